"""Checks of chapter 9's exercises: the size of a KV cache in bytes, and the repetition of KV heads
for grouped-query attention."""

import torch

from .. import multihead
from .core import CheckFailed, compare, integers, passed, random, run, self_check


@self_check
def check_kv_cache_bytes(fn, seed=0):
    """Check fn(batch_size, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_element) -> the
    size of a KV cache in bytes. Chapter 9, exercise 2."""
    cases = [
        (1, 1, 1, 1, 1, 2),
        (1, 4096, 32, 32, 128, 2),
        (8, 2048, 32, 8, 128, 2),
        (2, 100, 8, 2, 64, 4),
    ]
    if seed:
        cases = list(zip(*(integers(seed, 4, 1, 300, offset) for offset in range(6))))
    names = ["batch_size", "seq_len", "num_layers", "num_kv_heads", "head_dim", "bytes_per_element"]
    for arguments in cases:
        case = ", ".join(f"{n}={a}" for n, a in zip(names, arguments))
        expected = 2  # keys and values
        for argument in arguments:
            expected *= argument
        got = run(fn, arguments, case, forbidden=(multihead.kv_cache_bytes,))
        if got != expected:
            hint = (
                " (did you forget that keys AND values are cached?)" if got * 2 == expected else ""
            )
            raise CheckFailed(f"case '{case}': you say {got} bytes, expected {expected}{hint}")
    passed("your KV-cache size", len(cases))


@self_check
def check_repeat_kv(fn, seed=0):
    """Check fn(kv (batch, num_kv_heads, seq, head_dim), group_size) -> (batch, num_kv_heads *
    group_size, seq, head_dim) in which query head h gets KV head h // group_size.
    Chapter 9, exercise 1."""
    cases = [
        ("2 KV heads, groups of 2", (1, 2, 3, 4), 2),
        ("4 KV heads, groups of 3", (2, 4, 2, 2), 3),
        ("groups of 1 (MHA)", (1, 3, 2, 2), 1),
    ]
    for number, (case, shape, group_size) in enumerate(cases):
        kv = random(shape, seed, number)
        expected = torch.stack([kv[:, h // group_size] for h in range(shape[1] * group_size)], 1)
        got = run(fn, (kv, group_size), case)
        if (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and group_size > 1
            and torch.equal(got, kv.repeat(1, group_size, 1, 1))
        ):
            raise CheckFailed(
                f"case '{case}': your heads are in the order 0, 1, ..., 0, 1, ... "
                "(torch.repeat); query head h must read KV head h // group_size, "
                "as enable_gqa does (torch.repeat_interleave)"
            )
        compare(got, expected, case, "repeated heads")
    passed("your KV-head repetition", len(cases))
