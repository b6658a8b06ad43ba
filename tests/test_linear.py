"""Linear attention and the (gated) delta rule, against independent references: loops over
every token (and every pair of tokens) in float64, and the pure-PyTorch reference functions of
the pinned transformers (Qwen3-Next's gated delta rule, Kimi Linear's per-channel one)."""

import inspect
import itertools
import math
import textwrap

import pytest
import torch
import torch.nn.functional as F

from attention_course import delta_rule, linear_attention
from attention_course.linear import FEATURE_MAPS

qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
kimi_linear = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")

F64 = torch.float64


def normal(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def gates(*shape, seed=0):
    """(beta in (0, 1), log-decay g <= 0) as Qwen3-Next makes them: sigmoid(b) and
    -exp(A_log) softplus(a + dt_bias)."""
    b, a = normal(*shape, seed=seed), normal(*shape, seed=seed + 1)
    return torch.sigmoid(b), -0.5 * F.softplus(a - 1.0)


def max_error(a, b):
    return (a.double() - b.double()).abs().max().item()


# ------------------------------------------------------------------ references by loops


def linear_attention_by_pairs(query, key, value, phi, causal=True, normalize=True, log_decay=None):
    """Every weight phi(q_i) . phi(k_j) exp(g_(j+1) + ... + g_i), one pair at a time."""
    out = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=F64)
    for batch in itertools.product(*(range(s) for s in query.shape[:-2])):
        q, k, v = query[batch], key[batch], value[batch]
        for i in range(q.shape[0]):
            total, numerator = 0.0, torch.zeros(v.shape[-1], dtype=F64)
            for j in range(i + 1 if causal else k.shape[0]):
                weight = float(phi(q[i]) @ phi(k[j]))
                if log_decay is not None:
                    weight *= math.exp(float(log_decay[batch][j + 1 : i + 1].sum()))
                total += weight
                numerator += weight * v[j]
            out[batch][i] = numerator / total if normalize else numerator
    return out


def delta_rule_by_tokens(query, key, value, beta, log_decay=None, state=None):
    """The recurrence written out for each batch entry: S <- diag(exp(g_t)) S,
    S <- S + beta_t k_t (v_t - S^T k_t)^T, o_t = S^T q_t."""
    d_k, d_v = key.shape[-1], value.shape[-1]
    out = torch.zeros(*query.shape[:-1], d_v, dtype=F64)
    final = torch.zeros(*key.shape[:-2], d_k, d_v, dtype=F64)
    for batch in itertools.product(*(range(s) for s in key.shape[:-2])):
        s = torch.zeros(d_k, d_v, dtype=F64) if state is None else state[batch].clone()
        for t in range(key.shape[-2]):
            if log_decay is not None:
                decay = log_decay[batch][t].exp()
                s = decay * s if decay.dim() == 0 else decay[:, None] * s
            k = key[batch][t]
            s = s + beta[batch][t] * torch.outer(k, value[batch][t] - s.T @ k)
            out[batch][t] = s.T @ query[batch][t]
        final[batch] = s
    return out, final


# ------------------------------------------------------------------ linear attention


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
@pytest.mark.parametrize("causal", [True, False])
def test_linear_attention_equals_the_pairwise_sum(name, causal):
    q, k = normal(2, 9, 4), normal(2, 9, 4, seed=1)
    v = normal(2, 9, 3, seed=2)
    phi = {"elu": lambda x: F.elu(x) + 1, "relu": F.relu, "identity": lambda x: x}[name]
    normalize = name == "elu"  # the others can sum to 0: unnormalised
    expected = linear_attention_by_pairs(q, k, v, phi, causal, normalize)
    ours = linear_attention(q, k, v, name, causal=causal, normalize=normalize)
    assert max_error(ours, expected) < 1e-12


def test_non_causal_linear_attention_takes_other_queries_in_time_linear_in_n():
    q, k, v = normal(3, 4, 5), normal(3, 11, 5, seed=1), normal(3, 11, 2, seed=2)
    expected = linear_attention_by_pairs(q, k, v, lambda x: F.elu(x) + 1, causal=False)
    assert max_error(linear_attention(q, k, v, causal=False), expected) < 1e-12


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 4, 12, 13, 50])
@pytest.mark.parametrize("decay", [False, True])
def test_parallel_recurrent_and_chunked_linear_attention_agree(chunk_size, decay):
    """chunk_size None is the masked (n, n) form, 1 the recurrence; 3 and 5 do not divide
    n = 12, 4 and 12 do, 13 and 50 exceed it."""
    q, k, v = normal(2, 3, 12, 4), normal(2, 3, 12, 4, seed=1), normal(2, 3, 12, 5, seed=2)
    log_decay = -normal(2, 3, 12, seed=3).abs() if decay else None
    expected = linear_attention_by_pairs(q, k, v, lambda x: F.elu(x) + 1, log_decay=log_decay)
    ours = linear_attention(q, k, v, log_decay=log_decay, chunk_size=chunk_size)
    assert max_error(ours, expected) < 1e-12


def test_chunk_size_none_is_one_chunk_of_the_whole_sequence_in_both_functions():
    """chunk_size=None has one meaning in linear_attention and delta_rule: one chunk of n
    tokens, so it gives the same numbers as chunk_size=n and not as chunk_size=1's loop
    (whose rounding differs), for n = 0, 1 and 9."""
    for n in (0, 1, 9):
        q, k = normal(2, n, 4), F.normalize(normal(2, n, 4, seed=1), dim=-1)
        v = normal(2, n, 3, seed=2)
        beta, g = gates(2, n, seed=3)
        whole = max(n, 1)
        assert torch.equal(
            linear_attention(q, k, v, log_decay=g),
            linear_attention(q, k, v, log_decay=g, chunk_size=whole),
        )
        ours = delta_rule(q, k, v, beta, g)
        one_chunk = delta_rule(q, k, v, beta, g, chunk_size=whole)
        assert all(torch.equal(a, b) for a, b in zip(ours, one_chunk))
    loop = delta_rule(q, k, v, beta, g, chunk_size=1)[0]
    assert not torch.equal(ours[0], loop) and max_error(ours[0], loop) < 1e-12


def test_a_callable_feature_map_and_a_zero_normaliser():
    q, k, v = normal(7, 3), normal(7, 3, seed=1), normal(7, 2, seed=2)
    squared = linear_attention(q, k, v, feature_map=lambda x: x**2)
    assert max_error(squared, linear_attention_by_pairs(q, k, v, lambda x: x**2)) < 1e-12
    q[2] = -1.0  # ReLU features of query 2 are all 0
    out = linear_attention(q, k, v, feature_map="relu")
    assert torch.isfinite(out).all() and (out[2] == 0).all()


def test_linear_attention_needs_causal_for_a_decay_or_chunks():
    q = normal(4, 3)
    for options in (dict(log_decay=-q[:, 0].abs()), dict(chunk_size=2)):
        with pytest.raises(ValueError, match="causal=True"):
            linear_attention(q, q, q, causal=False, **options)
    with pytest.raises(ValueError, match="same n"):
        linear_attention(q, normal(5, 3), normal(5, 2))


# ------------------------------------------------------------------ the delta rule


@pytest.mark.parametrize("decay", ["none", "per token", "per channel"])
@pytest.mark.parametrize("chunk_size", [None, 1, 3, 5, 8, 16, 40])
def test_delta_rule_equals_the_token_loop(decay, chunk_size):
    """One chunk (None), the recurrence (1) and chunks: 3 and 5 do not divide n = 16, 8 and
    16 do, 40 exceeds it; with and without an initial state."""
    q, k = normal(2, 3, 16, 4), F.normalize(normal(2, 3, 16, 4, seed=1), dim=-1)
    v = normal(2, 3, 16, 5, seed=2)
    beta, g = gates(2, 3, 16, seed=3)
    log_decay = {
        "none": None,
        "per token": g,
        "per channel": -0.3 * F.softplus(normal(2, 3, 16, 4, seed=5)),
    }[decay]
    for state in (None, normal(2, 3, 4, 5, seed=6)):
        expected, expected_state = delta_rule_by_tokens(q, k, v, beta, log_decay, state)
        ours, final = delta_rule(
            q, k, v, beta, log_decay, chunk_size=chunk_size, initial_state=state
        )
        assert max_error(ours, expected) < 1e-12
        assert max_error(final, expected_state) < 1e-12


def test_the_final_state_continues_the_sequence():
    q, k = normal(2, 20, 6), F.normalize(normal(2, 20, 6, seed=1), dim=-1)
    v = normal(2, 20, 3, seed=2)
    beta, g = gates(2, 20, seed=3)
    whole, whole_state = delta_rule(q, k, v, beta, g, chunk_size=8)
    first, state = delta_rule(q[:, :7], k[:, :7], v[:, :7], beta[:, :7], g[:, :7])
    second, final = delta_rule(
        q[:, 7:], k[:, 7:], v[:, 7:], beta[:, 7:], g[:, 7:], chunk_size=4, initial_state=state
    )
    assert max_error(torch.cat([first, second], dim=1), whole) < 1e-12
    assert max_error(final, whole_state) < 1e-12


def test_with_beta_one_and_orthonormal_keys_the_state_stores_every_pair():
    """The regression reading: each step makes S^T k_t = v_t; orthonormal keys do not
    disturb each other, so all d pairs are recalled exactly afterwards."""
    keys = torch.linalg.qr(normal(6, 6))[0]  # rows orthonormal
    values = normal(6, 3, seed=1)
    _, state = delta_rule(keys, keys, values, torch.ones(6, dtype=F64))
    assert max_error(keys @ state, values) < 1e-12
    repeated = torch.cat([keys, keys[:1]])  # key 0 again, a new value
    new_values = torch.cat([values, normal(1, 3, seed=2)])
    _, state = delta_rule(repeated, repeated, new_values, torch.ones(7, dtype=F64))
    assert max_error(keys[0] @ state, new_values[6]) < 1e-12  # overwritten, not added


def test_chunked_gradients_equal_recurrent_ones():
    q, k, v = (normal(1, 2, 7, 3, seed=s).requires_grad_() for s in range(3))
    beta, g = (t.requires_grad_() for t in gates(1, 2, 7, seed=3))
    assert torch.autograd.gradcheck(
        lambda q, k, v, beta, g: delta_rule(q, F.normalize(k, dim=-1), v, beta, g, chunk_size=3)[0],
        (q, k, v, beta, g),
    )
    grads = [
        torch.autograd.grad(
            delta_rule(q, F.normalize(k, dim=-1), v, beta, g, chunk_size=size)[0].sum(),
            (q, k, v, beta, g),
        )
        for size in (None, 3)
    ]
    assert max(max_error(a, b) for a, b in zip(*grads)) < 1e-12


# ------------------------------------------------------------------ transformers' references


def in_float64(function, module, casts):
    """The reference function's own source, run in float64: transformers computes these in
    float32, so the text `torch.float32` (and `.float()`, in Kimi's chunked form) is replaced,
    and nothing else; `casts` is how many replacements must be made."""
    source = textwrap.dedent(inspect.getsource(inspect.unwrap(function)))
    source = "\n".join(line for line in source.splitlines() if not line.startswith("@"))
    made = source.count("torch.float32") + source.count(".float()")
    assert made == casts, f"{function.__name__}: {made} float32 casts, expected {casts}"
    source = source.replace("torch.float32", "torch.float64").replace(".float()", ".double()")
    namespace = dict(vars(module))
    exec(source, namespace)
    return namespace[function.__name__]


QWEN = {
    "recurrent": (qwen3_next.torch_recurrent_gated_delta_rule, 1),
    "chunk": (qwen3_next.torch_chunk_gated_delta_rule, 1),
}
KIMI = {
    "recurrent": (kimi_linear.recurrent_kimi_delta_attention, 1),
    "chunk": (kimi_linear.chunk_kimi_delta_attention, 2),
}


def their_inputs(channels, seed=0, dtype=F64):
    """transformers' layout (batch, n, heads, d): raw q and k (they l2-normalise them), beta,
    and the log-decay g, one per head or (Kimi) one per key channel."""
    q, k = normal(2, 21, 3, 8, seed=seed), normal(2, 21, 3, 8, seed=seed + 1)
    v = normal(2, 21, 3, 6, seed=seed + 2)
    beta, g = gates(2, 21, 3, seed=seed + 3)
    if channels:
        g = -0.2 * F.softplus(normal(2, 21, 3, 8, seed=seed + 5))
    return [t.to(dtype) for t in (q, k, v, g, beta)]


def ours_on(q, k, v, g, beta, l2norm, chunk_size, state):
    """The same computation in the course's layout (batch, heads, n, d), with the model's own
    conventions done outside the rule: l2-normalised q and k, q scaled by 1/sqrt(d_k)."""
    heads_first = [t.transpose(1, 2) for t in (q, k, v, g, beta)]
    q, k, v, g, beta = heads_first
    q, k = l2norm(q, dim=-1, eps=1e-6) / math.sqrt(q.shape[-1]), l2norm(k, dim=-1, eps=1e-6)
    out, final = delta_rule(q, k, v, beta, g, chunk_size=chunk_size, initial_state=state)
    return out.transpose(1, 2), final


@pytest.mark.parametrize(
    "model, form", [(m, f) for m in ("qwen", "kimi") for f in ("recurrent", "chunk")]
)
@pytest.mark.parametrize("chunk_size", [None, 4, 64])
@pytest.mark.parametrize("with_state", [False, True])
def test_equal_to_transformers_references_in_float64(model, form, chunk_size, with_state):
    function, casts = (QWEN if model == "qwen" else KIMI)[form]
    module = qwen3_next if model == "qwen" else kimi_linear
    reference = in_float64(function, module, casts)
    q, k, v, g, beta = their_inputs(channels=model == "kimi")
    state = normal(2, 3, 8, 6, seed=9) if with_state else None
    options = dict(chunk_size=16) if form == "chunk" else {}
    theirs, their_state = reference(
        q,
        k,
        v,
        g=g,
        beta=beta,
        initial_state=state,
        output_final_state=True,
        use_qk_l2norm_in_kernel=True,
        **options,
    )
    ours, our_state = ours_on(q, k, v, g, beta, module.l2norm, chunk_size, state)
    assert max_error(ours, theirs) < 1e-10
    assert max_error(our_state, their_state) < 1e-10


@pytest.mark.parametrize("model", ["qwen", "kimi"])
def test_equal_to_transformers_references_as_they_are_in_float32(model):
    """The unmodified references (float32 inside) against ours in float64: agreement to
    float32's rounding shows that the float64 copies above compute the same thing."""
    references = QWEN if model == "qwen" else KIMI
    module = qwen3_next if model == "qwen" else kimi_linear
    q, k, v, g, beta = their_inputs(channels=model == "kimi", seed=20)
    ours, our_state = ours_on(q, k, v, g, beta, module.l2norm, 5, None)
    for function, _ in references.values():
        theirs, their_state = function(
            q.float(),
            k.float(),
            v.float(),
            g=g.float(),
            beta=beta.float(),
            initial_state=None,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )
        assert max_error(ours, theirs) < 1e-5
        assert max_error(our_state, their_state) < 1e-5


# ------------------------------------------------------------------ dtypes and devices


@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 5e-2), (torch.float16, 5e-3)]
)
def test_dtypes_are_kept_and_half_precision_is_computed_in_float32(dtype, tolerance):
    q, k = normal(2, 33, 8), F.normalize(normal(2, 33, 8, seed=1), dim=-1)
    v = normal(2, 33, 4, seed=2)
    beta, g = gates(2, 33, seed=3)
    low = [t.to(dtype) for t in (q, k, v, beta, g)]
    exact, exact_state = delta_rule(*[t.double() for t in low])
    for chunk_size in (None, 8):
        out, state = delta_rule(*low, chunk_size=chunk_size)
        assert out.dtype == state.dtype == dtype
        scale = 1 + exact.abs().max().item()
        assert max_error(out, exact) <= tolerance * scale
        assert max_error(state, exact_state) <= tolerance * (1 + exact_state.abs().max().item())
    out = linear_attention(low[0], low[1], low[2], log_decay=low[4], chunk_size=8)
    exact = linear_attention(
        *[t.double() for t in (low[0], low[1], low[2])], log_decay=low[4].double()
    )
    assert out.dtype == dtype and max_error(out, exact) <= tolerance * 2


def test_nothing_is_made_on_the_cpu_behind_the_callers_back():
    meta = [
        torch.empty(2, 10, 4, device="meta"),
        torch.empty(2, 10, 4, device="meta"),
        torch.empty(2, 10, 3, device="meta"),
    ]
    per_token = torch.empty(2, 10, device="meta")
    for chunk_size in (None, 4):
        out, state = delta_rule(*meta, per_token, per_token, chunk_size=chunk_size)
        assert out.device.type == state.device.type == "meta"
        assert out.shape == (2, 10, 3) and state.shape == (2, 4, 3)
        out = linear_attention(*meta, log_decay=per_token, chunk_size=chunk_size)
        assert out.device.type == "meta" and out.shape == (2, 10, 3)
    assert linear_attention(*meta, causal=False).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_a_gpu_the_results_equal_the_cpus():
    q, k = normal(2, 40, 8), F.normalize(normal(2, 40, 8, seed=1), dim=-1)
    v = normal(2, 40, 4, seed=2)
    beta, g = gates(2, 40, seed=3)
    cpu = delta_rule(q, k, v, beta, g, chunk_size=16)
    gpu = delta_rule(*(t.cuda() for t in (q, k, v, beta, g)), chunk_size=16)
    assert all(max_error(a, b.cpu()) < 1e-12 for a, b in zip(cpu, gpu))


def test_an_empty_sequence_gives_an_empty_output_and_the_initial_state():
    q, v = normal(2, 0, 4), normal(2, 0, 3)
    state = normal(2, 4, 3, seed=1)
    for chunk_size in (None, 4):
        out, final = delta_rule(q, q, v, q[..., 0], initial_state=state, chunk_size=chunk_size)
        assert out.shape == (2, 0, 3) and torch.equal(final, state)
        assert linear_attention(q, q, v, chunk_size=chunk_size).shape == (2, 0, 3)


@pytest.mark.parametrize("empty", ["batch", "head", "d_k", "d_v"])
def test_chunked_forms_of_an_empty_dimension_equal_the_unchunked_ones(empty):
    sizes = dict(batch=2, head=3, n=5, d_k=4, d_v=3)
    sizes[empty] = 0
    b, h, n, d_k, d_v = sizes.values()
    q, k, v = normal(b, h, n, d_k), normal(b, h, n, d_k, seed=1), normal(b, h, n, d_v, seed=2)
    beta, g = gates(b, h, n, seed=3)
    channels = -normal(b, h, n, d_k, seed=5).abs()
    for decay in (None, g):
        whole = linear_attention(q, k, v, log_decay=decay)
        chunked = linear_attention(q, k, v, log_decay=decay, chunk_size=2)
        assert chunked.shape == whole.shape == (b, h, n, d_v)
        assert torch.equal(chunked, whole)  # both empty, or both zero
    for decay in (None, g, channels):
        whole = delta_rule(q, k, v, beta, log_decay=decay)
        chunked = delta_rule(q, k, v, beta, log_decay=decay, chunk_size=2)
        for ours, theirs in zip(chunked, whole):
            assert ours.shape == theirs.shape and torch.equal(ours, theirs)
        assert whole[1].shape == (b, h, d_k, d_v)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("closed", [-math.inf, -3e38], ids=["-inf", "-3e38"])
def test_a_decay_that_closes_the_gate_gives_the_formulas_finite_answer(closed, dtype):
    """log gamma = -inf (or a finite -3e38, whose sums overflow float32) forgets everything
    before it: every form gives the loops' answer, not NaN."""
    q, k, v = normal(2, 7, 4), normal(2, 7, 4, seed=1), normal(2, 7, 3, seed=2)
    beta, g = gates(2, 7, seed=3)
    g[0, 2] = g[1, 5] = g[1, 6] = closed
    channels = g[..., None].expand(-1, -1, 4).clone()
    channels[0, 4, 1] = closed
    tolerance = 1e-10 if dtype == F64 else 2e-4
    expected = linear_attention_by_pairs(q, k, v, FEATURE_MAPS["elu"], log_decay=g)
    cast = [t.to(dtype) for t in (q, k, v, beta, g, channels)]
    for chunk_size in (None, 1, 2, 3):
        ours = linear_attention(*cast[:3], log_decay=cast[4], chunk_size=chunk_size)
        assert max_error(ours, expected) < tolerance
    for decay, decay_cast in ((g, cast[4]), (channels, cast[5])):
        expected, expected_state = delta_rule_by_tokens(q, k, v, beta, decay)
        for chunk_size in (None, 2, 3):
            ours, state = delta_rule(*cast[:4], log_decay=decay_cast, chunk_size=chunk_size)
            assert max_error(ours, expected) < tolerance
            assert max_error(state, expected_state) < tolerance
