"""Checks of Part V (chapter 15 on): multi-head latent attention's absorbed query and cache."""

import torch

from .. import latent, linear, multihead
from .core import CheckFailed, _compare, _integers, _passed, _random, _run, _self_check


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
        sizes = zip(*(_integers(seed, 4, 1, 7, 150 + k) for k in range(4)))
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


@_self_check
def check_absorbed_query(fn, seed=0):
    """Check fn(q_content (num_heads, L, head_dim), k_up_weight (num_heads * head_dim,
    kv_rank)) -> the absorbed queries (num_heads, L, kv_rank): for each head i, q_i W_UK^(i),
    whose dot product with a latent c equals q_i's with head i's key W_UK^(i) c."""
    cases = _absorb_cases(seed)
    for number, (case, heads, queries, head_dim, kv_rank) in enumerate(cases):
        q_content = _random((heads, queries, head_dim), seed, 160 + number)
        k_up_weight = _random((heads * head_dim, kv_rank), seed, 170 + number)
        expected = _absorbed_by_heads(q_content, k_up_weight)
        got = _run(fn, (q_content, k_up_weight), case)
        if isinstance(got, torch.Tensor) and got.shape == (queries, kv_rank):
            raise CheckFailed(f"case '{case}': your answer has shape {tuple(got.shape)}: one "
                              "absorbed query per head is needed, (num_heads, L, kv_rank); a "
                              "sum over the heads mixes their scores")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for wrong, hint in _absorb_mistakes(q_content, k_up_weight):
                if (torch.allclose(got.detach().double(), wrong, atol=1e-5)
                        and not torch.allclose(wrong, expected, atol=1e-5)):
                    raise CheckFailed(f"case '{case}': {hint}")
        _compare(got, expected, case, "absorbed queries", atol=1e-5)
        latents = _random((7, kv_rank), seed, 180 + number).double()   # (S, d_c)
        keys = (latents @ k_up_weight.double().T).reshape(7, heads, head_dim)
        scores = torch.einsum("hld,shd->hls", q_content.double(), keys)
        if not torch.allclose(got.detach().double() @ latents.T, scores, atol=1e-5):
            raise CheckFailed(f"case '{case}': your absorbed queries do not reproduce the "
                              "scores q_i . (W_UK^(i) c) on latents c")
    _passed("your absorbed queries", len(cases))


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
    numbers = [_integers(seed, 4, 1, 200, 190 + k) for k in range(7)]
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


@_self_check
def check_latent_cache_bytes(fn, seed=0):
    """Check fn(config, seq_len, bytes_per_element) -> the bytes of one sequence's MLA cache,
    all layers, for a config dict with transformers' field names (num_hidden_layers,
    kv_lora_rank, qk_rope_head_dim, and others that do not matter)."""
    cases = _cache_cases(seed)
    for case, config, seq_len, size in cases:
        expected = (config["num_hidden_layers"] * (config["kv_lora_rank"]
                    + config["qk_rope_head_dim"]) * seq_len * size)
        got = _run(fn, (dict(config), seq_len, size), case,
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
    _passed("your latent-cache size", len(cases))


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
        numbers = zip(*(_integers(seed, 4, 1, 12, 200 + k) for k in range(3)))
        sizes = [(f"random case {m}: {n} tokens, {f} features, d_v {v}", n, f, v)
                 for m, (n, f, v) in enumerate(numbers)]
    for number, (case, n, f, d_v) in enumerate(sizes):
        phi_q, phi_k = (torch.nn.functional.elu(_random((n, f), seed, 210 + 3 * number + j)) + 1
                        for j in range(2))
        yield case, phi_q, phi_k, _random((n, d_v), seed, 212 + 3 * number)


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


@_self_check
def check_linear_recurrence(fn, seed=0):
    """Check fn(phi_q (n, f), phi_k (n, f), values (n, d_v)) -> (n, d_v): causal linear
    attention, output t = sum_(j <= t) (phi_q[t] . phi_k[j]) values[j] divided by
    sum_(j <= t) phi_q[t] . phi_k[j], computed with the recurrence."""
    cases = list(_recurrence_cases(seed))
    for case, phi_q, phi_k, values in cases:
        expected = _recurrence_reference(phi_q, phi_k, values)
        got = _run(fn, (phi_q.clone(), phi_k.clone(), values.clone()), case,
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
        _compare(got, expected, case, "outputs", atol=1e-5, explain_nan=explain)
    _passed("your causal linear-attention recurrence", len(cases))


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
        dims = zip(*(_integers(seed, 4, 1, 9, 220 + k) for k in range(2)))
        gates = _random((4, 2), seed, 222).sigmoid().tolist()
        sizes = [(f"random case {m}: d_k {k}, d_v {v}", k, v, round(b, 3), round(g, 3))
                 for m, ((k, v), (b, g)) in enumerate(zip(dims, gates))]
        sizes.append(("random square case", 4, 4, 0.7, 0.8))
    for number, (case, d_k, d_v, beta, gamma) in enumerate(sizes):
        state = _random((d_k, d_v), seed, 230 + 3 * number)
        key = torch.nn.functional.normalize(_random((d_k,), seed, 231 + 3 * number), dim=0)
        yield case, state, key, _random((d_v,), seed, 232 + 3 * number), beta, gamma


@_self_check
def check_gated_delta_step(fn, seed=0):
    """Check fn(state (d_k, d_v), key (d_k,), value (d_v,), beta, gamma) -> the new state
    (d_k, d_v) after one step of the gated delta rule: S' = gamma S, then
    S' + beta k (v - S'^T k)^T. beta and gamma are Python floats."""
    cases = list(_delta_step_cases(seed))
    for case, state, key, value, beta, gamma in cases:
        expected = _delta_step_reference(state, key, value, beta, gamma)
        got = _run(fn, (state.clone(), key.clone(), value.clone(), beta, gamma), case,
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
        _compare(got, expected, case, "new state", atol=1e-5)
    _passed("your gated delta-rule step", len(cases))
