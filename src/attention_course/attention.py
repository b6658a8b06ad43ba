"""Attention functions and layers: scaled dot-product attention (chapters 4–5) and additive
attention (chapter 3)."""

import torch
from torch import nn

from . import _kernels
from ._shapes import (
    HALF_PRECISION,
    broadcast_shape,
    check_attn_mask,
    check_qkv,
    check_scale,
    require_dtype_of,
    require_float,
    require_int,
    require_number,
    shape_of,
)
from .masking import masked_softmax


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
    Chapters 4-5.
    """
    check_qkv(query, key, value)
    scale = check_scale(scale, query)
    scores_shape = (
        *broadcast_shape(query.shape[:-2], key.shape[:-2]),
        query.shape[-2],
        key.shape[-2],
    )
    check_attn_mask(attn_mask, is_causal, scores_shape)
    return _kernels.attend(query, key, value, attn_mask, is_causal, scale)


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau et al. 2015) attention: score(q, k) = w_v^T tanh(W_q q + W_k k).

    Queries and keys may have different sizes: W_q maps query_size and W_k maps key_size to
    num_hiddens. forward(queries (batch, n_q, query_size), keys (batch, n_k, key_size),
    values (batch, n_k, d_v), valid_lens=None) -> (batch, n_q, d_v); keeps `.attention_weights`
    (batch, n_q, n_k). valid_lens is (batch,) or (batch, n_q), as for `masked_softmax`.
    Chapter 3.
    """

    def __init__(self, query_size, key_size, num_hiddens, dropout=0.0):
        super().__init__()
        for name, size in (
            ("query_size", query_size),
            ("key_size", key_size),
            ("num_hiddens", num_hiddens),
        ):
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
        """(batch, n_q, query_size), (batch, n_k, key_size) -> (batch, n_q, n_k). Chapter 3."""
        self._check_inputs(queries=queries, keys=keys)
        if queries.shape[-1] != self.W_q.in_features or keys.shape[-1] != self.W_k.in_features:
            raise ValueError(
                f"queries {shape_of(queries)} and keys {shape_of(keys)} must end in "
                f"query_size={self.W_q.in_features} and "
                f"key_size={self.W_k.in_features}"
            )
        if queries.shape[0] != keys.shape[0]:
            raise ValueError(
                f"queries {shape_of(queries)} and keys {shape_of(keys)} disagree on the batch size"
            )
        return self._scores(queries, keys)

    def _scores(self, queries, keys):
        # (batch, n_q, 1, h) + (batch, 1, n_k, h) -> (batch, n_q, n_k, h): every query-key pair
        features = torch.tanh(self.W_q(queries)[:, :, None, :] + self.W_k(keys)[:, None, :, :])
        return self.w_v(features).squeeze(-1)

    def forward(self, queries, keys, values, valid_lens=None):
        """The forward pass of the class docstring. Chapter 3."""
        scores = self.scores(queries, keys)  # checks queries and keys
        self._check_inputs(values=values)
        if values.shape[:2] != keys.shape[:2]:
            raise ValueError(
                f"keys {shape_of(keys)} and values {shape_of(values)} must agree on (batch, n_k)"
            )
        self.attention_weights = masked_softmax(scores, valid_lens)
        return self.dropout(self.attention_weights) @ values


def attention_entropy(weights):
    """Entropy in nats of each row of attention weights: (..., n_k) -> (...), with 0 log 0 = 0.

    ln(n_k) for uniform weights, 0 for one-hot weights.
    Chapter 4.
    """
    require_float("weights", weights)
    if weights.dim() < 1:
        raise ValueError(
            f"weights must have at least 1 dimension (..., n_k), got shape {shape_of(weights)}"
        )
    wide = weights.float() if weights.dtype in HALF_PRECISION else weights
    return -torch.special.xlogy(wide, wide).sum(dim=-1).to(weights.dtype)
