"""Self-checks for the exercises: call `check_...(your_function)` and read what it says.

Each check runs your function on several inputs, awkward ones included, compares it with an
independent answer, and either prints one line saying all cases pass or raises `CheckFailed`
telling, in plain words, which case failed and how (wrong shape, NaN and what caused it, a row
that does not sum to one, a value off). While your answer is still the stub (it raises
`NotImplementedError`), a check prints "Not yet answered" and lets the notebook run on.

- `seed`: every check draws its cases from a seed. The default gives the cases the chapter
  shows; graders run the same check with other seeds as hidden tests, so an answer must be
  right in general, not only on the visible cases.
- Options that an exercise names (a temperature, a bandwidth) are passed to your function, with
  several values.
- An answer that calls the package's own function for the very quantity the exercise asks for
  does not pass: the exercise is to write it.
- `strict=True` (the graders' test cells): a stub fails like any wrong answer.
"""

import contextlib
import functools
import math
import sys

import torch

from . import (attention, decoding, masking, multihead, pooling, positions, rotary,
               scoring, tiled)


class CheckFailed(AssertionError):
    """Your answer does not match the reference yet; the message says where and how."""


class NotAnswered(CheckFailed):
    """The answer is still the exercise's stub: it raises NotImplementedError."""

    def __init__(self, name):
        super().__init__(f"{name} still raises NotImplementedError: replace the stub with "
                         "your code")
        self.name = name


class _Delegated(Exception):
    """Raised when a learner's answer calls one of the package's own answers."""


def _passed(what, n_cases):
    print(f"Correct: {what}.\nAll {n_cases} test cases agree with the reference.")


def _self_check(check):
    """A public check: on a stub answer it prints "Not yet answered" and returns, so that a
    notebook runs from top to bottom before the learner has answered, unless `strict`."""
    @functools.wraps(check)
    def run(*args, strict=False, **kwargs):
        __tracebackhide__ = True  # noqa: F841 (IPython and pytest show the message, not us)
        try:
            return check(*args, **kwargs)
        except NotAnswered as stub:
            if strict:
                raise NotAnswered(stub.name) from None
            print(f"Not yet answered: {stub.name} is still the stub.\n"
                  "Write your answer in the cell above, run it, then run this check again.")
        except CheckFailed as failure:
            raise CheckFailed(str(failure)) from None  # the message without the check's insides
    return run


def _tripwire(name):
    def tripwire(*args, **kwargs):
        raise _Delegated(name)
    return tripwire


def _namespaces(fn, references):
    """Where a learner's function may find the forbidden functions: its globals, the package's
    modules, and the modules the functions come from."""
    package = sys.modules[__name__.rpartition(".")[0]]
    modules = [package, torch.nn.functional,
               *(m for n, m in sys.modules.items() if n.startswith(package.__name__ + ".")),
               *(sys.modules[r.__module__] for r in references
                 if getattr(r, "__module__", None) in sys.modules)]
    return [getattr(fn, "__globals__", {}), scoring.SIMILARITIES,
            *{id(m): vars(m) for m in modules}.values()]


@contextlib.contextmanager
def _forbidden(fn, references):
    """While fn runs, each function in `references` raises _Delegated wherever fn could reach it
    (see _namespaces); restored afterwards."""
    by_id = {id(reference): reference.__name__ for reference in references}
    if id(fn) in by_id:
        raise _Delegated(by_id[id(fn)])
    patched = []
    for namespace in _namespaces(fn, references):
        for name, value in list(namespace.items()):
            if id(value) in by_id:
                patched.append((namespace, name, value))
                namespace[name] = _tripwire(by_id[id(value)])
    try:
        yield
    finally:
        for namespace, name, value in reversed(patched):
            namespace[name] = value


def _run(fn, args, case, kwargs=None, forbidden=()):
    """Call the learner's function; turn any exception into a CheckFailed naming the case."""
    try:
        with _forbidden(fn, forbidden):
            return fn(*args, **(kwargs or {}))
    except NotImplementedError:
        raise NotAnswered(f"`{getattr(fn, '__name__', 'your function')}`") from None
    except _Delegated as delegated:
        raise CheckFailed(f"case '{case}': your function calls `{delegated}`, which computes "
                          "exactly what this exercise asks for; write the computation yourself "
                          "with torch operations") from None
    except TypeError as error:
        hint = ("; the exercise's function takes " + ", ".join(f"{k}=..." for k in kwargs)
                if kwargs and "argument" in str(error) else "")
        raise CheckFailed(f"case '{case}': your function raised TypeError: {error}{hint}") from None
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
        return f"row {row} contains NaN or inf: {rows[row].tolist()[:6]}"
    if (rows < 0).any():
        row = _first_bad_row((rows < 0).any(dim=-1))
        return f"row {row} has a negative weight ({rows[row].min().item():.3g}); weights are >= 0"
    sums = rows.sum(dim=-1)
    off = (sums - 1).abs() > atol
    if off.any():
        row = _first_bad_row(off)
        return f"row {row} sums to {sums[row].item():.4f}, not 1"
    return None


@_self_check
def check_attention_weights(weights, atol=1e-5):
    """Check that every row of `weights` (..., n_k) is finite, non-negative and sums to 1."""
    problem = weights_problem(weights, atol)
    if problem:
        raise CheckFailed(problem)
    print(f"Correct: all {weights.reshape(-1, weights.shape[-1]).shape[0]} rows are "
          "non-negative and sum to 1.")


def _compare(got, expected, case, what="output", atol=1e-5, explain_nan=None):
    """Raise CheckFailed unless tensor `got` has `expected`'s shape and values; `explain_nan`
    (index -> str or None) says what produced a NaN or inf at that index."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"case '{case}': your {what} is a {type(got).__name__}, "
                          "expected a torch.Tensor")
    got = got.detach().cpu()  # an answer computed on a GPU is compared all the same
    if got.shape != expected.shape:
        raise CheckFailed(f"case '{case}': your {what} has shape {tuple(got.shape)}, "
                          f"expected {tuple(expected.shape)}")
    if not torch.isfinite(got).all():
        index = tuple((~torch.isfinite(got)).nonzero()[0].tolist())
        cause = explain_nan(index) if explain_nan else None
        raise CheckFailed(f"case '{case}': your {what} holds {got[index].item()} at index "
                          f"{index}" + (f": {cause}" if cause else ""))
    wrong = (got.double() - expected.double()).abs() > atol * (1 + expected.double().abs())
    if wrong.any():
        index = tuple(wrong.nonzero()[0].tolist())
        raise CheckFailed(f"case '{case}': your {what} at index {index} is "
                          f"{got[index].item():.5f}, expected {expected[index].item():.5f}")


def _generator(seed, offset=0):
    return torch.Generator().manual_seed(1234 + 1000 * seed + offset)


def _random(shape, seed, offset=0):
    return torch.randn(*shape, generator=_generator(seed, offset))


def _integers(seed, count, low, high, offset=0):
    """`count` integers drawn uniformly from [low, high)."""
    return torch.randint(low, high, (count,), generator=_generator(seed, offset)).tolist()


def _regression_cases(seed=0):
    """(name, queries, keys, values, bandwidth) inputs for the kernel-regression checks."""
    generator = _generator(seed)
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


def _kernel_underflow(queries, keys, bandwidths):
    """index -> why a Gaussian kernel-regression row is NaN, if its kernel values underflow."""
    def explain(index):
        distances = (queries[index[0]] - keys) / bandwidths
        if torch.exp(-distances**2 / 2).sum() == 0:
            return ("every kernel value of this query underflows to 0 in float32, so its row "
                    "is 0/0; subtract the row's largest score before exponentiating (as "
                    "torch.softmax does)")
        return None
    return explain


_REGRESSION_ANSWERS = (pooling.nadaraya_watson, pooling.kernel_scores)


def _require_an_average(fn, queries, keys, bandwidth):
    """A weighted average of equal values is that value, whatever the weights: an answer
    that misses it has weights that do not sum to 1 (the commonest slip)."""
    case, level = "every value equal to 2.5", 2.5
    got = _run(fn, (queries, keys, torch.full_like(keys, level), bandwidth), case,
               forbidden=_REGRESSION_ANSWERS)
    if (isinstance(got, torch.Tensor) and got.shape == queries.shape
            and torch.isfinite(got).all() and not torch.allclose(got, torch.full_like(got, level))):
        shown = ", ".join(f"{value:.4g}" for value in got[:3].tolist())
        raise CheckFailed(f"case '{case}': a weighted average of equal values is that value, "
                          f"but yours gives {shown}: do each query's weights sum to 1?")


@_self_check
def check_nadaraya_watson(fn, seed=0):
    """Check fn(queries (n_q,), keys (n_k,), values (n_k,), bandwidth) -> predictions (n_q,),
    Gaussian-kernel Nadaraya–Watson regression."""
    cases = _regression_cases(seed)
    _require_an_average(fn, *cases[0][1:3], cases[0][4])
    for case, queries, keys, values, bandwidth in cases:
        expected, _ = pooling.nadaraya_watson(queries, keys, values, bandwidth, "gaussian")
        got = _run(fn, (queries, keys, values, bandwidth), case, forbidden=_REGRESSION_ANSWERS)
        _compare(got, expected, case, "predictions",
                 explain_nan=_kernel_underflow(queries, keys, bandwidth))
    _passed("your Gaussian Nadaraya–Watson regression", len(cases))


@_self_check
def check_kernel_weights(fn, kernel, seed=0):
    """Check fn(queries (n_q,), keys (n_k,), bandwidth) -> weights (n_q, n_k) for a named kernel
    ('gaussian', 'boxcar' or 'epanechnikov')."""
    if kernel not in pooling.KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {sorted(pooling.KERNELS)}")
    answers = (*_REGRESSION_ANSWERS, pooling.KERNELS[kernel])
    cases = [c for c in _regression_cases(seed) if kernel == "gaussian" or c[4] >= 0.7]
    for case, queries, keys, values, bandwidth in cases:
        distance_to_nearest_key = (queries[:, None] - keys[None, :]).abs().min(dim=1).values
        queries = queries[distance_to_nearest_key < bandwidth]  # a compact kernel must reach a key
        _, expected = pooling.nadaraya_watson(queries, keys, values, bandwidth, kernel)
        got = _run(fn, (queries, keys, bandwidth), case, forbidden=answers)
        problem = weights_problem(got) if isinstance(got, torch.Tensor) else None
        if problem and got.shape == expected.shape and torch.isfinite(got).all():
            raise CheckFailed(f"case '{case}': {problem}")
        _compare(got, expected, case, "weights",
                 explain_nan=_kernel_underflow(queries, keys, bandwidth))
    _passed(f"your {kernel} attention-weight matrix", len(cases))


@_self_check
def check_leave_one_out(fn, seed=0):
    """Check fn(keys (n,), values (n,), bandwidth) -> leave-one-out mean squared error (a number),
    Gaussian kernel."""
    cases = _regression_cases(seed)[:3]
    answers = (*_REGRESSION_ANSWERS, pooling.leave_one_out_mse, pooling.select_bandwidth)
    for case, _, keys, values, bandwidth in cases:
        expected = pooling.leave_one_out_mse(keys, values, bandwidth)
        got = _run(fn, (keys, values, bandwidth), case, forbidden=answers)
        got = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
        if not isinstance(got, float):
            raise CheckFailed(f"case '{case}': expected one number, got {got!r}")
        if got != got:
            raise CheckFailed(f"case '{case}': your error is NaN: with exp()/sum a row whose "
                              "kernel values all underflow is 0/0; use a softmax")
        if abs(got - expected) > 1e-5 * (1 + abs(expected)):
            in_sample = pooling.nadaraya_watson(keys, keys, values, bandwidth)[0]
            hint = (" (that is the in-sample error: mask each point's own key)"
                    if abs(got - torch.mean((in_sample - values) ** 2).item()) < 1e-5 else "")
            raise CheckFailed(f"case '{case}': your error is {got:.5f}, "
                              f"expected {expected:.5f}{hint}")
    _passed("your leave-one-out error", len(cases))


@_self_check
def check_batched_pooling(fn, seed=0):
    """Check fn(weights (b, n_q, n_k), values (b, n_k, d_v)) -> (b, n_q, d_v): one weighted
    average of values per query and per batch element."""
    cases = [("batch of 2, one query each", (2, 1, 10), (2, 10, 1)),
             ("batch of 3, four queries, 2-D values", (3, 4, 6), (3, 6, 2)),
             ("batch of 1", (1, 5, 5), (1, 5, 3))]
    for number, (case, weight_shape, value_shape) in enumerate(cases):
        weights = torch.softmax(_random(weight_shape, seed, number), dim=-1)
        values = _random(value_shape, seed, 10 + number)
        expected = torch.stack([w @ v for w, v in zip(weights, values)])
        _compare(_run(fn, (weights, values), case), expected, case)
    _passed("your batched weighted average", len(cases))


@_self_check
def check_per_key_weights(fn, seed=0):
    """Check fn(queries (n_q,), keys (n_k,), bandwidths (n_k,)) -> (n_q, n_k): Gaussian attention
    weights in which key i has its own bandwidth h_i."""
    cases = _regression_cases(seed)[:4]
    for number, (case, queries, keys, values, bandwidth) in enumerate(cases):
        bandwidths = bandwidth * torch.exp(0.5 * _random((len(keys),), seed, number))
        _, expected = pooling.nadaraya_watson(queries, keys, values, bandwidths)
        got = _run(fn, (queries, keys, bandwidths), case, forbidden=_REGRESSION_ANSWERS)
        _compare(got, expected, case, "weights",
                 explain_nan=_kernel_underflow(queries, keys, bandwidths))
    _passed("your per-key attention weights", len(cases))


# The keyword each similarity takes, and the values a check passes for it.
SIMILARITY_OPTIONS = {"dot": "temperature", "scaled_dot": "temperature",
                      "cosine": "temperature", "rbf": "bandwidth"}
_OPTION_VALUES = (1.0, 0.5, 2.0, 0.1)


@_self_check
def check_similarity(fn, name, seed=0, **options):
    """Check fn(queries (n_q, d), keys (n_k, d), <option>=value) -> scores (n_q, n_k) against the
    similarity `name` ('dot', 'scaled_dot', 'cosine', 'rbf') of attention_course.scoring, for
    several values of its option (temperature or bandwidth), passed to fn as a keyword. A value
    given here (e.g. temperature=0.5, the exercise's default) is tested first."""
    if name not in SIMILARITY_OPTIONS:
        raise ValueError(f"unknown similarity {name!r}; choose one of {sorted(SIMILARITY_OPTIONS)}")
    option = SIMILARITY_OPTIONS[name]
    if set(options) - {option}:
        raise ValueError(f"the {name} similarity takes only {option}=..., got {sorted(options)}")
    values = list(dict.fromkeys([*options.values(), *_OPTION_VALUES]))
    reference = scoring.SIMILARITIES[name]
    shapes = [("2-D queries and keys", (1, 2), (6, 2)), ("8-D, three queries", (3, 8), (5, 8)),
              ("long keys", (2, 4), (7, 4))]
    n_cases = 0
    for number, (shape_case, query_shape, key_shape) in enumerate(shapes):
        queries, keys = _random(query_shape, seed, number), _random(key_shape, seed, 20 + number)
        if shape_case == "long keys":
            keys = keys * torch.arange(1.0, 8.0)[:, None] * 3
        for value in values:
            case, kwargs = f"{shape_case}, {option}={value}", {option: value}
            expected = reference(queries, keys, **kwargs)
            got = _run(fn, (queries, keys), case, kwargs, forbidden=(reference,))
            _compare(got, expected, case, "scores")
            n_cases += 1
    _passed(f"your {name} similarity", n_cases)


@_self_check
def check_entropy(fn, seed=0):
    """Check fn(weights (..., n)) -> entropies (...): -sum p log p in nats over the last axis,
    with 0 log 0 = 0."""
    cases = [("uniform over 64", torch.full((64,), 1 / 64)),
             ("a batch of random rows", torch.softmax(_random((3, 5), seed), dim=-1)),
             ("one-hot rows (0 log 0 = 0)", torch.eye(4)),
             ("rows with some exact zeros", torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.0, 0.8]]))]
    for case, weights in cases:
        def explain(index, weights=weights):
            if (weights[index] == 0).any():
                return ("this row has weights that are exactly 0, and 0 * log 0 = 0 * (-inf) "
                        "is NaN in floating point; the entropy takes 0 log 0 = 0 (use "
                        "torch.special.xlogy(p, p), or drop the zero weights)")
            return None
        got = _run(fn, (weights,), case, forbidden=(attention.attention_entropy,))
        _compare(got, attention.attention_entropy(weights), case, "entropy", explain_nan=explain)
    _passed("your entropy", len(cases))


@_self_check
def check_masked_softmax(fn, seed=0):
    """Check fn(scores (b, n_q, n_k), valid_lens (b,) or (b, n_q)) -> weights (b, n_q, n_k):
    softmax over the first valid_len keys, zero elsewhere, and all zeros when valid_len is 0."""
    cases = [("one length per sequence", (2, 2, 4), torch.tensor([2, 3])),
             ("one length per query", (2, 3, 4), torch.tensor([[1, 3, 4], [2, 2, 4]])),
             ("a sequence of length 0", (2, 2, 3), torch.tensor([0, 3]))]
    answers = (masking.masked_softmax, masking.softmax_with_mask)
    for number, (case, shape, valid_lens) in enumerate(cases):
        scores = _random(shape, seed, number)
        expected = masking.masked_softmax(scores, valid_lens)
        lengths = valid_lens[:, None].expand(shape[:2]) if valid_lens.dim() == 1 else valid_lens

        def explain(index, lengths=lengths):
            if lengths[index[0], index[1]] == 0:
                return ("this query has no valid key, so its softmax is over scores that are all "
                        "-inf: 0/0 = NaN; return zeros for such rows")
            return None
        got = _run(fn, (scores, valid_lens), case, forbidden=answers)
        _compare(got, expected, case, "weights", explain_nan=explain)
    _passed("your masked softmax", len(cases))


@_self_check
def check_causal_mask(fn, seed=0):
    """Check fn(n_queries, n_keys) -> bool (n_queries, n_keys), True where attending is allowed,
    top-left aligned as PyTorch's is_causal."""
    cases = [(4, 4), (2, 5), (5, 2), (1, 1)]
    if seed:
        cases = list(zip(_integers(seed, 4, 1, 9), _integers(seed, 4, 1, 9, 1)))
    for n_queries, n_keys in cases:
        case = f"{n_queries} queries, {n_keys} keys"
        got = _run(fn, (n_queries, n_keys), case, forbidden=(masking.causal_mask,))
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            raise CheckFailed(f"case '{case}': your mask has dtype {got.dtype}; use torch.bool "
                              "(True = may attend)")
        expected = torch.tensor([[key <= query for key in range(n_keys)]
                                 for query in range(n_queries)])
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape
                and not torch.equal(got, expected)):
            if torch.equal(got, ~expected):
                raise CheckFailed(f"case '{case}': your mask is inverted: here True must mean "
                                  "'may attend', as in scaled_dot_product_attention")
            row, column = (got != expected).nonzero()[0].tolist()
            allowed = "may" if expected[row, column] else "may not"
            raise CheckFailed(f"case '{case}': query {row} {allowed} attend to key {column}, "
                              "but your mask says the opposite")
        _compare(got.float() if isinstance(got, torch.Tensor) else got, expected.float(), case,
                 "mask")
    _passed("your causal mask", len(cases))


@_self_check
def check_self_attention(fn, seed=0):
    """Check fn(x (n, d_in), W_q (d_in, d_k), W_k (d_in, d_k), W_v (d_in, d_v)) -> (n, d_v):
    single-head self-attention softmax(X W_q (X W_k)^T / sqrt(d_k)) X W_v, stable for large
    scores."""
    cases = [("4 tokens, d_in 3 -> d_k 2", 4, 3, 2, 2, 1.0),
             ("6 tokens, d_k 8, d_v 5", 6, 4, 8, 5, 1.0), ("1 token", 1, 3, 4, 2, 1.0),
             ("scores around 1e3", 5, 4, 4, 3, 30.0)]
    answers = (attention.scaled_dot_product_attention,
               torch.nn.functional.scaled_dot_product_attention)
    for number, (case, n, d_in, d_k, d_v, scale) in enumerate(cases):
        x = _random((n, d_in), seed, number) * scale
        w_q, w_k, w_v = (_random(shape, seed, 10 * number + i) * (scale if i < 2 else 1)
                         for i, shape in enumerate([(d_in, d_k), (d_in, d_k), (d_in, d_v)]))
        q, k, v = (x @ w_q).double(), (x @ w_k).double(), (x @ w_v).double()
        weights = torch.softmax(q @ k.T / d_k**0.5, dim=-1)      # float64: no overflow
        expected = (weights @ v).float()

        def explain(index, big=scale > 1):
            return ("these scores are around 1e3 and exp(1e3) overflows to inf, so the softmax "
                    "is inf/inf = NaN; subtract each row's largest score first" if big else None)
        got = _run(fn, (x, w_q, w_k, w_v), case, forbidden=answers)
        _compare(got, expected, case, explain_nan=explain, atol=1e-4)
    _passed("your self-attention", len(cases))


@_self_check
def check_positional_encoding(fn, seed=0):
    """Check fn(num_positions, dim) -> (num_positions, dim), the sinusoidal encoding."""
    cases = [(4, 2), (10, 8), (50, 16)]
    if seed:
        cases = [(n, 2 * d) for n, d in zip(_integers(seed, 3, 1, 60), _integers(seed, 3, 1, 20, 1))]
    for num_positions, dim in cases:
        case = f"{num_positions} positions, dim {dim}"
        position = torch.arange(num_positions, dtype=torch.float64)[:, None]
        frequency = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        expected = torch.stack([torch.sin(position * frequency),
                                torch.cos(position * frequency)], dim=-1).flatten(1).float()
        got = _run(fn, (num_positions, dim), case,
                   forbidden=(positions.sinusoidal_positional_encoding,))
        _compare(got.to(expected.dtype) if isinstance(got, torch.Tensor) else got, expected, case,
                 "encoding", atol=1e-4)
    _passed("your positional encoding", len(cases))


@_self_check
def check_split_heads(fn, seed=0):
    """Check fn(x (batch, seq, num_heads * head_dim), num_heads) -> (batch, num_heads, seq,
    head_dim), where head h holds features h * head_dim ... (h + 1) * head_dim - 1."""
    cases = [("2 heads", (1, 3, 4), 2), ("4 heads, batch 2", (2, 5, 8), 4), ("1 head", (2, 2, 6), 1)]
    for number, (case, shape, num_heads) in enumerate(cases):
        x = _random(shape, seed, number)
        head_dim = shape[-1] // num_heads
        expected = torch.stack([x[..., h * head_dim:(h + 1) * head_dim]
                                for h in range(num_heads)], dim=1)
        got = _run(fn, (x, num_heads), case, forbidden=(multihead.split_heads,))
        _compare(got, expected, case, "heads")
    _passed("your split_heads", len(cases))


@_self_check
def check_mha_parameter_count(fn, seed=0):
    """Check fn(embed_dim, num_heads, bias) -> the number of parameters of multi-head attention,
    against torch.nn.MultiheadAttention."""
    cases = [(8, 2, True), (64, 8, False), (512, 8, True), (12, 3, False)]
    if seed:
        heads, widths, biases = _integers(seed, 4, 1, 9), _integers(seed, 4, 1, 33, 1), \
            _integers(seed, 4, 0, 2, 2)
        cases = [(h * w, h, bool(b)) for h, w, b in zip(heads, widths, biases)]
    for embed_dim, num_heads, bias in cases:
        case = f"embed_dim {embed_dim}, {num_heads} heads, bias {bias}"
        module = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias)
        expected = sum(p.numel() for p in module.parameters())
        got = _run(fn, (embed_dim, num_heads, bias), case)
        if got != expected:
            raise CheckFailed(f"case '{case}': you count {got}, PyTorch's module has {expected}")
    _passed("your parameter count", len(cases))


@_self_check
def check_kv_cache_bytes(fn, seed=0):
    """Check fn(batch_size, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_element) -> the
    size of a KV cache in bytes."""
    cases = [(1, 1, 1, 1, 1, 2), (1, 4096, 32, 32, 128, 2), (8, 2048, 32, 8, 128, 2),
             (2, 100, 8, 2, 64, 4)]
    if seed:
        cases = list(zip(*(_integers(seed, 4, 1, 300, offset) for offset in range(6))))
    names = ["batch_size", "seq_len", "num_layers", "num_kv_heads", "head_dim", "bytes_per_element"]
    for arguments in cases:
        case = ", ".join(f"{n}={a}" for n, a in zip(names, arguments))
        expected = 2  # keys and values
        for argument in arguments:
            expected *= argument
        got = _run(fn, arguments, case, forbidden=(multihead.kv_cache_bytes,))
        if got != expected:
            hint = " (did you forget that keys AND values are cached?)" if got * 2 == expected else ""
            raise CheckFailed(f"case '{case}': you say {got} bytes, expected {expected}{hint}")
    _passed("your KV-cache size", len(cases))


@_self_check
def check_repeat_kv(fn, seed=0):
    """Check fn(kv (batch, num_kv_heads, seq, head_dim), group_size) -> (batch, num_kv_heads *
    group_size, seq, head_dim) in which query head h gets KV head h // group_size."""
    cases = [("2 KV heads, groups of 2", (1, 2, 3, 4), 2), ("4 KV heads, groups of 3", (2, 4, 2, 2), 3),
             ("groups of 1 (MHA)", (1, 3, 2, 2), 1)]
    for number, (case, shape, group_size) in enumerate(cases):
        kv = _random(shape, seed, number)
        expected = torch.stack([kv[:, h // group_size] for h in range(shape[1] * group_size)], 1)
        got = _run(fn, (kv, group_size), case)
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape and group_size > 1
                and torch.equal(got, kv.repeat(1, group_size, 1, 1))):
            raise CheckFailed(f"case '{case}': your heads are in the order 0, 1, ..., 0, 1, ... "
                              "(torch.repeat); query head h must read KV head h // group_size, "
                              "as enable_gqa does (torch.repeat_interleave)")
        _compare(got, expected, case, "repeated heads")
    _passed("your KV-head repetition", len(cases))


@_self_check
def check_query_jacobian(fn, seed=0):
    """Check fn(query (d,), keys (n, d)) -> (d, d): the Jacobian with respect to the query of
    attention whose values are its keys, o(q) = sum_i alpha_i k_i with
    alpha = softmax(K q / sqrt(d)), written without automatic differentiation."""
    cases = [("d = 2, three keys", 2, 3, 1.0), ("d = 8, twelve keys", 8, 12, 1.0),
             ("one key", 4, 1, 1.0), ("long keys, a saturated softmax", 6, 5, 6.0)]
    answers = (torch.autograd.functional.jacobian, torch.func.jacrev, torch.func.jacfwd)
    for number, (case, d, n, scale) in enumerate(cases):
        query = _random((d,), seed, number).double()
        keys = _random((n, d), seed, 10 + number).double() * scale

        def attend(q, keys=keys):
            return torch.softmax(keys @ q / d**0.5, dim=0) @ keys            # (d,)
        expected = torch.autograd.functional.jacobian(attend, query)         # (d, d)
        got = _run(fn, (query, keys), case, forbidden=answers)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and torch.allclose(
                got, expected * d**0.5, atol=1e-7) and n > 1:
            raise CheckFailed(f"case '{case}': your Jacobian is sqrt(d) = {d**0.5:.3g} times too "
                              "large: the scores are divided by sqrt(d), and so is their gradient")
        _compare(got, expected, case, "Jacobian")
    _passed("your query Jacobian", len(cases))


def _batched_regression_cases(seed=0):
    """(name, queries (B, n_q), keys (B, n_k), values (B, n_k), bandwidth) inputs."""
    generator = _generator(seed, 500)

    def draw(batch, n_q, n_k):
        keys = torch.rand(batch, n_k, generator=generator) * 10
        values = torch.randn(batch, n_k, generator=generator)
        queries = torch.rand(batch, n_q, generator=generator) * 10
        return queries, keys, values

    far = draw(3, 4, 6)
    far[0][1, 2] = 60.0                           # one query far from every key of set 1
    return [("a batch of 4 data sets, bandwidth 1", *draw(4, 5, 8), 1.0),
            ("a batch of 2, narrow bandwidth 0.3", *draw(2, 7, 12), 0.3),
            ("one data set, one query", *draw(1, 1, 9), 0.7),
            ("a query far from every key", *far, 0.5)]


@_self_check
def check_batched_regression(fn, seed=0):
    """Check fn(queries (B, n_q), keys (B, n_k), values (B, n_k), bandwidth) -> (B, n_q):
    Gaussian Nadaraya–Watson regression of B independent data sets in one call, data set b
    answering its own queries from its own keys and values."""
    cases = _batched_regression_cases(seed)
    for case, queries, keys, values, bandwidth in cases:
        expected = torch.stack([                  # an independent loop over the data sets
            torch.softmax(-((q[:, None] - k[None, :]) / bandwidth) ** 2 / 2, dim=1) @ v
            for q, k, v in zip(queries.double(), keys.double(), values.double())]).float()
        got = _run(fn, (queries, keys, values, bandwidth), case,
                   forbidden=_REGRESSION_ANSWERS)
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape
                and len(keys) > 1 and torch.isfinite(got).all()):
            pooled = torch.stack([
                torch.softmax(-((q[:, None] - keys.flatten()[None, :]) / bandwidth) ** 2
                              / 2, dim=1) @ values.flatten() for q in queries])
            if torch.allclose(got, pooled, atol=1e-5):
                raise CheckFailed(f"case '{case}': your queries attend to the keys of every "
                                  "data set; data set b must use only keys[b] and values[b]")
        _compare(got, expected, case, "predictions",
                 explain_nan=lambda index: _kernel_underflow(
                     queries[index[0]], keys[index[0]], bandwidth)((index[1],)))
    _passed("your batched kernel regression", len(cases))


def _decoder_step_cases(seed, with_dim):
    """(name, batch, n_k, d, d_v, valid_lens) for the one-decoder-step checks (chapter on
    encoder-decoder attention)."""
    cases = [("batch of 3, lengths 4, 2, 5", 3, 5, 4, 3, [4, 2, 5]),
             ("one sequence, no padding", 1, 6, 8, 2, [6]),
             ("a sequence of length 1", 2, 4, 2, 5, [1, 3])]
    if seed:
        sizes = _integers(seed, 3, 1, 7, 20)
        cases = [(f"random case {number}", batch, n_k, d, d_v,
                  _integers(seed, batch, 1, n_k + 1, 30 + number))
                 for number, (batch, n_k, d, d_v) in enumerate(zip(
                     sizes, _integers(seed, 3, 2, 9, 21), _integers(seed, 3, 1, 9, 22),
                     _integers(seed, 3, 1, 6, 23)))]
    return cases if with_dim else [case[:3] + case[4:] for case in cases]


def _reference_context(scores, values, lengths):
    """float64 softmax over the first lengths[b] scores of each row, then the weighted sum."""
    weights = torch.zeros_like(scores, dtype=torch.float64)
    for b, length in enumerate(lengths):
        weights[b, :length] = torch.softmax(scores[b, :length].double(), dim=0)
    return (weights[:, :, None] * values.double()).sum(dim=1), weights


@_self_check
def check_context_vector(fn, seed=0):
    """Check fn(scores (batch, n_k), values (batch, n_k, d_v), valid_lens (batch,)) -> context
    (batch, d_v): the softmax of each row's first valid_len scores, weighting the values."""
    cases = _decoder_step_cases(seed, with_dim=False)
    answers = (masking.masked_softmax, masking.softmax_with_mask)
    for number, (case, batch, n_k, d_v, lengths) in enumerate(cases):
        scores = _random((batch, n_k), seed, 40 + number) * 3
        values = _random((batch, n_k, d_v), seed, 50 + number)
        if n_k > min(lengths):
            scores[:, -1] = 30.0                        # a tempting score on padding
        expected, _ = _reference_context(scores, values, lengths)
        got = _run(fn, (scores, values, torch.tensor(lengths)), case, forbidden=answers)
        if isinstance(got, torch.Tensor):
            got = got.double()
        _compare(got, expected, case, "context vector")
    _passed("your context vector", len(cases))


@_self_check
def check_dot_product_step(fn, seed=0):
    """Check fn(query (batch, d), keys (batch, n_k, d), values (batch, n_k, d_v), valid_lens
    (batch,)) -> context (batch, d_v), with scores q . k_i / sqrt(d) over the first valid_len
    keys."""
    cases = _decoder_step_cases(seed, with_dim=True)
    answers = (masking.masked_softmax, masking.softmax_with_mask,
               attention.scaled_dot_product_attention,
               torch.nn.functional.scaled_dot_product_attention)
    for number, (case, batch, n_k, d, d_v, lengths) in enumerate(cases):
        query = _random((batch, d), seed, 60 + number)
        keys = _random((batch, n_k, d), seed, 70 + number)
        values = _random((batch, n_k, d_v), seed, 80 + number)
        scores = (keys.double() @ query.double()[:, :, None]).squeeze(-1) / d**0.5
        expected, _ = _reference_context(scores, values, lengths)
        got = _run(fn, (query, keys, values, torch.tensor(lengths)), case, forbidden=answers)
        if isinstance(got, torch.Tensor):
            got = got.double()
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape and d > 1
                and torch.allclose(got, _reference_context(scores * d**0.5, values,
                                                           lengths)[0], atol=1e-5)):
            raise CheckFailed(f"case '{case}': your context is that of unscaled scores "
                              "q . k_i; divide them by sqrt(d)")
        _compare(got, expected, case, "context vector")
    _passed("your dot-product attention step", len(cases))


def _rotate_reference(x, positions, pairs, sign=1.0, base=10000.0):
    """float64 RoPE of x (..., seq, d): pairs "half" (i, i + d/2), Llama's, or
    "adjacent" (2i, 2i + 1), the complex form's; sign -1 turns backwards."""
    x = x.double()
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = sign * positions.double()[:, None] * theta   # (seq, d/2)
    cos, sin = angles.cos(), angles.sin()
    if pairs == "half":
        a, b = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


_ROTARY_MISTAKES = (
    (dict(pairs="adjacent"), "you paired neighbouring dimensions (2i, 2i+1); "
     "this exercise pairs dimension i with i + head_dim/2, as Llama does"),
    (dict(pairs="half", sign=-1.0), "you rotated by -m theta_i: "
     "the second half is x_i sin + x_(i+d/2) cos, the first x_i cos - x_(i+d/2) sin"),
)


def _rotary_cases(seed):
    cases = [("head_dim 2, positions 0..3", 4, 2),
             ("head_dim 8, positions 0..5", 6, 8),
             ("head_dim 16, scattered positions below 5000", 7, 16)]
    if seed:
        cases = [(f"random case {n}", seq, 2 * half) for n, (seq, half) in
                 enumerate(zip(_integers(seed, 3, 1, 12, 90),
                               _integers(seed, 3, 1, 12, 91)))]
    for number, (case, seq, d) in enumerate(cases):
        positions = torch.arange(seq)
        if number == 2:
            positions = torch.tensor(_integers(seed, seq, 0, 5000, 92))
        yield case, _random((seq, d), seed, 93 + number), positions


@_self_check
def check_rotary(fn, seed=0):
    """Check fn(x (seq, head_dim), positions (seq,)) -> RoPE of x with base
    10000 and Llama's pairing of dimension i with i + head_dim/2."""
    n_cases = 0
    for case, x, where in _rotary_cases(seed):
        expected = _rotate_reference(x, where, "half")
        got = _run(fn, (x, where), case, forbidden=(rotary.apply_rotary,))
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for options, hint in _ROTARY_MISTAKES:
                wrong = _rotate_reference(x, where, **options)
                close = torch.allclose(got.detach().double(), wrong, atol=1e-4)
                if close and not torch.allclose(wrong, expected, atol=1e-4):
                    raise CheckFailed(f"case '{case}': {hint}")
        _compare(got, expected, case, "rotated x", atol=1e-4)
        n_cases += 1
    _passed("your rotary embedding", n_cases)


def _rotary_attention_reference(x, w_q, w_k, w_v, scale, rotate_values=False):
    q, k, v = (x.double() @ w.double() for w in (w_q, w_k, w_v))
    positions = torch.arange(len(x))
    q = _rotate_reference(q, positions, "half")
    k = _rotate_reference(k, positions, "half")
    if rotate_values:
        v = _rotate_reference(v, positions, "half")
    allowed = torch.ones(len(x), len(x), dtype=torch.bool).tril()
    scores = (q @ k.T * scale).masked_fill(~allowed, -torch.inf)
    return torch.softmax(scores, -1) @ v


@_self_check
def check_rotary_attention(fn, seed=0):
    """Check fn(x (seq, d_model), W_q, W_k, W_v (d_model, d)) -> causal
    self-attention output (seq, d) with RoPE on queries and keys only, scores
    scaled by 1 / sqrt(d)."""
    n_cases = 0
    for case, x, _ in _rotary_cases(seed):
        seq, d_model = x.shape
        d = d_model + 2                    # the head size differs from d_model
        w_q, w_k, w_v = (_random((d_model, d), seed, 100 + k) / d_model**0.5
                         for k in range(3))
        weights = (x, w_q, w_k, w_v)
        expected = _rotary_attention_reference(*weights, d**-0.5)
        got = _run(fn, weights, case, forbidden=(rotary.apply_rotary,))
        mistakes = [
            (_rotary_attention_reference(*weights, d**-0.5, True),
             "you rotated the values too; RoPE turns only queries and keys"),
            (_rotary_attention_reference(*weights, 1.0),
             "the scores are not scaled; divide them by sqrt(d)"),
            (_rotary_attention_reference(*weights, d_model**-0.5),
             "you scaled by sqrt(d_model); the scale is sqrt(d), the size of "
             "queries and keys")]
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and seq > 1:
            for wrong, hint in mistakes:
                if (torch.allclose(got.detach().double(), wrong, atol=1e-4)
                        and not torch.allclose(wrong, expected, atol=1e-4)):
                    raise CheckFailed(f"case '{case}': {hint}")
        _compare(got, expected, case, "attention output", atol=1e-4)
        n_cases += 1
    _passed("your rotary self-attention", n_cases)


def _window_cases(seed):
    """(case, query positions, key positions, window) for the sliding-window
    checks: a decoding step, a chunk of new queries, a window wider than the
    sequence, and keys left after older ones were evicted."""
    cases = [("one new token at position 9, window 4", [9], range(10), 4),
             ("a chunk of 4 new tokens, window 3", range(6, 10), range(10), 3),
             ("window 100 wider than the sequence", range(3, 7), range(7), 100),
             ("keys 5..10 left in the cache, window 5", [10], range(5, 11), 5)]
    if seed:
        lengths = _integers(seed, 3, 2, 12, 110)
        windows = _integers(seed, 3, 1, 8, 111)
        cases = [(f"random case {n}: {m} tokens, window {w}",
                  range(m - 1 - n, m), range(m), w)
                 for n, (m, w) in enumerate(zip(lengths, windows)) if m > n]
    for case, queries, keys, window in cases:
        yield case, torch.tensor(list(queries)), torch.tensor(list(keys)), window


def _window_by_loops(queries, keys, window, inclusive=False):
    reach = window + 1 if inclusive else window    # keys t - reach < s <= t
    return torch.tensor([[t - reach < s <= t for s in keys.tolist()]
                         for t in queries.tolist()])


@_self_check
def check_sliding_window_mask(fn, seed=0):
    """Check fn(query_positions (L,), key_positions (S,), window) -> bool (L, S):
    True where the query at position t may attend to the key at position s,
    that is t - window < s <= t (the token itself and the window - 1 before it).
    """
    n_cases = 0
    for case, queries, keys, window in _window_cases(seed):
        expected = _window_by_loops(queries, keys, window)
        got = _run(fn, (queries, keys, window), case,
                   forbidden=(decoding.decoding_mask,))
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            raise CheckFailed(f"case '{case}': your mask has dtype {got.dtype}; "
                              "use torch.bool (True = may attend)")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            hints = [(~expected, "your mask is inverted: True must mean "
                                 "'may attend'"),
                     (_window_by_loops(queries, keys, window, inclusive=True),
                      "your window lets a query see window + 1 keys; with "
                      "window W it sees itself and the W - 1 keys before it"),
                     (torch.ones(len(queries), len(keys), dtype=torch.bool).tril(),
                      "your mask is aligned top-left by index; compare "
                      "positions instead (new queries come after the cache)")]
            for wrong, hint in hints:
                if torch.equal(got, wrong) and not torch.equal(wrong, expected):
                    raise CheckFailed(f"case '{case}': {hint}")
        _compare(got.float() if isinstance(got, torch.Tensor) else got,
                 expected.float(), case, "mask")
        n_cases += 1
    _passed("your sliding-window mask", n_cases)


def _cache_cases(seed):
    """(case, held keys, new keys, window) for check_cache_append."""
    shapes = [("empty cache, a prompt of 5, no window", 0, 5, None),
              ("4 held, 1 new, window 3", 4, 1, 3),
              ("2 held, 3 new, window 4", 2, 3, 4),
              ("6 held, 1 new, window 10", 6, 1, 10)]
    if seed:
        held = _integers(seed, 3, 0, 8, 120)
        new = _integers(seed, 3, 1, 5, 121)
        windows = _integers(seed, 3, 1, 7, 122)
        shapes = [(f"random case {n}", h, t, w)
                  for n, (h, t, w) in enumerate(zip(held, new, windows))]
    for number, (case, held, new, window) in enumerate(shapes):
        keys = _random((2, 3, held + new, 4), seed, 130 + number)
        yield case, keys[:, :, :held], keys[:, :, held:], window


@_self_check
def check_cache_append(fn, seed=0):
    """Check fn(held (batch, kv_heads, n, d), new (batch, kv_heads, t, d),
    window) -> (attend_to, kept): attend_to is held followed by new along the
    token axis; kept is attend_to's last `window` tokens (all when window is
    None)."""
    n_cases = 0
    for case, held, new, window in _cache_cases(seed):
        tokens = [held[:, :, i] for i in range(held.shape[2])]
        tokens += [new[:, :, i] for i in range(new.shape[2])]
        expected_all = torch.stack(tokens, dim=2)      # token by token
        start = 0 if window is None else max(0, len(tokens) - window)
        expected_kept = torch.stack(tokens[start:], dim=2)
        got = _run(fn, (held.clone(), new.clone(), window), case)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"case '{case}': return two tensors, "
                              "(attend_to, kept)")
        attend_to, kept = got
        if (isinstance(attend_to, torch.Tensor)
                and attend_to.shape == expected_kept.shape
                and expected_kept.shape != expected_all.shape):
            raise CheckFailed(f"case '{case}': attend_to holds only the last "
                              "window tokens; the new queries must see every "
                              "held key and the new ones before anything is "
                              "dropped")
        if (isinstance(kept, torch.Tensor) and kept.shape == expected_kept.shape
                and window is not None and window < len(tokens)
                and torch.equal(kept, expected_all[:, :, :window])):
            raise CheckFailed(f"case '{case}': you kept the first window "
                              "tokens; a sliding window keeps the last ones")
        _compare(attend_to, expected_all, case, "attend_to")
        _compare(kept, expected_kept, case, "kept")
        n_cases += 1
    _passed("your cache update", n_cases)


def _score_rows(seed):
    """(case, scores (rows, n), block size) for check_online_softmax_update:
    each row is streamed to the update block by block."""
    normal = _random((3, 12), seed, 140)
    cases = [("3 rows of 12 scores, blocks of 4", normal, 4),
             ("huge scores (around 1000)", normal + 1000, 5),
             ("very negative scores (around -1000)", normal - 1000, 3),
             ("each block's maximum above the last", torch.arange(
                 12.0).repeat(2, 1) + _random((2, 12), seed, 141) * 0.1, 4),
             ("one block", normal[:, :7], 7)]
    masked = _random((2, 9), seed, 142)
    masked[0, :3] = -float("inf")
    cases.append(("the first block of row 0 fully masked (-inf)", masked, 3))
    between = _random((2, 9), seed, 143)
    between[1, 3:6] = -float("inf")
    cases.append(("row 1's middle block fully masked, between finite ones",
                  between, 3))
    if seed:
        sizes = _integers(seed, 3, 1, 6, 144)
        cases += [(f"random case {n}, blocks of {b}",
                   _random((2, 3 * b + n), seed, 145 + n) * 10, b)
                  for n, b in enumerate(sizes)]
    return cases


def _streamed(update, scores, block_size):
    """The state (m, l) after update() has seen every block of `scores`."""
    running_max = torch.full(scores.shape[:-1], -float("inf"),
                             dtype=scores.dtype)
    running_sum = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start:start + block_size]
        running_max, running_sum = update(running_max, running_sum, block)
    return running_max, running_sum


def _update_without_rescale(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    return new_max, running_sum + torch.exp(block - new_max[..., None]).sum(-1)


@_self_check
def check_online_softmax_update(fn, seed=0):
    """Check fn(running_max (rows,), running_sum (rows,), block (rows, b)) ->
    (new_max, new_sum): after the blocks of a row have been passed in order,
    starting from (-inf, 0), running_max is the row's maximum m and
    running_sum is sum_j exp(s_j - m). A block whose scores are all -inf
    (a masked row) must leave that row's state as it was."""
    n_cases = 0
    for case, scores, block_size in _score_rows(seed):
        def learners(running_max, running_sum, block):
            got = _run(fn, (running_max.clone(), running_sum.clone(),
                            block.clone()), case)
            if not (isinstance(got, tuple) and len(got) == 2):
                raise CheckFailed(f"case '{case}': return two tensors, "
                                  "(new_max, new_sum)")
            return got
        got_max, got_sum = _streamed(learners, scores, block_size)
        expected_max = scores.amax(dim=-1)       # from the whole row at once
        wide = scores.double()
        expected_sum = torch.exp(wide - wide.amax(-1, keepdim=True)).sum(-1)
        _, without_rescale = _streamed(_update_without_rescale, scores,
                                       block_size)
        hints = [(without_rescale, "the old running sum must be multiplied "
                  "by exp(m_old - m_new) when the maximum grows"),
                 (torch.exp(wide).sum(-1), "your running sum is sum_j "
                  "exp(s_j); keep it relative to the running maximum, "
                  "sum_j exp(s_j - m)")]
        for wrong_sum, hint in hints:
            if (isinstance(got_sum, torch.Tensor)
                    and got_sum.shape == wrong_sum.shape
                    and torch.allclose(got_sum.double(), wrong_sum.double())
                    and not torch.allclose(wrong_sum.double(), expected_sum)):
                raise CheckFailed(f"case '{case}': {hint}")

        def explain(index):
            if torch.isneginf(scores[index[0]]).any():
                return ("a block with every score -inf gives m_new = -inf, and "
                        "exp(m_old - m_new) = exp(-inf + inf) is NaN; leave the "
                        "state as it is when a block's maximum is -inf")
            if scores[index[0]].max() > 80:
                return ("exp of a large score overflows; subtract the running "
                        "maximum before exponentiating")
            return ("is the rescaling factor upside down? On the first "
                    "block m_old = -inf: exp(m_old - m_new) is 0, but "
                    "exp(m_new - m_old) is inf, and 0 * inf is NaN")
        _compare(got_max, expected_max, case, "running maximum",
                 explain_nan=explain)
        _compare(got_sum, expected_sum, case, "running sum",
                 explain_nan=explain)
        n_cases += 1
    _passed("your online-softmax update", n_cases)


def _causal_tiles_by_mask(n_queries, n_keys, query_block, key_block):
    """Every (query block, key block) with an allowed entry, from the mask."""
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool).tril()
    return {(q, k)
            for q in range(math.ceil(n_queries / query_block))
            for k in range(math.ceil(n_keys / key_block))
            if allowed[q * query_block:(q + 1) * query_block,
                       k * key_block:(k + 1) * key_block].any()}


def _tile_cases(seed):
    shapes = [(8, 8, 4, 4), (10, 10, 4, 4), (12, 12, 4, 2), (12, 12, 2, 4),
              (7, 12, 3, 5), (12, 7, 5, 2), (5, 5, 8, 8), (1, 1, 1, 1)]
    if seed:
        sizes = _integers(seed, 16, 1, 20, 150)
        shapes = [(sizes[i], sizes[i + 1], 1 + sizes[i + 2] % 6,
                   1 + sizes[i + 3] % 6) for i in range(0, 16, 4)]
    return shapes


@_self_check
def check_causal_tiles(fn, seed=0):
    """Check fn(n_queries, n_keys, query_block, key_block) -> the (query
    block, key block) index pairs that causal attention (query i sees keys
    j <= i) must compute, when queries come in blocks of query_block and keys
    in blocks of key_block: every tile with at least one allowed entry, and
    none of the tiles entirely above the diagonal. Any iterable of pairs, in
    any order."""
    n_cases = 0
    for n_queries, n_keys, query_block, key_block in _tile_cases(seed):
        case = (f"{n_queries} queries in blocks of {query_block}, {n_keys} "
                f"keys in blocks of {key_block}")
        got = _run(fn, (n_queries, n_keys, query_block, key_block), case,
                   forbidden=(tiled.tile_schedule,))
        try:
            got = {tuple(int(index) for index in pair) for pair in got}
        except (TypeError, ValueError):
            raise CheckFailed(f"case '{case}': return pairs of block "
                              "indices, such as [(0, 0), (1, 0), (1, 1)]"
                              ) from None
        expected = _causal_tiles_by_mask(n_queries, n_keys, query_block,
                                         key_block)
        every_tile = {(q, k) for q in range(math.ceil(n_queries / query_block))
                      for k in range(math.ceil(n_keys / key_block))}
        by_index = {(q, k) for q, k in every_tile if k <= q}
        if got == every_tile != expected:
            raise CheckFailed(f"case '{case}': you kept all {len(got)} tiles; "
                              "leave out those entirely above the diagonal")
        if got == by_index != expected:
            raise CheckFailed(f"case '{case}': comparing block indices works "
                              "only when both blocks have the same size; "
                              "compare positions: a tile is needed when its "
                              "first key is not after its last query")
        missing, extra = sorted(expected - got), sorted(got - expected)
        if missing:
            raise CheckFailed(f"case '{case}': tile {missing[0]} holds an "
                              "allowed entry (a key not after its query) but "
                              "is missing")
        if extra:
            raise CheckFailed(f"case '{case}': tile {extra[0]} lies entirely "
                              "above the diagonal (every key after every "
                              "query) and should be skipped")
        n_cases += 1
    _passed("your causal tile list", n_cases)


def _word_id_cases(seed):
    """Word ids as the tokenizer gives them: None for [CLS] and [SEP], and
    words of 1 to 4 pieces; a first case without any word, one of one word."""
    generator = _generator(seed, 13)
    cases = [("[CLS] [SEP] only", [None, None]),
             ("one word of three pieces", [None, 0, 0, 0, None])]
    for number in range(5):
        n_words = int(torch.randint(2, 7, (1,), generator=generator))
        pieces = torch.randint(1, 5, (n_words,), generator=generator).tolist()
        word_ids = [None] + [word for word, count in enumerate(pieces)
                             for _ in range(count)] + [None]
        cases.append((f"random sentence {number} ({n_words} words)", word_ids))
    return cases


def _previous_word_by_loops(word_ids):
    n = len(word_ids)
    targets = torch.zeros(n, n, dtype=torch.bool)
    for i, word in enumerate(word_ids):
        for j, other in enumerate(word_ids):
            if word is not None and other is not None and other == word - 1:
                targets[i, j] = True
    return targets


@_self_check
def check_previous_word_targets(fn, seed=0):
    """Check fn(word_ids) -> bool (n, n): True where key j is a piece of the
    word just before query i's word. word_ids: one entry per token, the index
    of its word, or None for [CLS] and [SEP] (which have no targets and are
    never targets)."""
    cases = _word_id_cases(seed)
    for case, word_ids in cases:
        got = _run(fn, (list(word_ids),), case)
        expected = _previous_word_by_loops(word_ids)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            _compare(got, expected.double(), case, "targets")
        got = got.detach().cpu().bool()
        n = len(word_ids)
        previous_token = torch.zeros(n, n, dtype=torch.bool)
        previous_token[torch.arange(1, n), torch.arange(n - 1)] = True
        if torch.equal(got, previous_token) and not torch.equal(got, expected):
            raise CheckFailed(f"case '{case}': you marked the previous token; "
                              "mark every piece of the previous word, from "
                              "every piece of the current word")
        wrong = (got != expected).nonzero()
        if len(wrong):
            i, j = wrong[0].tolist()
            should = "should be" if expected[i, j] else "should not be"
            raise CheckFailed(
                f"case '{case}' (word_ids {word_ids}): key {j} (word "
                f"{word_ids[j]}) {should} a target of query {i} (word "
                f"{word_ids[i]}); None marks [CLS] and [SEP], never targets")
    _passed("your previous-word targets", len(cases))


def _heads_by_hand(attention, x, zeroed_head=None):
    """MultiHeadAttention's output computed head by head, one head's output
    replaced by zeros."""
    outputs = []
    for head in range(attention.num_heads):
        rows = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
        q, k, v = (torch.nn.functional.linear(x, p.weight[rows],
                                              None if p.bias is None
                                              else p.bias[rows])
                   for p in (attention.q_proj, attention.k_proj,
                             attention.v_proj))
        weights = torch.softmax(q @ k.transpose(-2, -1)
                                / math.sqrt(attention.head_dim), dim=-1)
        output = weights @ v
        outputs.append(torch.zeros_like(output) if head == zeroed_head
                       else output)
    return attention.out_proj(torch.cat(outputs, dim=-1))


@_self_check
def check_ablate_head(fn, seed=0):
    """Check fn(attention, head) -> a copy of the MultiHeadAttention
    `attention` in which head `head` contributes nothing (its output is zero
    before out_proj) and every other head is unchanged; `attention` itself must
    stay as it was."""
    cases = [("8 wide, 2 heads, head 0", 8, 2, 0, True),
             ("12 wide, 3 heads, head 2", 12, 3, 2, True),
             ("16 wide, 4 heads, head 1, no bias", 16, 4, 1, False)]
    for number, (case, width, n_heads, head, bias) in enumerate(cases):
        torch.manual_seed(1234 + 1000 * seed + number)
        attention = multihead.MultiHeadAttention(width, n_heads, bias=bias)
        if bias:
            with torch.no_grad():  # non-zero biases, so forgetting one shows
                for projection in (attention.v_proj, attention.out_proj):
                    projection.bias.normal_()
        x = _random((2, 5, width), seed, number)
        before = {k: v.clone() for k, v in attention.state_dict().items()}
        with torch.no_grad():
            expected = _heads_by_hand(attention, x, zeroed_head=head)
        ablated = _run(fn, (attention, head), case)
        after = attention.state_dict()
        if any(not torch.equal(before[k], after[k]) for k in before):
            raise CheckFailed(f"case '{case}': you changed the original "
                              "layer's weights; change a copy "
                              "(copy.deepcopy(attention))")
        if not isinstance(ablated, torch.nn.Module):
            raise CheckFailed(f"case '{case}': return the ablated copy of "
                              f"the layer, not a {type(ablated).__name__}")
        with torch.no_grad():
            got = _run(ablated, (x, x, x), case)
        got = got[0] if isinstance(got, tuple) else got
        if bias and isinstance(got, torch.Tensor):
            v_bias_left = attention.v_proj.bias[head * (width // n_heads):
                                                (head + 1) * (width // n_heads)]
            leaked = attention.out_proj.weight[
                :, head * (width // n_heads):(head + 1) * (width // n_heads)]
            with torch.no_grad():
                if torch.allclose(got, expected + v_bias_left @ leaked.T,
                                  atol=1e-5):
                    raise CheckFailed(
                        f"case '{case}': the head still outputs its value "
                        "bias (the weights sum to 1, so sum_j a_ij b_v = "
                        "b_v); zero the bias too, or zero the head's "
                        "columns of out_proj instead")
        _compare(got, expected, case, "ablated layer's output")
    _passed("your head ablation", len(cases))


def _converter_permute(weight, num_heads):
    """llama.cpp's convert_hf_to_gguf reordering of W_Q / W_K rows: half-split -> interleaved
    (within each head, row i of the first half and row i of the second half become rows
    2i and 2i + 1)."""
    rows, columns = weight.shape
    return (weight.reshape(num_heads, 2, rows // num_heads // 2, columns)
            .transpose(1, 2).reshape(rows, columns))


def _half_split_cases(seed):
    """(name, half-split weight, num_heads): the original rows the answer must recover."""
    shapes = [("1 head of 8", 1, 8, 5), ("3 heads of 8", 3, 8, 6),
              ("9 heads of 64, as SmolLM2's W_Q", 9, 64, 7), ("2 heads of 2", 2, 2, 3)]
    return [(name, _random((heads * head_dim, columns), seed, number), heads)
            for number, (name, heads, head_dim, columns) in enumerate(shapes)]


@_self_check
def check_half_split_rows(fn, seed=0):
    """Check fn(weight (num_heads * head_dim, in), num_heads) -> the same rows in the
    half-split order: the inverse of the GGUF converter's reordering of W_Q and W_K."""
    from .pretrained import smollm2

    cases = _half_split_cases(seed)
    for case, original, heads in cases:
        gguf_rows = _converter_permute(original, heads)
        got = _run(fn, (gguf_rows, heads), case,
                   forbidden=(smollm2.interleaved_to_half_split,))
        if isinstance(got, torch.Tensor) and got.shape == original.shape:
            if torch.equal(got, _converter_permute(gguf_rows, heads)) and not torch.equal(
                    got, original):
                raise CheckFailed(f"case '{case}': you applied the converter's reordering "
                                  "again; undo it: rows 2i and 2i + 1 of each head go back "
                                  "to rows i and i + head_dim / 2")
            whole = gguf_rows.reshape(1, -1, 2, gguf_rows.shape[1]).transpose(1, 2)
            if heads > 1 and torch.equal(got, whole.reshape(gguf_rows.shape)):
                raise CheckFailed(f"case '{case}': you reordered the rows of all heads "
                                  "together; each head's rows are reordered on their own "
                                  "(reshape to (num_heads, head_dim // 2, 2, in) first)")
        _compare(got, original, case, "rows", atol=0)
    _passed("your reordering of W_Q and W_K rows", len(cases))


def _induction_target_cases(seed):
    """(name, ids (L,)): token sequences with repeats, so that targets exist."""
    generator = _generator(seed)
    return [("12 tokens from 4", torch.randint(0, 4, (12,), generator=generator)),
            ("30 tokens from 6", torch.randint(0, 6, (30,), generator=generator)),
            ("9 tokens repeated once", torch.randperm(9, generator=generator).repeat(2))]


def _targets_by_loops(ids, shift):
    """Bool (L, L): key s with ids[s - shift] == ids[t], shift <= s <= t."""
    length = len(ids)
    targets = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for s in range(shift, t + 1):
            targets[t, s] = bool(ids[s - shift] == ids[t])
    return targets


@_self_check
def check_induction_targets(fn, seed=0):
    """Check fn(ids (L,)) -> bool (L, L), True where key s follows an earlier occurrence of
    query t's token: ids[s - 1] == ids[t], 1 <= s <= t (an induction head's targets)."""
    cases = _induction_target_cases(seed)
    for case, ids in cases:
        expected = _targets_by_loops(ids, shift=1)
        got = _run(fn, (ids.clone(),), case)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if got.dtype != torch.bool:
                raise CheckFailed(f"case '{case}': return a bool matrix, got {got.dtype}")
            if torch.equal(got, _targets_by_loops(ids, shift=0) & ~torch.eye(
                    len(ids), dtype=torch.bool)):
                raise CheckFailed(f"case '{case}': you marked the earlier occurrence of the "
                                  "token itself (a duplicate-token head's target); an "
                                  "induction head looks at the key after it, s with "
                                  "ids[s - 1] == ids[t]")
            if (got & ~torch.ones_like(got).tril()).any():
                raise CheckFailed(f"case '{case}': a key after its query is marked; a decoder "
                                  "query t sees only keys s <= t")
        _compare(got.to(torch.int64) if isinstance(got, torch.Tensor) else got,
                 expected.to(torch.int64), case, "targets", atol=0)
    _passed("your induction targets", len(cases))
