"""Checks of chapter 12's exercises 1 and 2: the online-softmax update and the tiles that causal
attention needs. Exercise 5, FlashAttention-2 as an autograd Function, has its own module,
ch12_flash_autograd."""

import math

import torch

from .. import tiled
from .core import CheckFailed, compare, integers, passed, random, run, self_check


def _score_rows(seed):
    """(case, scores (rows, n), block size) for check_online_softmax_update:
    each row is streamed to the update block by block."""
    normal = random((3, 12), seed, 140)
    cases = [
        ("3 rows of 12 scores, blocks of 4", normal, 4),
        ("huge scores (around 1000)", normal + 1000, 5),
        ("very negative scores (around -1000)", normal - 1000, 3),
        (
            "each block's maximum above the last",
            torch.arange(12.0).repeat(2, 1) + random((2, 12), seed, 141) * 0.1,
            4,
        ),
        ("one block", normal[:, :7], 7),
    ]
    masked = random((2, 9), seed, 142)
    masked[0, :3] = -float("inf")
    cases.append(("the first block of row 0 fully masked (-inf)", masked, 3))
    between = random((2, 9), seed, 143)
    between[1, 3:6] = -float("inf")
    cases.append(("row 1's middle block fully masked, between finite ones", between, 3))
    if seed:
        sizes = integers(seed, 3, 1, 6, 144)
        cases += [
            (f"random case {n}, blocks of {b}", random((2, 3 * b + n), seed, 145 + n) * 10, b)
            for n, b in enumerate(sizes)
        ]
    return cases


def _streamed(update, scores, block_size):
    """The state (m, l) after update() has seen every block of `scores`."""
    running_max = torch.full(scores.shape[:-1], -float("inf"), dtype=scores.dtype)
    running_sum = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        running_max, running_sum = update(running_max, running_sum, block)
    return running_max, running_sum


def _update_without_rescale(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    return new_max, running_sum + torch.exp(block - new_max[..., None]).sum(-1)


@self_check
def check_online_softmax_update(fn, seed=0):
    """Check fn(running_max (rows,), running_sum (rows,), block (rows, b)) ->
    (new_max, new_sum): after the blocks of a row have been passed in order,
    starting from (-inf, 0), running_max is the row's maximum m and
    running_sum is sum_j exp(s_j - m). A block whose scores are all -inf
    (a masked row) must leave that row's state as it was. Chapter 12, exercise 1."""
    n_cases = 0
    for case, scores, block_size in _score_rows(seed):

        def learners(running_max, running_sum, block):
            got = run(fn, (running_max.clone(), running_sum.clone(), block.clone()), case)
            if not (isinstance(got, tuple) and len(got) == 2):
                raise CheckFailed(f"case '{case}': return two tensors, (new_max, new_sum)")
            return got

        got_max, got_sum = _streamed(learners, scores, block_size)
        expected_max = scores.amax(dim=-1)  # from the whole row at once
        wide = scores.double()
        expected_sum = torch.exp(wide - wide.amax(-1, keepdim=True)).sum(-1)
        _, without_rescale = _streamed(_update_without_rescale, scores, block_size)
        hints = [
            (
                without_rescale,
                "the old running sum must be multiplied "
                "by exp(m_old - m_new) when the maximum grows",
            ),
            (
                torch.exp(wide).sum(-1),
                "your running sum is sum_j "
                "exp(s_j); keep it relative to the running maximum, "
                "sum_j exp(s_j - m)",
            ),
        ]
        for wrong_sum, hint in hints:
            if (
                isinstance(got_sum, torch.Tensor)
                and got_sum.shape == wrong_sum.shape
                and torch.allclose(got_sum.double(), wrong_sum.double())
                and not torch.allclose(wrong_sum.double(), expected_sum)
            ):
                raise CheckFailed(f"case '{case}': {hint}")

        def explain(index):
            if torch.isneginf(scores[index[0]]).any():
                return (
                    "a block with every score -inf gives m_new = -inf, and "
                    "exp(m_old - m_new) = exp(-inf + inf) is NaN; leave the "
                    "state as it is when a block's maximum is -inf"
                )
            if scores[index[0]].max() > 80:
                return (
                    "exp of a large score overflows; subtract the running "
                    "maximum before exponentiating"
                )
            return (
                "is the rescaling factor upside down? On the first "
                "block m_old = -inf: exp(m_old - m_new) is 0, but "
                "exp(m_new - m_old) is inf, and 0 * inf is NaN"
            )

        compare(got_max, expected_max, case, "running maximum", explain_nan=explain)
        compare(got_sum, expected_sum, case, "running sum", explain_nan=explain)
        n_cases += 1
    passed("your online-softmax update", n_cases)


def _causal_tiles_by_mask(n_queries, n_keys, query_block, key_block):
    """Every (query block, key block) with an allowed entry, from the mask."""
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool).tril()
    return {
        (q, k)
        for q in range(math.ceil(n_queries / query_block))
        for k in range(math.ceil(n_keys / key_block))
        if allowed[
            q * query_block : (q + 1) * query_block, k * key_block : (k + 1) * key_block
        ].any()
    }


def _tile_cases(seed):
    shapes = [
        (8, 8, 4, 4),
        (10, 10, 4, 4),
        (12, 12, 4, 2),
        (12, 12, 2, 4),
        (7, 12, 3, 5),
        (12, 7, 5, 2),
        (5, 5, 8, 8),
        (1, 1, 1, 1),
    ]
    if seed:
        sizes = integers(seed, 16, 1, 20, 150)
        shapes = [
            (sizes[i], sizes[i + 1], 1 + sizes[i + 2] % 6, 1 + sizes[i + 3] % 6)
            for i in range(0, 16, 4)
        ]
    return shapes


@self_check
def check_causal_tiles(fn, seed=0):
    """Check fn(n_queries, n_keys, query_block, key_block) -> the (query
    block, key block) index pairs that causal attention (query i sees keys
    j <= i) must compute, when queries come in blocks of query_block and keys
    in blocks of key_block: every tile with at least one allowed entry, and
    none of the tiles entirely above the diagonal. Any iterable of pairs, in
    any order. Chapter 12, exercise 2."""
    n_cases = 0
    for n_queries, n_keys, query_block, key_block in _tile_cases(seed):
        case = (
            f"{n_queries} queries in blocks of {query_block}, {n_keys} "
            f"keys in blocks of {key_block}"
        )
        got = run(
            fn, (n_queries, n_keys, query_block, key_block), case, forbidden=(tiled.tile_schedule,)
        )
        try:
            got = {tuple(int(index) for index in pair) for pair in got}
        except (TypeError, ValueError):
            raise CheckFailed(
                f"case '{case}': return pairs of block indices, such as [(0, 0), (1, 0), (1, 1)]"
            ) from None
        expected = _causal_tiles_by_mask(n_queries, n_keys, query_block, key_block)
        every_tile = {
            (q, k)
            for q in range(math.ceil(n_queries / query_block))
            for k in range(math.ceil(n_keys / key_block))
        }
        by_index = {(q, k) for q, k in every_tile if k <= q}
        last_query = {q: min((q + 1) * query_block, n_queries) - 1 for q, _ in every_tile}
        slips = [
            (
                {(q, k) for q, k in every_tile if k * key_block <= q * query_block},
                "you compare the tile's first key with the block's first "
                "query, but the block's later queries see later keys: a tile "
                "is needed when its first key is not after its last query",
            ),
            (
                {
                    (q, k)
                    for q, k in every_tile
                    if min((k + 1) * key_block, n_keys) - 1 <= last_query[q]
                },
                "you keep a tile only when its last key is not after the "
                "last query, which drops the tiles on the diagonal: a tile "
                "is needed as soon as its first key is not after its last "
                "query",
            ),
        ]
        if got == every_tile != expected:
            raise CheckFailed(
                f"case '{case}': you kept all {len(got)} tiles; "
                "leave out those entirely above the diagonal"
            )
        if got == by_index != expected:
            raise CheckFailed(
                f"case '{case}': comparing block indices works "
                "only when both blocks have the same size; "
                "compare positions: a tile is needed when its "
                "first key is not after its last query"
            )
        for wrong, hint in slips:
            if got == wrong != expected:
                raise CheckFailed(f"case '{case}': {hint}")
        missing, extra = sorted(expected - got), sorted(got - expected)
        if missing:
            raise CheckFailed(
                f"case '{case}': tile {missing[0]} holds an "
                "allowed entry (a key not after its query) but "
                "is missing"
            )
        if extra:
            raise CheckFailed(
                f"case '{case}': tile {extra[0]} lies entirely "
                "above the diagonal (every key after every "
                "query) and should be skipped"
            )
        n_cases += 1
    passed("your causal tile list", n_cases)
