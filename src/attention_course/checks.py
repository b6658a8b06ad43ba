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
    print(f"Correct: {what}: all {n_cases} test cases agree with the reference.")


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


def _random(shape, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator)


def check_batched_pooling(fn):
    """Check fn(weights (b, n_q, n_k), values (b, n_k, d_v)) -> (b, n_q, d_v): one weighted
    average of values per query and per batch element."""
    cases = [("batch of 2, one query each", (2, 1, 10), (2, 10, 1)),
             ("batch of 3, four queries, 2-D values", (3, 4, 6), (3, 6, 2)),
             ("batch of 1", (1, 5, 5), (1, 5, 3))]
    for number, (case, weight_shape, value_shape) in enumerate(cases):
        weights = torch.softmax(_random(weight_shape, number), dim=-1)
        values = _random(value_shape, 10 + number)
        expected = torch.stack([w @ v for w, v in zip(weights, values)])
        _compare(_run(fn, (weights, values), case), expected, case)
    _passed("your batched weighted average", len(cases))


def check_per_key_weights(fn):
    """Check fn(queries (n_q,), keys (n_k,), bandwidths (n_k,)) -> (n_q, n_k): Gaussian attention
    weights in which key i has its own bandwidth h_i."""
    cases = _regression_cases()[:4]
    for number, (case, queries, keys, values, bandwidth) in enumerate(cases):
        bandwidths = bandwidth * torch.exp(0.5 * _random((len(keys),), number))
        _, expected = pooling.nadaraya_watson(queries, keys, values, bandwidths)
        _compare(_run(fn, (queries, keys, bandwidths), case), expected, case, "weights")
    _passed("your per-key attention weights", len(cases))


def check_similarity(fn, name, **options):
    """Check fn(queries (n_q, d), keys (n_k, d)) -> scores (n_q, n_k) against the similarity
    `name` of attention_course.scoring.SIMILARITIES ('dot', 'scaled_dot', 'cosine', 'rbf'),
    called with `options` (e.g. temperature=0.5 or bandwidth=0.5)."""
    from .scoring import SIMILARITIES

    if name not in SIMILARITIES:
        raise ValueError(f"unknown similarity {name!r}; choose one of {sorted(SIMILARITIES)}")
    cases = [("2-D queries and keys", (1, 2), (6, 2)), ("8-D, three queries", (3, 8), (5, 8)),
             ("long keys", (2, 4), (7, 4))]
    for number, (case, query_shape, key_shape) in enumerate(cases):
        queries, keys = _random(query_shape, number), _random(key_shape, 20 + number)
        if case == "long keys":
            keys = keys * torch.arange(1.0, 8.0)[:, None] * 3
        expected = SIMILARITIES[name](queries, keys, **options)
        _compare(_run(fn, (queries, keys), case), expected, case, "scores")
    _passed(f"your {name} similarity", len(cases))


def check_entropy(fn):
    """Check fn(weights (..., n)) -> entropies (...): -sum p log p in nats over the last axis,
    with 0 log 0 = 0."""
    cases = [("uniform over 64", torch.full((64,), 1 / 64)),
             ("a batch of random rows", torch.softmax(_random((3, 5), 0), dim=-1)),
             ("one-hot rows (0 log 0 = 0)", torch.eye(4)),
             ("rows with some exact zeros", torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.0, 0.8]]))]
    for case, weights in cases:
        positive = torch.where(weights > 0, weights, torch.ones_like(weights))
        expected = -(weights * positive.log()).sum(dim=-1)
        _compare(_run(fn, (weights,), case), expected, case, "entropy")
    _passed("your entropy", len(cases))


def check_softmax_jacobian(fn):
    """Check fn(scores (n,)) -> (n, n), the Jacobian d softmax(s)_i / d s_j, against autograd."""
    cases = [("small scores", _random((4,), 0)), ("large scores", 10 * _random((5,), 1)),
             ("equal scores", torch.zeros(3))]
    for case, scores in cases:
        expected = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=0), scores)
        _compare(_run(fn, (scores,), case), expected, case, "Jacobian")
    _passed("your softmax Jacobian", len(cases))


def check_masked_softmax(fn):
    """Check fn(scores (b, n_q, n_k), valid_lens (b,) or (b, n_q)) -> weights (b, n_q, n_k):
    softmax over the first valid_len keys, zero elsewhere, and all zeros when valid_len is 0."""
    from .masking import masked_softmax

    cases = [("one length per sequence", (2, 2, 4), torch.tensor([2, 3])),
             ("one length per query", (2, 3, 4), torch.tensor([[1, 3, 4], [2, 2, 4]])),
             ("a sequence of length 0", (2, 2, 3), torch.tensor([0, 3]))]
    for number, (case, shape, valid_lens) in enumerate(cases):
        scores = _random(shape, number)
        expected = masked_softmax(scores, valid_lens)
        _compare(_run(fn, (scores, valid_lens), case), expected, case, "weights")
    _passed("your masked softmax", len(cases))


def check_causal_mask(fn):
    """Check fn(n_queries, n_keys) -> bool (n_queries, n_keys), True where attending is allowed,
    top-left aligned as PyTorch's is_causal."""
    from .masking import causal_mask

    cases = [(4, 4), (2, 5), (5, 2), (1, 1)]
    for n_queries, n_keys in cases:
        case = f"{n_queries} queries, {n_keys} keys"
        got = _run(fn, (n_queries, n_keys), case)
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            raise CheckFailed(f"case '{case}': your mask has dtype {got.dtype}; use torch.bool "
                              "(True = may attend)")
        expected = causal_mask(n_queries, n_keys)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and not torch.equal(got, expected):
            if torch.equal(got, ~expected):
                raise CheckFailed(f"case '{case}': your mask is inverted: here True must mean "
                                  "'may attend', as in scaled_dot_product_attention")
            row, column = (got != expected).nonzero()[0].tolist()
            raise CheckFailed(f"case '{case}': query {row} {'may' if expected[row, column] else 'may not'} "
                              f"attend to key {column}, but your mask says the opposite")
        _compare(got.float() if isinstance(got, torch.Tensor) else got, expected.float(), case, "mask")
    _passed("your causal mask", len(cases))
