"""The checks of Part V (chapter 15): independent correct answers pass, on the visible and the
hidden seeds; typical wrong answers fail with a hint that names the mistake."""

import pytest
import torch

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed

SEEDS = (0, 1, 2, 7)


def absorbed_by_loops(q_content, k_up_weight):
    """For each head, each query and each latent dimension, the sum by hand."""
    heads, queries, head_dim = q_content.shape
    out = torch.zeros(heads, queries, k_up_weight.shape[1], dtype=q_content.dtype)
    for i in range(heads):
        for t in range(queries):
            for d in range(head_dim):
                out[i, t] += q_content[i, t, d] * k_up_weight[i * head_dim + d]
    return out


def absorbed_by_einsum(q_content, k_up_weight):
    heads, _, head_dim = q_content.shape
    return torch.einsum("hld,hdc->hlc", q_content, k_up_weight.unflatten(0, (heads, head_dim)))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [absorbed_by_loops, absorbed_by_einsum])
def test_absorbed_query_check_passes_independent_answers(answer, seed, capsys):
    checks.check_absorbed_query(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def test_absorbed_query_check_names_the_usual_mistakes():
    def heads_interleaved(q, w):
        heads, _, head_dim = q.shape
        return q @ w.reshape(head_dim, heads, -1).transpose(0, 1)

    def blocks_cut_the_wrong_way(q, w):
        heads, _, head_dim = q.shape
        return q @ w.reshape(heads, -1, head_dim).transpose(1, 2)

    def transposed_blocks(q, w):                   # right shape only where head_dim == kv_rank
        heads, _, head_dim = q.shape
        blocks = w.reshape(heads, head_dim, -1)
        if blocks.shape[-1] != head_dim:
            return absorbed_by_einsum(q, w)
        return q @ blocks.transpose(1, 2)

    def summed_over_heads(q, w):
        return q.transpose(0, 1).reshape(q.shape[1], -1) @ w          # (L, d_c)

    def explicit_keys(q, w):                       # scores against keys, not a query
        return q @ q.transpose(1, 2)

    with pytest.raises(CheckFailed, match="rows of head i are rows"):
        checks.check_absorbed_query(heads_interleaved)
    with pytest.raises(CheckFailed, match="you cut it as"):
        checks.check_absorbed_query(blocks_cut_the_wrong_way)
    with pytest.raises(CheckFailed, match="block transposed"):
        checks.check_absorbed_query(transposed_blocks)
    with pytest.raises(CheckFailed, match="one absorbed query per head"):
        checks.check_absorbed_query(summed_over_heads)
    with pytest.raises(CheckFailed, match="shape"):
        checks.check_absorbed_query(explicit_keys)
    with pytest.raises(CheckFailed, match="absorbed queries at index"):
        checks.check_absorbed_query(lambda q, w: 2 * absorbed_by_einsum(q, w))


def test_absorbed_query_check_refuses_a_hard_coded_answer():
    remembered = {}
    for case, heads, queries, head_dim, rank in checks.ch15_multi_head_latent_attention._absorb_cases(0):
        remembered[(heads, queries, head_dim, rank)] = None

    def only_visible_shapes(q, w):
        heads, queries, head_dim = q.shape
        if (heads, queries, head_dim, w.shape[1]) not in remembered:
            return torch.zeros(heads, queries, w.shape[1])
        return absorbed_by_einsum(q, w)

    checks.check_absorbed_query(only_visible_shapes)
    with pytest.raises(CheckFailed):
        checks.check_absorbed_query(only_visible_shapes, seed=1)


def cache_by_parts(config, seq_len, bytes_per_element):
    """Per token and layer: a latent and a RoPE key; then all layers, all tokens."""
    per_token_and_layer = config["kv_lora_rank"] + config["qk_rope_head_dim"]
    return per_token_and_layer * bytes_per_element * config["num_hidden_layers"] * seq_len


def cache_by_tensors(config, seq_len, bytes_per_element):
    """The real cache of random latents, counted; bytes_per_element scales float32's count."""
    layer = torch.zeros(seq_len, config["kv_lora_rank"] + config["qk_rope_head_dim"])
    return layer.numel() * config["num_hidden_layers"] * bytes_per_element


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [cache_by_parts, cache_by_tensors])
def test_latent_cache_check_passes_independent_answers(answer, seed, capsys):
    checks.check_latent_cache_bytes(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


@pytest.mark.parametrize("wrong, hint", [
    (lambda c, n, b: 2 * cache_by_parts(c, n, b), "no factor 2"),
    (lambda c, n, b: c["num_hidden_layers"] * c["kv_lora_rank"] * n * b, "RoPE key"),
    (lambda c, n, b: c["num_attention_heads"] * cache_by_parts(c, n, b), "shared by all heads"),
    (lambda c, n, b: (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * n * b, "every layer"),
    (lambda c, n, b: c["num_hidden_layers"] * c["num_attention_heads"]
     * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"]) * n * b,
     "multi-head attention would cache"),
    (lambda c, n, b: str(cache_by_parts(c, n, b)), "expected a number of bytes"),
])
def test_latent_cache_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_latent_cache_bytes(wrong)


def test_latent_cache_check_refuses_the_package_s_answer():
    def delegated(config, seq_len, bytes_per_element):
        return attention_course.latent_cache_bytes(
            batch_size=1, seq_len=seq_len, num_layers=config["num_hidden_layers"],
            kv_rank=config["kv_lora_rank"], rope_dim=config["qk_rope_head_dim"],
            bytes_per_element=bytes_per_element)

    with pytest.raises(CheckFailed, match="calls `latent_cache_bytes`"):
        checks.check_latent_cache_bytes(delegated)
    assert attention_course.latent_cache_bytes(batch_size=1, seq_len=1, num_layers=1, kv_rank=1,
                                               rope_dim=1) == 4     # restored afterwards


def test_a_stub_waits_for_its_answer(capsys):
    def stub(*args):
        raise NotImplementedError

    for check in (checks.check_absorbed_query, checks.check_latent_cache_bytes):
        assert check(stub) is None
        assert "Not yet answered" in capsys.readouterr().out
        with pytest.raises(checks.NotAnswered):
            check(stub, strict=True)


# ------------------------------------------------- chapter 17: sinks, hybrid caches, top-k


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


@pytest.mark.parametrize("wrong, hint", [
    (lambda z, b: torch.softmax(z, -1), "a plain softmax"),
    (lambda z, b: torch.softmax(torch.cat([z, b[:, None, None].expand(*z.shape[:-1], 1)],
                                          -1), -1), "one column too many"),
    (lambda z, b: torch.softmax(torch.cat([z, b[None, :, None].expand(*z.shape[:-1], 1)],
                                          -1), -1)[..., :-1], "query t got the sink of head t"),
    (sink_shift_without_the_sink, "every score of that row is -inf"),
    (sink_without_a_shift, "exp\\(1000\\) overflows"),
    (lambda z, b: 2 * sink_by_an_extra_column(z, b), "weights at index"),
    (lambda z, b: attention_course.sink_softmax(z, b), "calls `sink_softmax`"),
])
def test_sink_softmax_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_sink_softmax(wrong)


def cache_by_layer(layer_types, seq_len, window, num_kv_heads, head_dim,
                   bytes_per_element=2):
    total = 0
    for kind in layer_types:
        tokens = seq_len if kind == "full_attention" else min(seq_len, window)
        total += 2 * tokens * num_kv_heads * head_dim * bytes_per_element
    return total


def cache_by_real_tensors(layer_types, seq_len, window, num_kv_heads, head_dim,
                          bytes_per_element=2):
    """Build every layer's keys and values (float32 zeros, scaled to the element size):
    a sliding layer's as a KVCache with a window would keep them."""
    total = 0
    for kind in layer_types:
        cache = attention_course.KVCache(window=window if kind == "sliding_attention"
                                         else None)
        for _ in range(2):        # two chunks, so that a window drops what it must
            half = torch.zeros(1, num_kv_heads, (seq_len + 1) // 2, head_dim)
            cache.update(half, half)
        total += len(cache) * 2 * num_kv_heads * head_dim * bytes_per_element
    return total - sum(2 * num_kv_heads * head_dim * bytes_per_element
                       for kind in layer_types if seq_len % 2 and (
                           kind == "full_attention" or seq_len < window))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [cache_by_layer, cache_by_real_tensors])
def test_hybrid_cache_check_passes_independent_answers(answer, seed, capsys):
    checks.check_hybrid_cache_bytes(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def held(minimum):
    """A wrong answer whose sliding layers hold minimum(seq_len, window) tokens."""
    def answer(layer_types, seq_len, window, num_kv_heads, head_dim, bytes_per_element=2):
        tokens = sum(seq_len if kind == "full_attention" else minimum(seq_len, window)
                     for kind in layer_types)
        return 2 * tokens * num_kv_heads * head_dim * bytes_per_element
    return answer


@pytest.mark.parametrize("wrong, hint", [
    (held(lambda n, w: n), "keeps only the last `window` tokens"),
    (held(lambda n, w: w), "before the window fills"),
    (held(lambda n, w: min(n, w - 1)), "not W - 1"),
    (lambda *a: cache_by_layer(*a) // 2, "a key AND a value"),
    (lambda *a: cache_by_layer(*a[:5]) // 2, "counts numbers, not bytes"),
    (lambda *a: cache_by_layer(*a[:5]), "use it rather than 2"),
    (lambda types, *a: cache_by_layer(
        ["full_attention" if t == "sliding_attention" else "sliding_attention"
         for t in types], *a), "you swapped them"),
    (lambda *a: str(cache_by_layer(*a)), "expected a number of bytes"),
    (lambda *a: float("nan"), "you say nan bytes"),
    (lambda *a: attention_course.costs.hybrid_cache_bytes(
        layer_types=a[0], seq_len=a[1], window=a[2], num_kv_heads=a[3], head_dim=a[4],
        bytes_per_element=a[5]), "calls `hybrid_cache_bytes`"),
])
def test_hybrid_cache_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_hybrid_cache_bytes(wrong)


def top_k_by_sorting(index_scores, k):
    """Row by row: the visible keys sorted by score, the first k kept."""
    n_queries, n_keys = index_scores.shape
    chosen = torch.zeros(n_queries, n_keys, dtype=torch.bool)
    for t in range(n_queries):
        visible = index_scores[t, :t + n_keys - n_queries + 1]
        chosen[t, visible.argsort(descending=True)[:k]] = True
    return chosen


def top_k_by_rank(index_scores, k):
    """A key is chosen when fewer than k visible keys score higher: ranks by comparison."""
    n_queries, n_keys = index_scores.shape
    visible = torch.arange(n_keys) <= torch.arange(n_queries)[:, None] + n_keys - n_queries
    masked = index_scores.masked_fill(~visible, float("-inf"))
    higher = (masked[:, None, :] > masked[:, :, None]).sum(-1)     # (L, S): keys above s
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
        scores = (index_scores.masked_fill(~visible, float("-inf")) if mask_before
                  else index_scores)
        top = scores.topk(min(k_of(k), index_scores.shape[dim]), dim=dim).indices
        chosen = scatter(index_scores, top, dim)
        return chosen & visible if mask_after else chosen
    return answer


@pytest.mark.parametrize("wrong, hint", [
    (top_k_with(lambda k: k, mask_before=False, mask_after=False), "keys in their future"),
    (top_k_with(lambda k: k, mask_before=False), "masked the future after choosing"),
    (top_k_with(lambda k: k, mask_after=False), "got masked \\(-inf\\) keys"),
    (top_k_with(lambda k: k, dim=0), "best queries of each key"),
    (top_k_with(lambda k: k + 1), "keeps min\\(k, that\\) = 3 of them, not 4"),
    (top_k_with(lambda k: max(k - 1, 1)), "keeps min\\(k, that\\) = 3 of them, not 2"),
    (lambda s, k: s.masked_fill(~visible_keys(s), float("-inf")).topk(min(k, s.shape[1])),
     "torch.topk's \\(values, indices\\)"),
    (lambda s, k: s.masked_fill(~visible_keys(s), float("-inf")).topk(
        min(k, s.shape[1])).indices, "indices: scatter them"),
    (lambda s, k: top_k_by_sorting(s, k).float(), "not bool"),
    (lambda s, k: top_k_by_sorting(s, k)[None], "shape \\(1, 6, 6\\)"),
    (lambda s, k: attention_course.top_k_mask(s.masked_fill(~visible_keys(s),
                                                            float("-inf")), k),
     "calls `top_k_mask`"),
])
def test_causal_top_k_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_causal_top_k(wrong)


def test_the_chapter_17_stubs_wait_for_their_answers(capsys):
    def stub(*args):
        raise NotImplementedError

    for check in (checks.check_sink_softmax, checks.check_hybrid_cache_bytes,
                  checks.check_causal_top_k):
        assert check(stub) is None
        assert "Not yet answered" in capsys.readouterr().out
        with pytest.raises(checks.NotAnswered):
            check(stub, strict=True)
