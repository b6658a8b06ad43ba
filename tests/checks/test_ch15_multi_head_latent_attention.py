"""The checks of chapter 15's exercises (the absorbed query, the latent cache of a config):
independent correct answers pass, on the visible and the hidden seeds; typical wrong answers
fail with a hint that names the mistake."""

import math

import pytest
import torch
from learner_answers import SEEDS

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed


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

    def transposed_blocks(q, w):  # right shape only where head_dim == kv_rank
        heads, _, head_dim = q.shape
        blocks = w.reshape(heads, head_dim, -1)
        if blocks.shape[-1] != head_dim:
            return absorbed_by_einsum(q, w)
        return q @ blocks.transpose(1, 2)

    def summed_over_heads(q, w):
        return q.transpose(0, 1).reshape(q.shape[1], -1) @ w  # (L, d_c)

    def explicit_keys(q, w):  # scores against keys, not a query
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
    with pytest.raises(CheckFailed, match="scale 1/sqrt\\(d\\) belongs to the scores"):
        checks.check_absorbed_query(lambda q, w: absorbed_by_einsum(q, w) / math.sqrt(q.shape[-1]))


def test_absorbed_query_check_refuses_a_hard_coded_answer():
    remembered = {}
    cases = checks.ch15_multi_head_latent_attention._absorb_cases(0)
    for _case, heads, queries, head_dim, rank in cases:
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


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda c, n, b: 2 * cache_by_parts(c, n, b), "no factor 2"),
        (lambda c, n, b: c["num_hidden_layers"] * c["kv_lora_rank"] * n * b, "RoPE key"),
        (lambda c, n, b: c["num_attention_heads"] * cache_by_parts(c, n, b), "shared by all heads"),
        (lambda c, n, b: (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * n * b, "every layer"),
        (
            lambda c, n, b: (
                c["num_hidden_layers"]
                * (c["kv_lora_rank"] + c["num_attention_heads"] * c["qk_rope_head_dim"])
                * n
                * b
            ),
            "one per token, shared by all heads, not one per head",
        ),
        (
            lambda c, n, b: (
                c["num_hidden_layers"]
                * c["num_attention_heads"]
                * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"])
                * n
                * b
            ),
            "multi-head attention would cache",
        ),
        (lambda c, n, b: str(cache_by_parts(c, n, b)), "expected a number of bytes"),
    ],
)
def test_latent_cache_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_latent_cache_bytes(wrong)


def test_latent_cache_check_refuses_the_package_s_answer():
    def delegated(config, seq_len, bytes_per_element):
        return attention_course.latent_cache_bytes(
            batch_size=1,
            seq_len=seq_len,
            num_layers=config["num_hidden_layers"],
            kv_rank=config["kv_lora_rank"],
            rope_dim=config["qk_rope_head_dim"],
            bytes_per_element=bytes_per_element,
        )

    with pytest.raises(CheckFailed, match="calls `latent_cache_bytes`"):
        checks.check_latent_cache_bytes(delegated)
    assert (
        attention_course.latent_cache_bytes(
            batch_size=1, seq_len=1, num_layers=1, kv_rank=1, rope_dim=1
        )
        == 4
    )  # restored afterwards


def test_a_stub_waits_for_its_answer(capsys):
    def stub(*args):
        raise NotImplementedError

    for check in (
        checks.check_absorbed_query,
        checks.check_latent_cache_bytes,
        checks.check_decode_flop_per_byte,
    ):
        assert check(stub) is None
        assert "Not yet answered" in capsys.readouterr().out
        with pytest.raises(checks.NotAnswered):
            check(stub, strict=True)


# ------------------------------------------------- exercise 5: FLOPs per byte of a decoding step


def intensity_by_parts(config, cached_tokens, batch_size, bytes_per_element):
    """Per sequence: absorb the query, score and sum over its keys; then the weights once."""
    heads, d_c = config["num_attention_heads"], config["kv_lora_rank"]
    d_h, d_r, d_v = config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]
    keys = cached_tokens + 1
    absorb = heads * d_h * d_c  # q_C W_UK, every head
    out = heads * d_c * d_v  # the weighted latent through W_UV, every head
    scores, weighted_sum = keys * heads * (d_c + d_r), keys * heads * d_c
    flops = 2 * batch_size * (absorb + out + scores + weighted_sum)
    weights = heads * d_h * d_c + heads * d_v * d_c  # k_up and v_up
    caches = batch_size * keys * (d_c + d_r)
    return flops / ((weights + caches) * bytes_per_element)


def intensity_by_loops(config, cached_tokens, batch_size, bytes_per_element):
    """Brute force: for every sequence and every key, add what it costs and reads."""
    heads, d_c = config["num_attention_heads"], config["kv_lora_rank"]
    d_h, d_r, d_v = config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]
    multiply_adds = numbers = 0
    numbers += d_c * heads * d_h + d_c * heads * d_v  # the weights, read once
    for _sequence in range(batch_size):
        multiply_adds += heads * d_h * d_c + heads * d_c * d_v
        for _key in range(cached_tokens + 1):
            multiply_adds += heads * (d_c + d_r) + heads * d_c
            numbers += d_c + d_r
    return 2 * multiply_adds / (numbers * bytes_per_element)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [intensity_by_parts, intensity_by_loops])
def test_decode_flop_per_byte_check_passes_independent_answers(answer, seed, capsys):
    checks.check_decode_flop_per_byte(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def test_decode_flop_per_byte_at_deepseek_v3_against_numbers_worked_by_hand():
    """DeepSeek-V3, 1 sequence, 4,096 cached tokens, bfloat16: U = 128 * 512 * 256 =
    16,777,216; per key 128 * 1,088 = 139,264 multiply-adds and 576 numbers."""
    config = dict(
        num_attention_heads=128,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    )
    flops = 2 * (16_777_216 + 4097 * 139_264)
    read = 2 * (16_777_216 + 4097 * 576)
    assert intensity_by_parts(config, 4096, 1, 2) == pytest.approx(flops / read, rel=1e-12)
    assert intensity_by_loops(config, 4096, 1, 2) == pytest.approx(flops / read, rel=1e-12)


def _sizes(c):
    return (
        c["num_attention_heads"],
        c["kv_lora_rank"],
        c["qk_nope_head_dim"],
        c["qk_rope_head_dim"],
        c["v_head_dim"],
    )


def _slip(flops_of, bytes_of):
    """An answer from a wrong count of FLOPs or of bytes: each gets (H, d_c, d_h, d_R, d_v,
    keys = cached + 1, batch, b), plus the cached count for the off-by-one slip."""

    def answer(config, cached_tokens, batch_size, bytes_per_element):
        sizes = (*_sizes(config), cached_tokens + 1, batch_size, bytes_per_element)
        return flops_of(*sizes, cached_tokens) / bytes_of(*sizes, cached_tokens)

    return answer


def right_flops(h, c, d, r, v, k, batch, b, n):
    return 2 * batch * (h * c * (d + v) + k * h * (2 * c + r))


def right_bytes(h, c, d, r, v, k, batch, b, n):
    return b * (h * c * (d + v) + batch * k * (c + r))


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            _slip(lambda *s: right_flops(*s) / 2, right_bytes),
            "a multiply-add is 2 FLOPs",
        ),
        (
            lambda *a: 1 / intensity_by_parts(*a),
            "bytes per FLOP",
        ),
        (
            _slip(
                right_flops,
                lambda h, c, d, r, v, k, batch, b, n: b * batch * (h * c * (d + v) + k * (c + r)),
            ),
            "read once for the whole batch",
        ),
        (
            _slip(right_flops, lambda h, c, d, r, v, k, batch, b, n: b * batch * k * (c + r)),
            "also reads the weights of W_UK and W_UV",
        ),
        (
            _slip(
                lambda h, c, d, r, v, k, batch, b, n: 2 * batch * k * h * (2 * c + r),
                right_bytes,
            ),
            "W_UK into its query",
        ),
        (
            _slip(
                lambda h, c, d, r, v, k, batch, b, n: right_flops(h, c, d, r, v, n, batch, b, n),
                lambda h, c, d, r, v, k, batch, b, n: right_bytes(h, c, d, r, v, n, batch, b, n),
            ),
            "the new token is a key too",
        ),
        (
            _slip(
                right_flops,
                lambda h, c, d, r, v, k, batch, b, n: (
                    b * (h * c * (d + v) + batch * k * h * (c + r))
                ),
            ),
            "shared by all heads",
        ),
        (
            _slip(
                lambda h, c, d, r, v, k, batch, b, n: (
                    2 * batch * k * (h * c * (d + v) + h * (d + r + v))
                ),
                right_bytes,
            ),
            "that is the explicit path",
        ),
        (
            _slip(
                right_flops,
                lambda h, c, d, r, v, k, batch, b, n: right_bytes(h, c, d, r, v, k, batch, 1, n),
            ),
            "FLOPs per number read",
        ),
        (
            _slip(
                lambda h, c, d, r, v, k, batch, b, n: (
                    2 * batch * (h * c * (d + v) + k * h * (c + r + v))
                ),
                right_bytes,
            ),
            "not d_v",
        ),
        (
            _slip(
                lambda h, c, d, r, v, k, batch, b, n: 2 * batch * (h * c * (d + v) + k * h * 2 * c),
                right_bytes,
            ),
            "the shared RoPE key too",
        ),
        (lambda *a: str(intensity_by_parts(*a)), "expected a number of FLOPs per byte"),
    ],
)
def test_decode_flop_per_byte_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_decode_flop_per_byte(wrong)


def test_decode_flop_per_byte_check_refuses_a_hard_coded_answer():
    cases = checks.ch15_multi_head_latent_attention._decode_cases(0)
    visible = {
        (cached, batch, size): intensity_by_parts(config, cached, batch, size)
        for _case, config, cached, batch, size in cases
    }

    def only_visible_cases(config, cached_tokens, batch_size, bytes_per_element):
        return visible.get((cached_tokens, batch_size, bytes_per_element), 1.0)

    checks.check_decode_flop_per_byte(only_visible_cases)
    with pytest.raises(CheckFailed):
        checks.check_decode_flop_per_byte(only_visible_cases, seed=1)
