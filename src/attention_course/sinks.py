"""Learned attention sinks, as in gpt-oss (OpenAI 2025, the gpt-oss model card; chapter 17).

Notable:
- every head h has a learned logit omega_h that joins the softmax's denominator and nothing
  else, w_ts = exp(z_ts) / (exp(omega_h) + sum_s' exp(z_ts')) (E. Miller's "off-by-one"
  softmax, 2023, with a learned logit in place of 0): a query that finds nothing worth
  reading gives its weight to the sink, which holds no value, instead of to a token (the
  attention sinks of StreamingLLM, Xiao et al. 2024, chapter 11);
- omega_h = -inf gives back the plain softmax; a row with no allowed key gets weights and
  output 0, never NaN, with finite gradients;
- equal to transformers' gpt-oss `eager_attention_forward`, which appends omega_h as an extra
  column of logits, takes the softmax and drops that column;
- the other remedy, Qwen3-Next's gated attention (Qiu et al. 2025): the softmax is left alone
  and each head's output is multiplied, element by element, by sigmoid(g), g a gate logit that
  the query's projection makes beside the query; gated_attention equals the attention step of
  transformers' Qwen3NextAttention (between its q/k norms and rotary and its o_proj).
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
        raise ValueError(
            f"sinks {shape_of(sinks)} must hold one logit per "
            f"head, (heads,) = ({heads},), for {owner} "
            f"{shape_of(tensor)}"
        )


def _sink_softmax(scores, sinks):
    """sink_softmax of checked scores (..., H, n_q, n_k), sinks (H,), one dtype."""
    # alpha_ts = exp(S_ts - m) / (exp(omega_i - m) + sum_s' exp(S_ts' - m)),
    # m the row's max, omega_i the sink of the row's head i
    if scores.shape[-1] == 0:
        return scores.clone()  # no key: the sink takes every weight
    sink = sinks.reshape(-1, 1, 1)  # (H, 1, 1)
    # the row's largest logit, the sink's included; the weights do not depend
    # on it, so no gradient flows through it
    largest = scores.amax(-1, keepdim=True)  # (..., H, n_q, 1)
    shift = torch.maximum(largest, sink).detach()
    shift = shift.masked_fill(torch.isneginf(shift), 0.0)  # all -inf: any
    exp = (scores - shift).exp_()  # (..., H, n_q, n_k); 0 at -inf
    total = exp.sum(-1, keepdim=True) + (sink - shift).exp()  # >= 1, or 0
    return exp / total.clamp_min(torch.finfo(total.dtype).tiny)  # 0/0 -> 0


def sink_softmax(scores, sinks):
    """Softmax over the last axis of scores (..., heads, n_q, n_k) with one more
    logit per head, sinks (heads,), in the denominator only: for head i,
    exp(S_ts) / (exp(omega_i) + sum_s exp(S_ts)).

    Returns weights of the scores' shape and dtype; a row sums to 1 minus the
    sink's share, sigmoid(omega_i - logsumexp_s S_ts). A -inf score gets weight 0,
    a row of -inf scores all zeros. sinks must have the scores' dtype;
    float16/bfloat16 are computed in float32. Chapter 17.
    """
    require_float("scores", scores)
    if scores.dim() < 3:
        raise ValueError(f"scores must be (..., heads, n_q, n_k), got shape {shape_of(scores)}")
    _check_sinks(sinks, scores.shape[-3], "scores", scores)
    wide = scores.float() if scores.dtype in HALF_PRECISION else scores
    return _sink_softmax(wide, sinks.to(wide.dtype)).to(scores.dtype)


def sink_attention(query, key, value, sinks, attn_mask=None, is_causal=False, scale=None):
    """Attention with gpt-oss's learned sinks:
    sink_softmax(Q K^T * scale + mask, sinks) V.

    query (batch, heads, n_q, d), key (batch, kv_heads, n_k, d), value (batch,
    kv_heads, n_k, d_v), heads a multiple of kv_heads: query head i reads KV
    head i // (heads // kv_heads), as PyTorch's enable_gqa. sinks (heads,):
    one logit per query head, in the inputs' dtype. attn_mask (bool, True =
    may attend; or float, added to the scores) and is_causal (top-left) as in
    scaled_dot_product_attention; a sliding window of w keys is the mask
    decoding_mask(positions, positions, window=w). scale: default 1/sqrt(d).
    Returns (output (batch, heads, n_q, d_v), weights (batch, heads, n_q, n_k)) in
    the inputs' dtype; float16/bfloat16 are computed in float32. A query with
    no allowed key gets zero weights and a zero output. Chapter 17.
    """
    check_grouped(query, key, value, names=("query", "key", "value"))
    _check_sinks(sinks, query.shape[1], "query", query)
    scale = check_scale(scale, query)
    check_attn_mask(
        attn_mask, is_causal, (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    )
    return _sink_attention(query, key, value, sinks, attn_mask, is_causal, scale)


def _sink_attention(query, key, value, sinks, attn_mask, is_causal, scale):
    """sink_attention of checked arguments, scale a number."""
    dtype = query.dtype
    if dtype in HALF_PRECISION:
        query, key, value = query.float(), key.float(), value.float()
        sinks = sinks.float()
    batch, heads, length, head_dim = query.shape
    kv_heads, n_keys = key.shape[1], key.shape[2]
    # query heads in groups of heads // kv_heads beside the KV head they read
    grouped = query.reshape(
        batch, kv_heads, heads // kv_heads, length, head_dim
    )  # (b, H_kv, g, n_q, d)
    scores = grouped @ key[:, :, None].transpose(-2, -1)  # (b, H_kv, g, n_q, n_k)
    scores = scores.mul_(scale).reshape(batch, heads, length, n_keys)
    allowed, bias = _kernels.allowed_and_bias(attn_mask, is_causal, scores)
    if bias is not None:
        scores.add_(bias)  # a -inf entry blocks its key
    if allowed is not None:
        scores.masked_fill_(allowed.logical_not(), float("-inf"))
    weights = _sink_softmax(scores, sinks)  # (b, H, n_q, n_k)
    output = weights.reshape(grouped.shape[:-1] + (n_keys,)) @ value[:, :, None]
    return (output.reshape(batch, heads, length, value.shape[-1]).to(dtype), weights.to(dtype))


def gated_attention(query, key, value, gate, attn_mask=None, is_causal=False, scale=None):
    """Attention with Qwen3-Next's output gate (Qiu et al. 2025's G1):
    sigmoid(gate) * softmax(Q K^T * scale + mask) V, elementwise.

    query (batch, heads, n_q, d), key (batch, kv_heads, n_k, d), value (batch,
    kv_heads, n_k, d_v), heads a multiple of kv_heads (grouped as in
    sink_attention). gate (batch, heads, n_q, d_v), one gate logit per output
    element, as Qwen3-Next's q_proj makes beside each head's query; or (batch,
    heads, n_q, 1), one per head and query. attn_mask, is_causal and scale as in
    sink_attention. Returns (output (batch, heads, n_q, d_v), weights (batch,
    heads, n_q, n_k)): the weights are the plain softmax's, the gate scales only
    the output. float16/bfloat16 are computed in float32. A query with no
    allowed key gets zero weights and a zero output. Chapter 17.
    """
    check_grouped(query, key, value, names=("query", "key", "value"))
    require_float("gate", gate, 4)
    require_same_dtype("query", query, "gate", gate)
    batch, heads, n_q = query.shape[:3]
    d_v = value.shape[-1]
    if gate.shape[:3] != (batch, heads, n_q) or gate.shape[-1] not in (d_v, 1):
        raise ValueError(
            f"gate {shape_of(gate)} must be (batch, heads, n_q, d_v) = "
            f"({batch}, {heads}, {n_q}, {d_v}) or (batch, heads, n_q, 1), for "
            f"query {shape_of(query)} and value {shape_of(value)}"
        )
    scale = check_scale(scale, query)
    check_attn_mask(attn_mask, is_causal, (batch, heads, n_q, key.shape[2]))
    # a sink of -inf takes no weight: the plain softmax, masked rows zero
    closed = torch.full((heads,), float("-inf"), dtype=query.dtype, device=query.device)
    output, weights = _sink_attention(query, key, value, closed, attn_mask, is_causal, scale)
    # each output element times the sigmoid of its gate logit
    wide = torch.float32 if query.dtype in HALF_PRECISION else query.dtype
    gated = output.to(wide) * torch.sigmoid(gate.to(wide))
    return gated.to(query.dtype), weights
