"""The computations several layers share, for arguments already checked.

Each public function or layer of the package checks its arguments once, at
the door (with `_shapes`), then calls these kernels, which trust them: no
checks here, so that nothing is checked twice on one path. Learners call the
public names (`scaled_dot_product_attention`, `apply_rotary`, `split_heads`,
...); the chapters that teach each kernel are named in its docstring.
"""

import math

import torch

from ._shapes import HALF_PRECISION


def softmax_inplace(scores, dtype=None):
    """Softmax over the last axis of the caller's own scores: in place when
    no gradient is needed (the scores become the weights). Chapter 5."""
    if scores.requires_grad and torch.is_grad_enabled():
        return torch.softmax(scores, dim=-1, dtype=dtype or scores.dtype)
    return torch.softmax(scores, dim=-1, out=scores).to(dtype or scores.dtype)


def masked_softmax_inplace(scores, allowed, dtype=None):
    """Softmax over the last axis keeping the entries where `allowed` (bool,
    broadcastable) is True; a row with nothing allowed gets zeros, with
    finite gradients. Overwrites `scores`. Chapter 5."""
    # block the masked entries: -inf scores get weight exp(-inf) = 0
    blocked = allowed.logical_not()  # the mask's size
    scores.masked_fill_(blocked, float("-inf"))
    # rows with no allowed key: a finite score, so no 0/0, zeroed after
    empty = blocked.all(dim=-1, keepdim=True)  # (..., n_q, 1)
    del blocked
    any_empty = bool(empty.any())
    if any_empty:
        scores.masked_fill_(empty, 0.0)
    weights = softmax_inplace(scores, dtype)
    if any_empty:
        weights = (
            weights.masked_fill(empty, 0.0)
            if weights.requires_grad
            else weights.masked_fill_(empty, 0.0)
        )
    return weights


def allowed_and_bias(attn_mask, is_causal, scores):
    """PyTorch-style mask arguments (checked) -> (allowed bool mask or None,
    additive float bias or None) for scores (..., L, S). Chapter 5."""
    if is_causal:
        n_queries, n_keys = scores.shape[-2:]
        return torch.ones(n_queries, n_keys, dtype=torch.bool, device=scores.device).tril(), None
    if attn_mask is None:
        return None, None
    if attn_mask.dtype == torch.bool:
        return attn_mask, None
    return None, attn_mask


def allowed_by_position(query_positions, key_positions, window=None, sinks=0):
    """Bool (L, S): query t may see key s if s <= t and, with a window W,
    t - W < s or s < sinks. Chapter 11."""
    t = query_positions[:, None]  # (L, 1)
    s = key_positions[None, :].to(query_positions.device)  # (1, S)
    allowed = s <= t
    if window is not None:
        allowed &= (s > t - window) | (s < sinks)
    return allowed


def attend(query, key, value, attn_mask, is_causal, scale):
    """softmax(Q K^T * scale + mask) V -> (output, weights), half precision
    computed in float32 and rounded once at the end. Chapters 4-5."""
    dtype = query.dtype
    if dtype in HALF_PRECISION:
        query, key, value = query.float(), key.float(), value.float()
    # scores S = Q K^T * scale: (..., L, S), ours, so the softmax may overwrite it
    scores = (query @ key.transpose(-2, -1)).mul_(scale)
    allowed, bias = allowed_and_bias(attn_mask, is_causal, scores)
    if bias is not None:
        scores.add_(bias)
        if torch.isneginf(bias).any():
            allowed = ~torch.isneginf(scores)  # a -inf entry is a blocked one
    # weights P = softmax(S) over the allowed keys; output P V
    weights = (
        softmax_inplace(scores) if allowed is None else masked_softmax_inplace(scores, allowed)
    )
    return (weights @ value).to(dtype), weights.to(dtype)


def split_heads(x, num_heads):
    """(batch, seq, num_heads * head_dim) -> (batch, num_heads, seq, head_dim).
    Chapter 8."""
    batch, seq, width = x.shape
    return x.reshape(batch, seq, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x):
    """(batch, num_heads, seq, head_dim) -> (batch, seq, num_heads * head_dim).
    Chapter 8."""
    batch, heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * head_dim)


def grouped_mask(mask, scores_shape, kv_heads):
    """A mask broadcastable to the scores (batch, H, L, S), laid out for
    (batch, H_kv, g, L, S). Chapter 9."""
    if mask is None or mask.dim() < 3:
        return mask  # (L, S) or (S,): the same for every head
    group = scores_shape[1] // kv_heads
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (b, H or 1, L, S)
    if mask.shape[1] == 1:
        return mask[:, :, None]  # (b, 1, 1, L, S)
    return mask.reshape(mask.shape[0], kv_heads, group, *mask.shape[2:])


def grouped_attention(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """Query heads q (batch, H, L, d) over KV heads k, v (batch, H_kv, S, d):
    head h reads KV head h // (H // H_kv) -> (output (batch, H, L, d_v),
    weights (batch, H, L, S)). Chapter 9."""
    batch, heads, length, head_dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    # query heads in groups of H // H_kv beside their shared KV head: this
    # reshape and k[:, :, None] are views, but the matrix products inside
    # attend broadcast K and V over the group, which copies them (chapter 11)
    grouped = q.reshape(batch, kv_heads, group, length, head_dim)
    mask = grouped_mask(attn_mask, (batch, heads, length, k.shape[2]), kv_heads)
    output, weights = attend(
        grouped,
        k[:, :, None],
        v[:, :, None],
        mask,
        is_causal,
        1 / math.sqrt(head_dim) if scale is None else scale,
    )
    return (
        output.reshape(batch, heads, length, v.shape[-1]),  # (batch, H, L, d_v)
        weights.reshape(batch, heads, length, k.shape[2]),
    )  # (batch, H, L, S)


def compute_dtypes(x):
    """(angles, products): angles m theta_i reach thousands of radians, so
    they are computed in float64 (float32 on Apple's MPS, which lacks it);
    the rotation itself in float64 for float64 inputs, else in float32.
    Chapter 10."""
    angles = torch.float32 if x.device.type == "mps" else torch.float64
    products = torch.float64 if x.dtype == torch.float64 else torch.float32
    return angles, products


def rotate(x, positions, base=10000.0, *, theta=None, factor=1.0):
    """RoPE on x (..., seq, head_dim) at positions (seq,) on x's device: the
    pair (x_i, x_{i + d/2}) at position m turns by m theta_i, with theta_i =
    base^(-2i / d) unless `theta` (in the angles' dtype) is given; the result
    is multiplied by `factor` (YaRN's). Chapter 10."""
    head_dim = x.shape[-1]
    wide, work = compute_dtypes(x)
    if theta is None:
        exponents = torch.arange(0, head_dim, 2, device=x.device, dtype=wide)
        theta = base ** (-exponents / head_dim)
    # angles m theta_i: (seq, head_dim / 2)
    angles = positions.to(wide)[:, None] * theta
    cos, sin = angles.cos(), angles.sin()
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    cos, sin = cos.to(work), sin.to(work)
    # rotate each pair: (a, b) -> (a cos - b sin, a sin + b cos)
    first, second = x.to(work).chunk(2, dim=-1)  # (..., seq, head_dim / 2)
    rotated = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    return rotated.to(x.dtype)


def interleaved_to_half_split(weight, num_heads):
    """Rows of W_Q or W_K (num_heads * head_dim, in) from the interleaved RoPE pairing (rows
    2i, 2i + 1 of each head) to the half-split one (rows i, i + head_dim / 2): within each
    head the even rows first, then the odd ones. Chapter 14."""
    rows, columns = weight.shape
    pairs = rows // num_heads // 2
    return (
        weight.reshape(num_heads, pairs, 2, columns)  # (head, i, member of pair)
        .transpose(1, 2)
        .reshape(rows, columns)
    )


def built(cls, *sizes):
    """A module of class `cls` built by its `_build(*sizes)` without its constructor's checks:
    for sizes a caller has checked (a decoder's config, a loader's weights). Chapters 9-17."""
    module = cls.__new__(cls)
    torch.nn.Module.__init__(module)
    module._build(*sizes)
    return module


def blocks_for(tokens, block_size):
    """Blocks that hold `tokens` tokens: ceil(tokens / block_size). Chapter 19."""
    return -(-tokens // block_size)


def ragged_layout(block_tables, query_lens, key_lens, block_size):
    """Where a ragged batch's keys are and who may see them -> (slots (S,) of every key of
    every sequence, in the flattened pool; allowed (T, S) bool: same sequence, not later).
    Chapter 19."""
    device = block_tables.device
    batch = torch.arange(len(key_lens), device=device)
    # each key: its sequence and its position in it, then its slot through the block table
    key_sequence = batch.repeat_interleave(key_lens)
    key_start = key_lens.cumsum(0) - key_lens
    key_position = torch.arange(len(key_sequence), device=device) - key_start[key_sequence]
    block = block_tables[key_sequence, key_position // block_size]
    slots = block * block_size + key_position % block_size
    # each query: its sequence, and its position there (the last query_lens[b] tokens)
    query_sequence = batch.repeat_interleave(query_lens)
    query_start = query_lens.cumsum(0) - query_lens
    query_position = (
        torch.arange(len(query_sequence), device=device)
        - query_start[query_sequence]
        + (key_lens - query_lens)[query_sequence]
    )
    # a query sees the keys of its own sequence up to its own position
    allowed = (query_sequence[:, None] == key_sequence[None, :]) & (
        key_position[None, :] <= query_position[:, None]
    )
    return slots, allowed


def gathered_attention(query, key_pool, value_pool, slots, allowed, scale=None):
    """Query heads (1, H, T, d) over the keys and values at slots of the pools (num_blocks,
    block_size, H_kv, d) -> (1, H, T, d_v). Chapter 19."""
    # gather: (S, H_kv, d) -> (1, H_kv, S, d)
    keys = key_pool.flatten(0, 1)[slots].transpose(0, 1)[None]
    values = value_pool.flatten(0, 1)[slots].transpose(0, 1)[None]
    return grouped_attention(query, keys, values, allowed, scale=scale)[0]
