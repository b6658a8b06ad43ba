"""Gated attention (Qwen3-Next's full-attention layers, Qiu et al. 2025; chapter 17) against
independent references: the pinned transformers' Qwen3NextAttention with its weights copied in
(float64, to 1e-10; q/k norms, partial rotary, grouped heads and the causal mask as the model
has them; transformers computes its norms, rotary angles and eager softmax in float32, so the
test runs its sdpa path, its norm in the input's dtype and angles made in float64), a
brute-force loop over heads, queries and elements, and the package's own
scaled_dot_product_attention with the gate's sigmoid applied by hand."""

import math

import pytest
import torch

from attention_course import gated_attention, scaled_dot_product_attention
from attention_course.rotary import apply_rotary

qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
masking_utils = pytest.importorskip("transformers.masking_utils")
transformers = pytest.importorskip("transformers")

F64 = torch.float64


def normal(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def small_config():
    """Qwen3-Next's attention at toy sizes: 4 query heads over 2 KV heads of 8 dimensions,
    half of each head rotated (partial_rotary_factor 0.5; the real model's, the config's
    default, is 0.25: half makes the toy's rotated part 4 dimensions, not 2)."""
    return transformers.Qwen3NextConfig(
        hidden_size=12,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_hidden_layers=1,
        layer_types=["full_attention"],
        vocab_size=10,
        intermediate_size=8,
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=8,
        shared_expert_intermediate_size=8,
        rope_parameters={"rope_theta": 100.0, "partial_rotary_factor": 0.5, "rope_type": "default"},
    )


def their_layer(config, seed):
    torch.manual_seed(seed)
    config._attn_implementation = "sdpa"  # eager's softmax is float32 whatever the dtype
    layer = qwen3_next.Qwen3NextAttention(config, layer_idx=0).to(F64).eval()
    with torch.no_grad():
        for parameter in layer.parameters():  # the norms' weights start at 0: randomize all
            parameter.copy_(normal(*parameter.shape, seed=seed) * 0.5)
            seed += 1
    return layer


def rms_norm(x, weight, eps):
    # Qwen3-Next's norm: x / rms(x) * (1 + w)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight)


def ours(layer, config, x):
    """The layer read by the course: projections, norms and rotary written out here,
    the attention step and its gate by gated_attention."""
    batch, n, _ = x.shape
    heads, kv_heads, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    # q_proj makes each head's query and gate side by side: (b, n, H, 2 d)
    both = (x @ layer.q_proj.weight.T).view(batch, n, heads, 2 * d)
    query, gate = both[..., :d], both[..., d:]
    key = (x @ layer.k_proj.weight.T).view(batch, n, kv_heads, d)
    value = (x @ layer.v_proj.weight.T).view(batch, n, kv_heads, d)
    eps = config.rms_norm_eps
    query = rms_norm(query, layer.q_norm.weight, eps).transpose(1, 2)  # (b, H, n, d)
    key = rms_norm(key, layer.k_norm.weight, eps).transpose(1, 2)  # (b, H_kv, n, d)
    # the rotary turns the first half of each head's dimensions, the rest pass
    rotated = int(d * config.rope_parameters["partial_rotary_factor"])
    base = config.rope_parameters["rope_theta"]
    query = torch.cat([apply_rotary(query[..., :rotated], base=base), query[..., rotated:]], -1)
    key = torch.cat([apply_rotary(key[..., :rotated], base=base), key[..., rotated:]], -1)
    output, weights = gated_attention(
        query, key, value.transpose(1, 2), gate.transpose(1, 2), is_causal=True
    )
    return output.transpose(1, 2).reshape(batch, n, heads * d) @ layer.o_proj.weight.T, weights


def norm_in_its_dtype(self, x):
    # Qwen3NextRMSNorm.forward without its cast to float32
    return rms_norm(x, self.weight, self.eps)


def float64_angles(config, n):
    """cos and sin (1, n, rotated) as Qwen3NextRotaryEmbedding makes them, in float64."""
    rotated = int(config.head_dim * config.rope_parameters["partial_rotary_factor"])
    base = config.rope_parameters["rope_theta"]
    inverse = 1.0 / base ** (torch.arange(0, rotated, 2, dtype=F64) / rotated)
    angles = torch.arange(n, dtype=F64)[:, None] * inverse  # (n, rotated / 2)
    both = torch.cat([angles, angles], -1)[None]  # (1, n, rotated)
    return both.cos(), both.sin()


@pytest.mark.parametrize("seed", [0, 1])
def test_equals_transformers_qwen3_next_attention(seed, monkeypatch):
    # the norm patched in below equals transformers' own forward (x / rms(x) * (1 + w)) on
    # float32 input, where that forward's casts change nothing
    norm = qwen3_next.Qwen3NextRMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(normal(8, seed=50 + seed, dtype=torch.float32))
    sample = normal(3, 5, 8, seed=60 + seed, dtype=torch.float32) * 3
    with torch.no_grad():
        gap = (norm_in_its_dtype(norm, sample) - norm(sample)).abs().max().item()
    assert gap < 1e-6
    monkeypatch.setattr(qwen3_next.Qwen3NextRMSNorm, "forward", norm_in_its_dtype)
    config = small_config()
    layer = their_layer(config, seed=10 * seed)
    batch, n = 2, 7
    x = normal(batch, n, config.hidden_size, seed=100 + seed)
    cos_sin = float64_angles(config, n)
    # the angles as transformers' own rotary makes them, in float32
    their_cos, their_sin = qwen3_next.Qwen3NextRotaryEmbedding(config)(x, torch.arange(n)[None])
    assert (their_cos - cos_sin[0]).abs().max().item() < 1e-6
    assert (their_sin - cos_sin[1]).abs().max().item() < 1e-6
    mask = masking_utils.eager_mask(
        batch_size=batch,
        q_length=n,
        kv_length=n,
        mask_function=masking_utils.causal_mask_function,
        dtype=F64,
    )
    with torch.no_grad():
        theirs, _ = layer(x, cos_sin, mask)
        mine, _ = ours(layer, config, x)
    assert (mine - theirs).abs().max().item() < 1e-10


def test_brute_force_loop():
    batch, heads, kv_heads, n, d, d_v = 2, 4, 2, 5, 3, 4
    query = normal(batch, heads, n, d, seed=1)
    key = normal(batch, kv_heads, n, d, seed=2)
    value = normal(batch, kv_heads, n, d_v, seed=3)
    gate = normal(batch, heads, n, d_v, seed=4) * 3
    output, weights = gated_attention(query, key, value, gate, is_causal=True, scale=0.7)
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // kv_heads)
            for t in range(n):
                scores = [
                    sum(query[b, h, t, e].item() * key[b, g, s, e].item() for e in range(d)) * 0.7
                    for s in range(t + 1)
                ]
                top = max(scores)
                exps = [math.exp(z - top) for z in scores]
                alphas = [e / sum(exps) for e in exps]
                for s, alpha in enumerate(alphas):
                    assert abs(weights[b, h, t, s].item() - alpha) < 1e-12
                assert weights[b, h, t, t + 1 :].abs().sum().item() == 0
                for j in range(d_v):
                    read = sum(a * value[b, g, s, j].item() for s, a in enumerate(alphas))
                    expected = read / (1 + math.exp(-gate[b, h, t, j].item()))
                    assert abs(output[b, h, t, j].item() - expected) < 1e-12


def test_one_gate_per_head_and_agrees_with_sdpa():
    query, key, value = (
        normal(2, 3, 4, 5, seed=1),
        normal(2, 3, 6, 5, seed=2),
        normal(2, 3, 6, 7, seed=3),
    )
    gate = normal(2, 3, 4, 1, seed=4)
    output, weights = gated_attention(query, key, value, gate)
    plain, plain_weights = scaled_dot_product_attention(query, key, value)
    assert (output - plain * torch.sigmoid(gate)).abs().max().item() < 1e-12
    assert (weights - plain_weights).abs().max().item() < 1e-12


def test_fully_masked_row_is_zero_and_gradients_finite():
    query, key, value = (normal(1, 2, 3, 4, seed=s).requires_grad_() for s in (1, 2, 3))
    gate = normal(1, 2, 3, 4, seed=4).requires_grad_()
    allowed = torch.tensor([[False] * 3, [True, False, False], [True, True, True]])
    output, weights = gated_attention(query, key, value, gate, attn_mask=allowed)
    assert torch.equal(output[:, :, 0], torch.zeros(1, 2, 4, dtype=F64))
    assert torch.equal(weights[:, :, 0], torch.zeros(1, 2, 3, dtype=F64))
    output.sum().backward()
    for tensor in (query, key, value, gate):
        assert torch.isfinite(tensor.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_follows_dtype(dtype):
    query, key, value = (normal(1, 2, 3, 4, seed=s) for s in (1, 2, 3))
    gate = normal(1, 2, 3, 4, seed=4)
    reference, _ = gated_attention(query, key, value, gate)
    output, weights = gated_attention(*(t.to(dtype) for t in (query, key, value, gate)))
    assert output.dtype == weights.dtype == dtype
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert (output.double() - reference).abs().max().item() < tolerance


def test_bad_gate_shape_names_the_argument():
    query, key, value = normal(1, 2, 3, 4), normal(1, 2, 3, 4), normal(1, 2, 3, 5)
    with pytest.raises(ValueError, match="gate"):
        gated_attention(query, key, value, normal(1, 2, 3, 4))
