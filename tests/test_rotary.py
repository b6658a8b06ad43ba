"""apply_rotary against independent references: a rotation matrix built entry by
entry, the complex-number (interleaved) form, and Llama's implementation in
Hugging Face transformers."""

import copy
import math

import pytest
import torch

from attention_course import apply_rotary, rotary_attention_factor, rotary_frequencies
from helpers.rotary_reference import rotate_by_matrices


def complex_rotary(x, positions, base=10000.0):
    """RoPE in Meta's original form: adjacent dimensions (2i, 2i+1) as one
    complex number, multiplied by exp(i m theta_i). x (seq, head_dim)."""
    head_dim = x.shape[-1]
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    turns = torch.polar(
        torch.ones(len(positions), head_dim // 2, dtype=torch.float64),
        positions.double()[:, None] * theta,
    )
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
    torch.testing.assert_close(apply_rotary(x, positions), expected, rtol=0, atol=1e-12)


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

    config = LlamaConfig(
        hidden_size=256, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512
    )
    rope = modeling_llama.LlamaRotaryEmbedding(config)
    q = random(2, 4, 33, 64, dtype=torch.float32)  # (batch, H, seq, d)
    k = random(2, 2, 33, 64, seed=1, dtype=torch.float32)
    positions = torch.arange(400, 433)
    cos, sin = rope(q, positions[None].expand(2, -1))
    q_llama, k_llama = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin)
    # Llama's angles m theta_i (about 430 rad here) are rounded in float32, by
    # up to 430 * 2^-24 ~ 3e-5 rad; ours are computed in float64.
    torch.testing.assert_close(apply_rotary(q, positions), q_llama, rtol=0, atol=1e-4)
    torch.testing.assert_close(apply_rotary(k, positions), k_llama, rtol=0, atol=1e-4)


def test_score_depends_only_on_the_offset_and_norms_are_kept():
    q, k = random(64), random(64, seed=1)
    scores = [
        apply_rotary(q[None], torch.tensor([m + 3]))[0]
        @ apply_rotary(k[None], torch.tensor([m]))[0]
        for m in (0, 5, 100, 4000)
    ]
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(4), rtol=0, atol=1e-11)
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


# ---------------------------------------------------------------- RoPE scaling
# Real configs' rope_parameters (their config.json files; Qwen2.5's is the
# yarn block its model card recommends for contexts beyond 32,768 tokens):
# (name, config class, config arguments, head_dim, seq_len for "dynamic")
LLAMA_31_8B = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def llama(name, hidden, heads, context, rope, head_dim):
    """A case: (name, transformers' config class, its arguments, the head size)."""
    arguments = dict(
        hidden_size=hidden,
        num_attention_heads=heads,
        max_position_embeddings=context,
        rope_parameters=rope,
    )
    return name, "LlamaConfig", arguments, head_dim


REAL_CONFIGS = [
    (
        "Llama 3.1 8B",
        "LlamaConfig",
        dict(
            hidden_size=4096,
            num_attention_heads=32,
            max_position_embeddings=131072,
            rope_parameters=LLAMA_31_8B,
        ),
        128,
    ),
    (
        "Llama 3.2 1B",
        "LlamaConfig",
        dict(
            hidden_size=2048,
            num_attention_heads=32,
            head_dim=64,
            max_position_embeddings=131072,
            rope_parameters={**LLAMA_31_8B, "factor": 32.0},
        ),
        64,
    ),
    (
        "Qwen2.5 7B, yarn",
        "Qwen2Config",
        dict(
            hidden_size=3584,
            num_attention_heads=28,
            max_position_embeddings=131072,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 1e6,
                "factor": 4.0,
                "original_max_position_embeddings": 32768,
            },
        ),
        128,
    ),
    (
        "DeepSeek-V3, yarn with mscale",
        "DeepseekV3Config",
        dict(
            max_position_embeddings=163840,
            rope_parameters={
                "type": "yarn",
                "rope_theta": 10000.0,
                "factor": 40.0,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096,
            },
        ),
        64,
    ),
    ("gpt-oss, yarn without truncation", "GptOssConfig", {}, 64),
    llama(
        "Vicuna 7B v1.5 16k, linear",
        hidden=4096,
        heads=32,
        context=16384,
        rope={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
        head_dim=128,
    ),
]
DYNAMIC = llama(
    "Llama 2 7B with dynamic NTK, factor 2",
    hidden=4096,
    heads=32,
    context=4096,
    rope={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    head_dim=128,
)


def transformers_config(class_name, arguments):
    import transformers

    return getattr(transformers, class_name)(**copy.deepcopy(arguments))


def transformers_frequencies(config, seq_len=None):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    kind = config.rope_parameters["rope_type"]
    return ROPE_INIT_FUNCTIONS[kind](config, device=None, seq_len=seq_len)


def assert_close_relative(ours, theirs):
    """transformers computes in float32: equal to a few float32 roundings."""
    relative = (ours - theirs.double()).abs() / theirs.double()
    assert relative.max() < 1e-6, relative.max()


@pytest.mark.parametrize(
    "name, class_name, arguments, head_dim", REAL_CONFIGS, ids=[c[0] for c in REAL_CONFIGS]
)
def test_scaled_frequencies_equal_transformers_on_real_configs(
    name, class_name, arguments, head_dim
):
    config = transformers_config(class_name, arguments)
    theirs, attention_factor = transformers_frequencies(config)
    # the config's own rope_parameters, as transformers standardised them
    scaling = dict(config.rope_parameters)
    ours = rotary_frequencies(head_dim, scaling["rope_theta"], scaling=scaling, dtype=torch.float64)
    assert_close_relative(ours, theirs)
    assert math.isclose(rotary_attention_factor(scaling), attention_factor, rel_tol=1e-12)
    unscaled = rotary_frequencies(head_dim, scaling["rope_theta"], dtype=torch.float64)
    assert not torch.allclose(ours, unscaled)  # the case scales something


# a second dynamic config: another C, factor and head size
DYNAMIC_SMALL = llama(
    "a small Llama with dynamic NTK, factor 4",
    hidden=512,
    heads=8,
    context=1000,
    rope={"rope_type": "dynamic", "rope_theta": 50000.0, "factor": 4.0},
    head_dim=64,
)


@pytest.mark.parametrize("case", [DYNAMIC, DYNAMIC_SMALL], ids=lambda case: case[0])
@pytest.mark.parametrize("seq_len", [None, 1000, 4096, 6000, 16384])
def test_dynamic_frequencies_equal_transformers_at_each_length(case, seq_len):
    """A real "dynamic" rope_parameters dict as it stands (it holds no C),
    with context= the config's max_position_embeddings, as transformers
    takes it."""
    _, class_name, arguments, head_dim = case
    config = transformers_config(class_name, arguments)
    theirs, _ = transformers_frequencies(config, seq_len)
    scaling = dict(config.rope_parameters)
    assert "original_max_position_embeddings" not in scaling
    context, base = config.max_position_embeddings, scaling["rope_theta"]
    ours = rotary_frequencies(
        head_dim, base, scaling=scaling, seq_len=seq_len, context=context, dtype=torch.float64
    )
    assert_close_relative(ours, theirs)
    if seq_len is None or seq_len <= context:  # unchanged up to C
        torch.testing.assert_close(ours, rotary_frequencies(head_dim, base, dtype=torch.float64))
    else:
        assert not torch.allclose(ours, rotary_frequencies(head_dim, base, dtype=torch.float64))
    # C written into the dict instead gives the same frequencies
    with_key = {**scaling, "original_max_position_embeddings": context}
    torch.testing.assert_close(
        rotary_frequencies(head_dim, base, scaling=with_key, seq_len=seq_len, dtype=torch.float64),
        ours,
        rtol=0,
        atol=0,
    )


def test_dynamic_needs_its_context_once():
    dynamic = {"rope_type": "dynamic", "factor": 2.0}
    with pytest.raises(ValueError, match="context"):
        rotary_frequencies(64, scaling=dynamic, seq_len=5000)
    with pytest.raises(ValueError, match="context"):
        apply_rotary(random(2, 5, 8), scaling=dynamic)
    with pytest.raises(ValueError, match="disagrees"):
        rotary_frequencies(
            64, scaling={**dynamic, "original_max_position_embeddings": 4096}, context=2048
        )
    # the attention factor of "dynamic" is 1 and needs no C
    assert rotary_attention_factor(dynamic) == 1.0


@pytest.mark.parametrize(
    "module, class_name, scaling, positions",
    [
        (
            "qwen2",
            "Qwen2",
            {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 256,
            },
            range(600, 633),
        ),
        (
            "llama",
            "Llama",
            {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
            range(500, 533),
        ),
        (
            "llama",
            "Llama",
            {**LLAMA_31_8B, "rope_theta": 10000.0, "original_max_position_embeddings": 256},
            range(600, 633),
        ),
    ],
    ids=["yarn", "dynamic", "llama3"],
)
def test_rotation_with_scaling_equals_transformers(module, class_name, scaling, positions):
    """Rotated queries as transformers' rotary module and apply_rotary_pos_emb
    make them, attention factor included."""
    import importlib

    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    config = transformers_config(
        f"{class_name}Config",
        dict(
            hidden_size=256,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            rope_parameters=scaling,
        ),
    )
    rope = getattr(modeling, f"{class_name}RotaryEmbedding")(config)
    q = random(1, 4, len(positions), 64, dtype=torch.float32)
    positions = torch.tensor(list(positions))
    cos, sin = rope(q, positions[None])
    theirs, _ = modeling.apply_rotary_pos_emb(q, q, cos, sin)
    # the config's own dict; "dynamic" takes C from context, as transformers
    # takes it from max_position_embeddings
    ours = apply_rotary(q, positions, 10000.0, scaling=dict(config.rope_parameters), context=256)
    # angles of about 600 rad rounded in float32 by up to 600 * 2^-24 rad
    torch.testing.assert_close(ours, theirs, rtol=0, atol=3e-4)


def test_position_interpolation_is_dividing_the_positions():
    x = random(3, 40, 16)
    positions = torch.arange(0, 4 * 40, 4)
    linear = {"rope_type": "linear", "factor": 4.0}
    torch.testing.assert_close(
        apply_rotary(x, positions, scaling=linear),
        apply_rotary(x, positions // 4),
        rtol=0,
        atol=1e-12,
    )


def test_ntk_base_change_keeps_the_fastest_pair_and_divides_the_slowest():
    """Dynamic NTK with factor 1 at n = 8 C is the static base change by 8."""
    head_dim, context = 32, 512
    dynamic = {"rope_type": "dynamic", "factor": 1.0, "original_max_position_embeddings": context}
    ours = rotary_frequencies(head_dim, scaling=dynamic, seq_len=8 * context, dtype=torch.float64)
    base_changed = 10000.0 * 8 ** (head_dim / (head_dim - 2))
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    torch.testing.assert_close(ours, base_changed**-exponents, rtol=1e-12, atol=0)
    theta = rotary_frequencies(head_dim, dtype=torch.float64)
    assert ours[0] == theta[0]
    torch.testing.assert_close(ours[-1], theta[-1] / 8, rtol=1e-12, atol=0)


def test_llama3_keeps_fast_pairs_and_divides_slow_ones():
    theta = rotary_frequencies(128, 500000.0)
    scaled = rotary_frequencies(128, 500000.0, scaling=LLAMA_31_8B)
    wavelengths = 2 * math.pi / theta
    fast, slow = wavelengths < 8192 / 4, wavelengths > 8192 / 1
    torch.testing.assert_close(scaled[fast], theta[fast], rtol=0, atol=0)
    torch.testing.assert_close(scaled[slow], theta[slow] / 8)
    between = ~fast & ~slow
    assert between.any()
    assert ((scaled[between] < theta[between]) & (scaled[between] > theta[between] / 8)).all()


def test_yarn_scales_norms_by_its_attention_factor_and_stays_relative():
    yarn = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 128}
    factor = rotary_attention_factor(yarn)
    assert math.isclose(factor, 0.1 * math.log(16.0) + 1, rel_tol=1e-15)
    x = random(5, 20, 32)
    rotated = apply_rotary(x, scaling=yarn)
    torch.testing.assert_close(rotated.norm(dim=-1), factor * x.norm(dim=-1))
    q, k = random(32), random(32, seed=1)
    scores = [
        apply_rotary(q[None], torch.tensor([m + 7]), scaling=yarn)[0]
        @ apply_rotary(k[None], torch.tensor([m]), scaling=yarn)[0]
        for m in (0, 300, 5000)
    ]
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(3), rtol=0, atol=1e-10)


def test_bad_scaling_names_the_key():
    x = random(6, 8)
    with pytest.raises(ValueError, match="rope_type"):
        apply_rotary(x, scaling={"rope_type": "longrope"})
    with pytest.raises(ValueError, match=r"missing \['factor'\]"):
        apply_rotary(x, scaling={"rope_type": "linear"})
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        apply_rotary(
            x, scaling={"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}
        )
    with pytest.raises(ValueError, match="rope_theta.*disagrees.*base"):
        apply_rotary(x, base=500000.0, scaling=LLAMA_31_8B | {"rope_theta": 10000.0})
    with pytest.raises(ValueError, match="low_freq_factor.*below"):
        rotary_frequencies(
            8, scaling={**LLAMA_31_8B, "rope_theta": 10000.0, "low_freq_factor": 4.0}
        )
    with pytest.raises(TypeError, match="scaling must be a dict"):
        rotary_frequencies(8, scaling=[("rope_type", "linear")])
