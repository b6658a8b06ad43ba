"""The checks of chapter 17's exercises (sinks, hybrid caches, causal top-k, the indexer's
decoding step): independent correct
answers pass, on the visible and the hidden seeds; typical wrong answers fail with a hint that
names the mistake."""

import pytest
import torch
from learner_answers import SEEDS

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed


def sink_by_an_extra_column(scores, sinks):
    """As transformers' gpt-oss: the sink as one more column of logits, dropped after."""
    column = sinks[:, None, None].expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def sink_by_logaddexp(scores, sinks):
    """Head by head: exp(z - log(exp(b) + sum exp(z))), the log-sum-exp taken apart."""
    rows = []
    for head_scores, sink in zip(scores.double(), sinks.double()):
        normaliser = torch.logaddexp(torch.logsumexp(head_scores, dim=-1), sink)  # (L,)
        rows.append(torch.exp(head_scores - normaliser[:, None]))
    return torch.stack(rows)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [sink_by_an_extra_column, sink_by_logaddexp])
def test_sink_softmax_check_passes_independent_answers(answer, seed, capsys):
    checks.check_sink_softmax(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def sink_shift_without_the_sink(scores, sinks):
    """Subtracts the scores' row max only: -inf - (-inf) on a fully masked row."""
    largest = scores.amax(-1, keepdim=True)
    exp = (scores - largest).exp()
    return exp / (exp.sum(-1, keepdim=True) + (sinks[:, None, None] - largest).exp())


def sink_without_a_shift(scores, sinks):
    exp = scores.exp()
    return exp / (exp.sum(-1, keepdim=True) + sinks.exp()[:, None, None])


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda z, b: torch.softmax(z, -1), "a plain softmax"),
        (
            lambda z, b: torch.softmax(
                torch.cat([z, b[:, None, None].expand(*z.shape[:-1], 1)], -1), -1
            ),
            "one column too many",
        ),
        (
            lambda z, b: torch.softmax(
                torch.cat([z, b[None, :, None].expand(*z.shape[:-1], 1)], -1), -1
            )[..., :-1],
            "query t got the sink of head t",
        ),
        (sink_shift_without_the_sink, "every score of that row is -inf"),
        (sink_without_a_shift, "exp\\(1000\\) overflows"),
        (
            lambda z, b: torch.softmax(
                torch.cat([b[:, None, None].expand(*z.shape[:-1], 1), z], -1), -1
            )[..., :-1],
            "dropped the last column, a key's",
        ),
        (
            lambda z, b: z.exp() / (z.exp().sum(-1, keepdim=True) + b[:, None, None]),
            "as exp\\(omega_i\\), a logit like the scores",
        ),
        (lambda z, b: 2 * sink_by_an_extra_column(z, b), "weights at index"),
        (lambda z, b: attention_course.sink_softmax(z, b), "calls `sink_softmax`"),
    ],
)
def test_sink_softmax_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_sink_softmax(wrong)


def cache_by_layer(layer_types, seq_len, window, num_kv_heads, head_dim, bytes_per_element=2):
    total = 0
    for kind in layer_types:
        tokens = seq_len if kind == "full_attention" else min(seq_len, window)
        total += 2 * tokens * num_kv_heads * head_dim * bytes_per_element
    return total


def cache_by_real_tensors(
    layer_types, seq_len, window, num_kv_heads, head_dim, bytes_per_element=2
):
    """Build every layer's keys and values (float32 zeros, scaled to the element size):
    a sliding layer's as a KVCache with a window would keep them."""
    total = 0
    for kind in layer_types:
        cache = attention_course.KVCache(window=window if kind == "sliding_attention" else None)
        for _ in range(2):  # two chunks, so that a window drops what it must
            half = torch.zeros(1, num_kv_heads, (seq_len + 1) // 2, head_dim)
            cache.update(half, half)
        total += len(cache) * 2 * num_kv_heads * head_dim * bytes_per_element
    return total - sum(
        2 * num_kv_heads * head_dim * bytes_per_element
        for kind in layer_types
        if seq_len % 2 and (kind == "full_attention" or seq_len < window)
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [cache_by_layer, cache_by_real_tensors])
def test_hybrid_cache_check_passes_independent_answers(answer, seed, capsys):
    checks.check_hybrid_cache_bytes(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def held(minimum):
    """A wrong answer whose sliding layers hold minimum(seq_len, window) tokens."""

    def answer(layer_types, seq_len, window, num_kv_heads, head_dim, bytes_per_element=2):
        tokens = sum(
            seq_len if kind == "full_attention" else minimum(seq_len, window)
            for kind in layer_types
        )
        return 2 * tokens * num_kv_heads * head_dim * bytes_per_element

    return answer


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (held(lambda n, w: n), "keeps only the last `window` tokens"),
        (held(lambda n, w: w), "before the window fills"),
        (held(lambda n, w: min(n, w - 1)), "not W - 1"),
        (lambda *a: cache_by_layer(*a) // 2, "a key AND a value"),
        (lambda *a: cache_by_layer(*a[:5]) // 2, "counts numbers, not bytes"),
        (lambda *a: cache_by_layer(*a[:5]), "use it rather than 2"),
        (
            lambda types, *a: cache_by_layer(
                [
                    "full_attention" if t == "sliding_attention" else "sliding_attention"
                    for t in types
                ],
                *a,
            ),
            "you swapped them",
        ),
        (lambda *a: str(cache_by_layer(*a)), "expected a number of bytes"),
        (lambda *a: float("nan"), "you say nan bytes"),
        (
            lambda *a: attention_course.costs.hybrid_cache_bytes(
                layer_types=a[0],
                seq_len=a[1],
                window=a[2],
                num_kv_heads=a[3],
                head_dim=a[4],
                bytes_per_element=a[5],
            ),
            "calls `hybrid_cache_bytes`",
        ),
    ],
)
def test_hybrid_cache_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_hybrid_cache_bytes(wrong)


def top_k_by_sorting(index_scores, k):
    """Row by row: the visible keys sorted by score, the first k kept."""
    n_queries, n_keys = index_scores.shape
    chosen = torch.zeros(n_queries, n_keys, dtype=torch.bool)
    for t in range(n_queries):
        visible = index_scores[t, : t + n_keys - n_queries + 1]
        chosen[t, visible.argsort(descending=True)[:k]] = True
    return chosen


def top_k_by_rank(index_scores, k):
    """A key is chosen when fewer than k visible keys score higher: ranks by comparison."""
    n_queries, n_keys = index_scores.shape
    visible = torch.arange(n_keys) <= torch.arange(n_queries)[:, None] + n_keys - n_queries
    masked = index_scores.masked_fill(~visible, float("-inf"))
    higher = (masked[:, None, :] > masked[:, :, None]).sum(-1)  # (n_q, n_k): keys above s
    return visible & (higher < k)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [top_k_by_sorting, top_k_by_rank])
def test_causal_top_k_check_passes_independent_answers(answer, seed, capsys):
    checks.check_causal_top_k(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def visible_keys(index_scores):
    n_queries, n_keys = index_scores.shape
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(n_keys - n_queries)


def scatter(index_scores, indices, dim=-1):
    return torch.zeros(index_scores.shape, dtype=torch.bool).scatter(dim, indices, True)


def top_k_with(k_of, mask_before=True, mask_after=True, dim=-1):
    """A top-k answer with choices: how many per row (k_of(k, S)), where the mask goes,
    along which axis."""

    def answer(index_scores, k):
        visible = visible_keys(index_scores)
        scores = index_scores.masked_fill(~visible, float("-inf")) if mask_before else index_scores
        top = scores.topk(min(k_of(k), index_scores.shape[dim]), dim=dim).indices
        chosen = scatter(index_scores, top, dim)
        return chosen & visible if mask_after else chosen

    return answer


def top_left_top_k(index_scores, k):
    """The causal mask without the offset of the cached keys."""
    causal = torch.ones(index_scores.shape, dtype=torch.bool).tril()
    scores = index_scores.masked_fill(~causal, float("-inf"))
    top = scores.topk(min(k, index_scores.shape[1]), dim=-1).indices
    return scatter(index_scores, top, -1) & causal


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (top_k_with(lambda k: k, mask_before=False, mask_after=False), "keys in their future"),
        (top_k_with(lambda k: k, mask_before=False), "masked the future after choosing"),
        (top_k_with(lambda k: k, mask_after=False), "got masked \\(-inf\\) keys"),
        (top_k_with(lambda k: k, dim=0), "best queries of each key"),
        (top_left_top_k, "aligned top-left \\(tril\\(\\) without an offset\\)"),
        (top_k_with(lambda k: k + 1), "keeps min\\(k, that\\) = 3 of them, not 4"),
        (top_k_with(lambda k: max(k - 1, 1)), "keeps min\\(k, that\\) = 3 of them, not 2"),
        (
            lambda s, k: s.masked_fill(~visible_keys(s), float("-inf")).topk(min(k, s.shape[1])),
            "torch.topk's \\(values, indices\\)",
        ),
        (
            lambda s, k: (
                s.masked_fill(~visible_keys(s), float("-inf")).topk(min(k, s.shape[1])).indices
            ),
            "indices: scatter them",
        ),
        (lambda s, k: top_k_by_sorting(s, k).float(), "not bool"),
        (lambda s, k: top_k_by_sorting(s, k)[None], "shape \\(1, 6, 6\\)"),
        (
            lambda s, k: attention_course.top_k_mask(
                s.masked_fill(~visible_keys(s), float("-inf")), k
            ),
            "calls `top_k_mask`",
        ),
    ],
)
def test_causal_top_k_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_causal_top_k(wrong)


def index_step_by_sorting(queries, eta, new_key, cached_keys, k):
    """Written as a learner might: the scores by einsum, the keys sorted by score."""
    keys = torch.cat([cached_keys, new_key[None]], dim=0)
    dots = torch.einsum("hd,sd->hs", queries, keys) / queries.shape[1] ** 0.5
    scores = (eta[:, None] * torch.clamp(dots, min=0)).sum(0)
    chosen = torch.zeros(keys.shape[0], dtype=torch.bool)
    chosen[scores.argsort(descending=True)[:k]] = True
    return keys, chosen


def index_step_by_rank(queries, eta, new_key, cached_keys, k):
    """Key by key in Python, chosen when fewer than k keys rank above it (a higher score, or
    the same score at an earlier position: ties at 0, where every ReLU is 0, happen)."""
    keys = list(cached_keys) + [new_key]
    scores = [
        sum(e * max(float(q @ key) / len(q) ** 0.5, 0.0) for q, e in zip(queries, eta))
        for key in keys
    ]
    chosen = [
        sum(o > score or (o == score and j < s) for j, o in enumerate(scores)) < k
        for s, score in enumerate(scores)
    ]
    return torch.stack(keys), torch.tensor(chosen)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [index_step_by_sorting, index_step_by_rank])
def test_index_decode_step_check_passes_independent_answers(answer, seed, capsys):
    checks.check_index_decode_step(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def index_step_with(scores_of, keys_of=None, kept=lambda k, n: min(k, n)):
    """A decoding step with choices: the scores from (queries, eta, keys), the keys held."""

    def answer(queries, eta, new_key, cached_keys, k):
        keys = (
            torch.cat([cached_keys, new_key[None]])
            if keys_of is None
            else keys_of(cached_keys, new_key)
        )
        scores = scores_of(queries, eta, keys)
        chosen = torch.zeros(keys.shape[0], dtype=torch.bool)
        chosen[scores.topk(kept(k, keys.shape[0])).indices] = True
        return keys, chosen

    return answer


def right_scores(queries, eta, keys):
    return eta @ (queries @ keys.T / queries.shape[1] ** 0.5).relu()


def right_scores_of_cached_keys(queries, eta, keys):
    """The right scores, but the new token's own key (the last) never chosen."""
    scores = right_scores(queries, eta, keys)
    return torch.cat([scores[:-1], torch.tensor([-torch.inf], dtype=scores.dtype)])


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (index_step_with(right_scores, keys_of=lambda c, n: c), "append new_key as the last"),
        (
            index_step_with(right_scores, keys_of=lambda c, n: torch.cat([n[None], c])),
            "your first key is the new token's",
        ),
        (
            index_step_with(lambda q, e, keys: e @ (q @ keys.T)),
            "without the ReLU",
        ),
        (
            index_step_with(lambda q, e, keys: (q @ keys.T).relu().sum(0)),
            "weight head i's ReLU by its eta_i",
        ),
        (
            index_step_with(lambda q, e, keys: e.softmax(0) @ (q @ keys.T).relu()),
            r"softmax\(eta\)",
        ),
        (
            index_step_with(lambda q, e, keys: (e[:, None] * (q @ keys.T)).relu().sum(0)),
            "ReLU after weighting by eta_i",
        ),
        (index_step_with(right_scores_of_cached_keys), "among the cached keys only"),
        (index_step_with(lambda q, e, keys: -right_scores(q, e, keys)), "lowest scores"),
        (index_step_with(right_scores, kept=lambda k, n: min(k + 1, n)), r"expected min\(k"),
        (
            lambda q, e, n, c, k: index_step_with(right_scores)(q, e, n, c, k)[1],
            "expected a pair",
        ),
        (
            lambda q, e, n, c, k: (
                index_step_with(right_scores)(q, e, n, c, k)[0],
                index_step_with(right_scores)(q, e, n, c, k)[1].float(),
            ),
            "not a bool tensor",
        ),
        (
            lambda q, e, n, c, k: (
                torch.cat([c, n[None]]),
                attention_course.top_k_mask(right_scores(q, e, torch.cat([c, n[None]])), k),
            ),
            "calls `top_k_mask`",
        ),
    ],
)
def test_index_decode_step_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_index_decode_step(wrong)


def test_the_chapter_17_stubs_wait_for_their_answers(capsys):
    def stub(*args):
        raise NotImplementedError

    for check in (
        checks.check_sink_softmax,
        checks.check_hybrid_cache_bytes,
        checks.check_causal_top_k,
        checks.check_index_decode_step,
    ):
        assert check(stub) is None
        assert "Not yet answered" in capsys.readouterr().out
        with pytest.raises(checks.NotAnswered):
            check(stub, strict=True)
