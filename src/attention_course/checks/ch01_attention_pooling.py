"""Checks of chapter 1's exercises: Gaussian Nadaraya–Watson regression, the weights of a named
kernel, and the leave-one-out error. Chapter 2's checks reuse its cases, hints and forbidden
answers (`regression_cases`, `kernel_underflow`, `REGRESSION_ANSWERS`)."""

import torch

from .. import pooling
from .core import CheckFailed, compare, generator, passed, run, self_check, weights_problem


def regression_cases(seed=0):
    """(name, queries, keys, values, bandwidth) inputs for the kernel-regression checks.
    Chapters 1-2."""
    rng = generator(seed)
    keys = torch.sort(torch.rand(12, generator=rng) * 10).values
    values = torch.randn(12, generator=rng)
    queries = torch.rand(5, generator=rng) * 10
    return [
        ("five queries, bandwidth 1", queries, keys, values, 1.0),
        ("narrow bandwidth 0.3", queries, keys, values, 0.3),
        ("wide bandwidth 50", queries, keys, values, 50.0),
        ("queries on the keys", keys[:4].clone(), keys, values, 0.7),
        ("a query far from every key", torch.tensor([2.0, 60.0]), keys, values, 0.5),
    ]


def kernel_underflow(queries, keys, bandwidths):
    """index -> why a Gaussian kernel-regression row is NaN, if its kernel values underflow.
    Chapters 1-2."""

    def explain(index):
        distances = (queries[index[0]] - keys) / bandwidths
        if torch.exp(-(distances**2) / 2).sum() == 0:
            return (
                "every kernel value of this query underflows to 0 in float32, so its row "
                "is 0/0; subtract the row's largest score before exponentiating (as "
                "torch.softmax does)"
            )
        return None

    return explain


REGRESSION_ANSWERS = (pooling.nadaraya_watson, pooling.kernel_scores)


def _require_an_average(fn, queries, keys, bandwidth):
    """A weighted average of equal values is that value, whatever the weights: an answer
    that misses it has weights that do not sum to 1 (the commonest slip)."""
    case, level = "every value equal to 2.5", 2.5
    got = run(
        fn,
        (queries, keys, torch.full_like(keys, level), bandwidth),
        case,
        forbidden=REGRESSION_ANSWERS,
    )
    if (
        isinstance(got, torch.Tensor)
        and got.shape == queries.shape
        and torch.isfinite(got).all()
        and not torch.allclose(got, torch.full_like(got, level))
    ):
        shown = ", ".join(f"{value:.4g}" for value in got[:3].tolist())
        raise CheckFailed(
            f"case '{case}': a weighted average of equal values is that value, "
            f"but yours gives {shown}: do each query's weights sum to 1?"
        )


@self_check
def check_nadaraya_watson(fn, seed=0):
    """Check fn(queries (n_q,), keys (n_k,), values (n_k,), bandwidth) -> predictions (n_q,),
    Gaussian-kernel Nadaraya–Watson regression. Chapter 1, exercise 1."""
    cases = regression_cases(seed)
    _require_an_average(fn, *cases[0][1:3], cases[0][4])
    for case, queries, keys, values, bandwidth in cases:
        expected, _ = pooling.nadaraya_watson(queries, keys, values, bandwidth, "gaussian")
        got = run(fn, (queries, keys, values, bandwidth), case, forbidden=REGRESSION_ANSWERS)
        compare(
            got,
            expected,
            case,
            "predictions",
            explain_nan=kernel_underflow(queries, keys, bandwidth),
        )
    passed("your Gaussian Nadaraya–Watson regression", len(cases))


@self_check
def check_kernel_weights(fn, kernel, seed=0):
    """Check fn(queries (n_q,), keys (n_k,), bandwidth) -> weights (n_q, n_k) for a named kernel
    ('gaussian', 'boxcar' or 'epanechnikov'). Chapter 1, exercise 2."""
    if kernel not in pooling.KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {sorted(pooling.KERNELS)}")
    answers = (*REGRESSION_ANSWERS, pooling.KERNELS[kernel])
    cases = [c for c in regression_cases(seed) if kernel == "gaussian" or c[4] >= 0.7]
    for case, queries, keys, values, bandwidth in cases:
        distance_to_nearest_key = (queries[:, None] - keys[None, :]).abs().min(dim=1).values
        queries = queries[distance_to_nearest_key < bandwidth]  # a compact kernel must reach a key
        _, expected = pooling.nadaraya_watson(queries, keys, values, bandwidth, kernel)
        got = run(fn, (queries, keys, bandwidth), case, forbidden=answers)
        problem = weights_problem(got) if isinstance(got, torch.Tensor) else None
        if problem and got.shape == expected.shape and torch.isfinite(got).all():
            raise CheckFailed(f"case '{case}': {problem}")
        compare(
            got, expected, case, "weights", explain_nan=kernel_underflow(queries, keys, bandwidth)
        )
    passed(f"your {kernel} attention-weight matrix", len(cases))


@self_check
def check_leave_one_out(fn, seed=0):
    """Check fn(keys (n,), values (n,), bandwidth) -> leave-one-out mean squared error (a number),
    Gaussian kernel. Chapter 1, exercise 3."""
    cases = regression_cases(seed)[:3]
    answers = (*REGRESSION_ANSWERS, pooling.leave_one_out_mse, pooling.select_bandwidth)
    for case, _, keys, values, bandwidth in cases:
        expected = pooling.leave_one_out_mse(keys, values, bandwidth)
        got = run(fn, (keys, values, bandwidth), case, forbidden=answers)
        got = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
        if not isinstance(got, float):
            raise CheckFailed(f"case '{case}': expected one number, got {got!r}")
        if got != got:
            raise CheckFailed(
                f"case '{case}': your error is NaN: with exp()/sum a row whose "
                "kernel values all underflow is 0/0; use a softmax"
            )
        if abs(got - expected) > 1e-5 * (1 + abs(expected)):
            in_sample = pooling.nadaraya_watson(keys, keys, values, bandwidth)[0]
            hint = (
                " (that is the in-sample error: mask each point's own key)"
                if abs(got - torch.mean((in_sample - values) ** 2).item()) < 1e-5
                else ""
            )
            raise CheckFailed(
                f"case '{case}': your error is {got:.5f}, expected {expected:.5f}{hint}"
            )
    passed("your leave-one-out error", len(cases))
