"""Self-checks for the exercises: call `check_...(your_function)` and read what it says.

Each check runs your function and the course's reference on several inputs, including awkward
ones, and either prints one line saying all cases pass or raises `CheckFailed` telling, in plain
words, which case failed and how (wrong shape, NaN, a row that does not sum to one, a value off).
"""

import torch

from . import pooling


class CheckFailed(AssertionError):
    """Your answer does not match the reference yet; the message says where and how."""


def _passed(what, n_cases):
    print(f"Correct: {what} agrees with the reference on all {n_cases} test cases.")


def _run(fn, args, case):
    """Call the learner's function; turn any exception into a CheckFailed naming the case."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise CheckFailed("your function still raises NotImplementedError: "
                          "replace the stub with your code") from None
    except Exception as error:  # the learner's bug, reported rather than crashing the check
        raise CheckFailed(f"case '{case}': your function raised "
                          f"{type(error).__name__}: {error}") from None


def _first_bad_row(bad_rows):
    return bad_rows.nonzero().flatten()[0].item()


def weights_problem(weights, atol=1e-5):
    """Why `weights` (..., n_k) are not attention weights, in plain words; None if they are."""
    if not isinstance(weights, torch.Tensor):
        return f"expected a torch.Tensor, got {type(weights).__name__}"
    rows = weights.reshape(-1, weights.shape[-1]) if weights.dim() else weights.reshape(1, 1)
    if not torch.isfinite(rows).all():
        row = _first_bad_row(~torch.isfinite(rows).all(dim=-1))
        return (f"row {row} contains NaN or inf: {rows[row].tolist()[:6]}; if every kernel "
                "value underflowed to 0 the row is 0/0, so compute the weights with a softmax")
    if (rows < 0).any():
        row = _first_bad_row((rows < 0).any(dim=-1))
        return f"row {row} has a negative weight ({rows[row].min().item():.3g}); weights are >= 0"
    sums = rows.sum(dim=-1)
    off = (sums - 1).abs() > atol
    if off.any():
        row = _first_bad_row(off)
        return f"row {row} sums to {sums[row].item():.4f}, not 1"
    return None


def check_attention_weights(weights, atol=1e-5):
    """Check that every row of `weights` (..., n_k) is finite, non-negative and sums to 1."""
    problem = weights_problem(weights, atol)
    if problem:
        raise CheckFailed(problem)
    print(f"Correct: all {weights.reshape(-1, weights.shape[-1]).shape[0]} rows are "
          "non-negative and sum to 1.")


def _compare(got, expected, case, what="output", atol=1e-5):
    """Raise CheckFailed unless tensor `got` has `expected`'s shape and values."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"case '{case}': your {what} is a {type(got).__name__}, "
                          "expected a torch.Tensor")
    if got.shape != expected.shape:
        raise CheckFailed(f"case '{case}': your {what} has shape {tuple(got.shape)}, "
                          f"expected {tuple(expected.shape)}")
    if not torch.isfinite(got).all():
        index = tuple((~torch.isfinite(got)).nonzero()[0].tolist())
        raise CheckFailed(f"case '{case}': your {what} holds {got[index].item()} at index {index}; "
                          "did every kernel value underflow to 0? Work with log-kernels and a "
                          "softmax")
    wrong = (got.double() - expected.double()).abs() > atol * (1 + expected.double().abs())
    if wrong.any():
        index = tuple(wrong.nonzero()[0].tolist())
        raise CheckFailed(f"case '{case}': your {what} at index {index} is "
                          f"{got[index].item():.5f}, expected {expected[index].item():.5f}")


def _regression_cases():
    """(name, queries, keys, values, bandwidth) inputs for the kernel-regression checks."""
    generator = torch.Generator().manual_seed(1234)
    keys = torch.sort(torch.rand(12, generator=generator) * 10).values
    values = torch.randn(12, generator=generator)
    queries = torch.rand(5, generator=generator) * 10
    return [
        ("five queries, bandwidth 1", queries, keys, values, 1.0),
        ("narrow bandwidth 0.3", queries, keys, values, 0.3),
        ("wide bandwidth 50", queries, keys, values, 50.0),
        ("queries on the keys", keys[:4].clone(), keys, values, 0.7),
        ("a query far from every key", torch.tensor([2.0, 60.0]), keys, values, 0.5),
    ]


def check_nadaraya_watson(fn):
    """Check fn(queries (n_q,), keys (n_k,), values (n_k,), bandwidth) -> predictions (n_q,),
    Gaussian-kernel Nadaraya–Watson regression."""
    cases = _regression_cases()
    for case, queries, keys, values, bandwidth in cases:
        expected, _ = pooling.nadaraya_watson(queries, keys, values, bandwidth, "gaussian")
        _compare(_run(fn, (queries, keys, values, bandwidth), case), expected, case, "predictions")
    _passed("your Gaussian Nadaraya–Watson regression", len(cases))


def check_kernel_weights(fn, kernel):
    """Check fn(queries (n_q,), keys (n_k,), bandwidth) -> weights (n_q, n_k) for a named kernel
    ('gaussian', 'boxcar' or 'epanechnikov')."""
    if kernel not in pooling.KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {sorted(pooling.KERNELS)}")
    cases = [case for case in _regression_cases() if kernel == "gaussian" or case[4] >= 0.7]
    for case, queries, keys, values, bandwidth in cases:
        distance_to_nearest_key = (queries[:, None] - keys[None, :]).abs().min(dim=1).values
        queries = queries[distance_to_nearest_key < bandwidth]  # a compact kernel must reach a key
        _, expected = pooling.nadaraya_watson(queries, keys, values, bandwidth, kernel)
        got = _run(fn, (queries, keys, bandwidth), case)
        problem = weights_problem(got) if isinstance(got, torch.Tensor) else None
        if problem and got.shape == expected.shape:
            raise CheckFailed(f"case '{case}': {problem}")
        _compare(got, expected, case, "weights")
    _passed(f"your {kernel} attention-weight matrix", len(cases))


def check_leave_one_out(fn):
    """Check fn(keys (n,), values (n,), bandwidth) -> leave-one-out mean squared error (a number),
    Gaussian kernel."""
    cases = _regression_cases()[:3]
    for case, _, keys, values, bandwidth in cases:
        expected = pooling.leave_one_out_mse(keys, values, bandwidth)
        got = _run(fn, (keys, values, bandwidth), case)
        got = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
        if not isinstance(got, float):
            raise CheckFailed(f"case '{case}': expected one number, got {got!r}")
        if abs(got - expected) > 1e-5 * (1 + abs(expected)):
            in_sample = pooling.nadaraya_watson(keys, keys, values, bandwidth)[0]
            hint = (" (that is the in-sample error: mask each point's own key)"
                    if abs(got - torch.mean((in_sample - values) ** 2).item()) < 1e-5 else "")
            raise CheckFailed(f"case '{case}': your error is {got:.5f}, "
                              f"expected {expected:.5f}{hint}")
    _passed("your leave-one-out error", len(cases))
