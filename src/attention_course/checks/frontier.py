"""Checks of Part V (chapter 15 on): multi-head latent attention's absorbed query and cache;
linear attention and the gated delta rule; learned sinks, hybrid caches and sparse top-k."""

import torch

from .. import costs, latent, linear, multihead, sparse
from .. import sinks as sink_module
from .core import CheckFailed, compare, integers, passed, random, run, self_check


def _absorbed_by_heads(q_content, k_up_weight):
    """float64 q_i W_UK^(i) for every head i: (H, L, d_h), (H * d_h, d_c) -> (H, L, d_c)."""
    heads, _, head_dim = q_content.shape
    blocks = k_up_weight.double().reshape(heads, head_dim, -1)      # W_UK^(i): (d_h, d_c)
    return q_content.double() @ blocks


def _absorb_cases(seed):
    """(case, heads, queries, head_dim, kv_rank); the square one (head_dim == kv_rank) lets a
    transposed block keep the right shape."""
    cases = [("1 head, 3 queries, head_dim 4, kv_rank 6", 1, 3, 4, 6),
             ("4 heads, 5 queries, head_dim 3, kv_rank 8", 4, 5, 3, 8),
             ("2 heads, 1 query, head_dim 5 = kv_rank 5", 2, 1, 5, 5),
             ("3 heads, 2 queries, head_dim 6, kv_rank 2", 3, 2, 6, 2)]
    if seed:
        sizes = zip(*(integers(seed, 4, 1, 7, 150 + k) for k in range(4)))
        cases = [(f"random case {n}: {h} heads, {q} queries, head_dim {d}, kv_rank {c}",
                  h, q, d, c) for n, (h, q, d, c) in enumerate(sizes)]
        cases.append(("random square case", 2, 3, 4, 4))
    return cases


def _absorb_mistakes(q_content, k_up_weight):
    """(what a typical wrong answer computes, why it is wrong)."""
    heads, _, head_dim = q_content.shape
    kv_rank = k_up_weight.shape[1]
    weight = k_up_weight.double()
    q = q_content.double()
    mistakes = []
    if head_dim == kv_rank:     # a transposed block keeps its shape: name this first
        mistakes.append((q @ weight.reshape(heads, head_dim, kv_rank).transpose(1, 2),
                         "you multiplied by each head's block transposed: the score is "
                         "q_i . (W_UK^(i) c), so the absorbed query is q_i W_UK^(i), the row "
                         "vector q_i times the (head_dim, kv_rank) block"))
    mistakes += [
        (q @ weight.reshape(head_dim, heads, kv_rank).transpose(0, 1),
         "the rows of head i are rows i * head_dim to (i + 1) * head_dim - 1 of k_up_weight "
         "(each head's block is consecutive, as split_heads lays out the keys): reshape to "
         "(num_heads, head_dim, kv_rank)"),
        (q @ weight.reshape(heads, kv_rank, head_dim).transpose(1, 2),
         "nn.Linear stores W_UK as (out, in) = (num_heads * head_dim, kv_rank), so each "
         "head's block is (head_dim, kv_rank); you cut it as (kv_rank, head_dim)")]
    return mistakes


@self_check
def check_absorbed_query(fn, seed=0):
    """Check fn(q_content (num_heads, L, head_dim), k_up_weight (num_heads * head_dim,
    kv_rank)) -> the absorbed queries (num_heads, L, kv_rank): for each head i, q_i W_UK^(i),
    whose dot product with a latent c equals q_i's with head i's key W_UK^(i) c."""
    cases = _absorb_cases(seed)
    for number, (case, heads, queries, head_dim, kv_rank) in enumerate(cases):
        q_content = random((heads, queries, head_dim), seed, 160 + number)
        k_up_weight = random((heads * head_dim, kv_rank), seed, 170 + number)
        expected = _absorbed_by_heads(q_content, k_up_weight)
        got = run(fn, (q_content, k_up_weight), case)
        if isinstance(got, torch.Tensor) and got.shape == (queries, kv_rank):
            raise CheckFailed(f"case '{case}': your answer has shape {tuple(got.shape)}: one "
                              "absorbed query per head is needed, (num_heads, L, kv_rank); a "
                              "sum over the heads mixes their scores")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for wrong, hint in _absorb_mistakes(q_content, k_up_weight):
                if (torch.allclose(got.detach().double(), wrong, atol=1e-5)
                        and not torch.allclose(wrong, expected, atol=1e-5)):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "absorbed queries", atol=1e-5)
        latents = random((7, kv_rank), seed, 180 + number).double()   # (S, d_c)
        keys = (latents @ k_up_weight.double().T).reshape(7, heads, head_dim)
        scores = torch.einsum("hld,shd->hls", q_content.double(), keys)
        if not torch.allclose(got.detach().double() @ latents.T, scores, atol=1e-5):
            raise CheckFailed(f"case '{case}': your absorbed queries do not reproduce the "
                              "scores q_i . (W_UK^(i) c) on latents c")
    passed("your absorbed queries", len(cases))


_REAL_CONFIGS = {
    # attention fields of the published config.json files
    "DeepSeek-V3": dict(num_hidden_layers=61, num_attention_heads=128, kv_lora_rank=512,
                        qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    "DeepSeek-V2": dict(num_hidden_layers=60, num_attention_heads=128, kv_lora_rank=512,
                        qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    "DeepSeek-V2-Lite": dict(num_hidden_layers=27, num_attention_heads=16, kv_lora_rank=512,
                             qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
}


def _cache_cases(seed):
    """(case, config, seq_len, bytes_per_element)."""
    if not seed:
        return [("DeepSeek-V3, 1 token, bfloat16", _REAL_CONFIGS["DeepSeek-V3"], 1, 2),
                ("DeepSeek-V2, 4,096 tokens, 6 bits = 0.75 bytes", _REAL_CONFIGS["DeepSeek-V2"],
                 4096, 0.75),
                ("DeepSeek-V2-Lite, 1,000 tokens, float32", _REAL_CONFIGS["DeepSeek-V2-Lite"],
                 1000, 4)]
    numbers = [integers(seed, 4, 1, 200, 190 + k) for k in range(7)]
    cases = []
    for n, (layers, heads, rank, half_rope, nope, value, tokens) in enumerate(zip(*numbers)):
        config = dict(num_hidden_layers=layers, num_attention_heads=heads, kv_lora_rank=rank,
                      qk_rope_head_dim=2 * half_rope, qk_nope_head_dim=nope, v_head_dim=value)
        cases.append((f"random config {n}, {tokens} tokens", config, tokens, [1, 2, 4][n % 3]))
    return cases


def _cache_mistakes(config, seq_len, size):
    """(what a typical wrong answer computes, why it is wrong)."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    rank, rope = config["kv_lora_rank"], config["qk_rope_head_dim"]
    nope, value = config["qk_nope_head_dim"], config["v_head_dim"]
    right = layers * (rank + rope) * seq_len * size
    return [
        (2 * right, "MLA caches one latent and one RoPE key per token, not a key and a value "
                    "of that size: no factor 2"),
        (layers * rank * seq_len * size, "the decoupled RoPE key (qk_rope_head_dim numbers "
                                         "per token) is cached too"),
        (heads * right, "the latent and the RoPE key are shared by all heads: the number of "
                        "heads does not appear"),
        ((rank + rope) * seq_len * size, "every layer has a cache of its own: multiply by "
                                         "num_hidden_layers"),
        (layers * heads * (nope + rope + value) * seq_len * size,
         "that is every head's key and value: what the explicit path computes, and what "
         "multi-head attention would cache, not what MLA stores"),
    ]


@self_check
def check_latent_cache_bytes(fn, seed=0):
    """Check fn(config, seq_len, bytes_per_element) -> the bytes of one sequence's MLA cache,
    all layers, for a config dict with transformers' field names (num_hidden_layers,
    kv_lora_rank, qk_rope_head_dim, and others that do not matter)."""
    cases = _cache_cases(seed)
    for case, config, seq_len, size in cases:
        expected = (config["num_hidden_layers"] * (config["kv_lora_rank"]
                    + config["qk_rope_head_dim"]) * seq_len * size)
        got = run(fn, (dict(config), seq_len, size), case,
                  forbidden=(latent.latent_cache_bytes, multihead.kv_cache_bytes))
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise CheckFailed(f"case '{case}': your function returned {type(got).__name__}, "
                              "expected a number of bytes")
        if abs(got - expected) > 1e-6 * expected:
            hint = next((why for wrong, why in _cache_mistakes(config, seq_len, size)
                         if abs(got - wrong) <= 1e-6 * wrong and wrong != expected), None)
            raise CheckFailed(f"case '{case}': you say {got:,} bytes, expected {expected:,}"
                              + (f": {hint}" if hint else ""))
    passed("your latent-cache size", len(cases))


# ------------------------------------------------------------------ chapter 16: linear attention


def _recurrence_reference(phi_q, phi_k, values, causal_offset=0, normalize=True):
    """float64 causal linear attention by a double loop: output t reads keys j <= t
    (j < t with causal_offset 1), weights phi_q[t] . phi_k[j], divided by their sum."""
    phi_q, phi_k, values = phi_q.double(), phi_k.double(), values.double()
    output = torch.zeros(len(phi_q), values.shape[1], dtype=torch.float64)
    for t in range(len(phi_q)):
        weights = [phi_q[t] @ phi_k[j] for j in range(t + 1 - causal_offset)]
        total = sum(weights, torch.tensor(0.0, dtype=torch.float64))
        numerator = sum((w * values[j] for j, w in enumerate(weights)),
                        torch.zeros(values.shape[1], dtype=torch.float64))
        output[t] = numerator / total if normalize else numerator
    return output


def _recurrence_cases(seed):
    """(case, phi_q (n, f), phi_k (n, f), values (n, d_v)), positive features."""
    sizes = [("1 token, 3 features, d_v 2", 1, 3, 2),
             ("6 tokens, 4 features, d_v 3", 6, 4, 3),
             ("10 tokens, 2 features, d_v 5", 10, 2, 5),
             ("9 tokens, 8 features, d_v 1", 9, 8, 1)]
    if seed:
        numbers = zip(*(integers(seed, 4, 1, 12, 200 + k) for k in range(3)))
        sizes = [(f"random case {m}: {n} tokens, {f} features, d_v {v}", n, f, v)
                 for m, (n, f, v) in enumerate(numbers)]
    for number, (case, n, f, d_v) in enumerate(sizes):
        phi_q, phi_k = (torch.nn.functional.elu(random((n, f), seed, 210 + 3 * number + j)) + 1
                        for j in range(2))
        yield case, phi_q, phi_k, random((n, d_v), seed, 212 + 3 * number)


def _recurrence_mistakes(phi_q, phi_k, values):
    """(what a typical wrong answer computes, why it is wrong)."""
    every_key = phi_q.double() @ phi_k.double().T
    mistakes = [
        (_recurrence_reference(phi_q, phi_k, values, normalize=False),
         "your outputs are not normalised: divide S_t^T phi(q_t) by phi(q_t) . z_t, where "
         "z_t = phi(k_1) + ... + phi(k_t) is the second part of the state"),
        ((every_key / every_key.sum(1, keepdim=True)) @ values.double(),
         "every query reads every key: the recurrence must give token t only the keys "
         "j <= t, reading the state right after adding token t"),
        (torch.cumsum(values.double(), 0) / torch.arange(1, len(values) + 1)[:, None],
         "that is the running mean of the values: the weights phi(q_t) . phi(k_j) are "
         "missing"),
    ]
    if len(values) > 1:
        shifted = _recurrence_reference(phi_q, phi_k, values, causal_offset=1)[1:]
        mistakes.append((torch.cat([values[:1].double(), shifted]),
                         "token t must read its own key and value too: add token t to the "
                         "state before reading it"))
    return mistakes


@self_check
def check_linear_recurrence(fn, seed=0):
    """Check fn(phi_q (n, f), phi_k (n, f), values (n, d_v)) -> (n, d_v): causal linear
    attention, output t = sum_(j <= t) (phi_q[t] . phi_k[j]) values[j] divided by
    sum_(j <= t) phi_q[t] . phi_k[j], computed with the recurrence."""
    cases = list(_recurrence_cases(seed))
    for case, phi_q, phi_k, values in cases:
        expected = _recurrence_reference(phi_q, phi_k, values)
        got = run(fn, (phi_q.clone(), phi_k.clone(), values.clone()), case,
                  forbidden=(linear.linear_attention,))
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for wrong, hint in _recurrence_mistakes(phi_q, phi_k, values):
                if (torch.allclose(got.detach().double(), wrong, atol=1e-5)
                        and not torch.allclose(wrong, expected, atol=1e-5)):
                    raise CheckFailed(f"case '{case}': {hint}")

        def explain(index):
            if index[0] == 0:
                return ("the first token's weight sum is 0: did you read the state before "
                        "adding token 0 to it? Then 0 / 0 is NaN")
            return None
        compare(got, expected, case, "outputs", atol=1e-5, explain_nan=explain)
    passed("your causal linear-attention recurrence", len(cases))


def _delta_step_reference(state, key, value, beta, gamma, mistake=None):
    """float64 gated delta-rule step on a (d_k, d_v) state, or a typical mistake."""
    state, key, value = state.double(), key.double(), value.double()
    decayed = gamma * state
    if mistake == "decay after":
        return gamma * (state + beta * torch.outer(key, value - state.T @ key))
    if mistake == "undecayed prediction":
        return decayed + beta * torch.outer(key, value - state.T @ key)
    if mistake == "no correction":
        return decayed + beta * torch.outer(key, value)
    if mistake == "sign":
        return decayed + beta * torch.outer(key, value + decayed.T @ key)
    if mistake == "transposed read":            # a shape error unless d_k == d_v
        if state.shape[0] != state.shape[1]:
            return None
        return decayed + beta * torch.outer(key, value - decayed @ key)
    return decayed + beta * torch.outer(key, value - decayed.T @ key)


_DELTA_MISTAKES = (
    ("decay after", "you decayed after writing: the rule lets the old state fade first, "
                    "S' = gamma S, then predicts with S' and writes the correction undecayed"),
    ("undecayed prediction", "predict the value with the decayed state, (gamma S)^T k: the "
                             "correction is beta (v - (gamma S)^T k)"),
    ("no correction", "that writes beta k v^T, linear attention's update: the delta rule "
                      "writes the error, beta k (v - S'^T k)^T, with S' = gamma S"),
    ("sign", "the error is v minus the prediction, v - S'^T k, not v + S'^T k"),
    ("transposed read", "the state is (d_k, d_v): its prediction for a key k is S^T k "
                        "(k @ S in code), a vector of size d_v"),
)


def _delta_step_cases(seed):
    """(case, state (d_k, d_v), key (d_k,), value (d_v,), beta, gamma)."""
    sizes = [("d_k 4, d_v 3, beta 0.5, gamma 0.9", 4, 3, 0.5, 0.9),
             ("d_k 3 = d_v 3, beta 0.8, gamma 0.7", 3, 3, 0.8, 0.7),
             ("no decay (gamma 1), beta 1", 5, 2, 1.0, 1.0),
             ("beta 0: nothing written", 2, 4, 0.0, 0.6),
             ("d_k 6 = d_v 6, beta 0.3, gamma 0.95", 6, 6, 0.3, 0.95)]
    if seed:
        dims = zip(*(integers(seed, 4, 1, 9, 220 + k) for k in range(2)))
        gates = random((4, 2), seed, 222).sigmoid().tolist()
        sizes = [(f"random case {m}: d_k {k}, d_v {v}", k, v, round(b, 3), round(g, 3))
                 for m, ((k, v), (b, g)) in enumerate(zip(dims, gates))]
        sizes.append(("random square case", 4, 4, 0.7, 0.8))
    for number, (case, d_k, d_v, beta, gamma) in enumerate(sizes):
        state = random((d_k, d_v), seed, 230 + 3 * number)
        key = torch.nn.functional.normalize(random((d_k,), seed, 231 + 3 * number), dim=0)
        yield case, state, key, random((d_v,), seed, 232 + 3 * number), beta, gamma


@self_check
def check_gated_delta_step(fn, seed=0):
    """Check fn(state (d_k, d_v), key (d_k,), value (d_v,), beta, gamma) -> the new state
    (d_k, d_v) after one step of the gated delta rule: S' = gamma S, then
    S' + beta k (v - S'^T k)^T. beta and gamma are Python floats."""
    cases = list(_delta_step_cases(seed))
    for case, state, key, value, beta, gamma in cases:
        expected = _delta_step_reference(state, key, value, beta, gamma)
        got = run(fn, (state.clone(), key.clone(), value.clone(), beta, gamma), case,
                  forbidden=(linear.delta_rule,))
        if isinstance(got, torch.Tensor) and got.shape == expected.shape[::-1] != \
                expected.shape:
            raise CheckFailed(f"case '{case}': your state has shape {tuple(got.shape)}, "
                              f"expected {tuple(expected.shape)} = (d_k, d_v): write "
                              "k u^T (torch.outer(key, u)), not u k^T")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for mistake, hint in _DELTA_MISTAKES:
                wrong = _delta_step_reference(state, key, value, beta, gamma, mistake)
                if wrong is not None and (torch.allclose(got.detach().double(), wrong, atol=1e-5)
                        and not torch.allclose(wrong, expected, atol=1e-5)):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "new state", atol=1e-5)
    passed("your gated delta-rule step", len(cases))


# ------------------------------------------------- chapter 17: sinks, hybrids, sparse top-k


def _sink_reference(scores, sinks):
    """float64 sink softmax by its definition: the softmax over the keys and one more
    logit, the head's sink, whose column is then dropped."""
    scores = scores.double()
    column = sinks.double()[:, None, None].expand(*scores.shape[:-1], 1)  # (H, L, 1)
    return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]


def _sink_cases(seed):
    """(case, scores (H, L, S), sinks (H,)); the first has H == L, where sinks broadcast
    over the queries instead of the heads still give the right shape."""
    sizes = [(3, 3, 5), (2, 4, 6), (2, 3, 4), (2, 3, 4), (3, 2, 5)]
    if seed:
        heads, keys = integers(seed, 5, 2, 6, 240), integers(seed, 5, 2, 9, 241)
        queries = [heads[0]] + integers(seed, 4, 1, 7, 242)
        sizes = list(zip(heads, queries, keys))
    names = ["heads = queries", "random", "scores and sinks around 1000",
             "a row of -inf scores (fully masked)", "sinks of -1e4: a plain softmax"]
    for number, (name, (heads, queries, keys)) in enumerate(zip(names, sizes)):
        scores = random((heads, queries, keys), seed, 250 + 2 * number)
        sinks = random((heads,), seed, 251 + 2 * number)
        if number == 2:
            scores, sinks = 1000 * scores, 1000 * sinks
        if number == 3:
            scores[-1, -1] = float("-inf")                # the last head's last query
            scores[0, 0, -1] = float("-inf")              # and one masked key
        if number == 4:
            sinks = torch.full((heads,), -1e4)
        yield f"{name}: {heads} heads, {queries} queries, {keys} keys", scores, sinks


def _sink_mistakes(scores, sinks):
    """(what a typical wrong answer computes, why it is wrong)."""
    scores, sinks = scores.double(), sinks.double()
    heads, queries, _ = scores.shape
    mistakes = [(torch.softmax(scores, dim=-1),
                 "your rows sum to 1, a plain softmax: the sink's exp(omega_h) joins each "
                 "row's denominator, so a row sums to less than 1")]
    if heads == queries:
        per_query = sinks[None, :, None].expand(heads, queries, 1)       # omega_t, not omega_h
        wrong = torch.softmax(torch.cat([scores, per_query], -1), -1)[..., :-1]
        mistakes.append((wrong, "query t got the sink of head t: sinks (heads,) must "
                                "line up with the heads axis, sinks[:, None, None] "
                                "beside scores (heads, L, S), or sinks[:, None] beside "
                                "the row sums (heads, L)"))
    return mistakes


def _sink_nan_cause(scores):
    """explain_nan for compare: what made a NaN at an index of the weights."""
    def explain(index):
        if torch.isneginf(scores[index[0], index[1]]).all():
            return ("every score of that row is -inf, so its largest score is -inf and "
                    "-inf - (-inf) is NaN: subtract the largest of the scores AND the "
                    "sink, which is finite; the row's weights must be 0")
        if scores[torch.isfinite(scores)].abs().max() > 100:
            return ("exp(1000) overflows to inf, and inf / inf is NaN: subtract each "
                    "row's largest logit, the sink's included, before exp")
        return None
    return explain


@self_check
def check_sink_softmax(fn, seed=0):
    """Check fn(scores (heads, L, S), sinks (heads,)) -> weights (heads, L, S): for head h,
    exp(z_ts) / (exp(omega_h) + sum_s exp(z_ts)), the softmax with gpt-oss's learned sink in
    the denominator. A -inf score gets weight 0, a row of -inf scores all zeros."""
    cases = list(_sink_cases(seed))
    for case, scores, sinks in cases:
        expected = _sink_reference(scores, sinks)
        got = run(fn, (scores.clone(), sinks.clone()), case,
                  forbidden=(sink_module.sink_softmax,))
        if isinstance(got, torch.Tensor) and got.shape == (*scores.shape[:-1],
                                                           scores.shape[-1] + 1):
            raise CheckFailed(f"case '{case}': your weights have shape "
                              f"{tuple(got.shape)}, one column too many: drop the sink's "
                              "column after the softmax (it takes weight but holds no "
                              "value), keeping (heads, L, S)")
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape
                and torch.isfinite(got).all()):
            for wrong, hint in _sink_mistakes(scores, sinks):
                if (torch.allclose(got.detach().double(), wrong, atol=1e-5)
                        and not torch.allclose(wrong, expected, atol=1e-5)):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "weights", atol=1e-5,
                explain_nan=_sink_nan_cause(scores))
    passed("your sink softmax", len(cases))


def _layers(n_layers, every):
    """transformers' layer_types: each `every`-th layer full, the others sliding."""
    return ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
            for i in range(n_layers)]


def _hybrid_cases(seed):
    """(case, layer_types, seq_len, window, num_kv_heads, head_dim, bytes_per_element)."""
    if not seed:
        # gpt-oss-120b's sizes (transformers' GptOssConfig): 36 layers, sliding and full
        # in turn, window 128, 8 KV heads of 64; Gemma 3's pattern: 5 sliding, 1 full
        gpt_oss, gemma = _layers(36, 2), _layers(34, 6)
        return [("gpt-oss-like, 36 layers in turn, 4,096 tokens", gpt_oss, 4096, 128, 8,
                 64, 2),
                ("gpt-oss-like, 100 tokens, fewer than the window of 128", gpt_oss, 100,
                 128, 8, 64, 2),
                ("Gemma-3-like, 5 sliding : 1 full, 32,768 tokens, float32", gemma, 32768,
                 1024, 4, 256, 4),
                ("Gemma-3-like, 600 tokens, window 1,024, 8-bit", gemma, 600, 1024, 4, 256,
                 1),
                ("3 full layers, window unused", ["full_attention"] * 3, 50, 16, 2, 8, 2)]
    numbers = [integers(seed, 4, low, high, 260 + k)
               for k, (low, high) in enumerate([(2, 40), (2, 7), (8, 600), (1, 9),
                                                (1, 129)])]
    cases = []
    for n, (layers, every, window, kv_heads, head_dim) in enumerate(zip(*numbers)):
        seq_len = window // 2 + 1 if n % 2 else 3 * window + n
        cases.append((f"random case {n}: {layers} layers, 1 full in {every}, window "
                      f"{window}, {seq_len} tokens", _layers(layers, every), seq_len,
                      window, kv_heads, head_dim, [1, 2, 4][n % 3]))
    return cases


def _hybrid_bytes(layer_types, seq_len, window, kv_heads, head_dim, size, held=None,
                  per_token=2):
    """Bytes of the caches; held(seq_len, window) -> tokens of a sliding layer."""
    held = held or (lambda n, w: min(n, w))
    tokens = sum(seq_len if kind == "full_attention" else held(seq_len, window)
                 for kind in layer_types)
    return per_token * kv_heads * head_dim * size * tokens


def _hybrid_mistakes(layer_types, seq_len, window, kv_heads, head_dim, size):
    """(what a typical wrong answer computes, why it is wrong)."""
    shape = (layer_types, seq_len, window, kv_heads, head_dim)
    swapped = ["full_attention" if kind == "sliding_attention" else "sliding_attention"
               for kind in layer_types]
    return [
        (_hybrid_bytes(*shape, size, held=lambda n, w: n),
         "a sliding layer keeps only the last `window` tokens: min(seq_len, window)"),
        (_hybrid_bytes(*shape, size, held=lambda n, w: w),
         "a sliding layer holds min(seq_len, window) tokens: before the window fills, "
         "only the seq_len tokens seen so far"),
        (_hybrid_bytes(*shape, size, held=lambda n, w: min(n, w - 1)),
         "a window of W holds W tokens, the query's own among them (transformers: key "
         "s is kept while s > t - W), not W - 1"),
        (_hybrid_bytes(*shape, size, per_token=1),
         "each token stores a key AND a value, of num_kv_heads * head_dim numbers each: "
         "a factor 2"),
        (_hybrid_bytes(*shape, 1),
         "that counts numbers, not bytes: multiply by bytes_per_element"),
        (_hybrid_bytes(*shape, 2),
         "bytes_per_element is an argument (4 for float32, 1 for 8 bits): use it "
         "rather than 2"),
        (_hybrid_bytes(swapped, *shape[1:], size),
         "a 'full_attention' layer keeps every token, a 'sliding_attention' one the "
         "last `window`: you swapped them"),
    ]


@self_check
def check_hybrid_cache_bytes(fn, seed=0):
    """Check fn(layer_types, seq_len, window, num_kv_heads, head_dim, bytes_per_element=2)
    -> the bytes of one sequence's KV caches, all layers: a "full_attention" layer holds
    seq_len tokens, a "sliding_attention" one min(seq_len, window); each token a key and
    a value of num_kv_heads * head_dim numbers."""
    cases = _hybrid_cases(seed)
    for case, *arguments in cases:
        layer_types, seq_len, window, kv_heads, head_dim, size = arguments
        expected = _hybrid_bytes(*arguments)
        got = run(fn, (list(layer_types), seq_len, window, kv_heads, head_dim, size), case,
                  forbidden=(costs.hybrid_cache_bytes, costs.attention_costs))
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise CheckFailed(f"case '{case}': your function returned {type(got).__name__}, "
                              "expected a number of bytes")
        if not abs(got - expected) <= 1e-9 * expected:       # NaN is not close either
            hints = [why for wrong, why in _hybrid_mistakes(*arguments)
                     if abs(got - wrong) <= 1e-9 * wrong and wrong != expected]
            raise CheckFailed(f"case '{case}': you say {got:,} bytes, expected {expected:,}"
                              + "".join(f"{'; or ' if n else ': '}{hint}"
                                        for n, hint in enumerate(hints)))
    passed("your hybrid cache size", len(cases))


def _visible(n_queries, n_keys):
    """Bool (L, S): the L queries are the last L of S positions; query t sees the keys
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
    """(case, index_scores (L, S), k), distinct scores."""
    sizes = [("6 queries, 6 keys, k = 3", 6, 6, 3),
             ("4 new queries after 5 cached keys (L = 4, S = 9), k = 3", 4, 9, 3),
             ("1 query (decoding), 7 keys, k = 4", 1, 7, 4),
             ("5 queries, 5 keys, k = 1", 5, 5, 1),
             ("4 queries, 6 keys, k = 8: more than there are keys", 4, 6, 8)]
    if seed:
        queries, extra = integers(seed, 5, 1, 9, 270), integers(seed, 5, 0, 6, 271)
        top = integers(seed, 5, 1, 10, 272)
        sizes = [(f"random case {n}: L = {q}, S = {q + e}, k = {k}", q, q + e, k)
                 for n, (q, e, k) in enumerate(zip(queries, extra, top))]
    return [(case, random((q, s), seed, 280 + n), k)
            for n, (case, q, s, k) in enumerate(sizes)]


def _scatter_top(scores, k, dim=-1):
    top = scores.topk(min(k, scores.shape[dim]), dim=dim).indices
    return torch.zeros(scores.shape, dtype=torch.bool).scatter(dim, top, True)


def _top_k_hint(got, scores, k, expected):
    """Why a wrong mask (L, S) is wrong, when it is a typical mistake; else None."""
    visible = _visible(*scores.shape)
    masked = scores.double().masked_fill(~visible, float("-inf"))
    if any(torch.equal(got, chosen) for chosen in (
            _scatter_top(masked, k, dim=0), _scatter_top(masked, k, dim=0) & visible,
            _scatter_top(scores, k, dim=0) & visible)):
        return ("you chose the k best queries of each key (dim 0): choose among the "
                "keys of each query, dim=-1")
    if (got & ~visible).any():
        if torch.equal(got & visible, expected):
            return ("a query that sees fewer than k keys got masked (-inf) keys from "
                    "torch.topk as well: keep only the keys it sees (& the causal mask), "
                    "min(k, visible) of them")
        return ("some queries chose keys in their future: a query may choose only keys "
                "it sees, s <= t + (S - L); set the others to -inf before torch.topk")
    if torch.equal(got, _scatter_top(scores, k) & visible):
        return ("you masked the future after choosing, so future keys took some of the "
                "k places and early queries kept fewer than min(k, visible keys): mask "
                "before top-k")
    return None


def _top_k_answer(got, case, shape):
    """The learner's mask, or CheckFailed saying what else it is."""
    if isinstance(got, tuple) and hasattr(got, "indices"):
        raise CheckFailed(f"case '{case}': you returned torch.topk's (values, indices); "
                          "return a bool mask (L, S): torch.zeros(L, S, dtype=torch.bool)"
                          ".scatter_(-1, indices, True)")
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"case '{case}': your function returned {type(got).__name__}, "
                          f"expected a bool tensor of shape {shape}")
    if got.dtype != torch.bool:
        what = ("indices: scatter them into a bool mask, torch.zeros(L, S, dtype="
                "torch.bool).scatter_(-1, indices, True)" if got.shape != shape
                and not got.dtype.is_floating_point else
                "not bool: return True where a key is chosen (as a mask for "
                "scaled_dot_product_attention, where a float mask is added to the scores)")
        raise CheckFailed(f"case '{case}': your answer is {got.dtype} of shape "
                          f"{tuple(got.shape)}, {what}")
    if got.shape != shape:
        raise CheckFailed(f"case '{case}': your mask has shape {tuple(got.shape)}, expected "
                          f"{shape} = (L, S)")
    return got.detach().cpu()


@self_check
def check_causal_top_k(fn, seed=0):
    """Check fn(index_scores (L, S), k) -> bool (L, S): True at the k highest-scoring keys
    among those each query sees (the L queries are the last L of S positions: query t sees
    keys s <= t + S - L), and at all of them where it sees fewer than k."""
    cases = _top_k_cases(seed)
    for case, scores, k in cases:
        expected = _top_k_loop(scores, k)
        got = _top_k_answer(run(fn, (scores.clone(), k), case,
                                forbidden=(sparse.top_k_mask,)), case, tuple(scores.shape))
        if torch.equal(got, expected):
            continue
        hint = _top_k_hint(got, scores, k, expected)
        row = (got != expected).any(-1).nonzero()[0].item()
        chosen = got[row].nonzero().flatten().tolist()
        wanted = expected[row].nonzero().flatten().tolist()
        if hint is None and len(chosen) != len(wanted):
            hint = (f"query {row} sees {row + scores.shape[1] - scores.shape[0] + 1} keys, "
                    f"so it keeps min(k, that) = {len(wanted)} of them, not {len(chosen)}")
        raise CheckFailed(f"case '{case}': query {row} chose keys {chosen}, expected "
                          f"{wanted}" + (f": {hint}" if hint else ""))
    passed("your causal top-k selection", len(cases))
