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
    from .attention import attention_entropy

    for case, weights in cases:
        _compare(_run(fn, (weights,), case), attention_entropy(weights), case, "entropy")
    _passed("your entropy", len(cases))


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


def check_self_attention(fn):
    """Check fn(x (n, d_in), W_q (d_in, d_k), W_k (d_in, d_k), W_v (d_in, d_v)) -> (n, d_v):
    single-head self-attention softmax(X W_q (X W_k)^T / sqrt(d_k)) X W_v."""
    from .attention import scaled_dot_product_attention

    cases = [("4 tokens, d_in 3 -> d_k 2", 4, 3, 2, 2), ("6 tokens, d_k 8, d_v 5", 6, 4, 8, 5),
             ("1 token", 1, 3, 4, 2)]
    for number, (case, n, d_in, d_k, d_v) in enumerate(cases):
        x = _random((n, d_in), number)
        w_q, w_k, w_v = (_random(shape, 10 * number + i)
                         for i, shape in enumerate([(d_in, d_k), (d_in, d_k), (d_in, d_v)]))
        expected, _ = scaled_dot_product_attention(x @ w_q, x @ w_k, x @ w_v)
        _compare(_run(fn, (x, w_q, w_k, w_v), case), expected, case)
    _passed("your self-attention", len(cases))


def check_positional_encoding(fn):
    """Check fn(num_positions, dim) -> (num_positions, dim), the sinusoidal encoding."""
    from .positions import sinusoidal_positional_encoding

    cases = [(4, 2), (10, 8), (50, 16)]
    for num_positions, dim in cases:
        case = f"{num_positions} positions, dim {dim}"
        expected = sinusoidal_positional_encoding(num_positions, dim)
        got = _run(fn, (num_positions, dim), case)
        _compare(got.to(expected.dtype) if isinstance(got, torch.Tensor) else got, expected, case,
                 "encoding", atol=1e-4)
    _passed("your positional encoding", len(cases))


def check_split_heads(fn):
    """Check fn(x (batch, seq, num_heads * head_dim), num_heads) -> (batch, num_heads, seq,
    head_dim), where head h holds features h * head_dim ... (h + 1) * head_dim - 1."""
    from .multihead import split_heads

    cases = [("2 heads", (1, 3, 4), 2), ("4 heads, batch 2", (2, 5, 8), 4), ("1 head", (2, 2, 6), 1)]
    for number, (case, shape, num_heads) in enumerate(cases):
        x = _random(shape, number)
        _compare(_run(fn, (x, num_heads), case), split_heads(x, num_heads), case, "heads")
    _passed("your split_heads", len(cases))


def check_mha_parameter_count(fn):
    """Check fn(embed_dim, num_heads, bias) -> the number of parameters of multi-head attention,
    against torch.nn.MultiheadAttention."""
    cases = [(8, 2, True), (64, 8, False), (512, 8, True), (12, 3, False)]
    for embed_dim, num_heads, bias in cases:
        case = f"embed_dim {embed_dim}, {num_heads} heads, bias {bias}"
        module = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias)
        expected = sum(p.numel() for p in module.parameters())
        got = _run(fn, (embed_dim, num_heads, bias), case)
        if got != expected:
            raise CheckFailed(f"case '{case}': you count {got}, PyTorch's module has {expected}")
    _passed("your parameter count", len(cases))


def check_kv_cache_bytes(fn):
    """Check fn(batch_size, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_element) -> the
    size of a KV cache in bytes."""
    from .multihead import kv_cache_bytes

    cases = [(1, 1, 1, 1, 1, 2), (1, 4096, 32, 32, 128, 2), (8, 2048, 32, 8, 128, 2),
             (2, 100, 8, 2, 64, 4)]
    names = ["batch_size", "seq_len", "num_layers", "num_kv_heads", "head_dim", "bytes_per_element"]
    for arguments in cases:
        case = ", ".join(f"{n}={a}" for n, a in zip(names, arguments))
        expected = kv_cache_bytes(**dict(zip(names, arguments)))
        got = _run(fn, arguments, case)
        if got != expected:
            hint = " (did you forget that keys AND values are cached?)" if got * 2 == expected else ""
            raise CheckFailed(f"case '{case}': you say {got} bytes, expected {expected}{hint}")
    _passed("your KV-cache size", len(cases))


def check_repeat_kv(fn):
    """Check fn(kv (batch, num_kv_heads, seq, head_dim), group_size) -> (batch, num_kv_heads *
    group_size, seq, head_dim) in which query head h gets KV head h // group_size."""
    cases = [("2 KV heads, groups of 2", (1, 2, 3, 4), 2), ("4 KV heads, groups of 3", (2, 4, 2, 2), 3),
             ("groups of 1 (MHA)", (1, 3, 2, 2), 1)]
    for number, (case, shape, group_size) in enumerate(cases):
        kv = _random(shape, number)
        expected = kv.repeat_interleave(group_size, dim=1)
        got = _run(fn, (kv, group_size), case)
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape and group_size > 1
                and torch.equal(got, kv.repeat(1, group_size, 1, 1))):
            raise CheckFailed(f"case '{case}': your heads are in the order 0, 1, ..., 0, 1, ... "
                              "(torch.repeat); query head h must read KV head h // group_size, "
                              "as enable_gqa does (torch.repeat_interleave)")
        _compare(got, expected, case, "repeated heads")
    _passed("your KV-head repetition", len(cases))
