"""Checks of chapter 14's exercises: undoing the GGUF converter's reordering of W_Q and W_K rows,
and the targets of an induction head."""

import torch

from .. import rotary
from .core import CheckFailed, compare, generator, passed, random, run, self_check


def _converter_permute(weight, num_heads):
    """llama.cpp's convert_hf_to_gguf reordering of W_Q / W_K rows: half-split -> interleaved
    (within each head, row i of the first half and row i of the second half become rows
    2i and 2i + 1)."""
    rows, columns = weight.shape
    return (
        weight.reshape(num_heads, 2, rows // num_heads // 2, columns)
        .transpose(1, 2)
        .reshape(rows, columns)
    )


def _half_split_cases(seed):
    """(name, half-split weight, num_heads): the original rows the answer must recover."""
    shapes = [
        ("1 head of 8", 1, 8, 5),
        ("3 heads of 8", 3, 8, 6),
        ("9 heads of 64, as SmolLM2's W_Q", 9, 64, 7),
        ("2 heads of 2", 2, 2, 3),
    ]
    return [
        (name, random((heads * head_dim, columns), seed, number), heads)
        for number, (name, heads, head_dim, columns) in enumerate(shapes)
    ]


@self_check
def check_half_split_rows(fn, seed=0):
    """Check fn(weight (num_heads * head_dim, in), num_heads) -> the same rows in the
    half-split order: the inverse of the GGUF converter's reordering of W_Q and W_K.
    Chapter 14, exercise 1."""
    cases = _half_split_cases(seed)
    for case, original, heads in cases:
        gguf_rows = _converter_permute(original, heads)
        got = run(fn, (gguf_rows, heads), case, forbidden=(rotary.interleaved_to_half_split,))
        if isinstance(got, torch.Tensor) and got.shape == original.shape:
            if torch.equal(got, _converter_permute(gguf_rows, heads)) and not torch.equal(
                got, original
            ):
                raise CheckFailed(
                    f"case '{case}': you applied the converter's reordering "
                    "again; undo it: rows 2i and 2i + 1 of each head go back "
                    "to rows i and i + head_dim / 2"
                )
            whole = gguf_rows.reshape(1, -1, 2, gguf_rows.shape[1]).transpose(1, 2)
            if heads > 1 and torch.equal(got, whole.reshape(gguf_rows.shape)):
                raise CheckFailed(
                    f"case '{case}': you reordered the rows of all heads "
                    "together; each head's rows are reordered on their own "
                    "(reshape to (num_heads, head_dim // 2, 2, in) first)"
                )
        compare(got, original, case, "rows", atol=0)
    passed("your reordering of W_Q and W_K rows", len(cases))


def _induction_target_cases(seed):
    """(name, ids (L,)): token sequences with repeats, so that targets exist."""
    rng = generator(seed)
    return [
        ("12 tokens from 4", torch.randint(0, 4, (12,), generator=rng)),
        ("30 tokens from 6", torch.randint(0, 6, (30,), generator=rng)),
        ("9 tokens repeated once", torch.randperm(9, generator=rng).repeat(2)),
    ]


def _targets_by_loops(ids, shift):
    """Bool (L, L): key s with ids[s - shift] == ids[t], shift <= s <= t."""
    length = len(ids)
    targets = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for s in range(shift, t + 1):
            targets[t, s] = bool(ids[s - shift] == ids[t])
    return targets


def _induction_slips(ids):
    """(wrong targets, hint) of the usual slips: the key before the occurrence,
    key s = t left out, key 0 marked by a roll that wraps round."""
    expected = _targets_by_loops(ids, shift=1)
    before = torch.zeros_like(expected)
    before[:, :-1] = ids[None, 1:] == ids[:, None]  # ids[s + 1] == ids[t]
    wrapped = (ids.roll(1)[None, :] == ids[:, None]) & torch.ones_like(expected).tril()
    return [
        (
            before & torch.ones_like(expected).tril(-1),
            "you marked the key before the earlier occurrence, ids[s + 1] == "
            "ids[t]; an induction head looks at the key after it, ids[s - 1] "
            "== ids[t]",
        ),
        (
            expected & torch.ones_like(expected).tril(-1),
            "you left out key s = t: when ids[t - 1] == ids[t] the query's own "
            "key follows the earlier occurrence, so 1 <= s <= t, not s < t",
        ),
        (
            wrapped,
            "key 0 follows no token, but your shift wraps round (torch.roll "
            "compares key 0 with the last token): key 0 is never a target",
        ),
    ]


@self_check
def check_induction_targets(fn, seed=0):
    """Check fn(ids (L,)) -> bool (L, L), True where key s follows an earlier occurrence of
    query t's token: ids[s - 1] == ids[t], 1 <= s <= t (an induction head's targets).
    Chapter 14, exercise 2."""
    cases = _induction_target_cases(seed)
    for case, ids in cases:
        expected = _targets_by_loops(ids, shift=1)
        got = run(fn, (ids.clone(),), case)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if got.dtype != torch.bool:
                raise CheckFailed(f"case '{case}': return a bool matrix, got {got.dtype}")
            if torch.equal(
                got, _targets_by_loops(ids, shift=0) & ~torch.eye(len(ids), dtype=torch.bool)
            ):
                raise CheckFailed(
                    f"case '{case}': you marked the earlier occurrence of the "
                    "token itself (a duplicate-token head's target); an "
                    "induction head looks at the key after it, s with "
                    "ids[s - 1] == ids[t]"
                )
            for wrong, hint in _induction_slips(ids):
                if torch.equal(got, wrong) and not torch.equal(wrong, expected):
                    raise CheckFailed(f"case '{case}': {hint}")
            if (got & ~torch.ones_like(got).tril()).any():
                raise CheckFailed(
                    f"case '{case}': a key after its query is marked; a decoder "
                    "query t sees only keys s <= t"
                )
        compare(
            got.to(torch.int64) if isinstance(got, torch.Tensor) else got,
            expected.to(torch.int64),
            case,
            "targets",
            atol=0,
        )
    passed("your induction targets", len(cases))
