"""Multi-head and grouped-query attention against PyTorch's modules and SDPA, in float64."""

import pytest
import torch
import torch.nn.functional as F

from attention_course import GroupedQueryAttention, MultiHeadAttention, causal_mask, kv_cache_bytes
from attention_course.multihead import merge_heads, split_heads

TIGHT = {"atol": 1e-10, "rtol": 1e-10}


def torch_mha(embed_dim, num_heads, bias, seed):
    torch.manual_seed(seed)
    module = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=True).double()
    if bias:  # PyTorch initialises biases to zero; make them matter
        with torch.no_grad():
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    return module.eval()


@pytest.mark.parametrize("embed_dim, num_heads", [(8, 1), (8, 2), (12, 3), (16, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_torch_multihead_attention(embed_dim, num_heads, bias):
    reference = torch_mha(embed_dim, num_heads, bias, seed=embed_dim + num_heads)
    ours = MultiHeadAttention.from_torch(reference)
    g = torch.Generator().manual_seed(0)
    query = torch.randn(2, 5, embed_dim, generator=g, dtype=torch.float64)
    memory = torch.randn(2, 7, embed_dim, generator=g, dtype=torch.float64)
    out, weights = ours(query, memory, memory)
    expected, expected_weights = reference(query, memory, memory, average_attn_weights=False)
    torch.testing.assert_close(out, expected, **TIGHT)
    torch.testing.assert_close(weights, expected_weights, **TIGHT)
    assert weights.shape == (2, num_heads, 5, 7)


@pytest.mark.parametrize("bias", [True, False])
def test_causal_equals_torch(bias):
    reference = torch_mha(16, 4, bias, seed=1)
    ours = MultiHeadAttention.from_torch(reference)
    x = torch.randn(3, 6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch_mask = ~causal_mask(6)  # PyTorch's MHA: True = ignore
    expected, expected_weights = reference(
        x, x, x, attn_mask=torch_mask, is_causal=True, average_attn_weights=False
    )
    out, weights = ours(x, x, x, is_causal=True)
    torch.testing.assert_close(out, expected, **TIGHT)
    torch.testing.assert_close(weights, expected_weights, **TIGHT)
    out_mask, _ = ours(x, x, x, attn_mask=causal_mask(6))
    torch.testing.assert_close(out_mask, expected, **TIGHT)


def test_key_padding_mask_is_the_inverted_convention():
    reference = torch_mha(8, 2, True, seed=2)
    ours = MultiHeadAttention.from_torch(reference)
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    padding = torch.tensor([[False, False, False, True, True], [False] * 5])  # True = ignore
    expected, _ = reference(x, x, x, key_padding_mask=padding)
    out, _ = ours(x, x, x, attn_mask=~padding[:, None, None, :])  # True = may attend
    torch.testing.assert_close(out, expected, **TIGHT)


def test_parameter_count_matches_formula():
    for bias in (True, False):
        layer = MultiHeadAttention(64, 8, bias=bias)
        assert sum(p.numel() for p in layer.parameters()) == 4 * 64 * 64 + (4 * 64 if bias else 0)
        reference = torch.nn.MultiheadAttention(64, 8, bias=bias, batch_first=True)
        assert sum(p.numel() for p in layer.parameters()) == sum(
            p.numel() for p in reference.parameters()
        )


def test_split_and_merge_heads_are_inverse():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])  # head 1 owns features 4..7
    torch.testing.assert_close(merge_heads(heads), x)


@pytest.mark.parametrize("num_heads, num_kv_heads", [(8, 8), (8, 4), (8, 2), (8, 1), (6, 3)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_gqa_equals_sdpa_enable_gqa(num_heads, num_kv_heads, is_causal):
    torch.manual_seed(num_heads * 10 + num_kv_heads)
    layer = GroupedQueryAttention(48, num_heads, num_kv_heads).double()
    x = torch.randn(2, 7, 48, dtype=torch.float64)
    out, weights = layer(x, is_causal=is_causal)
    q = layer.q_proj(x).reshape(2, 7, num_heads, -1).transpose(1, 2)
    k = layer.k_proj(x).reshape(2, 7, num_kv_heads, -1).transpose(1, 2)
    v = layer.v_proj(x).reshape(2, 7, num_kv_heads, -1).transpose(1, 2)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
    expected = layer.out_proj(heads.transpose(1, 2).reshape(2, 7, 48))
    torch.testing.assert_close(out, expected, **TIGHT)
    assert weights.shape == (2, num_heads, 7, 7)


def test_gqa_with_all_kv_heads_is_multihead_attention():
    torch.manual_seed(3)
    mha = MultiHeadAttention(32, 4, bias=True).double()
    gqa = GroupedQueryAttention.from_multihead(mha, num_kv_heads=4)
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    torch.testing.assert_close(gqa(x, is_causal=True)[0], mha(x, x, x, is_causal=True)[0], **TIGHT)
    assert sum(p.numel() for p in gqa.parameters()) == sum(p.numel() for p in mha.parameters())


def test_one_kv_head_is_multi_query_attention():
    torch.manual_seed(4)
    mqa = GroupedQueryAttention(32, 4, num_kv_heads=1).double()
    x = torch.randn(1, 5, 32, dtype=torch.float64)
    keys, values = mqa.project_kv(x)
    assert keys.shape == values.shape == (1, 1, 5, 8)
    q = mqa.q_proj(x).reshape(1, 5, 4, 8).transpose(1, 2)
    for head in range(4):  # every query head attends over the same single key/value head
        expected = F.scaled_dot_product_attention(q[:, head], keys[:, 0], values[:, 0])
        _, weights = mqa(x)
        torch.testing.assert_close(weights[:, head] @ values[:, 0], expected, **TIGHT)


def test_mean_pooling_conversion_pools_each_group():
    torch.manual_seed(5)
    mha = MultiHeadAttention(16, 4, bias=True).double()
    gqa = GroupedQueryAttention.from_multihead(mha, num_kv_heads=2)
    head_dim = 4
    for name in ("k_proj", "v_proj"):
        source, target = getattr(mha, name), getattr(gqa, name)
        for kv_head in range(2):
            rows = [
                source.weight[h * head_dim : (h + 1) * head_dim]
                for h in (2 * kv_head, 2 * kv_head + 1)
            ]
            torch.testing.assert_close(
                target.weight[kv_head * head_dim : (kv_head + 1) * head_dim],
                (rows[0] + rows[1]) / 2,
            )
    torch.testing.assert_close(gqa.q_proj.weight, mha.q_proj.weight)
    torch.testing.assert_close(gqa.out_proj.bias, mha.out_proj.bias)


def test_kv_cache_bytes_counts_real_cache_tensors():
    torch.manual_seed(6)
    layers = [GroupedQueryAttention(64, 8, 2) for _ in range(3)]
    x = torch.randn(4, 10, 64)
    for dtype, size in ((torch.float32, 4), (torch.float16, 2), (torch.bfloat16, 2)):
        cache = [tuple(t.to(dtype) for t in layer.project_kv(x)) for layer in layers]
        actual = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in cache)
        assert (
            kv_cache_bytes(
                batch_size=4,
                seq_len=10,
                num_layers=3,
                num_kv_heads=2,
                head_dim=8,
                bytes_per_element=size,
            )
            == actual
        )


def test_kv_cache_bytes_for_llama_2_7b():
    # 32 layers, 32 KV heads of 128: 0.5 MiB per token in float16 (a commonly quoted figure)
    per_token = kv_cache_bytes(
        batch_size=1, seq_len=1, num_layers=32, num_kv_heads=32, head_dim=128
    )
    assert per_token == 524288 == 512 * 1024


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: MultiHeadAttention(10, 3), r"num_heads=3 must be >= 1 and divide embed_dim=10"),
        (
            lambda: GroupedQueryAttention(16, 4, 3),
            r"num_heads=4 must be divisible by num_kv_heads=3",
        ),
        (lambda: GroupedQueryAttention(16, 4, 0), r"num_kv_heads=0"),
        (
            lambda: MultiHeadAttention(8, 2)(torch.ones(5, 8), torch.ones(5, 8), torch.ones(5, 8)),
            r"query must have 3 dimensions, got shape \(5, 8\)",
        ),
        (
            lambda: MultiHeadAttention(8, 2)(
                torch.ones(2, 5, 6), torch.ones(2, 5, 8), torch.ones(2, 5, 8)
            ),
            r"query \(2, 5, 6\) must be \(batch, seq, embed_dim=8\)",
        ),
        (
            lambda: MultiHeadAttention(8, 2)(
                torch.ones(2, 5, 8), torch.ones(2, 4, 8), torch.ones(2, 5, 8)
            ),
            r"key \(2, 4, 8\) and value \(2, 5, 8\)",
        ),
        (
            lambda: GroupedQueryAttention(8, 2, 1)(torch.ones(2, 5)),
            r"x must have 3 dimensions, got shape \(2, 5\)",
        ),
        (
            lambda: GroupedQueryAttention(8, 2, 1)(
                torch.ones(1, 3, 8), attn_mask=torch.ones(4, 4, dtype=torch.bool)
            ),
            r"attn_mask \(4, 4\) does not broadcast",
        ),
        (
            lambda: MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2)),
            r"batch_first=True",
        ),
        (
            lambda: MultiHeadAttention.from_torch(
                torch.nn.MultiheadAttention(8, 2, batch_first=True, add_bias_kv=True)
            ),
            r"add_bias_kv",
        ),
        (
            lambda: kv_cache_bytes(
                batch_size=1, seq_len=0, num_layers=1, num_kv_heads=1, head_dim=1
            ),
            r"seq_len must be a positive integer, got 0",
        ),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: kv_cache_bytes(
                batch_size=1.5, seq_len=1, num_layers=1, num_kv_heads=1, head_dim=1
            ),
            r"batch_size must be an integer, got 1.5",
        ),
        (
            lambda: GroupedQueryAttention.from_multihead(torch.nn.Linear(8, 8), 2),
            r"mha must be a MultiHeadAttention, got Linear",
        ),
        (
            lambda: MultiHeadAttention.from_torch(torch.nn.Linear(8, 8)),
            r"module must be a torch.nn.MultiheadAttention",
        ),
        (lambda: MultiHeadAttention(8, 2.0), r"num_heads must be an integer, got 2.0"),
        (
            lambda: MultiHeadAttention(8, 2)([[1.0] * 8], torch.ones(1, 1, 8), torch.ones(1, 1, 8)),
            r"query must be a torch.Tensor, got list",
        ),
    ],
)
def test_wrong_types_raise_type_error(call, message):
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: MultiHeadAttention(8, 2)(*[torch.ones(1, 3, 8, dtype=torch.long)] * 3),
            r"query \(1, 3, 8\) must hold floating-point numbers",
        ),
        (
            lambda: MultiHeadAttention(8, 2)(*[torch.ones(1, 3, 8, dtype=torch.float64)] * 3),
            r"query \(1, 3, 8\) is torch.float64 but the layer's weights are torch.float32",
        ),
        (
            lambda: GroupedQueryAttention(8, 2, 1)(torch.ones(1, 3, 8, dtype=torch.float64)),
            r"x \(1, 3, 8\) is torch.float64",
        ),
    ],
)
def test_dtypes_that_do_not_fit_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
