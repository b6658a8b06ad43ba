"""Similarity functions against their formulas, evaluated pair by pair."""

import math

import pytest
import torch

from attention_course import soft_nearest_neighbours
from attention_course.scoring import SIMILARITIES


def formula(name, q, k, option):
    dot = sum(a * b for a, b in zip(q, k))
    if name == "dot":
        return dot / option
    if name == "scaled_dot":
        return dot / (math.sqrt(len(q)) * option)
    if name == "cosine":
        return dot / (math.sqrt(sum(a * a for a in q)) * math.sqrt(sum(b * b for b in k)) * option)
    return -sum((a - b) ** 2 for a, b in zip(q, k)) / (2 * option**2)


@pytest.mark.parametrize("name", sorted(SIMILARITIES))
def test_scores_match_formula(name):
    g = torch.Generator().manual_seed(0)
    queries = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)
    keys = torch.randn(2, 4, 5, generator=g, dtype=torch.float64)
    keyword = "bandwidth" if name == "rbf" else "temperature"
    got = SIMILARITIES[name](queries, keys, **{keyword: 0.7})
    assert got.shape == (2, 3, 4)
    for b in range(2):
        for i in range(3):
            for j in range(4):
                expected = formula(name, queries[b, i].tolist(), keys[b, j].tolist(), 0.7)
                assert got[b, i, j].item() == pytest.approx(expected, rel=1e-7, abs=1e-12)


def test_inductive_biases():
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(1, 3, generator=g), torch.randn(5, 3, generator=g), torch.randn(5, 2)
    stretched = k * torch.tensor([[3.0], [1.0], [0.5], [2.0], [1.0]])  # change the keys' lengths
    shift = torch.tensor([[4.0, -2.0, 1.0]])
    _, cos = soft_nearest_neighbours(q, k, v, "cosine")
    _, cos_stretched = soft_nearest_neighbours(q, stretched, v, "cosine")
    torch.testing.assert_close(cos, cos_stretched)  # cosine ignores length
    _, dot = soft_nearest_neighbours(q, k, v, "dot")
    _, dot_stretched = soft_nearest_neighbours(q, stretched, v, "dot")
    assert not torch.allclose(dot, dot_stretched)  # the dot product does not
    _, rbf = soft_nearest_neighbours(q, k, v, "rbf")
    _, rbf_shifted = soft_nearest_neighbours(q + shift, k + shift, v, "rbf")
    torch.testing.assert_close(rbf, rbf_shifted)  # RBF ignores a common shift
    _, dot_shifted = soft_nearest_neighbours(q + shift, k + shift, v, "dot")
    assert not torch.allclose(dot, dot_shifted)


def test_small_temperature_is_argmax_nearest_key():
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(4, 2, generator=g), torch.randn(7, 2, generator=g), torch.randn(7, 3)
    out, weights = soft_nearest_neighbours(q, k, v, "rbf", bandwidth=1e-3)
    nearest = torch.cdist(q, k).argmin(dim=1)
    torch.testing.assert_close(out, v[nearest])


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: SIMILARITIES["dot"](torch.ones(3, 2), torch.ones(4, 3)),
            r"queries \(3, 2\) and keys \(4, 3\) must share the feature size",
        ),
        (
            lambda: SIMILARITIES["dot"](torch.ones(2, 3, 2), torch.ones(3, 4, 2)),
            r"must share their leading \(batch\) dimensions",
        ),
        (
            lambda: SIMILARITIES["cosine"](torch.ones(3), torch.ones(4, 3)),
            r"queries must have .* dimensions, got shape \(3,\)",
        ),
        (
            lambda: SIMILARITIES["rbf"](torch.ones(3, 2), torch.ones(4, 2), bandwidth=0.0),
            r"bandwidth must be positive",
        ),
        (
            lambda: soft_nearest_neighbours(torch.ones(3, 2), torch.ones(4, 2), torch.ones(5, 2)),
            r"keys \(4, 2\) and values \(5, 2\)",
        ),
        (
            lambda: soft_nearest_neighbours(
                torch.ones(3, 2), torch.ones(4, 2), torch.ones(4, 2), "l1"
            ),
            r"unknown similarity 'l1'",
        ),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("name", sorted(SIMILARITIES))
def test_scores_refuse_integer_and_mixed_dtypes_and_empty_features(name):
    with pytest.raises(ValueError, match=r"queries \(3, 2\) must hold floating-point"):
        SIMILARITIES[name](torch.ones(3, 2, dtype=torch.long), torch.ones(4, 2))
    with pytest.raises(
        ValueError, match=r"queries \(3, 2\) torch.float32, keys \(4, 2\) torch.float64"
    ):
        SIMILARITIES[name](torch.ones(3, 2), torch.ones(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"no features \(d = 0\)"):
        SIMILARITIES[name](torch.ones(3, 0), torch.ones(4, 0))
