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

    for check in (checks.check_absorbed_query, checks.check_latent_cache_bytes):
        assert check(stub) is None
        assert "Not yet answered" in capsys.readouterr().out
        with pytest.raises(checks.NotAnswered):
            check(stub, strict=True)
