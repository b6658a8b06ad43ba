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
from rotary_reference import rotate_by_matrices


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
    extra = [{"kernel": "gaussian", "name": "cosine"}[p.name] for p in required]
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
    checks.check_batched_pooling(lambda w, v: torch.bmm(w, v))
    checks.check_per_key_weights(
        lambda q, k, h: torch.softmax(-((q[:, None] - k[None, :]) / h[None, :]) ** 2 / 2, dim=1))
    checks.check_similarity(lambda q, k, temperature=1.0: q @ k.T / temperature, "dot")
    checks.check_similarity(
        lambda q, k, bandwidth=0.5: -((q[:, None] - k[None, :]) ** 2).sum(-1) / (2 * bandwidth**2),
        "rbf", bandwidth=0.5)
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
    assert capsys.readouterr().out.count("Correct") == 7


@pytest.mark.parametrize("call, message", [
    (lambda: checks.check_batched_pooling(lambda w, v: w @ v.transpose(1, 2)), r"raised RuntimeError"),
    (lambda: checks.check_per_key_weights(lambda q, k, h: torch.softmax(-((q[:, None] - k) / h.mean()) ** 2 / 2, 1)), r"your weights at index"),
    (lambda: checks.check_similarity(lambda q, k, temperature=1.0: q @ k.T / temperature,
                                     "scaled_dot"), r"your scores at index"),
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


def cosine_by_hand(q, k, temperature=0.5):
    return (q / q.norm(dim=-1, keepdim=True)) @ (k / k.norm(dim=-1, keepdim=True)).T / temperature


def test_similarity_options_reach_the_learners_function(capsys):
    checks.check_similarity(cosine_by_hand, "cosine", temperature=0.5)
    assert "All 12 test cases" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match=r"temperature=1.0.*your scores at index"):
        checks.check_similarity(lambda q, k, temperature=0.5: cosine_by_hand(q, k), "cosine",
                                temperature=0.5)
    with pytest.raises(CheckFailed, match=r"unexpected keyword.*takes temperature="):
        checks.check_similarity(lambda q, k: cosine_by_hand(q, k), "cosine", temperature=0.5)
    with pytest.raises(ValueError, match="takes only bandwidth"):
        checks.check_similarity(cosine_by_hand, "rbf", temperature=0.5)


@pytest.mark.parametrize("call", [
    lambda: checks.check_similarity(
        lambda q, k, temperature=0.5: cosine_scores(q, k, temperature), "cosine"),
    lambda: checks.check_similarity(
        lambda q, k, temperature=0.5: attention_course.scoring.cosine_scores(q, k, temperature),
        "cosine"),
    lambda: checks.check_similarity(
        lambda q, k, temperature=0.5: SIMILARITIES["cosine"](q, k, temperature), "cosine"),
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
    checks.check_similarity(cosine_by_hand, "cosine", seed=seed, temperature=0.5)
    checks.check_causal_mask(lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(),
                             seed=seed)
    checks.check_mha_parameter_count(lambda e, h, bias: 4 * e * e + (4 * e if bias else 0),
                                     seed=seed)
    checks.check_kv_cache_bytes(lambda *a: 2 * math.prod(a), seed=seed)
    checks.check_positional_encoding(encoding_by_loops, seed=seed)
    assert capsys.readouterr().out.count("Correct") == 6


def test_a_hard_coded_answer_fails_the_other_seeds():
    public_cases = checks.pooling._regression_cases(0)
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
    def unmasked(scores, values, valid_lens):
        return torch.einsum("bn,bnd->bd", torch.softmax(scores, dim=-1), values)

    with pytest.raises(CheckFailed, match="context vector at index"):
        checks.check_context_vector(unmasked)
    with pytest.raises(CheckFailed, match=r"divide them by sqrt\(d\)"):
        checks.check_dot_product_step(
            lambda q, k, v, n: context_by_loops(torch.einsum("bd,bnd->bn", q, k), v, n))
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.check_context_vector(stub, strict=True)


def test_decoder_step_checks_reject_delegation():
    def delegating(scores, values, valid_lens):
        return (masked_softmax(scores[:, None], valid_lens) @ values)[:, 0]

    with pytest.raises(CheckFailed, match="calls `masked_softmax`"):
        checks.check_context_vector(delegating)

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


INDEPENDENT_ANSWERS = [
    ("check_context_vector", context_by_loops),
    ("check_dot_product_step", dot_step_by_loops),
    ("check_rotary", rotate_by_matrices),
    ("check_rotary_attention", rotary_attention_by_loops),
    ("check_sliding_window_mask", window_mask_by_comparison),
    ("check_cache_append", append_by_cat),
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
