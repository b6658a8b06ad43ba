"""apply_rotary against independent references: a rotation matrix built entry by
entry, the complex-number (interleaved) form, and Llama's implementation in
Hugging Face transformers."""

import pytest
import torch

from attention_course import apply_rotary
from rotary_reference import rotate_by_matrices


def complex_rotary(x, positions, base=10000.0):
    """RoPE in Meta's original form: adjacent dimensions (2i, 2i+1) as one
    complex number, multiplied by exp(i m theta_i). x (seq, head_dim)."""
    head_dim = x.shape[-1]
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64)
                     / head_dim)
    turns = torch.polar(torch.ones(len(positions), head_dim // 2,
                                   dtype=torch.float64),
                        positions.double()[:, None] * theta)
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(pairs * turns).flatten(-2)


def half_split_to_interleaved(head_dim):
    """Index list p: x_interleaved = x_half_split[..., p]."""
    half = head_dim // 2
    return [i // 2 + (i % 2) * half for i in range(head_dim)]


def random(*shape, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype)


@pytest.mark.parametrize("head_dim", [2, 8, 64])
def test_equals_a_rotation_matrix_per_position(head_dim):
    x = random(11, head_dim)
    positions = torch.tensor([0, 1, 2, 3, 7, 50, 99, 511, 1000, 4095, 4096])
    expected = rotate_by_matrices(x, positions)
    torch.testing.assert_close(apply_rotary(x, positions), expected,
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_equals_the_complex_form_after_a_fixed_permutation(base):
    head_dim = 16
    order = half_split_to_interleaved(head_dim)
    x = random(2, 3, 9, head_dim)
    positions = torch.arange(100, 109)
    ours = apply_rotary(x, positions, base=base)[..., order]
    theirs = complex_rotary(x[..., order], positions, base=base)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


def test_equals_llama_in_transformers():
    from transformers import LlamaConfig
    from transformers.models.llama import modeling_llama

    config = LlamaConfig(hidden_size=256, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512)
    rope = modeling_llama.LlamaRotaryEmbedding(config)
    q = random(2, 4, 33, 64, dtype=torch.float32)   # (batch, H, seq, d)
    k = random(2, 2, 33, 64, seed=1, dtype=torch.float32)
    positions = torch.arange(400, 433)
    cos, sin = rope(q, positions[None].expand(2, -1))
    q_llama, k_llama = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    # Llama's angles m theta_i (about 430 rad here) are rounded in float32, by
    # up to 430 * 2^-24 ~ 3e-5 rad; ours are computed in float64.
    torch.testing.assert_close(apply_rotary(q, positions), q_llama,
                               rtol=0, atol=1e-4)
    torch.testing.assert_close(apply_rotary(k, positions), k_llama,
                               rtol=0, atol=1e-4)


def test_score_depends_only_on_the_offset_and_norms_are_kept():
    q, k = random(64), random(64, seed=1)
    scores = [apply_rotary(q[None], torch.tensor([m + 3]))[0]
              @ apply_rotary(k[None], torch.tensor([m]))[0]
              for m in (0, 5, 100, 4000)]
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(4),
                               rtol=0, atol=1e-11)
    x = random(5, 20, 64)
    torch.testing.assert_close(apply_rotary(x).norm(dim=-1), x.norm(dim=-1))


def test_default_positions_count_from_zero_and_position_zero_is_identity():
    x = random(3, 6, 8)
    torch.testing.assert_close(apply_rotary(x), apply_rotary(x, torch.arange(6)))
    torch.testing.assert_close(apply_rotary(x)[..., 0, :], x[..., 0, :])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_keeps_the_dtype_and_is_as_accurate_as_the_dtype(dtype):
    x = random(4, 50, 32)
    positions = torch.arange(1000, 1050)
    got = apply_rotary(x.to(dtype), positions)
    assert got.dtype == dtype
    expected = apply_rotary(x.to(dtype).double(), positions)
    eps = torch.finfo(dtype).eps
    assert (got.double() - expected).abs().max() < 8 * eps * x.abs().max()


def test_bad_inputs_name_the_shapes():
    with pytest.raises(ValueError, match=r"\(3, 5\).*even"):
        apply_rotary(random(3, 5))
    with pytest.raises(ValueError, match=r"\(8,\)"):
        apply_rotary(random(8))
    with pytest.raises(ValueError, match=r"positions \(4,\).*\(6,\)"):
        apply_rotary(random(6, 8), torch.arange(4))
    with pytest.raises(ValueError, match="integers"):
        apply_rotary(random(6, 8), torch.arange(6.0))
    with pytest.raises(ValueError, match="base"):
        apply_rotary(random(6, 8), base=1.0)
