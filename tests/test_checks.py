"""The exercise checks accept correct answers written independently and reject wrong ones clearly."""

import copy
import inspect
import math

import pytest
import torch

import attention_course
from attention_course import (apply_rotary, SIMILARITIES, attention_entropy, causal_mask, checks, cosine_scores,
                              kv_cache_bytes, leave_one_out_mse, masked_softmax, nadaraya_watson,
                              sinusoidal_positional_encoding)
from attention_course.checks import CheckFailed
from attention_course import KVCache
from rotary_reference import rotate_by_matrices, rotation_matrix


def learner_nw(queries, keys, values, bandwidth):
    """A correct answer written the way a learner would: log-space scores and a softmax."""
    scores = -((queries[:, None] - keys[None, :]) / bandwidth) ** 2 / 2
    return torch.softmax(scores, dim=1) @ values


def naive_nw(queries, keys, values, bandwidth):
    """exp() then divide: right in the middle of the data, 0/0 = NaN far from it."""
    kernel = torch.exp(-((queries[:, None] - keys[None, :]) / bandwidth) ** 2 / 2)
    return (kernel @ values) / kernel.sum(dim=1)


def stub(*args):
    raise NotImplementedError


def test_correct_answers_pass(capsys):
    checks.check_nadaraya_watson(learner_nw)
    checks.check_kernel_weights(lambda q, k, h: torch.softmax(-((q[:, None] - k) / h) ** 2 / 2, 1), "gaussian")

    def epanechnikov(q, k, h):
        kernel = (1 - ((q[:, None] - k[None, :]) / h) ** 2).clamp(min=0)
        return kernel / kernel.sum(dim=1, keepdim=True)

    checks.check_kernel_weights(epanechnikov, "epanechnikov")

    def loo(keys, values, h):
        errors = []
        for i in range(len(keys)):
            keep = torch.arange(len(keys)) != i
            errors.append((learner_nw(keys[i:i + 1], keys[keep], values[keep], h) - values[i]) ** 2)
        return torch.cat(errors).mean().item()

    checks.check_leave_one_out(loo)
    assert capsys.readouterr().out.count("Correct") == 4


def test_underflow_is_explained():
    with pytest.raises(CheckFailed, match=r"a query far from every key.*underflow"):
        checks.check_nadaraya_watson(naive_nw)


def test_a_stub_is_not_yet_answered_and_fails_only_when_strict(capsys):
    """A learner's notebook runs on past an unanswered exercise; a grader's test fails."""
    assert checks.check_nadaraya_watson(stub) is None
    assert capsys.readouterr().out.startswith("Not yet answered: `stub` is still the stub.")
    with pytest.raises(CheckFailed, match="`stub` still raises NotImplementedError"):
        checks.check_nadaraya_watson(stub, strict=True)
    with pytest.raises(CheckFailed, match="shape"):  # a wrong answer fails either way
        checks.check_nadaraya_watson(lambda *a: learner_nw(*a)[:, None])


def any_stub(*args, **kwargs):
    raise NotImplementedError()


@pytest.mark.parametrize("name", [n for n in dir(checks) if n.startswith("check_")
                                  and n != "check_attention_weights"])
def test_every_check_of_a_function_waits_for_an_answer(name, capsys):
    """Any check given a stub says "Not yet answered", and fails when strict."""
    check = getattr(checks, name)
    required = [p for p in inspect.signature(check).parameters.values()
                if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD][1:]
    extra = [{"kernel": "gaussian"}[p.name] for p in required]
    assert check(any_stub, *extra) is None
    assert "Not yet answered: `any_stub`" in capsys.readouterr().out
    with pytest.raises(checks.NotAnswered):
        check(any_stub, *extra, strict=True)


def test_wrong_shape_and_value_are_reported():
    with pytest.raises(CheckFailed, match=r"shape \(5, 1\), expected \(5,\)"):
        checks.check_nadaraya_watson(lambda *a: learner_nw(*a)[:, None])
    with pytest.raises(CheckFailed, match=r"index \(0,\) is .*expected"):
        checks.check_nadaraya_watson(lambda q, k, v, h: learner_nw(q, k, v, 2 * h))


def test_unnormalised_kernel_weights_name_the_row():
    def unnormalised(q, k, h):
        return (1 - ((q[:, None] - k[None, :]) / h) ** 2).clamp(min=0)

    with pytest.raises(CheckFailed, match=r"row 0 sums to .*, not 1"):
        checks.check_kernel_weights(unnormalised, "epanechnikov")


def test_in_sample_error_gets_a_hint():
    def in_sample(keys, values, h):
        return torch.mean((learner_nw(keys, keys, values, h) - values) ** 2).item()

    with pytest.raises(CheckFailed, match="mask each point's own key"):
        checks.check_leave_one_out(in_sample)


@pytest.mark.parametrize("weights, message", [
    (torch.tensor([[0.5, 0.5], [0.2, 0.3]]), r"row 1 sums to 0.5000, not 1"),
    (torch.tensor([[1.5, -0.5]]), r"row 0 has a negative weight"),
    (torch.tensor([[0.5, 0.5], [float("nan"), 1.0]]), r"row 1 contains NaN"),
])
def test_check_attention_weights_messages(weights, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_attention_weights(weights)


def test_check_attention_weights_accepts_batches(capsys):
    checks.check_attention_weights(torch.softmax(torch.randn(2, 3, 4), dim=-1))
    assert "all 6 rows" in capsys.readouterr().out


def test_unknown_kernel_is_a_value_error():
    with pytest.raises(ValueError, match="unknown kernel"):
        checks.check_kernel_weights(stub, "triangle")


def test_chapter_2_to_5_checks_accept_independent_answers(capsys):
    checks.check_per_key_weights(
        lambda q, k, h: torch.softmax(-((q[:, None] - k[None, :]) / h[None, :]) ** 2 / 2, dim=1))
    checks.check_entropy(lambda p: -torch.special.xlogy(p, p).sum(-1))

    def loop_masked_softmax(scores, valid_lens):
        out = torch.zeros_like(scores)
        for b in range(scores.shape[0]):
            for i in range(scores.shape[1]):
                n = int(valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i])
                if n:
                    out[b, i, :n] = torch.softmax(scores[b, i, :n], dim=0)
        return out

    checks.check_masked_softmax(loop_masked_softmax)
    checks.check_causal_mask(lambda n_q, n_k: torch.tensor([[j <= i for j in range(n_k)] for i in range(n_q)]))
    assert capsys.readouterr().out.count("Correct") == 4


@pytest.mark.parametrize("call, message", [
    (lambda: checks.check_per_key_weights(lambda q, k, h: torch.softmax(-((q[:, None] - k) / h.mean()) ** 2 / 2, 1)), r"your weights at index"),
    (lambda: checks.check_entropy(lambda p: -(p * p.log()).sum(-1)),
     r"one-hot rows .* holds nan .*0 \* log 0"),
    (lambda: checks.check_masked_softmax(lambda s, v: torch.softmax(s.masked_fill(
        torch.arange(s.shape[-1]) >= (v[:, None, None] if v.dim() == 1 else v[:, :, None]), float("-inf")), -1)),
     r"a sequence of length 0.*holds nan.*no valid key"),
    (lambda: checks.check_causal_mask(lambda n_q, n_k: ~torch.ones(n_q, n_k, dtype=torch.bool).tril()), r"inverted"),
    (lambda: checks.check_causal_mask(lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)), r"2 queries, 5 keys.*query 0 may not attend to key 1"),
    (lambda: checks.check_causal_mask(lambda n_q, n_k: torch.ones(n_q, n_k).tril()), r"dtype torch.float32"),
])
def test_chapter_2_to_5_checks_explain_wrong_answers(call, message):
    with pytest.raises(CheckFailed, match=message):
        call()


def encoding_by_loops(n, d):
    out = torch.zeros(n, d)
    for p in range(n):
        for i in range(0, d, 2):
            out[p, i] = math.sin(p / 10000 ** (i / d))
            out[p, i + 1] = math.cos(p / 10000 ** (i / d))
    return out


def test_chapter_6_to_8_checks_accept_independent_answers(capsys):
    def self_attention(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return torch.softmax(q @ k.T / q.shape[-1] ** 0.5, dim=-1) @ v

    checks.check_self_attention(self_attention)
    checks.check_positional_encoding(encoding_by_loops)
    checks.check_split_heads(lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).permute(0, 2, 1, 3))
    checks.check_mha_parameter_count(lambda e, h, bias: 4 * e * e + (4 * e if bias else 0))
    checks.check_kv_cache_bytes(lambda b, s, n_l, n_kv, d, size: 2 * b * s * n_l * n_kv * d * size)
    checks.check_repeat_kv(lambda kv, g: kv[:, :, None].expand(-1, -1, g, -1, -1).flatten(1, 2))
    assert capsys.readouterr().out.count("Correct") == 6


@pytest.mark.parametrize("call, message", [
    (lambda: checks.check_self_attention(lambda x, q, k, v: torch.softmax((x @ q) @ (x @ k).T, -1) @ (x @ v)), r"your output at index"),
    (lambda: checks.check_split_heads(lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1)), r"your heads at index"),
    (lambda: checks.check_mha_parameter_count(lambda e, h, bias: 3 * e * e), r"you count"),
    (lambda: checks.check_kv_cache_bytes(lambda b, s, n_l, n_kv, d, size: b * s * n_l * n_kv * d * size), r"keys AND values"),
    (lambda: checks.check_repeat_kv(lambda kv, g: kv.repeat(1, g, 1, 1)), r"torch.repeat_interleave"),
    (lambda: checks.check_positional_encoding(lambda n, d: torch.zeros(n, d)), r"your encoding at index"),
])
def test_chapter_6_to_8_checks_explain_wrong_answers(call, message):
    with pytest.raises(CheckFailed, match=message):
        call()


def naive_self_attention(x, w_q, w_k, w_v):
    """No max subtraction: right for small scores, inf/inf = NaN for large ones."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    e = torch.exp(q @ k.T / q.shape[-1] ** 0.5)
    return e / e.sum(-1, keepdim=True) @ v


def test_self_attention_needs_the_max_subtraction():
    with pytest.raises(CheckFailed, match=r"scores around 1e3.*overflows to inf"):
        checks.check_self_attention(naive_self_attention)


def test_kernel_nan_is_blamed_on_underflow_only_where_it_underflows():
    with pytest.raises(CheckFailed, match=r"a query far from every key.*underflows to 0"):
        checks.check_nadaraya_watson(naive_nw)
    with pytest.raises(CheckFailed, match=r"holds nan at index \(0,\)$"):
        checks.check_nadaraya_watson(lambda q, k, v, h: learner_nw(q, k, v, h) * float("nan"))


@pytest.mark.parametrize("call", [
    lambda: checks.check_entropy(attention_entropy),
    lambda: checks.check_entropy(lambda p: attention_course.attention_entropy(p)),
    lambda: checks.check_masked_softmax(lambda s, v: masked_softmax(s, v)),
    lambda: checks.check_causal_mask(lambda n_q, n_k: causal_mask(n_q, n_k)),
    lambda: checks.check_nadaraya_watson(lambda q, k, v, h: nadaraya_watson(q, k, v, h)[0]),
    lambda: checks.check_leave_one_out(lambda k, v, h: leave_one_out_mse(k, v, h)),
    lambda: checks.check_self_attention(lambda x, q, k, v: torch.nn.functional.
                                        scaled_dot_product_attention(x @ q, x @ k, x @ v)),
    lambda: checks.check_positional_encoding(sinusoidal_positional_encoding),
    lambda: checks.check_kv_cache_bytes(lambda *a: kv_cache_bytes(**dict(zip(
        ["batch_size", "seq_len", "num_layers", "num_kv_heads", "head_dim",
         "bytes_per_element"], a)))),
])
def test_an_answer_that_calls_the_package_s_own_answer_fails(call):
    with pytest.raises(CheckFailed, match=r"calls `\w+`"):
        call()
    assert attention_course.cosine_scores is cosine_scores  # everything is restored
    assert SIMILARITIES["cosine"] is cosine_scores
    assert torch.nn.functional.scaled_dot_product_attention is not None


HIDDEN_SEEDS = (1, 2, 7)


@pytest.mark.parametrize("seed", HIDDEN_SEEDS)
def test_other_seeds_give_other_cases_that_correct_answers_pass(seed, capsys):
    checks.check_nadaraya_watson(learner_nw, seed=seed)
    checks.check_causal_mask(lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(),
                             seed=seed)
    checks.check_mha_parameter_count(lambda e, h, bias: 4 * e * e + (4 * e if bias else 0),
                                     seed=seed)
    checks.check_kv_cache_bytes(lambda *a: 2 * math.prod(a), seed=seed)
    checks.check_positional_encoding(encoding_by_loops, seed=seed)
    assert capsys.readouterr().out.count("Correct") == 5


def test_a_hard_coded_answer_fails_the_other_seeds():
    public_cases = checks.ch01_attention_pooling.regression_cases(0)
    answers = {tuple(q.tolist()): nadaraya_watson(q, k, v, h)[0]
               for _, q, k, v, h in public_cases}

    def memorised(q, k, v, h):
        return answers[tuple(q.tolist())]

    with pytest.raises(CheckFailed):
        checks.check_nadaraya_watson(memorised, seed=1)


def jacobian_by_finite_differences(query, keys, step=1e-6):
    """Central differences of o(q) = softmax(K q / sqrt(d)) K: an independent answer."""
    def attend(q):
        return torch.softmax(keys @ q / q.shape[0] ** 0.5, dim=0) @ keys
    columns = [(attend(query + step * e) - attend(query - step * e)) / (2 * step)
               for e in torch.eye(len(query), dtype=query.dtype)]
    return torch.stack(columns, dim=1)


def test_query_jacobian_check(capsys):
    checks.check_query_jacobian(jacobian_by_finite_differences)
    assert "All 4 test cases" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match=r"sqrt\(d\) = .* times too large"):
        checks.check_query_jacobian(
            lambda q, k: jacobian_by_finite_differences(q, k) * q.shape[0] ** 0.5)
    with pytest.raises(CheckFailed, match=r"calls `jacobian`"):
        checks.check_query_jacobian(lambda q, k: torch.autograd.functional.jacobian(
            lambda x: torch.softmax(k @ x / len(x) ** 0.5, 0) @ k, q))


def batched_regression_by_bmm(queries, keys, values, bandwidth):
    """A learner's answer: one (B, n_q, n_k) weight stack and one torch.bmm."""
    scores = -((queries[:, :, None] - keys[:, None, :]) / bandwidth) ** 2 / 2
    return torch.bmm(torch.softmax(scores, dim=-1), values[:, :, None]).squeeze(-1)


def test_batched_regression_check_accepts_a_bmm_answer(capsys):
    for seed in HIDDEN_SEEDS:
        checks.check_batched_regression(batched_regression_by_bmm, seed=seed)
    assert capsys.readouterr().out.count("All 4 test cases") == len(HIDDEN_SEEDS)


def test_batched_regression_check_explains_wrong_answers():
    def pooled(queries, keys, values, bandwidth):       # every set sees every key
        flat_k, flat_v = keys.flatten(), values.flatten()
        return torch.stack([learner_nw(q, flat_k, flat_v, bandwidth) for q in queries])

    def naive(queries, keys, values, bandwidth):         # exp() then divide
        kernel = torch.exp(-((queries[:, :, None] - keys[:, None, :]) / bandwidth) ** 2 / 2)
        return (kernel @ values[:, :, None]).squeeze(-1) / kernel.sum(-1)

    with pytest.raises(CheckFailed, match=r"attend to the keys of every data set"):
        checks.check_batched_regression(pooled)
    with pytest.raises(CheckFailed, match=r"a query far from every key.*underflows to 0"):
        checks.check_batched_regression(naive)
    with pytest.raises(CheckFailed, match=r"your predictions at index"):
        checks.check_batched_regression(
            lambda q, k, v, h: batched_regression_by_bmm(q, k, v, 2 * h))


def test_batched_regression_check_refuses_the_package_s_answer():
    def delegated(queries, keys, values, bandwidth):
        return torch.stack([nadaraya_watson(q, k, v, bandwidth)[0]
                            for q, k, v in zip(queries, keys, values)])

    with pytest.raises(CheckFailed, match=r"calls `nadaraya_watson`"):
        checks.check_batched_regression(delegated)


def context_by_loops(scores, values, valid_lens):
    """An independent answer: one sequence at a time, softmax over its real keys only."""
    rows = [torch.softmax(scores[b, :n], dim=0) @ values[b, :n]
            for b, n in enumerate(valid_lens.tolist())]
    return torch.stack(rows)


def dot_step_by_loops(query, keys, values, valid_lens):
    scores = torch.einsum("bd,bnd->bn", query, keys) / query.shape[-1] ** 0.5
    return context_by_loops(scores, values, valid_lens)




def test_decoder_step_checks_reject_wrong_answers():
    with pytest.raises(CheckFailed, match=r"divide them by sqrt\(d\)"):
        checks.check_dot_product_step(
            lambda q, k, v, n: context_by_loops(torch.einsum("bd,bnd->bn", q, k), v, n))


def test_decoder_step_checks_reject_delegation():
    def via_sdpa(query, keys, values, valid_lens):
        allowed = torch.arange(keys.shape[1])[None, None, :] < valid_lens[:, None, None]
        return torch.nn.functional.scaled_dot_product_attention(
            query[:, None], keys, values, attn_mask=allowed)[:, 0]

    with pytest.raises(CheckFailed, match="calls `scaled_dot_product_attention`"):
        checks.check_dot_product_step(via_sdpa)


def rotary_attention_by_loops(x, w_q, w_k, w_v, rotate_values=False):
    seq = len(x)
    positions = torch.arange(seq)
    q = rotate_by_matrices(x.double() @ w_q.double(), positions)
    k = rotate_by_matrices(x.double() @ w_k.double(), positions)
    v = x.double() @ w_v.double()
    if rotate_values:
        v = rotate_by_matrices(v, positions)
    out = []
    for i in range(seq):
        scores = torch.stack([q[i] @ k[j] for j in range(i + 1)])
        weights = torch.softmax(scores / math.sqrt(q.shape[1]), dim=0)
        out.append(sum(w * v[j] for j, w in enumerate(weights)))
    return torch.stack(out)


def llama3_by_wavelengths(theta, factor, low, high, context, slip=None):
    """Llama 3.1's rule pair by pair, as Meta's reference code states it (by
    wavelength), or with one of the usual slips."""
    frequencies = []
    for frequency in theta.tolist():
        wavelength = 2 * math.pi / frequency
        if slip == "no 2 pi":
            wavelength = 1 / frequency
        new = frequency * factor if slip == "multiplied" else frequency / factor
        if wavelength < context / high:
            kept, divided = frequency, new
        elif wavelength > context / low:
            kept, divided = new, frequency
        else:
            smooth = (context / wavelength - low) / (high - low)
            if slip == "reversed blend":
                smooth = 1 - smooth
            if slip == "no blend":
                smooth = 1.0
            kept = divided = smooth * frequency + (1 - smooth) * new
        frequencies.append(divided if slip == "swapped" else kept)
    return torch.tensor(frequencies, dtype=theta.dtype)


def rotate_with_exponents_missing_the_two(x, positions, base=10000.0):
    """RoPE with the frequencies base^(-i/d): the common slip."""
    half = x.shape[-1] // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) / x.shape[-1])
    angles = positions.double()[:, None] * theta
    first, second = x.double().chunk(2, dim=-1)
    return torch.cat([first * angles.cos() - second * angles.sin(),
                      first * angles.sin() + second * angles.cos()], dim=-1)


def window_mask_by_comparison(queries, keys, window):
    offsets = queries[:, None] - keys[None, :]              # t - s, (L, S)
    return (offsets >= 0) & (offsets < window)


def append_by_cat(held, new, window):
    everything = torch.cat([held, new], dim=2)
    return everything, everything if window is None else everything[:, :, -window:]


def update_by_logaddexp(running_max, running_sum, block):
    """The log of the new sum is logaddexp(old log-sum, the block's)."""
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    total = torch.logaddexp(running_max.double() + running_sum.double().log(),
                            torch.logsumexp(block.double(), dim=-1))
    new_sum = torch.nan_to_num(torch.exp(total - new_max.double()))
    return new_max, new_sum.to(running_sum.dtype)


def causal_tiles_by_entries(n_queries, n_keys, query_block, key_block):
    return {(i // query_block, j // key_block)
            for i in range(n_queries) for j in range(min(i + 1, n_keys))}


def previous_word_by_word_spans(word_ids):
    """Targets from the spans (first, last token) of each word."""
    n = len(word_ids)
    spans = {}
    for position, word in enumerate(word_ids):
        if word is not None:
            first, _ = spans.get(word, (position, position))
            spans[word] = (first, position)
    targets = torch.zeros(n, n, dtype=torch.bool)
    for word, (first, last) in spans.items():
        if word - 1 in spans:
            before_first, before_last = spans[word - 1]
            targets[first:last + 1, before_first:before_last + 1] = True
    return targets


def ablate_by_zeroing_values(attention, head):
    """Zero the head's value projection, weights and bias: its values are then
    zero, so its output is zero whatever its weights."""
    ablated = copy.deepcopy(attention)
    rows = slice(head * ablated.head_dim, (head + 1) * ablated.head_dim)
    with torch.no_grad():
        ablated.v_proj.weight[rows] = 0
        if ablated.v_proj.bias is not None:
            ablated.v_proj.bias[rows] = 0
    return ablated


def generate_with_own_lists(model, ids, max_new_tokens, chunk=None,
                            restart=False, mask="bottom-right",
                            refeed=False):
    """Cached greedy decoding written without the package's cache, RoPE or
    attention: per layer, lists of keys and values rotated by explicit
    matrices, a mask from a comparison of positions, a softmax by hand. The
    keywords make it one of the usual wrong answers instead."""
    keys, values = [[] for _ in model.blocks], [[] for _ in model.blocks]
    seen = [0]

    def heads(projection, h, count):          # (batch, L, n d) -> (b, n, L, d)
        batch, length, _ = h.shape
        return projection(h).reshape(batch, length, count, -1).transpose(1, 2)

    def attend(block, layer_keys, layer_values, h, where):
        attention = block.attention
        turn = torch.stack([rotation_matrix(int(p), attention.head_dim)
                            for p in where])                 # (L, d, d)
        q = torch.einsum("lij,bhlj->bhli", turn,
                         heads(attention.q_proj, h, attention.num_heads))
        k = torch.einsum("lij,bhlj->bhli", turn,
                         heads(attention.k_proj, h, attention.num_kv_heads))
        v = heads(attention.v_proj, h, attention.num_kv_heads)
        layer_keys.append(k)
        layer_values.append(v)
        group = attention.num_heads // attention.num_kv_heads
        all_keys = torch.cat(layer_keys, 2).repeat_interleave(group, 1)
        all_values = torch.cat(layer_values, 2).repeat_interleave(group, 1)
        n_new, n_all = len(where), all_keys.shape[2]
        if mask == "bottom-right":      # key s <= the query's place n_all - L + i
            allowed = (torch.arange(n_all)[None, :]
                       <= torch.arange(n_all - n_new, n_all)[:, None])
        else:                           # "top-left" on chunks, none for one
            allowed = torch.ones(n_new, n_all, dtype=torch.bool)
            if n_new > 1:
                allowed = allowed.tril()
        scores = q @ all_keys.transpose(-2, -1) / attention.head_dim ** 0.5
        weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), -1)
        return attention.out_proj(
            (weights @ all_values).transpose(1, 2).flatten(2))

    def read(new):                                   # (batch, L) -> logits
        start = 0 if restart else seen[0]
        where = range(start, start + new.shape[1])
        seen[0] += new.shape[1]
        x = model.embed(new)
        for block, layer_keys, layer_values in zip(model.blocks, keys, values):
            x = x + attend(block, layer_keys, layer_values,
                           block.attention_norm(x), where)
            h = block.mlp_norm(x)
            x = x + block.down_proj(torch.nn.functional.silu(
                block.gate_proj(h)) * block.up_proj(h))
        return model.lm_head(model.norm(x))[:, -1]

    step = chunk or ids.shape[1]
    for start in range(0, ids.shape[1], step):
        logits = read(ids[:, start:start + step])
    tokens = ids
    for _ in range(max_new_tokens):
        if refeed:
            logits = read(tokens[:, -1:])
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], 1)
        if not refeed:
            logits = read(tokens[:, -1:])
    return tokens


def generate_with_kv_cache(model, ids, max_new_tokens, chunk=None,
                           twice=False):
    """As a learner would write it: KVCache, apply_rotary and PyTorch's SDPA
    with a bottom-right mask; with twice=True every update is done twice."""
    caches = [KVCache() for _ in model.blocks]

    def attend(block, h, positions, cache):
        attention = block.attention
        q = attention.q_proj(h).unflatten(-1, (attention.num_heads, -1))
        q = apply_rotary(q.transpose(1, 2), positions)
        k, v = attention.project_kv(h)
        k = apply_rotary(k, positions)
        all_keys, all_values = cache.update(k, v)
        if twice:
            cache.update(k, v)
        n_new, n_all = len(positions), all_keys.shape[2]
        mask = torch.ones(n_new, n_all, dtype=torch.bool).tril(n_all - n_new)
        out = torch.nn.functional.scaled_dot_product_attention(
            q, all_keys, all_values, attn_mask=mask, enable_gqa=True)
        return attention.out_proj(out.transpose(1, 2).flatten(2))

    def read(new):
        positions = torch.arange(caches[0].seen, caches[0].seen + new.shape[1])
        x = model.embed(new)
        for block, cache in zip(model.blocks, caches):
            x = x + attend(block, block.attention_norm(x), positions, cache)
            h = block.mlp_norm(x)
            x = x + block.down_proj(torch.nn.functional.silu(
                block.gate_proj(h)) * block.up_proj(h))
        return model.lm_head(model.norm(x[:, -1]))

    step = chunk or ids.shape[1]
    for start in range(0, ids.shape[1], step):
        logits = read(ids[:, start:start + step])
    for number in range(max_new_tokens):
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
        if number < max_new_tokens - 1:
            logits = read(ids[:, -1:])
    return ids


INDEPENDENT_ANSWERS = [
    ("check_dot_product_step", dot_step_by_loops),
    ("check_rotary", rotate_by_matrices),
    ("check_rotary_attention", rotary_attention_by_loops),
    ("check_llama3_frequencies", llama3_by_wavelengths),
    ("check_sliding_window_mask", window_mask_by_comparison),
    ("check_cache_append", append_by_cat),
    ("check_generate_cached", generate_with_own_lists),
    ("check_generate_cached", generate_with_kv_cache),
    ("check_online_softmax_update", update_by_logaddexp),
    ("check_causal_tiles", causal_tiles_by_entries),
    ("check_previous_word_targets", previous_word_by_word_spans),
    ("check_ablate_head", ablate_by_zeroing_values),
]


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
@pytest.mark.parametrize("check, answer", INDEPENDENT_ANSWERS,
                         ids=[name for name, _ in INDEPENDENT_ANSWERS])
def test_later_checks_pass_independent_answers(check, answer, seed, capsys):
    getattr(checks, check)(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def test_rotary_checks_explain_the_usual_mistakes():
    with pytest.raises(CheckFailed, match="neighbouring dimensions"):
        checks.check_rotary(lambda x, p: rotate_by_matrices(x, p, "adjacent"))
    with pytest.raises(CheckFailed, match="-m theta_i"):
        checks.check_rotary(lambda x, p: rotate_by_matrices(x, p, sign=-1.0))
    with pytest.raises(CheckFailed, match="rotated x at index"):
        checks.check_rotary(lambda x, p: x)
    with pytest.raises(CheckFailed, match="calls `apply_rotary`"):
        checks.check_rotary(apply_rotary)
    with pytest.raises(CheckFailed, match="rotated the values too"):
        checks.check_rotary_attention(
            lambda *a: rotary_attention_by_loops(*a, rotate_values=True))
    with pytest.raises(CheckFailed, match="attention output at index"):
        checks.check_rotary_attention(
            lambda x, w_q, w_k, w_v: rotary_attention_by_loops(
                x, w_q, w_k, w_v).flip(0))


def test_rotary_check_names_frequencies_missing_the_two():
    with pytest.raises(CheckFailed, match=r"base\^\(-i/d\).*base\^\(-2i/d\)"):
        checks.check_rotary(rotate_with_exponents_missing_the_two)


@pytest.mark.parametrize("slip, message", [
    ("swapped", "divided the fast pairs"),
    ("reversed blend", "two weights are swapped"),
    ("no blend", "are blended, not"),
    ("no 2 pi", "one turn is 2 pi radians"),
    ("multiplied", "do not multiply"),
])
def test_llama3_check_names_the_usual_slips(slip, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_llama3_frequencies(
            lambda *a: llama3_by_wavelengths(*a, slip=slip))


def test_llama3_check_refuses_the_package_s_answer():
    def via_the_package(theta, factor, low, high, context):
        scaling = {"rope_type": "llama3", "factor": factor,
                   "low_freq_factor": low, "high_freq_factor": high,
                   "original_max_position_embeddings": context}
        return attention_course.rotary_frequencies(
            2 * len(theta), 500000.0, scaling=scaling, dtype=theta.dtype)
    with pytest.raises(CheckFailed, match="calls `rotary_frequencies`"):
        checks.check_llama3_frequencies(via_the_package)


def test_rotary_attention_check_names_the_wrong_scale():
    # scaling W_q by c multiplies every score by c
    unscaled = lambda x, w_q, w_k, w_v: rotary_attention_by_loops(
        x, w_q * w_q.shape[1] ** 0.5, w_k, w_v)
    with pytest.raises(CheckFailed, match="not scaled"):
        checks.check_rotary_attention(unscaled)
    by_model_width = lambda x, w_q, w_k, w_v: rotary_attention_by_loops(
        x, w_q * (w_q.shape[1] / w_q.shape[0]) ** 0.5, w_k, w_v)
    with pytest.raises(CheckFailed, match="sqrt\\(d_model\\)"):
        checks.check_rotary_attention(by_model_width)


def test_decoding_checks_explain_the_usual_mistakes():
    with pytest.raises(CheckFailed, match="inverted"):
        checks.check_sliding_window_mask(
            lambda q, k, w: ~window_mask_by_comparison(q, k, w))
    with pytest.raises(CheckFailed, match="window \\+ 1 keys"):
        checks.check_sliding_window_mask(
            lambda q, k, w: window_mask_by_comparison(q, k, w + 1))
    with pytest.raises(CheckFailed, match="aligned top-left"):
        checks.check_sliding_window_mask(
            lambda q, k, w: torch.ones(len(q), len(k), dtype=torch.bool).tril())
    with pytest.raises(CheckFailed, match="calls `decoding_mask`"):
        checks.check_sliding_window_mask(attention_course.decoding_mask)
    with pytest.raises(CheckFailed, match="kept the first window tokens"):
        checks.check_cache_append(lambda h, n, w: (
            torch.cat([h, n], 2), torch.cat([h, n], 2)[:, :, :w]))
    with pytest.raises(CheckFailed, match="attend_to holds only the last"):
        checks.check_cache_append(lambda h, n, w: (append_by_cat(h, n, w)[1],) * 2)
    with pytest.raises(CheckFailed, match="return two tensors"):
        checks.check_cache_append(lambda h, n, w: torch.cat([h, n], 2))


def test_generation_check_explains_the_usual_mistakes():
    def wrong(**slip):
        return lambda m, i, n, chunk=None: generate_with_own_lists(
            m, i, n, chunk, **slip)

    with pytest.raises(CheckFailed, match="positions restart at 0"):
        checks.check_generate_cached(wrong(restart=True))
    with pytest.raises(CheckFailed, match="chunks of 4.*aligned top-left"):
        checks.check_generate_cached(wrong(mask="top-left"))
    with pytest.raises(CheckFailed, match="received 26 tokens for a text of 14"):
        checks.check_generate_cached(
            lambda m, i, n, chunk=None: generate_with_kv_cache(
                m, i, n, chunk, twice=True))
    with pytest.raises(CheckFailed, match="last token is read again"):
        checks.check_generate_cached(wrong(refeed=True))

    def without_cache(model, ids, max_new_tokens, chunk=None):
        for _ in range(max_new_tokens):            # the whole text every step
            ids = generate_with_own_lists(model, ids, 1)
        return ids

    with pytest.raises(CheckFailed, match="reads 84 token positions for a "
                                          "text of 14"):
        checks.check_generate_cached(without_cache)

    def unchunked(model, ids, max_new_tokens, chunk=None):
        return generate_with_own_lists(model, ids, max_new_tokens)

    with pytest.raises(CheckFailed, match="chunks of at most chunk=4"):
        checks.check_generate_cached(unchunked)
    with pytest.raises(CheckFailed, match="calls `model.generate`"):
        checks.check_generate_cached(
            lambda m, i, n, chunk=None: m.generate(i, n, use_cache=False))
    with pytest.raises(CheckFailed, match="calls `block\\(...\\)`"):
        checks.check_generate_cached(
            lambda m, i, n, chunk=None: m.blocks[0](m.embed(i), torch.arange(
                i.shape[1])))
    with pytest.raises(CheckFailed, match="takes chunk=..."):
        checks.check_generate_cached(lambda m, i, n: generate_with_own_lists(
            m, i, n))


def update_without_guard(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    return new_max, (running_sum * torch.exp(running_max - new_max)
                     + torch.exp(block - new_max[:, None]).sum(-1))


def test_tiled_attention_checks_explain_the_usual_mistakes():
    def guarded(update):
        def safe(running_max, running_sum, block):
            if torch.isneginf(block).all():
                return running_max, running_sum
            return update(running_max, running_sum, block)
        return safe
    with pytest.raises(CheckFailed, match="exp\\(-inf \\+ inf\\) is NaN"):
        checks.check_online_softmax_update(update_without_guard)
    with pytest.raises(CheckFailed, match="must be multiplied by"):
        checks.check_online_softmax_update(guarded(lambda m, l, s: (
            torch.maximum(m, s.amax(-1)), l + torch.exp(
                s - torch.maximum(m, s.amax(-1))[:, None]).sum(-1))))
    with pytest.raises(CheckFailed, match="upside down"):
        checks.check_online_softmax_update(guarded(lambda m, l, s: (
            torch.maximum(m, s.amax(-1)), l * torch.exp(
                torch.maximum(m, s.amax(-1)) - m) + torch.exp(
                s - torch.maximum(m, s.amax(-1))[:, None]).sum(-1))))
    with pytest.raises(CheckFailed, match="relative to the running maximum"):
        checks.check_online_softmax_update(guarded(lambda m, l, s: (
            torch.maximum(m, s.amax(-1)), l + torch.exp(s).sum(-1))))
    every = lambda n_q, n_k, b_q, b_k: [
        (q, k) for q in range(-(-n_q // b_q)) for k in range(-(-n_k // b_k))]
    with pytest.raises(CheckFailed, match="kept all 4 tiles"):
        checks.check_causal_tiles(every)
    with pytest.raises(CheckFailed, match="compare positions"):
        checks.check_causal_tiles(lambda *sizes: [
            (q, k) for q, k in every(*sizes) if k <= q])
    with pytest.raises(CheckFailed, match=r"tile \(0, 0\) .* missing"):
        checks.check_causal_tiles(lambda *sizes: [
            (q, k) for q, k in every(*sizes) if k < q])
    with pytest.raises(CheckFailed, match="calls `tile_schedule`"):
        checks.check_causal_tiles(
            lambda n_q, n_k, b_q, b_k: attention_course.tiled.tile_schedule(
                n_q, n_k, b_q, True))


def test_previous_word_check_explains_the_usual_mistakes():
    def previous_token(word_ids):
        n = len(word_ids)
        return torch.ones(n, n, dtype=torch.bool).tril(-1) & ~torch.ones(
            n, n, dtype=torch.bool).tril(-2)

    with pytest.raises(CheckFailed, match="you marked the previous token"):
        checks.check_previous_word_targets(previous_token)

    def specials_as_minus_one(word_ids):  # None read as -1: [CLS] -> word 0
        ids = torch.tensor([-1 if w is None else w for w in word_ids])
        return ids[None, :] == ids[:, None] - 1

    with pytest.raises(CheckFailed, match="None marks"):
        checks.check_previous_word_targets(specials_as_minus_one)

    def same_word(word_ids):
        return previous_word_by_word_spans([None if w is None else w - 1
                                            for w in word_ids]).T

    with pytest.raises(CheckFailed):
        checks.check_previous_word_targets(same_word)


def test_ablation_check_explains_the_usual_mistakes():
    def in_place(attention, head):
        with torch.no_grad():
            columns = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
            attention.out_proj.weight[:, columns] = 0
        return attention

    with pytest.raises(CheckFailed, match="changed the original"):
        checks.check_ablate_head(in_place)

    def zeroing_rows(projection):
        """A wrong ablation: zero the head's rows of one projection's weight."""
        def ablate(attention, head):
            ablated = copy.deepcopy(attention)
            rows = slice(head * ablated.head_dim, (head + 1) * ablated.head_dim)
            with torch.no_grad():
                getattr(ablated, projection).weight[rows] = 0
            return ablated
        return ablate

    with pytest.raises(CheckFailed, match="value bias"):  # b_v still flows out
        checks.check_ablate_head(zeroing_rows("v_proj"))
    with pytest.raises(CheckFailed, match="ablated layer's output at index"):
        checks.check_ablate_head(zeroing_rows("q_proj"))  # query-independent weights
    with pytest.raises(CheckFailed, match="return the ablated copy"):
        checks.check_ablate_head(lambda attention, head: attention.out_proj.weight * 0)


def test_unnormalised_regression_weights_get_a_hint():
    def unnormalised(queries, keys, values, bandwidth):
        return torch.exp(-((queries[:, None] - keys[None]) / bandwidth) ** 2 / 2) @ values

    with pytest.raises(CheckFailed, match="do each query's weights sum to 1"):
        checks.check_nadaraya_watson(unnormalised)
    checks.check_nadaraya_watson(learner_nw)  # a right answer meets no such complaint


def half_split_by_loops(weight, num_heads):
    """Within each head, GGUF row 2i + p holds the half-split row p * head_dim / 2 + i."""
    head_dim = weight.shape[0] // num_heads
    out = torch.empty_like(weight)
    for head in range(num_heads):
        for i in range(head_dim // 2):
            for member in range(2):
                out[head * head_dim + member * head_dim // 2 + i] = \
                    weight[head * head_dim + 2 * i + member]
    return out


def test_half_split_rows_check_accepts_a_loop_and_names_the_usual_slips():
    checks.check_half_split_rows(half_split_by_loops)

    def converter_again(weight, num_heads):
        rows, columns = weight.shape
        return (weight.reshape(num_heads, 2, rows // num_heads // 2, columns)
                .transpose(1, 2).reshape(rows, columns))

    def all_heads_together(weight, num_heads):
        return half_split_by_loops(weight, 1)

    with pytest.raises(CheckFailed, match="converter's reordering again"):
        checks.check_half_split_rows(converter_again)
    with pytest.raises(CheckFailed, match="each head's rows are reordered on their own"):
        checks.check_half_split_rows(all_heads_together)
    with pytest.raises(CheckFailed, match="interleaved_to_half_split"):
        checks.check_half_split_rows(attention_course.pretrained.interleaved_to_half_split)


def induction_targets_by_loops(ids):
    """Key s follows an earlier occurrence of query t's token, by loops."""
    length = len(ids)
    targets = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for s in range(1, t + 1):
            targets[t, s] = bool(ids[s - 1] == ids[t])
    return targets


def test_induction_targets_check_accepts_loops_and_names_the_usual_slips():
    for seed in (0, 1, 2):
        checks.check_induction_targets(induction_targets_by_loops, seed=seed)

    def duplicate_token(ids):
        same = ids[None, :] == ids[:, None]
        return same & torch.ones_like(same).tril(-1)

    def not_causal(ids):
        targets = torch.zeros(len(ids), len(ids), dtype=torch.bool)
        targets[:, 1:] = ids[None, :-1] == ids[:, None]
        return targets

    with pytest.raises(CheckFailed, match="duplicate-token"):
        checks.check_induction_targets(duplicate_token)
    with pytest.raises(CheckFailed, match="after its query"):
        checks.check_induction_targets(not_causal)
    with pytest.raises(CheckFailed, match="bool"):
        checks.check_induction_targets(lambda ids: induction_targets_by_loops(ids).int())


# chapter 12, exercise 5: FlashAttention-2 as an autograd Function ------------


def flash_by_key_blocks(mistake=None):
    """An autograd Function for the FlashAttention check, written another way:
    the key blocks outside and the query blocks inside (as the first
    FlashAttention), a normalised running output, a running log-sum-exp
    merged with logaddexp; the backward sums over key blocks outside. With
    `mistake`, one typical error of a learner."""

    def blocks(n, size):
        return [range(start, min(start + size, n)) for start in range(0, n, size)]

    def masked_scores(q, k, rows, cols, is_causal, backward=False):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if is_causal and not (backward and mistake == "no mask in backward"):
            later = torch.tensor(cols)[None, :] > torch.tensor(rows)[:, None]
            scores = scores.masked_fill(later, -math.inf)
        return scores

    def needed(rows, cols, is_causal, query_block, key_block):
        if not is_causal or mistake == "no skip":
            return True
        if mistake == "block index":
            return cols.start // key_block <= rows.start // query_block
        return cols[0] <= rows[-1]

    class Flash(torch.autograd.Function):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            shape = query.shape[:-1]
            lse = query.new_full(shape, -math.inf)              # (..., L)
            out = query.new_zeros(*shape, value.shape[-1])
            for cols in blocks(key.shape[-2], key_block):
                k, v = key[..., cols, :], value[..., cols, :]
                for rows in blocks(query.shape[-2], query_block):
                    if not needed(rows, cols, is_causal, query_block,
                                  key_block):
                        continue
                    scores = masked_scores(query[..., rows, :], k, rows, cols,
                                           is_causal)
                    tile_lse = torch.logsumexp(scores, dim=-1)
                    new_lse = torch.logaddexp(lse[..., rows], tile_lse)
                    keep = torch.exp(lse[..., rows] - new_lse)
                    if mistake == "accumulator not rescaled":
                        keep = torch.ones_like(keep)
                    weights = torch.exp(scores - new_lse[..., None])
                    out[..., rows, :] = (out[..., rows, :] * keep[..., None]
                                         + weights @ v)
                    lse[..., rows] = new_lse
            saved = (query, key, value, out, lse)
            if mistake and mistake.startswith("saves the weights"):
                weights = torch.softmax(masked_scores(
                    query, key, range(query.shape[-2]),
                    range(key.shape[-2]), is_causal), dim=-1)
                if mistake.endswith("in ctx"):
                    ctx.weights = weights
                else:
                    saved = (*saved, weights)
            ctx.save_for_backward(*saved)
            ctx.options = is_causal, query_block, key_block
            return out

        @staticmethod
        def backward(ctx, grad_out):
            query, key, value, out, lse = ctx.saved_tensors
            is_causal, query_block, key_block = ctx.options
            scale = 1 / math.sqrt(query.shape[-1])
            delta = torch.einsum("...ld,...ld->...l", grad_out, out)
            dq = torch.zeros_like(query)
            dk, dv = torch.zeros_like(key), torch.zeros_like(value)
            for cols in blocks(key.shape[-2], key_block):
                k, v = key[..., cols, :], value[..., cols, :]
                for rows in blocks(query.shape[-2], query_block):
                    if not needed(rows, cols, is_causal, query_block,
                                  key_block):
                        continue
                    q, g = query[..., rows, :], grad_out[..., rows, :]
                    p = torch.exp(masked_scores(q, k, rows, cols, is_causal,
                                                backward=True)
                                  - lse[..., rows, None])
                    dv[..., cols, :] += p.transpose(-2, -1) @ g
                    dp = g @ v.transpose(-2, -1)
                    row_delta = ((p * dp).sum(-1) if mistake == "tile delta"
                                 else delta[..., rows])
                    ds = p * (dp - row_delta[..., None])
                    dq[..., rows, :] += ds @ k * scale
                    dk[..., cols, :] += ds.transpose(-2, -1) @ q * scale
            return dq, dk, dv, None, None, None

    return Flash


def flash_by_full_matrices():
    """Right answers, computed from whole (L, S) matrices: not FlashAttention."""

    class Naive(torch.autograd.Function):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
            if is_causal:
                scores = scores.masked_fill(torch.ones(
                    scores.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
            lse = torch.logsumexp(scores, dim=-1)
            out = torch.exp(scores - lse[..., None]) @ value
            ctx.save_for_backward(query, key, value, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            raise AssertionError("not reached")

    return Naive


def test_flash_check_passes_an_independent_answer(capsys):
    for seed in (0, *HIDDEN_SEEDS):
        checks.check_flash_autograd(flash_by_key_blocks(), seed=seed)
    assert capsys.readouterr().out.count("Correct") == 1 + len(HIDDEN_SEEDS)


@pytest.mark.parametrize("mistake, message", [
    ("accumulator not rescaled", r"multiplied by exp\(m_old - m_new\)"),
    ("block index", "compare positions"),
    ("no skip", r"hold only 6\d% of the scores"),
    ("saves the weights in ctx", "you keep tensors in ctx.weights"),
    ("saves the weights", r"you saved tensors of shapes .*\(20, 13\)\]"),
    ("tile delta", "not one tile's"),
    ("no mask in backward", "forward pass's causal mask"),
])
def test_flash_check_explains_the_usual_mistakes(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_flash_autograd(flash_by_key_blocks(mistake))


def test_flash_check_refuses_whole_matrices_and_pytorchs_answers():
    with pytest.raises(CheckFailed, match=r"forward pass made a tensor of shape "
                       r"\(20, 13\)"):
        checks.check_flash_autograd(flash_by_full_matrices())

    class CallsPyTorch(flash_by_key_blocks()):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            return torch.nn.functional.scaled_dot_product_attention(
                query, key, value, is_causal=is_causal)

    with pytest.raises(CheckFailed, match="calls `scaled_dot_product_attention`"):
        checks.check_flash_autograd(CallsPyTorch)

    class CallsThePackage(flash_by_key_blocks()):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            return attention_course.flash_attention(query, key, value,
                                                    is_causal)[0]

    with pytest.raises(CheckFailed, match="calls `flash_attention`"):
        checks.check_flash_autograd(CallsThePackage)


def flash_forward_by_query_blocks(mistake):
    """A forward pass in FlashAttention-2's order (query blocks outside) with
    one of two slips in combining the tiles; the check stops before backward."""

    class Slipped(flash_by_key_blocks()):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            out = torch.empty(*query.shape[:-1], value.shape[-1],
                              dtype=query.dtype)
            for r0 in range(0, query.shape[-2], query_block):
                q = query[..., r0:r0 + query_block, :] / math.sqrt(query.shape[-1])
                m = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
                total, acc = torch.zeros_like(m), 0.0
                for c0 in range(0, key.shape[-2], key_block):
                    s = q @ key[..., c0:c0 + key_block, :].transpose(-2, -1)
                    if is_causal:
                        i = torch.arange(r0, r0 + s.shape[-2])[:, None]
                        s = s.masked_fill(torch.arange(c0, c0 + s.shape[-1]) > i,
                                          -math.inf)
                    new_m = torch.maximum(m, s.amax(-1))
                    factor = torch.exp(m - new_m)
                    p = torch.exp(s - new_m[..., None])
                    total = total * factor + p.sum(-1)
                    acc = acc * factor[..., None] + p @ value[..., c0:c0 + key_block, :]
                    if mistake == "normalised in the loop":
                        acc = acc / total[..., None]
                    m = new_m
                out[..., r0:r0 + query_block, :] = (
                    acc if mistake == "normalised in the loop" else acc / total[..., None])
            return out

    return Slipped


def test_flash_check_names_a_normalisation_inside_the_loop():
    with pytest.raises(CheckFailed, match="divide by the sum once"):
        checks.check_flash_autograd(
            flash_forward_by_query_blocks("normalised in the loop"))


def test_flash_check_asks_for_the_saved_log_sum_exp():
    """A right forward pass that saves nothing."""
    with pytest.raises(CheckFailed, match="save the log-sum-exp"):
        checks.check_flash_autograd(flash_forward_by_query_blocks(None))


def test_flash_check_counts_the_gradients():
    class ThreeGradients(flash_by_key_blocks()):
        @staticmethod
        def backward(ctx, grad_out):
            return flash_by_key_blocks().backward(ctx, grad_out)[:3]

    with pytest.raises(CheckFailed, match="and then None for is_causal"):
        checks.check_flash_autograd(ThreeGradients)


# Chapter 3's temperature search and top-k attention, chapter 6's bidirectional encoder.

def temperature_by_log_bisection(scores, k_eff, in_bits=False, entropy_only=False):
    """An independent answer: bisection on ln tau over a fixed wide range, entropy written out
    with log-sum-exp. in_bits / entropy_only: the usual slips (2^H with H in nats read as bits,
    or the entropy itself set to k_eff)."""
    s = scores.double()

    def k_of(log_tau):
        z = s / math.exp(log_tau)
        log_w = z - torch.logsumexp(z, 0)
        entropy = -(log_w.exp() * log_w).sum().item()
        if entropy_only:
            return entropy
        return math.exp(entropy / math.log(2) if in_bits else entropy)

    low, high = -40.0, 40.0
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if k_of(middle) < k_eff else (low, middle)
    return math.exp((low + high) / 2)


def top_k_by_sorting(scores, k):
    """An independent answer: for each row, sort, keep the first k indices, softmax by hand
    after subtracting the row's largest kept score."""
    flat = scores.double().reshape(-1, scores.shape[-1])
    out = torch.zeros_like(flat)
    for r, row in enumerate(flat):
        order = sorted(range(len(row)), key=lambda i: -row[i].item())[:k]
        top = max(row[i].item() for i in order)
        e = {i: math.exp(row[i].item() - top) for i in order}
        total = sum(e.values())
        for i in order:
            out[r, i] = e[i] / total
    return out.reshape(scores.shape)


def bidirectional_by_packing(embedded, valid_lens, forward, backward, flip_batch=False):
    """An independent answer: PyTorch's own bidirectional GRU on packed sequences, with the
    two GRUs' weights copied in. flip_batch: the usual mistake (reverse the padded batch)."""
    if flip_batch:
        ahead, _ = forward(embedded)
        behind, _ = backward(embedded.flip(1))
        return torch.cat([ahead, behind.flip(1)], dim=-1)
    both = torch.nn.GRU(forward.input_size, forward.hidden_size, batch_first=True,
                        bidirectional=True).to(embedded.dtype)
    with torch.no_grad():
        for name, value in forward.named_parameters():
            getattr(both, name).copy_(value)
        for name, value in backward.named_parameters():
            getattr(both, name + "_reverse").copy_(value)
    packed = torch.nn.utils.rnn.pack_padded_sequence(embedded, valid_lens, batch_first=True,
                                                     enforce_sorted=False)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(both(packed)[0], batch_first=True,
                                                    total_length=embedded.shape[1])
    return out


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
def test_chapter_3_and_6_checks_pass_independent_answers(seed, capsys):
    checks.check_temperature_for(temperature_by_log_bisection, seed=seed)
    checks.check_top_k_attention(top_k_by_sorting, seed=seed)
    checks.check_bidirectional_states(bidirectional_by_packing, seed=seed)
    assert capsys.readouterr().out.count("Correct") == 3


def test_temperature_check_names_the_usual_slips():
    with pytest.raises(CheckFailed, match="k_eff is e to the entropy"):
        checks.check_temperature_for(
            lambda s, k: temperature_by_log_bisection(s, k, entropy_only=True))
    with pytest.raises(CheckFailed, match="entropy in bits"):
        checks.check_temperature_for(
            lambda s, k: temperature_by_log_bisection(s, k, in_bits=True))
    with pytest.raises(CheckFailed, match="expected a positive number"):
        checks.check_temperature_for(lambda s, k: -1.0)
    with pytest.raises(CheckFailed, match="k_eff is"):
        checks.check_temperature_for(lambda s, k: 1.0)        # a fixed guess


def test_top_k_check_names_the_usual_slips():
    with pytest.raises(CheckFailed, match="softmax over every score"):
        checks.check_top_k_attention(lambda s, k: torch.softmax(s, -1))

    def exp_by_hand(s, k):
        kept = s >= s.topk(k, dim=-1).values[..., -1:]
        e = torch.exp(s) * kept
        return e / e.sum(-1, keepdim=True)
    with pytest.raises(CheckFailed, match="overflows"):
        checks.check_top_k_attention(exp_by_hand)

    def not_renormalised(s, k):
        kept = s >= s.topk(k, dim=-1).values[..., -1:]
        return torch.softmax(s, -1) * kept
    with pytest.raises(CheckFailed, match="renormalise"):
        checks.check_top_k_attention(not_renormalised)


def test_bidirectional_check_names_the_usual_slips():
    with pytest.raises(CheckFailed, match="reads the padding first"):
        checks.check_bidirectional_states(
            lambda *a: bidirectional_by_packing(*a, flip_batch=True))
    with pytest.raises(CheckFailed, match="halves are swapped"):
        checks.check_bidirectional_states(
            lambda *a: bidirectional_by_packing(*a).roll(a[3].hidden_size, dims=-1))
    with pytest.raises(CheckFailed, match="states"):
        checks.check_bidirectional_states(
            lambda e, n, f, b: torch.cat([f(e)[0], f(e)[0]], dim=-1))
