"""Checks of chapter 19's exercises: the slots a block table gives a sequence's tokens,
one decoding step of attention through a block table (grouped-query heads, a partly filled
last block), and the scheduler's admission rule under a budget of blocks; each compared with
an independent answer (a loop over tokens, SDPA over keys copied out of the pool, a
simulation block by block) and naming the classic slips it recognises by reproducing them."""

import torch
import torch.nn.functional as F

from .core import CheckFailed, compare, integers, passed, random, run, self_check

# ------------------------------------------------------- exercise 1: a block table's slots


def _slots(table, length, block_size, mistake=None):
    """Each token's slot in the flattened pool, one token at a time; or a slip's: "no
    offset" (the block's first slot for every token), "table index" (the table read at the
    block index where its entry is meant), "modulo length" (blocks chosen by p % len(table))."""
    slots = []
    for position in range(length):
        index, offset = position // block_size, position % block_size
        if mistake == "modulo length":
            index = position % len(table)
        block = index if mistake == "table index" else table[index]
        slots.append(block * block_size + (0 if mistake == "no offset" else offset))
    return torch.tensor(slots, dtype=torch.long)


_SLOT_MISTAKES = (
    ("no offset", "add the token's offset in its block, position % block_size"),
    (
        "table index",
        "position // block_size is an index into the block table; the block is "
        "block_table[position // block_size]",
    ),
    ("modulo length", "token p sits in the table's entry p // block_size, not p % len(table)"),
)


def _slot_cases(seed):
    """(block table, length, block size): scattered blocks, a partly filled last block."""
    if seed:
        sizes = integers(seed, 12, 1, 9, 191)
        cases = []
        for i in range(3):
            block_size = 2 ** (sizes[i] % 4 + 1)
            blocks = torch.randperm(40, generator=torch.Generator().manual_seed(seed + i))
            table = blocks[: sizes[i + 3]].tolist()
            cases.append((table, (len(table) - 1) * block_size + sizes[i + 6] % block_size + 1,
                           block_size))  # fmt: skip
        return cases
    return [([7, 2, 9], 37, 16), ([3], 1, 4), ([5, 0, 11, 4], 16, 4), ([1, 8], 9, 8)]


@self_check
def check_token_slots(token_slots, seed=0):
    """Check `token_slots(block_table, length, block_size)` -> (length,) int64 slots of the
    flattened pool, token p in block block_table[p // block_size] at offset p % block_size.
    Chapter 19, exercise 1."""
    cases = _slot_cases(seed)
    for table, length, block_size in cases:
        case = f"block_table={table}, length={length}, block_size={block_size}"
        got = run(token_slots, (list(table), length, block_size), case)
        expected = _slots(table, length, block_size)
        if isinstance(got, torch.Tensor) and got.dtype.is_floating_point:
            raise CheckFailed(f"case '{case}': slots index a pool: return integers (int64)")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for mistake, hint in _SLOT_MISTAKES:
                if torch.equal(got.cpu().long(), _slots(table, length, block_size, mistake)):
                    if not torch.equal(got.cpu().long(), expected):
                        raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected.double(), case, what="slots", atol=0)
    passed("every token's slot through its block table", len(cases))


# -------------------------------------------- exercise 2: attention through a block table


def _pools(case, seed, number):
    """(query (H, d), key pool, value pool (N, B, H_kv, d)) float64 for a case."""
    heads, kv_heads, dim, block_size, num_blocks = case[1:6]
    query = random((heads, dim), seed, 300 + 3 * number).double()
    keys = random((num_blocks, block_size, kv_heads, dim), seed, 301 + 3 * number).double()
    values = random((num_blocks, block_size, kv_heads, dim), seed, 302 + 3 * number).double()
    return query, keys, values


def _decode_reference(query, keys, values, table, length, mistake=None):
    """SDPA of one query token over the first `length` keys copied out of the pool; or a
    slip's: "whole last block" (the last block's unwritten slots read too), "heads tiled"
    (key heads repeated as tile, not repeat_interleave), "no scale"."""
    block_size, kv_heads = keys.shape[1], keys.shape[2]
    read = len(table) * block_size if mistake == "whole last block" else length
    k = torch.cat([keys[block] for block in table])[:read]  # (read, H_kv, d)
    v = torch.cat([values[block] for block in table])[:read]
    group = query.shape[0] // kv_heads
    if mistake == "heads tiled":
        k, v = k.repeat(1, group, 1), v.repeat(1, group, 1)
    else:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = 1.0 if mistake == "no scale" else None
    out = F.scaled_dot_product_attention(
        query[:, None], k.transpose(0, 1), v.transpose(0, 1), scale=scale
    )
    return out[:, 0]


_DECODE_MISTAKES = (
    (
        "whole last block",
        "read only the sequence's `length` keys: the last block's slots past the end hold "
        "another sequence's keys, or stale ones",
    ),
    (
        "heads tiled",
        "query head h reads key head h // (H / H_kv): repeat the key heads with "
        "repeat_interleave (each one group times in a row), not repeat",
    ),
    ("no scale", "scale the scores by 1 / sqrt(head_dim)"),
)


def _decode_cases(seed):
    """(name, heads, kv_heads, dim, block_size, num_blocks, table, length)."""
    if seed:
        sizes = integers(seed, 9, 1, 7, 192)
        cases = []
        for i in range(3):
            block_size, blocks = 2 ** (sizes[i] % 3 + 2), sizes[i + 3] % 4 + 2
            table = torch.randperm(12, generator=torch.Generator().manual_seed(seed + 10 * i))
            length = (blocks - 1) * block_size + sizes[i + 6]
            cases.append((f"random case {i}", 4, 2, 8, block_size, 12,
                          table[:blocks].tolist(), min(length, blocks * block_size)))  # fmt: skip
        return cases
    return [
        ("four heads, two key heads, last block part full", 4, 2, 8, 4, 10, [6, 1, 8], 10),
        ("one key head for six query heads", 6, 1, 16, 8, 6, [2, 5], 13),
        ("one block, one token", 2, 2, 4, 4, 3, [2], 1),
        ("blocks exactly full", 4, 4, 8, 4, 8, [3, 0, 7], 12),
    ]


@self_check
def check_paged_decode_attention(paged_decode_attention, seed=0):
    """Check `paged_decode_attention(query (H, d), key_pool, value_pool (num_blocks,
    block_size, H_kv, d), block_table, length)` -> (H, d): one new token's attention over
    the sequence's first `length` keys, found through its block table.
    Chapter 19, exercise 2."""
    cases = _decode_cases(seed)
    for number, case in enumerate(cases):
        name, table, length = case[0], case[6], case[7]
        query, keys, values = _pools(case, seed, number)
        got = run(paged_decode_attention, (query, keys, values, list(table), length), name)
        expected = _decode_reference(query, keys, values, table, length)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for mistake, hint in _DECODE_MISTAKES:
                slip = _decode_reference(query, keys, values, table, length, mistake)
                if torch.allclose(got.detach().cpu().double(), slip, atol=1e-9) and not (
                    torch.allclose(slip, expected, atol=1e-9)
                ):
                    raise CheckFailed(f"case '{name}': {hint}")
        compare(got, expected, name, atol=1e-9)
    passed("attention through a block table", len(cases))


# --------------------------------------------------- exercise 3: admission under a budget


def _admitted(running, waiting, free_blocks, block_size, mistake=None):
    """How many waiting prompts are admitted this step, simulated block by block; or a
    slip's: "no room for running" (the running requests' next tokens not reserved first),
    "skip ahead" (a prompt that does not fit is passed over for later ones), "floor" (blocks
    counted as tokens // block_size)."""
    count = (lambda t: t // block_size) if mistake == "floor" else (
        lambda t: -(-t // block_size))  # fmt: skip
    # each running request writes one more token: a new block when its last one is full
    if mistake != "no room for running":
        for tokens in running:
            free_blocks -= count(tokens + 1) - count(tokens)
    admitted = 0
    for prompt in waiting:
        # a newcomer writes its whole prompt: it needs blocks for all of it
        needed = count(prompt)
        if needed > free_blocks:
            if mistake == "skip ahead":
                continue
            break
        free_blocks -= needed
        admitted += 1
    return admitted


_ADMISSION_MISTAKES = (
    (
        "no room for running",
        "the running requests come first: reserve a block for each one whose last block is "
        "full before admitting anyone",
    ),
    (
        "skip ahead",
        "admit in arrival order: stop at the first prompt that does not fit (first come, "
        "first served), so that a long prompt is not starved by shorter ones behind it",
    ),
    ("floor", "a partly filled block still takes a whole block: ceil(tokens / block_size)"),
)


def _admission_cases(seed):
    """(running token counts, waiting prompt lengths, free blocks, block size)."""
    if seed:
        sizes = integers(seed, 24, 1, 60, 193)
        return [
            (sizes[8 * i : 8 * i + 3], sizes[8 * i + 3 : 8 * i + 7], sizes[8 * i + 7] % 12 + 2,
             4 * (1 + i))
            for i in range(3)
        ]  # fmt: skip
    return [
        ([16, 5], [20, 3, 9], 4, 16),  # the first running request needs a new block
        ([7, 8], [40, 2], 4, 8),  # the long prompt does not fit: nobody passes it
        ([], [16, 17, 1], 3, 16),  # exactly full blocks
        ([3, 4, 11], [5, 5, 5, 5], 6, 4),
    ]


@self_check
def check_admission(admitted, seed=0):
    """Check `admitted(running, waiting, free_blocks, block_size)` -> how many of the
    waiting prompts (lengths, in arrival order) one step admits, after reserving the running
    requests' next tokens (running: how many tokens each holds). Chapter 19, exercise 3."""
    cases = _admission_cases(seed)
    answers = []
    for running, waiting, free_blocks, block_size in cases:
        case = (f"running={running}, waiting={waiting}, free_blocks={free_blocks}, "
                f"block_size={block_size}")  # fmt: skip
        got = run(admitted, (list(running), list(waiting), free_blocks, block_size), case)
        if not isinstance(got, int) or isinstance(got, bool):
            raise CheckFailed(f"case '{case}': return a count (an int), got {got!r}")
        answers.append((case, got))
    for (case, got), arguments in zip(answers, cases):
        expected = _admitted(*arguments)
        if got != expected:
            # the slip that gives every one of the answers, if one does
            hint = next(
                (h for m, h in _ADMISSION_MISTAKES
                 if all(_admitted(*a, m) == g for (_, g), a in zip(answers, cases))),
                None,
            )  # fmt: skip
            raise CheckFailed(
                f"case '{case}': you admit {got}, expected {expected}"
                + (f": {hint}" if hint else "")
            )
    passed("the admission rule under a budget of blocks", len(cases))


# -------------------------------------------- exercise 4: a block allocator with reference counts


def _operations(seed, count=80, num_blocks=6):
    """A seeded sequence of "allocate", ("share", i) and ("release", i), where i picks one of
    the references held so far (by position, so that any answer's block numbers serve)."""
    generator = torch.Generator().manual_seed(1000 + seed)
    draws = torch.randint(0, 1000, (count, 2), generator=generator).tolist()
    return num_blocks, [(("allocate", "share", "release")[a % 3], b) for a, b in draws]


@self_check
def check_block_allocator(allocator_class, seed=0):
    """Check a class `allocator_class(num_blocks)` with allocate() -> a free block's number
    (its count 1), or None when no block is free; share(block): one more reference;
    release(block): one fewer, the block free again at 0; and free_count() -> how many blocks
    are free. Driven through a seeded sequence of operations against reference counts kept by
    the check. Chapter 19, exercise 4."""
    num_blocks, operations = _operations(seed)
    case = f"num_blocks={num_blocks}"
    allocator = run(allocator_class, (num_blocks,), case)
    counts, held = [0] * num_blocks, []  # the check's books; references held, in order
    for step, (operation, pick) in enumerate(operations, 1):
        where = f"case '{case}', operation {step} ({operation})"
        if operation == "allocate":
            block = run(allocator.allocate, (), where, learner=allocator_class)
            if 0 not in counts:
                if block is not None:
                    raise CheckFailed(f"{where}: no block is free, so allocate() must return "
                                      f"None, got {block!r}")  # fmt: skip
                continue
            if not isinstance(block, int) or not 0 <= block < num_blocks:
                raise CheckFailed(f"{where}: allocate() must return a block number in "
                                  f"[0, {num_blocks}), got {block!r}")  # fmt: skip
            if counts[block]:
                raise CheckFailed(
                    f"{where}: allocate() returned block {block}, which {counts[block]} "
                    "reference(s) still hold: a block returns to the free list only when its "
                    "count reaches 0"
                )
            counts[block] = 1
            held.append(block)
        elif held:
            block = held[pick % len(held)]
            if operation == "share":
                run(allocator.share, (block,), where, learner=allocator_class)
                counts[block] += 1
                held.append(block)
            else:
                run(allocator.release, (block,), where, learner=allocator_class)
                counts[block] -= 1
                held.remove(block)
        free = run(allocator.free_count, (), where, learner=allocator_class)
        if free != counts.count(0):
            raise CheckFailed(
                f"{where}: free_count() is {free!r}, expected {counts.count(0)} (blocks whose "
                "count is 0; a shared block stays in use until every reference is released)"
            )
    passed("a block allocator with reference counts", len(operations))
