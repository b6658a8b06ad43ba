"""Checks of chapter 17's exercises: the softmax with a learned sink, the cache of a hybrid of
full and sliding-window layers, the causal top-k selection of sparse attention and one
decoding step of DSA's indexer with its key cache (exercise 6, cross-layer KV sharing, is
checked in ch17_kv_sharing)."""

import torch

from .. import costs, sparse
from .. import sinks as sink_module
from .ch17_kv_sharing import hybrid_layer_types
from .core import CheckFailed, compare, integers, passed, random, run, self_check


def _sink_reference(scores, sinks):
    """float64 sink softmax by its definition: the softmax over the keys and one more
    logit, the head's sink, whose column is then dropped."""
    scores = scores.double()
    column = sinks.double()[:, None, None].expand(*scores.shape[:-1], 1)  # (H, L, 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def _sink_cases(seed):
    """(case, scores (H, n_q, n_k), sinks (H,)); the first has H == L, where sinks broadcast
    over the queries instead of the heads still give the right shape."""
    sizes = [(3, 3, 5), (2, 4, 6), (2, 3, 4), (2, 3, 4), (3, 2, 5)]
    if seed:
        heads, keys = integers(seed, 5, 2, 6, 240), integers(seed, 5, 2, 9, 241)
        queries = [heads[0]] + integers(seed, 4, 1, 7, 242)
        sizes = list(zip(heads, queries, keys))
    names = [
        "heads = queries",
        "random",
        "scores and sinks around 1000",
        "a row of -inf scores (fully masked)",
        "sinks of -1e4: a plain softmax",
    ]
    for number, (name, (heads, queries, keys)) in enumerate(zip(names, sizes)):
        scores = random((heads, queries, keys), seed, 250 + 2 * number)
        sinks = random((heads,), seed, 251 + 2 * number)
        if number == 2:
            scores, sinks = 1000 * scores, 1000 * sinks
        if number == 3:
            scores[-1, -1] = float("-inf")  # the last head's last query
            scores[0, 0, -1] = float("-inf")  # and one masked key
        if number == 4:
            sinks = torch.full((heads,), -1e4)
        yield f"{name}: {heads} heads, {queries} queries, {keys} keys", scores, sinks


def _sink_mistakes(scores, sinks):
    """(what a typical wrong answer computes, why it is wrong)."""
    scores, sinks = scores.double(), sinks.double()
    heads, queries, _ = scores.shape
    mistakes = [
        (
            torch.softmax(scores, dim=-1),
            "your rows sum to 1, a plain softmax: the sink's exp(omega_i) joins each "
            "row's denominator, so a row sums to less than 1",
        )
    ]
    column = sinks[:, None, None].expand(heads, queries, 1)
    mistakes.append(
        (
            torch.softmax(torch.cat([column, scores], -1), -1)[..., :-1],
            "you put the sink's column first and then dropped the last column, "
            "a key's: drop the sink's own column, the one you added",
        )
    )
    mistakes.append(
        (
            scores.exp() / (scores.exp().sum(-1, keepdim=True) + column),
            "the sink enters the denominator as exp(omega_i), a logit like the "
            "scores, not as omega_i itself",
        )
    )
    if heads == queries:
        # one sink per query, not per head
        per_query = sinks[None, :, None].expand(heads, queries, 1)
        wrong = torch.softmax(torch.cat([scores, per_query], -1), -1)[..., :-1]
        mistakes.append(
            (
                wrong,
                "query t got the sink of head t: sinks (heads,) must "
                "line up with the heads axis, sinks[:, None, None] "
                "beside scores (heads, n_q, n_k), or sinks[:, None] beside "
                "the row sums (heads, L)",
            )
        )
    return mistakes


def _sink_nan_cause(scores):
    """explain_nan for compare: what made a NaN at an index of the weights."""

    def explain(index):
        if torch.isneginf(scores[index[0], index[1]]).all():
            return (
                "every score of that row is -inf, so its largest score is -inf and "
                "-inf - (-inf) is NaN: subtract the largest of the scores AND the "
                "sink, which is finite; the row's weights must be 0"
            )
        if scores[torch.isfinite(scores)].abs().max() > 100:
            return (
                "exp(1000) overflows to inf, and inf / inf is NaN: subtract each "
                "row's largest logit, the sink's included, before exp"
            )
        return None

    return explain


@self_check
def check_sink_softmax(fn, seed=0):
    """Check fn(scores (heads, n_q, n_k), sinks (heads,)) -> weights (heads, n_q, n_k): for head h,
    exp(S_ts) / (exp(omega_i) + sum_s exp(S_ts)), the softmax with gpt-oss's learned sink in
    the denominator. A -inf score gets weight 0, a row of -inf scores all zeros.
    Chapter 17, exercise 1."""
    cases = list(_sink_cases(seed))
    for case, scores, sinks in cases:
        expected = _sink_reference(scores, sinks)
        got = run(fn, (scores.clone(), sinks.clone()), case, forbidden=(sink_module.sink_softmax,))
        if isinstance(got, torch.Tensor) and got.shape == (
            *scores.shape[:-1],
            scores.shape[-1] + 1,
        ):
            raise CheckFailed(
                f"case '{case}': your weights have shape "
                f"{tuple(got.shape)}, one column too many: drop the sink's "
                "column after the softmax (it takes weight but holds no "
                "value), keeping (heads, n_q, n_k)"
            )
        if (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and torch.isfinite(got).all()
        ):
            for wrong, hint in _sink_mistakes(scores, sinks):
                if torch.allclose(got.detach().double(), wrong, atol=1e-5) and not torch.allclose(
                    wrong, expected, atol=1e-5
                ):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "weights", atol=1e-5, explain_nan=_sink_nan_cause(scores))
    passed("your sink softmax", len(cases))


def _hybrid_cases(seed):
    """(case, layer_types, seq_len, window, num_kv_heads, head_dim, bytes_per_element)."""
    if not seed:
        # gpt-oss-120b's sizes (transformers' GptOssConfig): 36 layers, sliding and full
        # in turn, window 128, 8 KV heads of 64; Gemma 3's pattern: 5 sliding, 1 full
        gpt_oss, gemma = hybrid_layer_types(36, 2), hybrid_layer_types(34, 6)
        return [
            ("gpt-oss-like, 36 layers in turn, 4,096 tokens", gpt_oss, 4096, 128, 8, 64, 2),
            ("gpt-oss-like, 100 tokens, fewer than the window of 128", gpt_oss, 100, 128, 8, 64, 2),
            (
                "Gemma-3-like, 5 sliding : 1 full, 32,768 tokens, float32",
                gemma,
                32768,
                1024,
                4,
                256,
                4,
            ),
            ("Gemma-3-like, 600 tokens, window 1,024, 8-bit", gemma, 600, 1024, 4, 256, 1),
            ("3 full layers, window unused", ["full_attention"] * 3, 50, 16, 2, 8, 2),
        ]
    numbers = [
        integers(seed, 4, low, high, 260 + k)
        for k, (low, high) in enumerate([(2, 40), (2, 7), (8, 600), (1, 9), (1, 129)])
    ]
    cases = []
    for n, (layers, every, window, kv_heads, head_dim) in enumerate(zip(*numbers)):
        seq_len = window // 2 + 1 if n % 2 else 3 * window + n
        cases.append(
            (
                f"random case {n}: {layers} layers, 1 full in {every}, window "
                f"{window}, {seq_len} tokens",
                hybrid_layer_types(layers, every),
                seq_len,
                window,
                kv_heads,
                head_dim,
                [1, 2, 4][n % 3],
            )
        )
    return cases


def _hybrid_bytes(layer_types, seq_len, window, kv_heads, head_dim, size, held=None, per_token=2):
    """Bytes of the caches; held(seq_len, window) -> tokens of a sliding layer."""
    held = held or (lambda n, w: min(n, w))
    tokens = sum(
        seq_len if kind == "full_attention" else held(seq_len, window) for kind in layer_types
    )
    return per_token * kv_heads * head_dim * size * tokens


def _hybrid_mistakes(layer_types, seq_len, window, kv_heads, head_dim, size):
    """(what a typical wrong answer computes, why it is wrong)."""
    shape = (layer_types, seq_len, window, kv_heads, head_dim)
    swapped = [
        "full_attention" if kind == "sliding_attention" else "sliding_attention"
        for kind in layer_types
    ]
    return [
        (
            _hybrid_bytes(*shape, size, held=lambda n, w: n),
            "a sliding layer keeps only the last `window` tokens: min(seq_len, window)",
        ),
        (
            _hybrid_bytes(*shape, size, held=lambda n, w: w),
            "a sliding layer holds min(seq_len, window) tokens: before the window fills, "
            "only the seq_len tokens seen so far",
        ),
        (
            _hybrid_bytes(*shape, size, held=lambda n, w: min(n, w - 1)),
            "a window of W holds W tokens, the query's own among them (transformers: key "
            "s is kept while s > t - W), not W - 1",
        ),
        (
            _hybrid_bytes(*shape, size, per_token=1),
            "each token stores a key AND a value, of num_kv_heads * head_dim numbers each: "
            "a factor 2",
        ),
        (_hybrid_bytes(*shape, 1), "that counts numbers, not bytes: multiply by bytes_per_element"),
        (
            _hybrid_bytes(*shape, 2),
            "bytes_per_element is an argument (4 for float32, 1 for 8 bits): use it rather than 2",
        ),
        (
            _hybrid_bytes(swapped, *shape[1:], size),
            "a 'full_attention' layer keeps every token, a 'sliding_attention' one the "
            "last `window`: you swapped them",
        ),
    ]


@self_check
def check_hybrid_cache_bytes(fn, seed=0):
    """Check fn(layer_types, seq_len, window, num_kv_heads, head_dim, bytes_per_element=2)
    -> the bytes of one sequence's KV caches, all layers: a "full_attention" layer holds
    seq_len tokens, a "sliding_attention" one min(seq_len, window); each token a key and
    a value of num_kv_heads * head_dim numbers. Chapter 17, exercise 2."""
    cases = _hybrid_cases(seed)
    for case, *arguments in cases:
        layer_types, seq_len, window, kv_heads, head_dim, size = arguments
        expected = _hybrid_bytes(*arguments)
        got = run(
            fn,
            (list(layer_types), seq_len, window, kv_heads, head_dim, size),
            case,
            forbidden=(costs.hybrid_cache_bytes, costs.attention_costs),
        )
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise CheckFailed(
                f"case '{case}': your function returned {type(got).__name__}, "
                "expected a number of bytes"
            )
        if not abs(got - expected) <= 1e-9 * expected:  # NaN is not close either
            hints = [
                why
                for wrong, why in _hybrid_mistakes(*arguments)
                if abs(got - wrong) <= 1e-9 * wrong and wrong != expected
            ]
            raise CheckFailed(
                f"case '{case}': you say {got:,} bytes, expected {expected:,}"
                + "".join(f"{'; or ' if n else ': '}{hint}" for n, hint in enumerate(hints))
            )
    passed("your hybrid cache size", len(cases))


def _visible(n_queries, n_keys):
    """Bool (n_q, n_k): the n_q queries are the last n_q of n_k positions; query t sees the keys
    s <= t + S - L (plain causal when L == S)."""
    return torch.ones(n_queries, n_keys, dtype=torch.bool).tril(n_keys - n_queries)


def _top_k_loop(scores, k):
    """For each query, the k best-scoring keys among those it sees, by sorting."""
    n_queries, n_keys = scores.shape
    chosen = torch.zeros(n_queries, n_keys, dtype=torch.bool)
    for t in range(n_queries):
        seen = range(t + n_keys - n_queries + 1)
        chosen[t, sorted(seen, key=lambda s: -scores[t, s].item())[:k]] = True
    return chosen


def _top_k_cases(seed):
    """(case, index_scores (n_q, n_k), k), distinct scores."""
    sizes = [
        ("6 queries, 6 keys, k = 3", 6, 6, 3),
        ("4 new queries after 5 cached keys (L = 4, S = 9), k = 3", 4, 9, 3),
        ("1 query (decoding), 7 keys, k = 4", 1, 7, 4),
        ("5 queries, 5 keys, k = 1", 5, 5, 1),
        ("4 queries, 6 keys, k = 8: more than there are keys", 4, 6, 8),
    ]
    if seed:
        queries, extra = integers(seed, 5, 1, 9, 270), integers(seed, 5, 0, 6, 271)
        top = integers(seed, 5, 1, 10, 272)
        sizes = [
            (f"random case {n}: L = {q}, S = {q + e}, k = {k}", q, q + e, k)
            for n, (q, e, k) in enumerate(zip(queries, extra, top))
        ]
    return [(case, random((q, s), seed, 280 + n), k) for n, (case, q, s, k) in enumerate(sizes)]


def _scatter_top(scores, k, dim=-1):
    top = scores.topk(min(k, scores.shape[dim]), dim=dim).indices
    return torch.zeros(scores.shape, dtype=torch.bool).scatter(dim, top, True)


def _top_k_hint(got, scores, k, expected):
    """Why a wrong mask (n_q, n_k) is wrong, when it is a typical mistake; else None."""
    visible = _visible(*scores.shape)
    masked = scores.double().masked_fill(~visible, float("-inf"))
    if any(
        torch.equal(got, chosen)
        for chosen in (
            _scatter_top(masked, k, dim=0),
            _scatter_top(masked, k, dim=0) & visible,
            _scatter_top(scores, k, dim=0) & visible,
        )
    ):
        return (
            "you chose the k best queries of each key (dim 0): choose among the "
            "keys of each query, dim=-1"
        )
    top_left = torch.ones(scores.shape, dtype=torch.bool).tril()
    if scores.shape[0] < scores.shape[1] and torch.equal(
        got, _scatter_top(scores.double().masked_fill(~top_left, float("-inf")), k) & top_left
    ):
        return (
            "your causal mask is aligned top-left (tril() without an offset): "
            "the n_q queries are the last n_q of n_k positions, so query t sees keys "
            "s <= t + S - L, tril(S - L)"
        )
    if (got & ~visible).any():
        if torch.equal(got & visible, expected):
            return (
                "a query that sees fewer than k keys got masked (-inf) keys from "
                "torch.topk as well: keep only the keys it sees (& the causal mask), "
                "min(k, visible) of them"
            )
        return (
            "some queries chose keys in their future: a query may choose only keys "
            "it sees, s <= t + (S - L); set the others to -inf before torch.topk"
        )
    if torch.equal(got, _scatter_top(scores, k) & visible):
        return (
            "you masked the future after choosing, so future keys took some of the "
            "k places and early queries kept fewer than min(k, visible keys): mask "
            "before top-k"
        )
    return None


def _top_k_answer(got, case, shape):
    """The learner's mask, or CheckFailed saying what else it is."""
    if isinstance(got, tuple) and hasattr(got, "indices"):
        raise CheckFailed(
            f"case '{case}': you returned torch.topk's (values, indices); "
            "return a bool mask (n_q, n_k): torch.zeros(n_q, n_k, dtype=torch.bool)"
            ".scatter_(-1, indices, True)"
        )
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(
            f"case '{case}': your function returned {type(got).__name__}, "
            f"expected a bool tensor of shape {shape}"
        )
    if got.dtype != torch.bool:
        what = (
            "indices: scatter them into a bool mask, torch.zeros(n_q, n_k, dtype="
            "torch.bool).scatter_(-1, indices, True)"
            if got.shape != shape and not got.dtype.is_floating_point
            else "not bool: return True where a key is chosen (as a mask for "
            "scaled_dot_product_attention, where a float mask is added to the scores)"
        )
        raise CheckFailed(
            f"case '{case}': your answer is {got.dtype} of shape {tuple(got.shape)}, {what}"
        )
    if got.shape != shape:
        raise CheckFailed(
            f"case '{case}': your mask has shape {tuple(got.shape)}, expected {shape} = (n_q, n_k)"
        )
    return got.detach().cpu()


@self_check
def check_causal_top_k(fn, seed=0):
    """Check fn(index_scores (n_q, n_k), k) -> bool (n_q, n_k): True at the k highest-scoring keys
    among those each query sees (the n_q queries are the last n_q of n_k positions: query t sees
    keys s <= t + S - L), and at all of them where it sees fewer than k. Chapter 17, exercise 3."""
    cases = _top_k_cases(seed)
    for case, scores, k in cases:
        expected = _top_k_loop(scores, k)
        got = _top_k_answer(
            run(fn, (scores.clone(), k), case, forbidden=(sparse.top_k_mask,)),
            case,
            tuple(scores.shape),
        )
        if torch.equal(got, expected):
            continue
        hint = _top_k_hint(got, scores, k, expected)
        row = (got != expected).any(-1).nonzero()[0].item()
        chosen = got[row].nonzero().flatten().tolist()
        wanted = expected[row].nonzero().flatten().tolist()
        if hint is None and len(chosen) != len(wanted):
            hint = (
                f"query {row} sees {row + scores.shape[1] - scores.shape[0] + 1} keys, "
                f"so it keeps min(k, that) = {len(wanted)} of them, not {len(chosen)}"
            )
        raise CheckFailed(
            f"case '{case}': query {row} chose keys {chosen}, expected "
            f"{wanted}" + (f": {hint}" if hint else "")
        )
    passed("your causal top-k selection", len(cases))


def _index_step_reference(queries, eta, new_key, cached_keys):
    """float64 by loops: the keys held after the step (n + 1, d_I) and the index score
    I_s = sum_i eta_i ReLU(q_i . k_s / sqrt(d_I)) of each, (n + 1,)."""
    keys = torch.cat([cached_keys.double(), new_key.double()[None]])
    heads, dim = queries.shape
    scores = torch.zeros(keys.shape[0], dtype=torch.float64)
    for s in range(keys.shape[0]):
        for i in range(heads):
            dot = sum(queries[i, c].double() * keys[s, c] for c in range(dim))
            scores[s] += eta[i].double() * max(dot / dim**0.5, 0.0)
    return keys, scores


def _index_step_cases(seed):
    """(case, queries (H_I, d_I), eta (H_I,), new_key (d_I,), cached_keys (n, d_I), k)."""
    sizes = [
        ("4 heads of 8, 10 cached keys, k = 4", 4, 8, 10, 4),
        ("2 heads of 6, 3 cached keys, k = 5: every key chosen", 2, 6, 3, 5),
        ("an empty cache: the new token is the only key", 3, 4, 0, 2),
        ("1 head of 16, 20 cached keys, k = 1", 1, 16, 20, 1),
        ("8 heads of 4, 15 cached keys, k = 6", 8, 4, 15, 6),
    ]
    if seed:
        heads, dims = integers(seed, 5, 1, 9, 300), integers(seed, 5, 2, 17, 301)
        held, top = integers(seed, 5, 0, 21, 302), integers(seed, 5, 1, 9, 303)
        sizes = [
            (f"random case {n}: H_I = {h}, d_I = {d}, n = {s}, k = {k}", h, d, s, k)
            for n, (h, d, s, k) in enumerate(zip(heads, dims, held, top))
        ]
    for n, (case, heads, dim, held, k) in enumerate(sizes):
        yield (
            case,
            random((heads, dim), seed, 310 + 4 * n),
            random((heads,), seed, 311 + 4 * n),
            random((dim,), seed, 312 + 4 * n),
            random((held, dim), seed, 313 + 4 * n),
            k,
        )


def _index_step_hint(chosen, queries, eta, keys, k):
    """Why a wrong selection (n + 1,) is wrong, when it is a typical mistake; else None.
    The mistakes are tried in this fixed order, the most specific first."""
    dots = queries.double() @ keys.T / queries.shape[1] ** 0.5  # (H_I, n + 1)
    eta = eta.double()
    kept = min(k, keys.shape[0])
    right = eta @ dots.relu()  # I_s: (n + 1,)
    cached_only = right.clone()
    cached_only[-1] = -torch.inf  # the new token's own key never chosen
    for scores, hint in (
        (
            cached_only,
            "you chose among the cached keys only: score the new token's own key too "
            "(its query may choose itself)",
        ),
        (
            (eta[:, None] * dots).relu().sum(0),
            "you applied the ReLU after weighting by eta_i: where eta_i is negative, "
            "the head can then no longer vote against a key; apply the ReLU to each "
            "head's score, before weighting by eta_i and summing",
        ),
        (
            eta @ dots,
            "you summed eta_i (q_i . k_s) without the ReLU: apply the ReLU to each head's "
            "score, before weighting by eta_i and summing",
        ),
        (
            dots.relu().sum(0),
            "your heads all count 1"
            + (
                " (or are weighted by softmax(eta), which chooses the same keys here)"
                if torch.equal(
                    _top(dots.relu().sum(0), kept), _top(eta.softmax(0) @ dots.relu(), kept)
                )
                else ""
            )
            + ": weight head i's ReLU by its eta_i (which may be negative)",
        ),
        (
            eta.softmax(0) @ dots.relu(),
            "you weighted the heads by softmax(eta): the indexer weights head i's ReLU by "
            "eta_i as it is, a weight that may be negative, not a distribution",
        ),
        (-right, "you chose the lowest scores: keep the k largest"),
    ):
        if torch.equal(chosen, _top(scores, kept)):
            return hint
    return None


def _top(scores, kept):
    """True at the `kept` largest scores (n + 1,)."""
    top = torch.zeros(scores.shape[0], dtype=torch.bool)
    top[scores.topk(kept).indices] = True
    return top


@self_check
def check_index_decode_step(fn, seed=0):
    """Check fn(queries (H_I, d_I), eta (H_I,), new_key (d_I,), cached_keys (n, d_I), k) ->
    (keys (n + 1, d_I), chosen (n + 1,) bool): the indexer's keys with the new token's
    appended, and True at the min(k, n + 1) keys of largest I_s = sum_i eta_i ReLU(q_i . k_s /
    sqrt(d_I)); a tie at the k-th place may be broken either way. Chapter 17, exercise 5."""
    cases = list(_index_step_cases(seed))
    for case, queries, eta, new_key, cached_keys, k in cases:
        expected_keys, scores = _index_step_reference(queries, eta, new_key, cached_keys)
        got = run(
            fn,
            (queries.clone(), eta.clone(), new_key.clone(), cached_keys.clone(), k),
            case,
            forbidden=(sparse.top_k_mask,),
        )
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(
                f"case '{case}': your function returned {type(got).__name__}, expected "
                "a pair (keys (n + 1, d_I), chosen (n + 1,) bool)"
            )
        keys, chosen = got
        if isinstance(keys, torch.Tensor) and keys.shape == cached_keys.shape:
            raise CheckFailed(
                f"case '{case}': your keys have shape {tuple(keys.shape)}, the cache's: "
                "append new_key as the last row before scoring (the new token is a key "
                "its own query may choose)"
            )
        if (
            isinstance(keys, torch.Tensor)
            and keys.shape == expected_keys.shape
            and cached_keys.shape[0]
            and torch.allclose(keys[0].double(), new_key.double())
        ):
            raise CheckFailed(
                f"case '{case}': your first key is the new token's: append it as the "
                "last row, at position n, after the cached keys"
            )
        compare(keys, expected_keys, case, "keys", atol=1e-6)
        length = expected_keys.shape[0]
        if not isinstance(chosen, torch.Tensor) or chosen.dtype != torch.bool:
            raise CheckFailed(
                f"case '{case}': your chosen is not a bool tensor: return True at the "
                "keys chosen, a mask of shape (n + 1,)"
            )
        if chosen.shape != (length,):
            hint = (
                ": the new token's own key is scored too" if chosen.shape == (length - 1,) else ""
            )
            raise CheckFailed(
                f"case '{case}': your chosen has shape {tuple(chosen.shape)}, expected "
                f"({length},) = (n + 1,){hint}"
            )
        chosen = chosen.detach().cpu()
        kept = min(k, length)
        if int(chosen.sum()) != kept:
            raise CheckFailed(
                f"case '{case}': you chose {int(chosen.sum())} keys, expected min(k, n + 1)"
                f" = {kept}"
            )
        best = scores.sort(descending=True).values[:kept]
        if torch.allclose(scores[chosen].sort(descending=True).values, best, atol=1e-9):
            continue
        hint = _index_step_hint(chosen, queries, eta, expected_keys, k)
        raise CheckFailed(
            f"case '{case}': you chose keys {chosen.nonzero().flatten().tolist()}, expected "
            f"{scores.topk(kept).indices.sort().values.tolist()} (the largest I_{{t,s}})"
            + (f": {hint}" if hint else "")
        )
    passed("your indexer's decoding step", len(cases))
