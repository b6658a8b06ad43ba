"""Attention functions and layers: scaled dot-product attention (chapters 4–5) and additive
attention (chapter 3)."""

import math

import torch
from torch import nn

from ._shapes import (
    broadcast_shape,
    require_dtype_of,
    require_float,
    require_int,
    require_number,
    require_same_dtype,
    require_tensor,
    shape_of,
)
from .masking import HALF_PRECISION, causal_mask, masked_softmax, softmax_, softmax_with_mask_

RANKS = tuple(range(2, 8))  # (L, E) to (b1, ..., b5, L, E)


def _check_qkv(query, key, value):
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_float(name, tensor, RANKS)
    require_same_dtype("query", query, "key", key, "value", value)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query {shape_of(query)} and key {shape_of(key)} must share the "
                         "feature size E (last dimension)")
    if query.shape[-1] == 0:
        raise ValueError(f"query {shape_of(query)} and key {shape_of(key)} have no features "
                         "(E = 0): the scale 1/sqrt(E) needs E >= 1")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key {shape_of(key)} and value {shape_of(value)} must have the same "
                         "number of keys S (second-to-last dimension)")
    if broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2]) is None:
        raise ValueError(f"the batch dimensions of query {shape_of(query)}, key {shape_of(key)} "
                         f"and value {shape_of(value)} do not broadcast")


def _allowed_and_bias(attn_mask, is_causal, scores):
    """Turn PyTorch-style mask arguments into (allowed bool mask or None, additive bias or None)."""
    n_queries, n_keys = scores.shape[-2:]
    if is_causal and attn_mask is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both (as in PyTorch)")
    if is_causal:
        return causal_mask(n_queries, n_keys, device=scores.device), None
    if attn_mask is None:
        return None, None
    require_tensor("attn_mask", attn_mask)
    if broadcast_shape(attn_mask.shape, scores.shape) != tuple(scores.shape):
        raise ValueError(f"attn_mask {shape_of(attn_mask)} does not broadcast to the scores "
                         f"(..., L, S) = {shape_of(scores)}")
    if attn_mask.dtype == torch.bool:
        return attn_mask, None
    if not attn_mask.dtype.is_floating_point:
        raise ValueError(f"attn_mask {shape_of(attn_mask)} must be bool or floating point, got "
                         f"{attn_mask.dtype}")
    return None, attn_mask


def _check_scale(scale, query):
    if scale is None:
        return 1 / math.sqrt(query.shape[-1])
    require_number("scale", scale)
    return scale


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """softmax(Q K^T * scale + mask) V, with PyTorch's argument names and mask meanings.

    query (..., L, E), key (..., S, E), value (..., S, Ev). attn_mask: bool, True = may attend,
    or float, added to the scores; broadcastable to (..., L, S). is_causal: top-left causal mask.
    scale: default 1 / sqrt(E). Returns (output (..., L, Ev), weights (..., L, S)), in the
    inputs' dtype and on their device. Equal to `torch.nn.functional.scaled_dot_product_attention`
    wherever some key is allowed. A query with no allowed key (a fully masked row) gets zero
    weights and a zero output, never NaN; PyTorch's answer there depends on the version and the
    backend (NaN from a plain softmax; zeros from the CPU kernels of 2.13; finite non-zero values
    were reported from cuDNN in float16/bfloat16 with PyTorch 2.11 on an H100), so never rely on
    it. Float16/bfloat16 inputs are computed in float32 (scores, softmax and the weighted sum)
    and rounded once at the end, as PyTorch's fused kernels do. Masked or not, it holds at most
    two (..., L, S) tensors, the scores and the weights (one without autograd: the weights then
    overwrite the scores).
    """
    _check_qkv(query, key, value)
    scale = _check_scale(scale, query)
    dtype = query.dtype
    if dtype in HALF_PRECISION:
        query, key, value = query.float(), key.float(), value.float()
    scores = (query @ key.transpose(-2, -1)).mul_(scale)  # (..., L, S): ours, may be overwritten
    allowed, bias = _allowed_and_bias(attn_mask, is_causal, scores)
    if bias is not None:
        scores.add_(bias)
        if torch.isneginf(bias).any():
            allowed = ~torch.isneginf(scores)  # a -inf entry is a blocked one
    weights = softmax_(scores) if allowed is None else softmax_with_mask_(scores, allowed)
    return (weights @ value).to(dtype), weights.to(dtype)


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau et al. 2015) attention: score(q, k) = w_v^T tanh(W_q q + W_k k).

    Queries and keys may have different sizes: W_q maps query_size and W_k maps key_size to
    num_hiddens. forward(queries (batch, n_q, query_size), keys (batch, n_k, key_size),
    values (batch, n_k, d_v), valid_lens=None) -> (batch, n_q, d_v); keeps `.attention_weights`
    (batch, n_q, n_k). valid_lens is (batch,) or (batch, n_q), as for `masked_softmax`.
    """

    def __init__(self, query_size, key_size, num_hiddens, dropout=0.0):
        super().__init__()
        for name, size in (("query_size", query_size), ("key_size", key_size),
                           ("num_hiddens", num_hiddens)):
            require_int(name, size, 1)
        require_number("dropout", dropout, 0, maximum=1)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def _check_inputs(self, **inputs):
        """Each input (batch, n, size) in the dtype of the layer's weights."""
        dtype = self.W_q.weight.dtype
        for name, tensor in inputs.items():
            require_float(name, tensor, 3)
            require_dtype_of(name, tensor, dtype, "the layer's weights")

    def scores(self, queries, keys):
        """(batch, n_q, query_size), (batch, n_k, key_size) -> (batch, n_q, n_k)."""
        self._check_inputs(queries=queries, keys=keys)
        if queries.shape[-1] != self.W_q.in_features or keys.shape[-1] != self.W_k.in_features:
            raise ValueError(f"queries {shape_of(queries)} and keys {shape_of(keys)} must end in "
                             f"query_size={self.W_q.in_features} and key_size={self.W_k.in_features}")
        if queries.shape[0] != keys.shape[0]:
            raise ValueError(f"queries {shape_of(queries)} and keys {shape_of(keys)} disagree on "
                             "the batch size")
        # (batch, n_q, 1, h) + (batch, 1, n_k, h) -> (batch, n_q, n_k, h): every query-key pair
        features = torch.tanh(self.W_q(queries)[:, :, None, :] + self.W_k(keys)[:, None, :, :])
        return self.w_v(features).squeeze(-1)

    def forward(self, queries, keys, values, valid_lens=None):
        self._check_inputs(queries=queries, keys=keys, values=values)
        if values.shape[:2] != keys.shape[:2]:
            raise ValueError(f"keys {shape_of(keys)} and values {shape_of(values)} must agree on "
                             "(batch, n_k)")
        self.attention_weights = masked_softmax(self.scores(queries, keys), valid_lens)
        return self.dropout(self.attention_weights) @ values


def attention_entropy(weights):
    """Entropy in nats of each row of attention weights: (..., n_k) -> (...), with 0 log 0 = 0.

    ln(n_k) for uniform weights, 0 for one-hot weights.
    """
    require_float("weights", weights)
    if weights.dim() < 1:
        raise ValueError(f"weights must have at least 1 dimension (..., n_k), got shape "
                         f"{shape_of(weights)}")
    wide = weights.float() if weights.dtype in HALF_PRECISION else weights
    return -torch.special.xlogy(wide, wide).sum(dim=-1).to(weights.dtype)
