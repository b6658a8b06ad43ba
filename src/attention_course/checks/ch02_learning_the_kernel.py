"""Checks of chapter 2's exercises: attention weights with a bandwidth per key, and kernel
regression of a batch of data sets in one call (on chapter 1's cases and hints)."""

import torch

from .. import pooling
from .ch01_attention_pooling import REGRESSION_ANSWERS, kernel_underflow, regression_cases
from .core import CheckFailed, compare, generator, passed, random, run, self_check


@self_check
def check_per_key_weights(fn, seed=0):
    """Check fn(queries (n_q,), keys (n_k,), bandwidths (n_k,)) -> (n_q, n_k): Gaussian attention
    weights in which key i has its own bandwidth h_i. Chapter 2, exercise 2."""
    cases = regression_cases(seed)[:4]
    for number, (case, queries, keys, values, bandwidth) in enumerate(cases):
        bandwidths = bandwidth * torch.exp(0.5 * random((len(keys),), seed, number))
        _, expected = pooling.nadaraya_watson(queries, keys, values, bandwidths)
        got = run(fn, (queries, keys, bandwidths), case, forbidden=REGRESSION_ANSWERS)
        compare(
            got, expected, case, "weights", explain_nan=kernel_underflow(queries, keys, bandwidths)
        )
    passed("your per-key attention weights", len(cases))


def _batched_regression_cases(seed=0):
    """(name, queries (B, n_q), keys (B, n_k), values (B, n_k), bandwidth) inputs."""
    rng = generator(seed, 500)

    def draw(batch, n_q, n_k):
        keys = torch.rand(batch, n_k, generator=rng) * 10
        values = torch.randn(batch, n_k, generator=rng)
        queries = torch.rand(batch, n_q, generator=rng) * 10
        return queries, keys, values

    far = draw(3, 4, 6)
    far[0][1, 2] = 60.0  # one query far from every key of set 1
    return [
        ("a batch of 4 data sets, bandwidth 1", *draw(4, 5, 8), 1.0),
        ("a batch of 2, narrow bandwidth 0.3", *draw(2, 7, 12), 0.3),
        ("one data set, one query", *draw(1, 1, 9), 0.7),
        ("a query far from every key", *far, 0.5),
    ]


@self_check
def check_batched_regression(fn, seed=0):
    """Check fn(queries (B, n_q), keys (B, n_k), values (B, n_k), bandwidth) -> (B, n_q):
    Gaussian Nadaraya–Watson regression of B independent data sets in one call, data set b
    answering its own queries from its own keys and values. Chapter 2, exercise 1."""
    cases = _batched_regression_cases(seed)
    for case, queries, keys, values, bandwidth in cases:
        expected = torch.stack(
            [  # an independent loop over the data sets
                torch.softmax(-(((q[:, None] - k[None, :]) / bandwidth) ** 2) / 2, dim=1) @ v
                for q, k, v in zip(queries.double(), keys.double(), values.double())
            ]
        ).float()
        got = run(fn, (queries, keys, values, bandwidth), case, forbidden=REGRESSION_ANSWERS)
        if (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and len(keys) > 1
            and torch.isfinite(got).all()
        ):
            pooled = torch.stack(
                [
                    torch.softmax(
                        -(((q[:, None] - keys.flatten()[None, :]) / bandwidth) ** 2) / 2, dim=1
                    )
                    @ values.flatten()
                    for q in queries
                ]
            )
            if torch.allclose(got, pooled, atol=1e-5):
                raise CheckFailed(
                    f"case '{case}': your queries attend to the keys of every "
                    "data set; data set b must use only keys[b] and values[b]"
                )
        compare(
            got,
            expected,
            case,
            "predictions",
            explain_nan=lambda index: kernel_underflow(
                queries[index[0]], keys[index[0]], bandwidth
            )((index[1],)),
        )
    passed("your batched kernel regression", len(cases))
