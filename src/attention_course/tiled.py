"""Tiled attention with the online softmax: FlashAttention's forward pass in
PyTorch (chapter 12), beside the naive three lines it must equal.

Notable: `flash_attention` never holds an (L, S) matrix of scores, only one
tile at a time, and returns the log-sum-exp a backward pass needs;
`tile_schedule` yields its tiles, skipping those above a causal diagonal.
Measuring time and memory lives in `attention_course.measure`."""

import itertools
import math

import torch

from ._shapes import HALF_PRECISION, check_qkv, check_scale, require_int, shape_of


def _check_block_size(block_size):
    require_int(
        "block_size", block_size, 1, message=f"block_size must be at least 1, got {block_size!r}"
    )


def tile_schedule(n_queries, n_keys, block_size, is_causal=False, *, skip_masked_tiles=True):
    """The tiles flash_attention computes, in its order, as a generator.

    Yields (query slice, key slice, needs_mask) one tile at a time, so the
    schedule itself takes no memory. Queries and keys are cut into blocks of
    block_size (the last may be shorter). With is_causal (top-left, query i
    sees keys j <= i, as in PyTorch), a tile entirely above the diagonal has
    no allowed entry and is left out, unless skip_masked_tiles is False (to
    measure what skipping saves); needs_mask is True for the tiles the
    diagonal crosses, and for those above it when they are kept. Chapter 12.
    """
    require_int("n_queries", n_queries, 0)
    require_int("n_keys", n_keys, 0)
    _check_block_size(block_size)
    return _tiles(n_queries, n_keys, block_size, is_causal, skip_masked_tiles)


def _tiles(n_queries, n_keys, block_size, is_causal, skip_masked_tiles):
    for q_start in range(0, n_queries, block_size):
        q_end = min(q_start + block_size, n_queries)
        for k_start in range(0, n_keys, block_size):
            k_end = min(k_start + block_size, n_keys)
            if is_causal and skip_masked_tiles and k_start > q_end - 1:
                break  # this tile and the ones right of it
            needs_mask = is_causal and k_end - 1 > q_start
            yield slice(q_start, q_end), slice(k_start, k_end), needs_mask


def _causal_tile_mask(query_slice, key_slice, device):
    """(Bq, Bk) bool, True where query i may see key j (j <= i)."""
    rows = torch.arange(query_slice.start, query_slice.stop, device=device)
    cols = torch.arange(key_slice.start, key_slice.stop, device=device)
    return cols[None, :] <= rows[:, None]


def flash_attention(
    query, key, value, is_causal=False, scale=None, block_size=128, *, skip_masked_tiles=True
):
    """softmax(Q K^T * scale) V computed tile by tile with the online softmax.

    query (..., L, E), key (..., S, E), value (..., S, Ev); batch dimensions
    broadcast. is_causal: top-left causal mask, as in PyTorch. scale: default
    1 / sqrt(E). Returns (output (..., L, Ev), logsumexp (..., L)): the
    log-sum-exp of each query's scaled, masked scores, what a backward pass
    needs to recompute the weights. It never holds an (L, S) matrix: at most
    one (..., block_size, block_size) tile of scores and of weights at a time.
    skip_masked_tiles=False computes the causal tiles above the diagonal too,
    every entry masked (the same output, more work: to measure the skip).
    Float16/bfloat16 inputs are computed in float32; the output is rounded
    to their dtype at the end, the log-sum-exp stays float32 (as in
    FlashAttention: rounded, it would spoil the recomputed weights).
    Chapter 12.
    """
    check_qkv(query, key, value)  # float tensors of one dtype
    _check_block_size(block_size)
    if key.shape[-2] == 0:
        raise ValueError(
            f"key {shape_of(key)} has no keys (S = 0): every "
            "query needs at least one key to attend to"
        )
    scale = check_scale(scale, query)
    dtype = query.dtype
    if dtype in HALF_PRECISION:
        query, key, value = query.float(), key.float(), value.float()
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    n_queries, n_keys = query.shape[-2], key.shape[-2]
    output = value.new_empty(*batch, n_queries, value.shape[-1])
    logsumexp = value.new_empty(*batch, n_queries)
    tiles = _tiles(n_queries, n_keys, block_size, is_causal, skip_masked_tiles)
    # one block of queries at a time, with all of its key tiles; Q pre-scaled
    for q_slice, row_tiles in itertools.groupby(tiles, key=lambda t: t[0]):
        out, lse = _attend_query_block(
            query[..., q_slice, :] * scale, key, value, list(row_tiles), batch
        )
        output[..., q_slice, :] = out
        logsumexp[..., q_slice] = lse
    return output.to(dtype), logsumexp


def _attend_query_block(q_block, key, value, row_tiles, batch):
    """One block of (already scaled) queries against its key tiles."""
    shape = (*batch, q_block.shape[-2])
    # running max m = -inf, running sum l = 0, output accumulator O = 0
    running_max = q_block.new_full(shape, -math.inf)  # m: (..., Bq)
    running_sum = q_block.new_zeros(shape)  # l: (..., Bq)
    accumulated = q_block.new_zeros(*shape, value.shape[-1])  # (..., Bq, Ev)
    for q_slice, k_slice, needs_mask in row_tiles:
        # the tile's scores S = Q_block K_tile^T (Q already scaled)
        k_block = key[..., k_slice, :]
        scores = q_block @ k_block.transpose(-2, -1)  # (..., Bq, Bk)
        if needs_mask:
            allowed = _causal_tile_mask(q_slice, k_slice, scores.device)
            scores = scores.masked_fill(~allowed, -math.inf)
        # m_new = max(m_old, rowmax(S))
        new_max = torch.maximum(running_max, scores.amax(dim=-1))
        # what was summed against m_old is rescaled by exp(m_old - m_new)
        rescale = torch.exp(running_max - new_max)  # 0 on the first tile
        # P = exp(S - m_new), the tile's unnormalised weights
        weights = torch.exp(scores - new_max[..., None])  # (..., Bq, Bk)
        # l = l exp(m_old - m_new) + rowsum(P)
        running_sum = running_sum * rescale + weights.sum(dim=-1)
        # O = O exp(m_old - m_new) + P V_tile
        accumulated = accumulated * rescale[..., None] + weights @ value[..., k_slice, :]
        running_max = new_max
    # output O / l; logsumexp = m + log l
    return (accumulated / running_sum[..., None], running_max + torch.log(running_sum))


def naive_attention(query, key, value, is_causal=False):
    """softmax(Q K^T / sqrt(E)) V as three plain lines: holds (..., L, S).
    Chapter 12."""
    check_qkv(query, key, value)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if is_causal:
        n_queries, n_keys = scores.shape[-2:]
        blocked = torch.ones(n_queries, n_keys, dtype=torch.bool, device=scores.device).triu_(1)
        scores = scores.masked_fill(blocked, -math.inf)
    return torch.softmax(scores, dim=-1) @ value
