"""Checks of chapter 7's exercises: single-head self-attention, stable for large scores, and the
sinusoidal positional encoding."""

import torch

from .. import attention, positions
from .core import compare, integers, passed, random, run, self_check


@self_check
def check_self_attention(fn, seed=0):
    """Check fn(x (n, d_in), W_q (d_in, d_k), W_k (d_in, d_k), W_v (d_in, d_v)) -> (n, d_v):
    single-head self-attention softmax(X W_q (X W_k)^T / sqrt(d_k)) X W_v, stable for large
    scores. Chapter 7, exercise 1."""
    cases = [
        ("4 tokens, d_in 3 -> d_k 2", 4, 3, 2, 2, 1.0),
        ("6 tokens, d_k 8, d_v 5", 6, 4, 8, 5, 1.0),
        ("1 token", 1, 3, 4, 2, 1.0),
        ("scores around 1e3", 5, 4, 4, 3, 30.0),
    ]
    answers = (
        attention.scaled_dot_product_attention,
        torch.nn.functional.scaled_dot_product_attention,
    )
    for number, (case, n, d_in, d_k, d_v, scale) in enumerate(cases):
        x = random((n, d_in), seed, number) * scale
        w_q, w_k, w_v = (
            random(shape, seed, 10 * number + i) * (scale if i < 2 else 1)
            for i, shape in enumerate([(d_in, d_k), (d_in, d_k), (d_in, d_v)])
        )
        q, k, v = (x @ w_q).double(), (x @ w_k).double(), (x @ w_v).double()
        weights = torch.softmax(q @ k.T / d_k**0.5, dim=-1)  # float64: no overflow
        expected = (weights @ v).float()

        def explain(index, big=scale > 1):
            return (
                "these scores are around 1e3 and exp(1e3) overflows to inf, so the softmax "
                "is inf/inf = NaN; subtract each row's largest score first"
                if big
                else None
            )

        got = run(fn, (x, w_q, w_k, w_v), case, forbidden=answers)
        compare(got, expected, case, explain_nan=explain, atol=1e-4)
    passed("your self-attention", len(cases))


@self_check
def check_positional_encoding(fn, seed=0):
    """Check fn(num_positions, dim) -> (num_positions, dim), the sinusoidal encoding.
    Chapter 7, exercise 2."""
    cases = [(4, 2), (10, 8), (50, 16)]
    if seed:
        cases = [(n, 2 * d) for n, d in zip(integers(seed, 3, 1, 60), integers(seed, 3, 1, 20, 1))]
    for num_positions, dim in cases:
        case = f"{num_positions} positions, dim {dim}"
        position = torch.arange(num_positions, dtype=torch.float64)[:, None]
        frequency = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        expected = (
            torch.stack([torch.sin(position * frequency), torch.cos(position * frequency)], dim=-1)
            .flatten(1)
            .float()
        )
        got = run(
            fn, (num_positions, dim), case, forbidden=(positions.sinusoidal_positional_encoding,)
        )
        compare(
            got.to(expected.dtype) if isinstance(got, torch.Tensor) else got,
            expected,
            case,
            "encoding",
            atol=1e-4,
        )
    passed("your positional encoding", len(cases))
