"""Checks of chapter 8's exercises: splitting the features into heads, and the parameter count of
multi-head attention (against torch.nn.MultiheadAttention)."""

import torch

from .. import multihead
from .core import CheckFailed, compare, integers, passed, random, run, self_check


@self_check
def check_split_heads(fn, seed=0):
    """Check fn(x (batch, seq, num_heads * head_dim), num_heads) -> (batch, num_heads, seq,
    head_dim), where head h holds features h * head_dim ... (h + 1) * head_dim - 1.
    Chapter 8, exercise 1."""
    cases = [
        ("2 heads", (1, 3, 4), 2),
        ("4 heads, batch 2", (2, 5, 8), 4),
        ("1 head", (2, 2, 6), 1),
    ]
    for number, (case, shape, num_heads) in enumerate(cases):
        x = random(shape, seed, number)
        head_dim = shape[-1] // num_heads
        expected = torch.stack(
            [x[..., h * head_dim : (h + 1) * head_dim] for h in range(num_heads)], dim=1
        )
        got = run(fn, (x, num_heads), case, forbidden=(multihead.split_heads,))
        compare(got, expected, case, "heads")
    passed("your split_heads", len(cases))


@self_check
def check_mha_parameter_count(fn, seed=0):
    """Check fn(embed_dim, num_heads, bias) -> the number of parameters of multi-head attention,
    against torch.nn.MultiheadAttention. Chapter 8, exercise 2."""
    cases = [(8, 2, True), (64, 8, False), (512, 8, True), (12, 3, False)]
    if seed:
        heads, widths, biases = (
            integers(seed, 4, 1, 9),
            integers(seed, 4, 1, 33, 1),
            integers(seed, 4, 0, 2, 2),
        )
        cases = [(h * w, h, bool(b)) for h, w, b in zip(heads, widths, biases)]
    for embed_dim, num_heads, bias in cases:
        case = f"embed_dim {embed_dim}, {num_heads} heads, bias {bias}"
        module = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias)
        expected = sum(p.numel() for p in module.parameters())
        got = run(fn, (embed_dim, num_heads, bias), case)
        if got != expected:
            raise CheckFailed(f"case '{case}': you count {got}, PyTorch's module has {expected}")
    passed("your parameter count", len(cases))
