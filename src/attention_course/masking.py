"""Masks and the masked softmax (chapter 5).

Convention throughout the package, as in `torch.nn.functional.scaled_dot_product_attention`:
a boolean mask is True where a query MAY attend to a key. A row of scores with no allowed key
(every key blocked by the mask, past its valid_len, or scored -inf) gets weights of exactly
zero, never NaN (the package's contract: see `attention_course`'s docstring).
"""

import torch

from . import _kernels
from ._shapes import (
    HALF_PRECISION,
    broadcast_shape,
    require_float,
    require_floating_dtype,
    require_int,
    require_integer,
    require_rank,
    require_tensor,
    shape_of,
)


def causal_mask(n_queries, n_keys=None, device=None):
    """Bool (n_queries, n_keys), True where key j <= query i may be attended (top-left aligned,
    as PyTorch's `is_causal`). With more keys than queries the extra keys are all masked for
    early queries; with fewer, late queries see every key. Chapter 5."""
    require_int("n_queries", n_queries)
    n_keys = n_queries if n_keys is None else n_keys
    require_int("n_keys", n_keys)
    if n_queries < 1 or n_keys < 1:
        raise ValueError(f"a causal mask needs n_queries, n_keys >= 1, got ({n_queries}, {n_keys})")
    return torch.ones(n_queries, n_keys, dtype=torch.bool, device=device).tril()


def valid_lens_mask(valid_lens, n_queries, n_keys):
    """Bool (batch, 1, n_keys) for valid_lens (batch,), or (batch, n_queries, n_keys) for
    valid_lens (batch, n_queries): True where key position j < valid_len.

    valid_lens: integer tensor (batch,) — one length per sequence — or (batch, n_queries) — one
    length per query. Each length must lie in [0, n_keys].
    Chapter 5.
    """
    require_int("n_queries", n_queries, 0)
    require_int("n_keys", n_keys, 0)
    _check_valid_lens(valid_lens, n_queries, n_keys)
    return _lengths_mask(valid_lens, n_keys)


def _check_valid_lens(valid_lens, n_queries, n_keys):
    """valid_lens (batch,) or (batch, n_queries) of whole numbers in [0, n_keys]."""
    require_rank("valid_lens", valid_lens, (1, 2))
    if valid_lens.dtype == torch.bool or valid_lens.dtype.is_complex:
        raise ValueError(
            f"valid_lens {shape_of(valid_lens)} must hold lengths (integers), "
            f"got {valid_lens.dtype}"
        )
    if valid_lens.dtype.is_floating_point and not torch.equal(valid_lens, valid_lens.round()):
        raise ValueError(f"valid_lens {shape_of(valid_lens)} must hold whole numbers")
    if valid_lens.dim() == 2 and valid_lens.shape[1] != n_queries:
        raise ValueError(
            f"valid_lens {shape_of(valid_lens)} must be (batch,) or (batch, n_queries={n_queries})"
        )
    if ((valid_lens < 0) | (valid_lens > n_keys)).any():
        raise ValueError(
            f"valid_lens {valid_lens.tolist()} out of range: each must be in [0, n_keys={n_keys}]"
        )


def _lengths_mask(valid_lens, n_keys):
    """True where key position j < valid_len: (batch, 1 or n_q, n_keys)."""
    lengths = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens  # (batch, 1 or n_q)
    positions = torch.arange(n_keys, device=valid_lens.device)
    return positions[None, None, :] < lengths[:, :, None]


def _check_scores_and_dtype(scores, dtype):
    require_float("scores", scores)
    if scores.dim() < 1:
        raise ValueError(f"scores must have at least 1 dimension, got shape {shape_of(scores)}")
    require_floating_dtype("dtype", dtype)


def _check_allowed(allowed, scores):
    """allowed: a bool tensor that broadcasts to scores without growing them."""
    require_tensor("allowed", allowed)
    if allowed.dtype != torch.bool:
        raise ValueError(
            f"allowed {shape_of(allowed)} must be a bool mask (True = may attend), "
            f"got {allowed.dtype}"
        )
    if allowed.shape != scores.shape[scores.dim() - allowed.dim() :] and (
        broadcast_shape(allowed.shape, scores.shape) != tuple(scores.shape)
    ):
        raise ValueError(
            f"allowed {shape_of(allowed)} does not broadcast to the scores {shape_of(scores)}"
        )


def softmax(scores, dim=-1):
    """torch.softmax, computed in float32 for float16/bfloat16 scores and returned in their
    dtype, so half precision loses no more than its own rounding (as PyTorch's fused kernels).
    Chapter 5."""
    require_float("scores", scores)
    require_int("dim", dim)
    if not -max(scores.dim(), 1) <= dim < max(scores.dim(), 1):
        raise ValueError(f"dim={dim} is not a dimension of scores {shape_of(scores)}")
    if scores.dtype in HALF_PRECISION:
        return torch.softmax(scores, dim=dim, dtype=torch.float32).to(scores.dtype)
    return torch.softmax(scores, dim=dim)


def softmax_(scores, dtype=None):
    """Softmax over the last axis of `scores`, the caller's own intermediate: when no gradient is
    needed it is computed in place (the scores become the weights, no other full-size tensor is
    made); otherwise by torch.softmax. Each row needs one finite score. Chapter 5."""
    _check_scores_and_dtype(scores, dtype)
    return _kernels.softmax_inplace(scores, dtype)


def softmax_with_mask_(scores, allowed, dtype=None):
    """Softmax over the last axis keeping only the entries where `allowed` (bool, broadcastable
    to scores) is True; a row with nothing allowed gets zeros. OVERWRITES `scores` (which must be
    the caller's own intermediate), so that it holds no more full-size tensors than a plain
    softmax: the scores and the weights (without autograd, the weights overwrite the scores).
    `dtype`: the softmax's dtype (default: scores'). No NaN in the output or the gradient.
    Chapter 5."""
    _check_scores_and_dtype(scores, dtype)
    _check_allowed(allowed, scores)
    return _kernels.masked_softmax_inplace(scores, allowed, dtype)


def softmax_with_mask(scores, allowed):
    """As softmax_with_mask_, without touching `scores`; half precision computed in float32.
    Chapter 5."""
    _check_scores_and_dtype(scores, None)
    _check_allowed(allowed, scores)
    return _with_mask(scores, allowed)


def masked_softmax(scores, valid_lens=None):
    """Softmax over the last axis of scores (batch, ..., n_queries, n_keys) where key positions
    j >= valid_len get weight 0.

    valid_lens: None, (batch,) or (batch, n_queries). A row with no allowed key (valid_len 0, or
    every score of the row -inf) returns zeros, never NaN.
    Chapter 5.
    """
    require_float("scores", scores)
    if scores.dim() < 3:
        raise ValueError(
            f"scores must be (batch, ..., n_queries, n_keys), got shape {shape_of(scores)}"
        )
    allowed = None
    if valid_lens is not None:
        _check_valid_lens(valid_lens, scores.shape[-2], scores.shape[-1])
        if valid_lens.shape[0] != scores.shape[0]:
            raise ValueError(
                f"valid_lens {shape_of(valid_lens)} and scores {shape_of(scores)} "
                "disagree on the batch size"
            )
        allowed = _lengths_mask(valid_lens, scores.shape[-1])
        extra_dims = scores.dim() - 3  # e.g. a heads axis between batch and queries
        allowed = allowed.reshape(allowed.shape[0], *([1] * extra_dims), *allowed.shape[1:])
    scored = torch.isneginf(scores)  # a -inf score blocks its key, as a mask would
    if allowed is None:
        if not scored.all(dim=-1).any():  # some key allowed in every row
            if scores.dtype in HALF_PRECISION:
                return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
            return torch.softmax(scores, dim=-1)
        return _with_mask(scores, scored.logical_not_())
    return _with_mask(scores, scored.logical_not_().logical_and_(allowed))


def _with_mask(scores, allowed):
    """softmax_with_mask for arguments masked_softmax has checked."""
    return _kernels.masked_softmax_inplace(
        scores.float() if scores.dtype in HALF_PRECISION else scores.clone(), allowed
    ).to(scores.dtype)


def decoding_mask(query_positions, key_positions, window=None, sinks=0):
    """Bool (L, S), True where the query at query_positions (L,) may attend to
    the key at key_positions (S,): causal (s <= t) and, with a window W, only
    the last W positions (t - W < s) or one of the first `sinks` positions
    (s < sinks). Chapter 11."""
    require_integer("query_positions", query_positions, 1)
    require_integer("key_positions", key_positions, 1)
    if window is not None:
        require_int("window", window, 1)
    require_int("sinks", sinks, 0)  # a mask may show sinks alone
    return _kernels.allowed_by_position(query_positions, key_positions, window, sinks)
