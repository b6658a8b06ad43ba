"""Similarity scores between queries and keys (chapter 3): the first step of every attention.

All functions take queries (..., n_q, d) and keys (..., n_k, d) with the same leading dimensions
and return scores (..., n_q, n_k). Each is a different inductive bias: dot product (direction
and length), cosine (angle only), RBF (Euclidean distance). `soft_nearest_neighbours` is
attention as soft k-NN: scores, softmax, weighted average.
"""

import math

import torch

from ._shapes import (
    require_float,
    require_number,
    require_positive,
    require_same_dtype,
    shape_of,
    type_name,
)
from .masking import HALF_PRECISION, softmax

RANKS = tuple(range(2, 8))  # (n, d) to (b1, ..., b5, n, d)


def _check_pair(queries, keys):
    require_float("queries", queries, RANKS)
    require_float("keys", keys, RANKS)
    require_same_dtype("queries", queries, "keys", keys)
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"queries {shape_of(queries)} and keys {shape_of(keys)} must share "
            "the feature size (last dimension)"
        )
    if queries.shape[-1] == 0:
        raise ValueError(
            f"queries {shape_of(queries)} and keys {shape_of(keys)} have no features (d = 0)"
        )
    if queries.shape[:-2] != keys.shape[:-2]:
        raise ValueError(
            f"queries {shape_of(queries)} and keys {shape_of(keys)} must share "
            "their leading (batch) dimensions"
        )


def _dot(queries, keys, temperature):
    return queries @ keys.transpose(-2, -1) / temperature


def dot_product_scores(queries, keys, temperature=1.0):
    """q . k / temperature. Chapter 3."""
    _check_pair(queries, keys)
    require_positive("temperature", temperature)
    return _dot(queries, keys, temperature)


def scaled_dot_product_scores(queries, keys, temperature=1.0):
    """q . k / (sqrt(d) * temperature): the transformer's score (Vaswani et al. 2017).
    Chapter 3."""
    _check_pair(queries, keys)
    require_positive("temperature", temperature)
    return _dot(queries, keys, temperature) / math.sqrt(queries.shape[-1])


def cosine_scores(queries, keys, temperature=1.0, eps=1e-9):
    """cos(q, k) / temperature = q . k / (|q| |k| temperature); a zero vector scores 0.
    Chapter 3."""
    _check_pair(queries, keys)
    require_positive("temperature", temperature)
    require_number("eps", eps, 0)
    # unit vectors q / |q| and k / |k|, then their dot product
    unit_queries = queries / (queries.norm(dim=-1, keepdim=True) + eps)
    unit_keys = keys / (keys.norm(dim=-1, keepdim=True) + eps)
    return _dot(unit_queries, unit_keys, temperature)


def rbf_scores(queries, keys, bandwidth=1.0):
    """-|q - k|^2 / (2 bandwidth^2): the log of a Gaussian kernel, as in chapter 1.
    Chapter 3."""
    _check_pair(queries, keys)
    require_positive("bandwidth", bandwidth)
    dtype = queries.dtype
    if dtype in HALF_PRECISION:  # cdist has no half-precision CPU kernel; float32 is also exact
        queries, keys = queries.float(), keys.float()
    squared_distances = torch.cdist(queries, keys, compute_mode="donot_use_mm_for_euclid_dist") ** 2
    return (-squared_distances / (2 * bandwidth**2)).to(dtype)


SIMILARITIES = {
    "dot": dot_product_scores,
    "scaled_dot": scaled_dot_product_scores,
    "cosine": cosine_scores,
    "rbf": rbf_scores,
}


def soft_nearest_neighbours(queries, keys, values, similarity="scaled_dot", **options):
    """Attention as soft k-NN: scores -> softmax -> weighted average of values.

    queries (..., n_q, d), keys (..., n_k, d), values (..., n_k, d_v); `similarity` is a key of
    SIMILARITIES and `options` its keyword (temperature or bandwidth).
    Returns (output (..., n_q, d_v), weights (..., n_q, n_k)). Chapter 3.
    """
    if not isinstance(similarity, str):
        raise TypeError(
            f"similarity must be a name from SIMILARITIES (a str), got {type_name(similarity)}"
        )
    if similarity not in SIMILARITIES:
        raise ValueError(f"unknown similarity {similarity!r}; choose one of {sorted(SIMILARITIES)}")
    # scores s(q, k): the similarity function checks queries, keys and its options
    scores = SIMILARITIES[similarity](queries, keys, **options)
    require_float("values", values, RANKS)
    require_same_dtype("keys", keys, "values", values)
    if values.shape[:-1] != keys.shape[:-1]:
        raise ValueError(
            f"keys {shape_of(keys)} and values {shape_of(values)} must agree on "
            "every dimension but the last (one value per key)"
        )
    # weights: softmax over the keys; output: the weighted average of the values
    weights = softmax(scores)
    return weights @ values, weights
