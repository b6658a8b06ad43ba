"""Checks of chapter 15's exercises: the absorbed query of multi-head latent attention, the
latent cache of a config, on DeepSeek's published configs among others, and the FLOPs per byte
of an absorbed decoding step."""

import torch

from .. import latent, multihead
from .core import CheckFailed, compare, integers, passed, random, run, self_check


def _absorbed_by_heads(q_content, k_up_weight):
    """float64 q_i W_UK^(i) for every head i: (H, L, d_h), (H * d_h, d_c) -> (H, L, d_c)."""
    heads, _, head_dim = q_content.shape
    blocks = k_up_weight.double().reshape(heads, head_dim, -1)  # W_UK^(i): (d_h, d_c)
    return q_content.double() @ blocks


def _absorb_cases(seed):
    """(case, heads, queries, head_dim, kv_rank); the square one (head_dim == kv_rank) lets a
    transposed block keep the right shape."""
    cases = [
        ("1 head, 3 queries, head_dim 4, kv_rank 6", 1, 3, 4, 6),
        ("4 heads, 5 queries, head_dim 3, kv_rank 8", 4, 5, 3, 8),
        ("2 heads, 1 query, head_dim 5 = kv_rank 5", 2, 1, 5, 5),
        ("3 heads, 2 queries, head_dim 6, kv_rank 2", 3, 2, 6, 2),
    ]
    if seed:
        sizes = zip(*(integers(seed, 4, 1, 7, 150 + k) for k in range(4)))
        cases = [
            (f"random case {n}: {h} heads, {q} queries, head_dim {d}, kv_rank {c}", h, q, d, c)
            for n, (h, q, d, c) in enumerate(sizes)
        ]
        cases.append(("random square case", 2, 3, 4, 4))
    return cases


def _absorb_mistakes(q_content, k_up_weight):
    """(what a typical wrong answer computes, why it is wrong)."""
    heads, _, head_dim = q_content.shape
    kv_rank = k_up_weight.shape[1]
    weight = k_up_weight.double()
    q = q_content.double()
    mistakes = []
    if head_dim == kv_rank:  # a transposed block keeps its shape: name this first
        mistakes.append(
            (
                q @ weight.reshape(heads, head_dim, kv_rank).transpose(1, 2),
                "you multiplied by each head's block transposed: the score is "
                "q_i . (W_UK^(i) c), so the absorbed query is q_i W_UK^(i), the row "
                "vector q_i times the (head_dim, kv_rank) block",
            )
        )
    mistakes += [
        (
            q @ weight.reshape(head_dim, heads, kv_rank).transpose(0, 1),
            "the rows of head i are rows i * head_dim to (i + 1) * head_dim - 1 of k_up_weight "
            "(each head's block is consecutive, as split_heads lays out the keys): reshape to "
            "(num_heads, head_dim, kv_rank)",
        ),
        (
            q @ weight.reshape(heads, kv_rank, head_dim).transpose(1, 2),
            "nn.Linear stores W_UK as (out, in) = (num_heads * head_dim, kv_rank), so each "
            "head's block is (head_dim, kv_rank); you cut it as (kv_rank, head_dim)",
        ),
    ]
    right = _absorbed_by_heads(q_content, k_up_weight)
    for scale in (head_dim**-0.5, kv_rank**-0.5):
        mistakes.append(
            (
                right * scale,
                "you scaled the absorbed queries; they are q_i W_UK^(i) alone, "
                "and the scale 1/sqrt(d) belongs to the scores computed with them",
            )
        )
    return mistakes


@self_check
def check_absorbed_query(fn, seed=0):
    """Check fn(q_content (num_heads, L, head_dim), k_up_weight (num_heads * head_dim,
    kv_rank)) -> the absorbed queries (num_heads, L, kv_rank): for each head i, q_i W_UK^(i),
    whose dot product with a latent c equals q_i's with head i's key W_UK^(i) c.
    Chapter 15, exercise 1."""
    cases = _absorb_cases(seed)
    for number, (case, heads, queries, head_dim, kv_rank) in enumerate(cases):
        q_content = random((heads, queries, head_dim), seed, 160 + number)
        k_up_weight = random((heads * head_dim, kv_rank), seed, 170 + number)
        expected = _absorbed_by_heads(q_content, k_up_weight)
        got = run(fn, (q_content, k_up_weight), case)
        if isinstance(got, torch.Tensor) and got.shape == (queries, kv_rank):
            raise CheckFailed(
                f"case '{case}': your answer has shape {tuple(got.shape)}: one "
                "absorbed query per head is needed, (num_heads, L, kv_rank); a "
                "sum over the heads mixes their scores"
            )
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for wrong, hint in _absorb_mistakes(q_content, k_up_weight):
                if torch.allclose(got.detach().double(), wrong, atol=1e-5) and not torch.allclose(
                    wrong, expected, atol=1e-5
                ):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "absorbed queries", atol=1e-5)
        latents = random((7, kv_rank), seed, 180 + number).double()  # (S, d_c)
        keys = (latents @ k_up_weight.double().T).reshape(7, heads, head_dim)
        scores = torch.einsum("hld,shd->hls", q_content.double(), keys)
        if not torch.allclose(got.detach().double() @ latents.T, scores, atol=1e-5):
            raise CheckFailed(
                f"case '{case}': your absorbed queries do not reproduce the "
                "scores q_i . (W_UK^(i) c) on latents c"
            )
    passed("your absorbed queries", len(cases))


_REAL_CONFIGS = {
    # attention fields of the published config.json files
    "DeepSeek-V3": dict(
        num_hidden_layers=61,
        num_attention_heads=128,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
    ),
    "DeepSeek-V2": dict(
        num_hidden_layers=60,
        num_attention_heads=128,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
    ),
    "DeepSeek-V2-Lite": dict(
        num_hidden_layers=27,
        num_attention_heads=16,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
    ),
}


def _cache_cases(seed):
    """(case, config, seq_len, bytes_per_element)."""
    if not seed:
        return [
            ("DeepSeek-V3, 1 token, bfloat16", _REAL_CONFIGS["DeepSeek-V3"], 1, 2),
            (
                "DeepSeek-V2, 4,096 tokens, 6 bits = 0.75 bytes",
                _REAL_CONFIGS["DeepSeek-V2"],
                4096,
                0.75,
            ),
            ("DeepSeek-V2-Lite, 1,000 tokens, float32", _REAL_CONFIGS["DeepSeek-V2-Lite"], 1000, 4),
        ]
    numbers = [integers(seed, 4, 1, 200, 190 + k) for k in range(7)]
    cases = []
    for n, (layers, heads, rank, half_rope, nope, value, tokens) in enumerate(zip(*numbers)):
        config = dict(
            num_hidden_layers=layers,
            num_attention_heads=heads,
            kv_lora_rank=rank,
            qk_rope_head_dim=2 * half_rope,
            qk_nope_head_dim=nope,
            v_head_dim=value,
        )
        cases.append((f"random config {n}, {tokens} tokens", config, tokens, [1, 2, 4][n % 3]))
    return cases


def _cache_mistakes(config, seq_len, size):
    """(what a typical wrong answer computes, why it is wrong)."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    rank, rope = config["kv_lora_rank"], config["qk_rope_head_dim"]
    nope, value = config["qk_nope_head_dim"], config["v_head_dim"]
    right = layers * (rank + rope) * seq_len * size
    return [
        (
            2 * right,
            "MLA caches one latent and one RoPE key per token, not a key and a value "
            "of that size: no factor 2",
        ),
        (
            layers * rank * seq_len * size,
            "the decoupled RoPE key (qk_rope_head_dim numbers per token) is cached too",
        ),
        (
            layers * (rank + heads * rope) * seq_len * size,
            "the decoupled RoPE key is one per token, shared by all heads, "
            "not one per head: qk_rope_head_dim numbers, not num_heads times that",
        ),
        (
            heads * right,
            "the latent and the RoPE key are shared by all heads: the number of "
            "heads does not appear",
        ),
        (
            (rank + rope) * seq_len * size,
            "every layer has a cache of its own: multiply by num_hidden_layers",
        ),
        (
            layers * heads * (nope + rope + value) * seq_len * size,
            "that is every head's key and value: what the explicit path computes, and what "
            "multi-head attention would cache, not what MLA stores",
        ),
    ]


@self_check
def check_latent_cache_bytes(fn, seed=0):
    """Check fn(config, seq_len, bytes_per_element) -> the bytes of one sequence's MLA cache,
    all layers, for a config dict with transformers' field names (num_hidden_layers,
    kv_lora_rank, qk_rope_head_dim, and others that do not matter). Chapter 15, exercise 2."""
    cases = _cache_cases(seed)
    for case, config, seq_len, size in cases:
        expected = (
            config["num_hidden_layers"]
            * (config["kv_lora_rank"] + config["qk_rope_head_dim"])
            * seq_len
            * size
        )
        got = run(
            fn,
            (dict(config), seq_len, size),
            case,
            forbidden=(latent.latent_cache_bytes, multihead.kv_cache_bytes),
        )
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise CheckFailed(
                f"case '{case}': your function returned {type(got).__name__}, "
                "expected a number of bytes"
            )
        if abs(got - expected) > 1e-6 * expected:
            hint = next(
                (
                    why
                    for wrong, why in _cache_mistakes(config, seq_len, size)
                    if abs(got - wrong) <= 1e-6 * wrong and wrong != expected
                ),
                None,
            )
            raise CheckFailed(
                f"case '{case}': you say {got:,} bytes, expected {expected:,}"
                + (f": {hint}" if hint else "")
            )
    passed("your latent-cache size", len(cases))


def _decode_cases(seed):
    """(case, config, cached_tokens, batch_size, bytes_per_element)."""
    if not seed:
        return [
            (
                "DeepSeek-V3, 4,096 cached, 1 sequence, bfloat16",
                _REAL_CONFIGS["DeepSeek-V3"],
                4096,
                1,
                2,
            ),
            (
                "DeepSeek-V2-Lite, 1,000 cached, 8 sequences, 1 byte",
                _REAL_CONFIGS["DeepSeek-V2-Lite"],
                1000,
                8,
                1,
            ),
            (
                "3 heads, kv_lora_rank 10, d_h 5, d_R 4, d_v 6, 0 cached, 3 sequences, float32",
                dict(
                    num_hidden_layers=2,
                    num_attention_heads=3,
                    kv_lora_rank=10,
                    qk_rope_head_dim=4,
                    qk_nope_head_dim=5,
                    v_head_dim=6,
                ),
                0,
                3,
                4,
            ),
        ]
    numbers = [integers(seed, 4, 1, 300, 200 + k) for k in range(7)]
    cases = []
    for n, (heads, rank, half_rope, nope, value, cached, batch) in enumerate(zip(*numbers)):
        config = dict(
            num_hidden_layers=1 + n,
            num_attention_heads=heads,
            kv_lora_rank=rank,
            qk_rope_head_dim=2 * half_rope,
            qk_nope_head_dim=nope,
            v_head_dim=value,
        )
        cases.append(
            (
                f"random config {n}, {cached} cached, {batch} sequences",
                config,
                cached,
                batch,
                [1, 2, 4][n % 3],
            )
        )
    return cases


def _decode_parts(config, cached, batch, size):
    """The parts of one absorbed decoding step of one layer, for the right answer and the
    mistakes: (U, keys per sequence, multiply-adds per pair of all heads, cached numbers per
    key)."""
    heads, rank = config["num_attention_heads"], config["kv_lora_rank"]
    rope, nope, value = config["qk_rope_head_dim"], config["qk_nope_head_dim"], config["v_head_dim"]
    up = heads * rank * (nope + value)  # W_UK and W_UV: multiply-adds on one vector, and weights
    return up, cached + 1, heads * (2 * rank + rope), rank + rope


def _decode_flop_per_byte(config, cached, batch, size):
    up, keys, per_pair, per_key = _decode_parts(config, cached, batch, size)
    flops = 2 * batch * (up + keys * per_pair)
    return flops / (size * (up + batch * keys * per_key))


def _decode_mistakes(config, cached, batch, size):
    """(what a typical wrong answer computes, why it is wrong)."""
    up, keys, per_pair, per_key = _decode_parts(config, cached, batch, size)
    heads, rank = config["num_attention_heads"], config["kv_lora_rank"]
    rope, nope, value = config["qk_rope_head_dim"], config["qk_nope_head_dim"], config["v_head_dim"]
    flops = 2 * batch * (up + keys * per_pair)
    read = size * (up + batch * keys * per_key)
    return [
        (
            flops / 2 / read,
            "you counted multiply-adds: a multiply-add is 2 FLOPs",
        ),
        (
            read / flops,
            "you returned bytes per FLOP: the question is FLOPs per byte read",
        ),
        (
            flops / (size * batch * (up + keys * per_key)),
            "the weights of W_UK and W_UV are read once for the whole batch; only the caches "
            "are read once per sequence",
        ),
        (
            flops / (size * batch * keys * per_key),
            "the step also reads the weights of W_UK and W_UV, H d_c (d_h + d_v) numbers",
        ),
        (
            2 * batch * keys * per_pair / read,
            "each new token also costs H d_c (d_h + d_v) multiply-adds: W_UK into its query "
            "and W_UV after the weighted sum",
        ),
        (
            2 * batch * (up + cached * per_pair) / (size * (up + batch * cached * per_key)),
            "the new token is a key too: it attends to cached_tokens + 1 keys, its own latent "
            "and RoPE key included",
        ),
        (
            flops / (size * (up + batch * keys * heads * per_key)),
            "the latent and the RoPE key are shared by all heads: each sequence reads its cache "
            "once, not once per head",
        ),
        (
            2 * batch * keys * (up + heads * (nope + rope + value)) / read,
            "that is the explicit path, which expands every key's latent: the absorbed step "
            "scores the latents with absorbed queries",
        ),
        (
            flops / (up + batch * keys * per_key),
            "that is FLOPs per number read: multiply the numbers by bytes_per_element",
        ),
        (
            2 * batch * (up + keys * heads * (rank + rope + value)) / read,
            "the absorbed weighted sum runs over the latents: d_c multiply-adds per pair and "
            "head, not d_v (W_UV comes after the sum)",
        ),
        (
            2 * batch * (up + keys * heads * 2 * rank) / read,
            "the scores read the shared RoPE key too: d_c + d_R multiply-adds per pair and head",
        ),
    ]


@self_check
def check_decode_flop_per_byte(fn, seed=0):
    """Check fn(config, cached_tokens, batch_size, bytes_per_element) -> the FLOPs (2 per
    multiply-add) per byte read of one absorbed decoding step of one MLA layer: batch_size
    sequences with one new token each after cached_tokens cached ones; the weights of W_UK and
    W_UV read once for the batch, each sequence's latents and RoPE keys once; what both paths
    share (the projections of the new tokens, W_O) left out. config: a dict with transformers'
    field names. Chapter 15, exercise 5."""
    cases = _decode_cases(seed)
    for case, config, cached, batch, size in cases:
        expected = _decode_flop_per_byte(config, cached, batch, size)
        got = run(fn, (dict(config), cached, batch, size), case)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise CheckFailed(
                f"case '{case}': your function returned {type(got).__name__}, "
                "expected a number of FLOPs per byte"
            )
        if abs(got - expected) > 1e-9 * expected:
            hint = next(
                (
                    why
                    for wrong, why in _decode_mistakes(config, cached, batch, size)
                    if abs(got - wrong) <= 1e-9 * wrong and abs(wrong - expected) > 1e-9 * expected
                ),
                None,
            )
            raise CheckFailed(
                f"case '{case}': you say {got:,.4f} FLOPs per byte, expected {expected:,.4f}"
                + (f": {hint}" if hint else "")
            )
    passed("your FLOPs per byte of an absorbed decoding step", len(cases))
