"""Learned attention sinks, as in gpt-oss (OpenAI 2025, the gpt-oss-120b and
gpt-oss-20b model card; chapter 17).

A softmax must hand out all of a row's weight: a query that finds nothing
worth reading still puts weight 1 somewhere. Trained models make room for
"nothing" by dumping weight on a token that carries little, often the first
one: the attention sinks of StreamingLLM (Xiao et al. 2024), which a sliding
window must then keep (`decoding_mask(..., sinks=k)`, chapter 11). gpt-oss
gives every head h a learned logit omega_h instead, which joins the softmax's
denominator and nothing else (E. Miller's "off-by-one" softmax, 2023, with a
learned logit in place of 0):

    w_ts = exp(z_ts) / (exp(omega_h) + sum_s' exp(z_ts'))

for query t, key s and the scaled, masked scores z of head h. The sink holds
no value, so the share it takes, 1 - sum_s w_ts = sigmoid(omega_h - logsumexp_s
z_ts), is weight given to nothing: the row's output shrinks towards 0 instead
of mixing values it did not want. omega_h = -inf gives back the plain softmax.
Equal to transformers' gpt-oss `eager_attention_forward`, which appends omega_h as
an extra column of logits, takes the softmax and drops that column.

As in the rest of the package, a key scored -inf (or blocked by a mask) gets
weight exactly 0, and a row with no allowed key gives all of its weight to the
sink: its weights and its output are 0, never NaN, with finite gradients (also
when omega_h = -inf).
"""

import torch

from . import _kernels
from ._shapes import (
    HALF_PRECISION,
    check_attn_mask,
    check_grouped,
    check_scale,
    require_float,
    require_same_dtype,
    shape_of,
)


def _check_sinks(sinks, heads, owner, tensor):
    """sinks: one logit per head, (heads,), in the dtype of `tensor`, the
    argument named `owner`."""
    require_float("sinks", sinks, 1)
    require_same_dtype(owner, tensor, "sinks", sinks)
    if sinks.shape[0] != heads:
        raise ValueError(f"sinks {shape_of(sinks)} must hold one logit per "
                         f"head, (heads,) = ({heads},), for {owner} "
                         f"{shape_of(tensor)}")


def _sink_softmax(scores, sinks):
    """sink_softmax of checked scores (..., H, L, S), sinks (H,), one dtype."""
    if scores.shape[-1] == 0:
        return scores.clone()           # no key: the sink takes every weight
    sink = sinks.reshape(-1, 1, 1)                                # (H, 1, 1)
    # the row's largest logit, the sink's included; the weights do not depend
    # on it, so no gradient flows through it
    largest = scores.amax(-1, keepdim=True)                  # (..., H, L, 1)
    shift = torch.maximum(largest, sink).detach()
    shift = shift.masked_fill(torch.isneginf(shift), 0.0)  # all -inf: any
    exp = (scores - shift).exp_()                 # (..., H, L, S); 0 at -inf
    total = exp.sum(-1, keepdim=True) + (sink - shift).exp()  # >= 1, or 0
    return exp / total.clamp_min(torch.finfo(total.dtype).tiny)  # 0/0 -> 0


def sink_softmax(scores, sinks):
    """Softmax over the last axis of scores (..., heads, L, S) with one more
    logit per head, sinks (heads,), in the denominator only:
    exp(z_ts) / (exp(omega_h) + sum_s exp(z_ts)).

    Returns weights of the scores' shape and dtype; a row sums to 1 minus the
    sink's share, sigmoid(omega_h - logsumexp_s z_ts). A -inf score gets weight 0,
    a row of -inf scores all zeros. sinks must have the scores' dtype;
    float16/bfloat16 are computed in float32.
    """
    require_float("scores", scores)
    if scores.dim() < 3:
        raise ValueError("scores must be (..., heads, L, S), got shape "
                         f"{shape_of(scores)}")
    _check_sinks(sinks, scores.shape[-3], "scores", scores)
    wide = scores.float() if scores.dtype in HALF_PRECISION else scores
    return _sink_softmax(wide, sinks.to(wide.dtype)).to(scores.dtype)


def sink_attention(query, key, value, sinks, attn_mask=None, is_causal=False,
                   scale=None):
    """Attention with gpt-oss's learned sinks:
    sink_softmax(Q K^T * scale + mask, sinks) V.

    query (batch, heads, L, d), key (batch, kv_heads, S, d), value (batch,
    kv_heads, S, d_v), heads a multiple of kv_heads: query head h reads KV
    head h // (heads // kv_heads), as PyTorch's enable_gqa. sinks (heads,):
    one logit per query head, in the inputs' dtype. attn_mask (bool, True =
    may attend; or float, added to the scores) and is_causal (top-left) as in
    scaled_dot_product_attention; a sliding window of W keys is the mask
    decoding_mask(positions, positions, window=W). scale: default 1/sqrt(d).
    Returns (output (batch, heads, L, d_v), weights (batch, heads, L, S)) in
    the inputs' dtype; float16/bfloat16 are computed in float32. A query with
    no allowed key gets zero weights and a zero output.
    """
    check_grouped(query, key, value, names=("query", "key", "value"))
    _check_sinks(sinks, query.shape[1], "query", query)
    scale = check_scale(scale, query)
    check_attn_mask(attn_mask, is_causal, (query.shape[0], query.shape[1], query.shape[2],
                                           key.shape[2]))
    dtype = query.dtype
    if dtype in HALF_PRECISION:
        query, key, value = query.float(), key.float(), value.float()
        sinks = sinks.float()
    batch, heads, length, head_dim = query.shape
    kv_heads, n_keys = key.shape[1], key.shape[2]
    # query heads in groups of heads // kv_heads beside the KV head they read
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, length,
                            head_dim)                     # (b, H_kv, g, L, d)
    scores = grouped @ key[:, :, None].transpose(-2, -1)  # (b, H_kv, g, L, S)
    scores = scores.mul_(scale).reshape(batch, heads, length, n_keys)
    allowed, bias = _kernels.allowed_and_bias(attn_mask, is_causal, scores)
    if bias is not None:
        scores.add_(bias)                     # a -inf entry blocks its key
    if allowed is not None:
        scores.masked_fill_(allowed.logical_not(), float("-inf"))
    weights = _sink_softmax(scores, sinks)                     # (b, H, L, S)
    output = weights.reshape(grouped.shape[:-1] + (n_keys,)) @ value[:, :, None]
    return (output.reshape(batch, heads, length, value.shape[-1]).to(dtype),
            weights.to(dtype))
