"""The paged KV cache and paged attention (chapter 19).

- `PagedKVCache`: every layer's keys and values in a pool of fixed-size blocks, a block table
  per sequence (vLLM's PagedAttention, Kwon et al. 2023); reference counts, so that sequences
  with a common prefix share its blocks, and copy-on-write when a shared block is written;
- `paged_attention`: attention of a ragged batch of new tokens over the keys and values that
  their block tables point to, each sequence kept apart from the others by the mask.

`serving` runs a decoder on them (continuous batching).
"""

import torch

from . import _kernels
from ._kernels import blocks_for
from ._shapes import (
    check_scale,
    require_float,
    require_floating_dtype,
    require_instance,
    require_int,
    require_integer,
    require_same_dtype,
    shape_of,
)
from .config import DecoderConfig


class PagedKVCache:
    """Every layer's keys and values in blocks of block_size tokens.

    PagedKVCache(config, num_blocks, block_size=16, dtype=None, device=None), config a
    DecoderConfig: `keys[layer]`, `values[layer]` are pools (num_blocks, block_size,
    kv_heads, head_dim) (dtype None: torch's default). A sequence (an id from new_sequence or
    fork) has a block table, the blocks that hold its tokens in order: token p sits in block
    table[p // block_size] at offset p % block_size, slot block * block_size + offset of the
    flattened pool. A block's reference count is the number of tables holding it; at 0 it
    returns to the free list. reserve(sequence, count) finds slots for count more tokens,
    first copying a shared, partly filled last block (copy-on-write); write(layer, slots,
    key, value) stores a layer's keys and values there. Chapter 19.
    """

    def __init__(self, config, num_blocks, block_size=16, dtype=None, device=None):
        require_instance("config", config, DecoderConfig, "a DecoderConfig")
        require_int("num_blocks", num_blocks, 1)
        require_int("block_size", block_size, 1)
        require_floating_dtype("dtype", dtype)
        self._start(config, num_blocks, block_size, dtype or torch.get_default_dtype(), device)

    @classmethod
    def _of_checked_sizes(cls, config, num_blocks, block_size, dtype, device):
        """An empty cache for sizes its batcher has checked."""
        cache = cls.__new__(cls)
        cache._start(config, num_blocks, block_size, dtype, device)
        return cache

    def _start(self, config, num_blocks, block_size, dtype, device):
        # one pool of keys and one of values per layer
        shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
        self.keys = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_layers)
        ]
        self.values = [torch.zeros_like(pool) for pool in self.keys]
        self.num_blocks, self.block_size = num_blocks, block_size
        # the bookkeeping: reference counts, the free list (block 0 handed out first),
        # each sequence's block table and length
        self._refcounts = [0] * num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))
        self._tables, self._lengths = {}, {}
        self._next_sequence = 0

    @property
    def free_blocks(self):
        """How many blocks are on the free list."""
        return len(self._free)

    @property
    def refcounts(self):
        """Each block's reference count (a list, a copy)."""
        return list(self._refcounts)

    @property
    def sequences(self):
        """The ids of the sequences held, in order."""
        return sorted(self._tables)

    def _check_sequence(self, sequence):
        require_int("sequence", sequence)
        if sequence not in self._tables:
            raise ValueError(
                f"sequence={sequence} is not held (never made, or released already); held: "
                f"{self.sequences}"
            )

    def new_sequence(self):
        """A new, empty sequence -> its id (an int). Chapter 19."""
        sequence, self._next_sequence = self._next_sequence, self._next_sequence + 1
        self._tables[sequence], self._lengths[sequence] = [], 0
        return sequence

    def fork(self, sequence, length=None):
        """A new sequence holding the first `length` tokens (None: all) of `sequence` in the
        same blocks, each block's reference count + 1 -> its id. Chapter 19."""
        self._check_sequence(sequence)
        held = self._lengths[sequence]
        if length is None:
            length = held
        require_int("length", length, 0)
        if length > held:
            raise ValueError(f"length={length} exceeds the {held} tokens of sequence={sequence}")
        return self._fork(sequence, length)

    def _fork(self, sequence, length):
        child = self.new_sequence()
        shared = self._tables[sequence][: blocks_for(length, self.block_size)]
        for block in shared:
            self._refcounts[block] += 1
        self._tables[child], self._lengths[child] = list(shared), length
        return child

    def blocks_needed(self, sequence, count):
        """How many free blocks reserve(sequence, count) takes -> int: the new blocks, and one
        more to copy a shared, partly filled last block into. Chapter 19."""
        self._check_sequence(sequence)
        require_int("count", count, 0)
        return self._blocks_needed(sequence, count)

    def _blocks_needed(self, sequence, count):
        table, length = self._tables[sequence], self._lengths[sequence]
        new = blocks_for(length + count, self.block_size) - len(table)
        return new + self._copy_on_write(table, length, count)

    def _copy_on_write(self, table, length, count):
        """Whether writing count tokens after `length` writes into a shared block."""
        return count > 0 and length % self.block_size > 0 and self._refcounts[table[-1]] > 1

    def reserve(self, sequence, count):
        """Room for count more tokens of sequence -> their slots (count,), int64 on the pools'
        device; ValueError when fewer than blocks_needed(sequence, count) are free. Chapter 19."""
        self._check_sequence(sequence)
        require_int("count", count, 0)
        needed = self._blocks_needed(sequence, count)
        if needed > len(self._free):
            raise ValueError(
                f"count={count} more tokens of sequence={sequence} need {needed} blocks; "
                f"{len(self._free)} are free"
            )
        return self._reserve(sequence, count)

    def _reserve(self, sequence, count):
        table, length, size = self._tables[sequence], self._lengths[sequence], self.block_size
        # copy-on-write: a shared block is copied before this sequence writes into it
        if self._copy_on_write(table, length, count):
            table[-1] = self._copied(table[-1], length % size)
        # new blocks from the free list, as many as the new tokens need
        while len(table) * size < length + count:
            table.append(self._allocate())
        self._lengths[sequence] = length + count
        slots = [table[p // size] * size + p % size for p in range(length, length + count)]
        return torch.tensor(slots, dtype=torch.long, device=self.keys[0].device)

    def _allocate(self):
        block = self._free.pop()
        self._refcounts[block] = 1
        return block

    def _copied(self, block, used):
        """A fresh block holding the first `used` tokens of `block` in every layer, which
        loses one reference -> the fresh block."""
        fresh = self._allocate()
        for pool in self.keys + self.values:
            pool[fresh, :used] = pool[block, :used]
        self._refcounts[block] -= 1
        return fresh

    def write(self, layer, slots, key, value):
        """Store one layer's key and value (t, kv_heads, head_dim) at slots (t,) from
        reserve. Chapter 19."""
        require_int("layer", layer, 0)
        if layer >= len(self.keys):
            raise ValueError(f"layer={layer} must be below the {len(self.keys)} layers")
        require_integer("slots", slots, 1)
        pool = self.keys[layer]
        for name, tensor in (("key", key), ("value", value)):
            require_float(name, tensor, 3)
            if tensor.shape != (slots.shape[0], *pool.shape[2:]) or tensor.dtype != pool.dtype:
                raise ValueError(
                    f"{name} {shape_of(tensor)} ({tensor.dtype}) must be (t, kv_heads, head_dim)"
                    f" = ({slots.shape[0]}, {pool.shape[2]}, {pool.shape[3]}) for slots "
                    f"{shape_of(slots)}, in the pool's {pool.dtype}"
                )
        if slots.numel() and (slots.min() < 0 or slots.max() >= pool.shape[0] * pool.shape[1]):
            raise ValueError(
                f"slots {shape_of(slots)} must lie in [0, num_blocks * block_size = "
                f"{pool.shape[0] * pool.shape[1]})"
            )
        self._write(layer, slots.to(pool.device), key, value)

    def _write(self, layer, slots, key, value):
        self.keys[layer].flatten(0, 1)[slots] = key
        self.values[layer].flatten(0, 1)[slots] = value

    def release(self, sequence):
        """Retire a sequence: each of its blocks loses one reference and returns to the free
        list when it has none left. Chapter 19."""
        self._check_sequence(sequence)
        self._release(sequence)

    def _release(self, sequence):
        for block in reversed(self._tables.pop(sequence)):
            self._refcounts[block] -= 1
            if self._refcounts[block] == 0:
                self._free.append(block)
        del self._lengths[sequence]

    def block_table(self, sequence):
        """The blocks holding sequence's tokens, in order -> a list of ints. Chapter 19."""
        self._check_sequence(sequence)
        return list(self._tables[sequence])

    def length(self, sequence):
        """How many tokens sequence holds -> int. Chapter 19."""
        self._check_sequence(sequence)
        return self._lengths[sequence]

    def _block_tables(self, sequences):
        """Block tables of sequences -> (len(sequences), longest) int64, padded with 0."""
        tables = [self._tables[sequence] for sequence in sequences]
        width = max(1, max(len(table) for table in tables))
        rows = [table + [0] * (width - len(table)) for table in tables]
        return torch.tensor(rows, dtype=torch.long, device=self.keys[0].device)


def paged_attention(query, key_pool, value_pool, block_tables, query_lens, key_lens, scale=None):
    """Attention of a ragged batch through block tables -> output (T, H, d_v).

    query (T, H, d): the new tokens of B sequences one after another, query_lens[b] of them
    for sequence b, the last of its key_lens[b] tokens; key_pool, value_pool (num_blocks,
    block_size, H_kv, d or d_v), H a multiple of H_kv (query head h reads KV head h // (H /
    H_kv)); block_tables (B, max_blocks): token p of sequence b is at block
    block_tables[b, p // block_size], offset p % block_size. A query sees its own sequence's
    tokens up to its position (causal, aligned at the end); scale None: 1 / sqrt(d).
    Chapter 19."""
    for name, tensor, rank in (("query", query, 3), ("key_pool", key_pool, 4)):
        require_float(name, tensor, rank)
    require_float("value_pool", value_pool, 4)
    require_same_dtype("query", query, "key_pool", key_pool, "value_pool", value_pool)
    heads, kv_heads = query.shape[1], key_pool.shape[2]
    if (
        key_pool.shape[:3] != value_pool.shape[:3]
        or query.shape[2] != key_pool.shape[3]
        or query.shape[2] < 1
        or kv_heads < 1
        or heads % kv_heads
    ):
        raise ValueError(
            f"query {shape_of(query)}, key_pool {shape_of(key_pool)} and value_pool "
            f"{shape_of(value_pool)} must be (T, H, d), (num_blocks, block_size, H_kv, d) and "
            "(num_blocks, block_size, H_kv, d_v) with H a multiple of H_kv and d >= 1"
        )
    scale = check_scale(scale, query)
    _check_ragged(query, key_pool, block_tables, query_lens, key_lens)
    slots, allowed = _kernels.ragged_layout(
        block_tables.to(query.device),
        query_lens.to(query.device),
        key_lens.to(query.device),
        key_pool.shape[1],
    )
    output = _kernels.gathered_attention(
        query.transpose(0, 1)[None], key_pool, value_pool, slots, allowed, scale
    )
    return output[0].transpose(0, 1)  # (T, H, d_v)


def _check_ragged(query, key_pool, block_tables, query_lens, key_lens):
    """block_tables (B, max_blocks), query_lens and key_lens (B,): integers, 0 <= query_lens
    <= key_lens <= max_blocks * block_size, sum(query_lens) = T, the blocks used in range."""
    require_integer("block_tables", block_tables, 2)
    for name, lens in (("query_lens", query_lens), ("key_lens", key_lens)):
        require_integer(name, lens, 1)
        if lens.shape[0] != block_tables.shape[0]:
            raise ValueError(
                f"{name} {shape_of(lens)} must hold one length per row of block_tables "
                f"{shape_of(block_tables)}"
            )
    room = block_tables.shape[1] * key_pool.shape[1]
    if ((query_lens < 0) | (query_lens > key_lens) | (key_lens > room)).any():
        raise ValueError(
            f"query_lens {query_lens.tolist()} and key_lens {key_lens.tolist()} must satisfy "
            f"0 <= query_lens <= key_lens <= max_blocks * block_size = {room}"
        )
    if int(query_lens.sum()) != query.shape[0]:
        raise ValueError(
            f"query {shape_of(query)} must hold sum(query_lens) = {int(query_lens.sum())} tokens"
        )
    used = torch.arange(block_tables.shape[1], device=key_lens.device) < blocks_for(
        key_lens[:, None], key_pool.shape[1]
    )
    entries = block_tables[used.to(block_tables.device)]
    if entries.numel() and (entries.min() < 0 or entries.max() >= key_pool.shape[0]):
        raise ValueError(
            f"block_tables {shape_of(block_tables)} must point at blocks in [0, num_blocks = "
            f"{key_pool.shape[0]}) wherever key_lens reach"
        )
