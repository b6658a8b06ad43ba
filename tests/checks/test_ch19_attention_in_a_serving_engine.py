"""The checks of chapter 19's exercises pass independent answers (slots by divmod in a list;
attention through the package's PagedKVCache and paged_attention; admission by filling a list
of free blocks) and name each slip they know, on the visible and hidden seeds."""

import pytest
import torch
from learner_answers import SEEDS, stub

from attention_course import DecoderConfig, PagedKVCache, checks, paged_attention
from attention_course.checks import CheckFailed


def slots_by_divmod(block_table, length, block_size, mistake=None):
    slots = []
    for position in range(length):
        entry, offset = divmod(position, block_size)
        if mistake == "no offset":
            offset = 0
        if mistake == "modulo length":
            entry = position % len(block_table)
        block = entry if mistake == "table index" else block_table[entry]
        slots.append(block * block_size + offset)
    return torch.tensor(slots)


@pytest.mark.parametrize("seed", SEEDS)
def test_slots_check_passes_a_loop(seed, capsys):
    checks.check_token_slots(slots_by_divmod, seed=seed)
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [("no offset", "offset"), ("table index", r"block_table\["), ("modulo length", "p // ")],
)
def test_slots_check_names_the_slip(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_token_slots(lambda *a: slots_by_divmod(*a, mistake=mistake))


def test_slots_as_floats_are_refused():
    with pytest.raises(CheckFailed, match="integers"):
        checks.check_token_slots(lambda *a: slots_by_divmod(*a).double())


def through_the_package(query, key_pool, value_pool, block_table, length, mistake=None):
    """The package's paged_attention on one query token, or with a slip."""
    heads, kv_heads = query.shape[0], key_pool.shape[2]
    if mistake == "heads tiled":  # query head h reads key head h % H_kv
        order = torch.arange(heads).view(kv_heads, -1).T.reshape(-1)
        query = query[order]
    if mistake == "whole last block":
        length = len(block_table) * key_pool.shape[1]
    scale = 1.0 if mistake == "no scale" else None
    out = paged_attention(
        query[None], key_pool, value_pool, torch.tensor([block_table]),
        torch.tensor([1]), torch.tensor([length]), scale=scale,
    )[0]  # fmt: skip
    if mistake == "heads tiled":
        out = out[order.argsort()]
    return out


def by_hand(query, key_pool, value_pool, block_table, length):
    """A loop over heads and tokens with an explicit softmax."""
    heads, kv_heads, dim = query.shape[0], key_pool.shape[2], query.shape[1]
    size = key_pool.shape[1]
    out = torch.zeros_like(query)
    for head in range(heads):
        kv = head // (heads // kv_heads)
        where = [(block_table[p // size], p % size) for p in range(length)]
        keys = torch.stack([key_pool[block, offset, kv] for block, offset in where])
        vals = torch.stack([value_pool[block, offset, kv] for block, offset in where])
        weights = torch.softmax(keys @ query[head] / dim**0.5, dim=0)
        out[head] = weights @ vals
    return out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [through_the_package, by_hand])
def test_decode_check_passes_independent_answers(seed, answer, capsys):
    checks.check_paged_decode_attention(answer, seed=seed)
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [("heads tiled", "repeat_interleave"), ("whole last block", "length"), ("no scale", "sqrt")],
)
def test_decode_check_names_the_slip(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_paged_decode_attention(lambda *a: through_the_package(*a, mistake=mistake))


def test_the_package_cache_lays_out_what_the_check_assumes():
    """The exercise's pool layout is PagedKVCache's: a sequence written through reserve and
    write is read back by block table as the check reads it."""
    config = DecoderConfig(vocab_size=8, embed_dim=8, num_layers=1, num_heads=2, num_kv_heads=1,
                           hidden_dim=8)  # fmt: skip
    cache = PagedKVCache(config, num_blocks=6, block_size=4, dtype=torch.float64)
    other, sequence = cache.new_sequence(), cache.new_sequence()
    keys = torch.randn(7, 1, 4, dtype=torch.float64)
    cache.reserve(other, 2)
    cache.write(0, cache.reserve(sequence, 7), keys, keys)
    table = cache.block_table(sequence)
    slots = slots_by_divmod(table, 7, 4)
    assert torch.equal(cache.keys[0].flatten(0, 1)[slots], keys)


def admit_by_filling(running, waiting, free_blocks, block_size, mistake=None):
    """Blocks as a list of owners: each token placed one at a time."""
    pool = [None] * free_blocks  # the free blocks; an owner once taken
    if mistake != "no room for running":
        for tokens in running:
            if tokens % block_size == 0 and tokens:
                pool.pop()  # its next token opens a block
            elif tokens == 0:
                pool.pop()
    count = 0
    for prompt in waiting:
        needed = prompt // block_size if mistake == "floor" else -(-prompt // block_size)
        if needed > len(pool):
            if mistake == "skip ahead":
                continue
            break
        del pool[:needed]
        count += 1
    return count


@pytest.mark.parametrize("seed", SEEDS)
def test_admission_check_passes_a_list_of_blocks(seed, capsys):
    checks.check_admission(admit_by_filling, seed=seed)
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [("no room for running", "running requests come first"), ("skip ahead", "arrival order"),
     ("floor", "ceil")],
)  # fmt: skip
def test_admission_check_names_the_slip(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_admission(lambda *a: admit_by_filling(*a, mistake=mistake))


def test_admission_must_be_a_count():
    with pytest.raises(CheckFailed, match="an int"):
        checks.check_admission(lambda *a: float(admit_by_filling(*a)))


@pytest.mark.parametrize(
    "check", [checks.check_token_slots, checks.check_paged_decode_attention, checks.check_admission]
)
def test_a_stub_is_not_yet_answered(check, capsys):
    check(stub)
    assert "Not yet answered" in capsys.readouterr().out


class DictAllocator:
    """A correct allocator kept another way: a dict of held blocks' counts, lowest free first."""

    def __init__(self, num_blocks, mistake=None):
        self.num_blocks, self.held, self.mistake = num_blocks, {}, mistake

    def allocate(self):
        free = [b for b in range(self.num_blocks) if b not in self.held]
        if not free:
            return None
        self.held[free[0]] = 1
        return free[0]

    def share(self, block):
        if self.mistake != "share not counted":
            self.held[block] += 1

    def release(self, block):
        self.held[block] -= 1
        if self.mistake == "freed at once" or self.held[block] <= 0:
            del self.held[block]

    def free_count(self):
        return self.num_blocks - len(self.held)


@pytest.mark.parametrize("seed", SEEDS)
def test_allocator_check_passes_a_dict_of_counts(seed, capsys):
    checks.check_block_allocator(DictAllocator, seed=seed)
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint", [("freed at once", "count reaches 0|every reference"),
                      ("share not counted", "count reaches 0|every reference")]
)  # fmt: skip
def test_allocator_check_names_the_slip(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_block_allocator(lambda n: DictAllocator(n, mistake))


def test_allocator_must_say_when_the_pool_is_empty():
    class Raises(DictAllocator):
        def allocate(self):
            return super().allocate() if len(self.held) < self.num_blocks else -1

    with pytest.raises(CheckFailed, match="None"):
        checks.check_block_allocator(Raises)


def test_a_stub_allocator_is_not_yet_answered(capsys):
    checks.check_block_allocator(stub)
    assert "Not yet answered" in capsys.readouterr().out
