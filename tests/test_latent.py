"""Multi-head latent attention (chapter 15) against transformers' DeepseekV3Attention with the
weights copied in (float64 to 1e-10: causal, and prefill then decode through the caches), against
a brute-force loop over queries and heads built from the paper's formulas, and the absorbed path
against the explicit one (1e-12); the latent cache's bytes; the stored reference of the chapter.

What is tested, in the names of the paper and of transformers (the layer's sizes and weights):

Arguments of MultiHeadLatentAttention (the paper's symbols; the names of transformers'
DeepseekV3Config):

- embed_dim   d, the model's width (hidden_size)
- num_heads   n_h, the number of heads (num_attention_heads)
- kv_rank     d_c, the size of the cached latent c (kv_lora_rank)
- q_rank      d_c', the size of the queries' latent (q_lora_rank); None: the queries are
              projected from h at full rank, with no query latent (DeepSeek-V2-Lite)
- head_dim    d_h, each head's content query and key size (qk_nope_head_dim);
              default embed_dim // num_heads
- rope_dim    d_h^R, the size of the RoPE part of each query and of the shared RoPE key
              (qk_rope_head_dim), even, >= 2; default head_dim // 2 (rounded down to an
              even number, at least 2), as in DeepSeek-V2/V3
- value_dim   each head's value size (v_head_dim); default head_dim
- base        RoPE's base (rope_theta); plain RoPE (no YaRN scaling)
- norm_eps    the epsilon of the two RMSNorms, on c and on c_Q (DeepSeek's 1e-6)

The layer's weights (nn.Linear without bias, stored (out, in) as PyTorch does) and where
`from_deepseek` finds them in a DeepseekV3Attention's state dict:

- kv_down   W_DKV  (kv_rank, d)              kv_a_proj_with_mqa, its first kv_rank rows
- k_rope    W_KR   (rope_dim, d)             kv_a_proj_with_mqa, its last rope_dim rows
- kv_norm   RMSNorm(kv_rank)                 kv_a_layernorm
- k_up      W_UK   (num_heads * head_dim, kv_rank)   kv_b_proj: per head, the first head_dim rows
- v_up      W_UV   (num_heads * value_dim, kv_rank)  kv_b_proj: per head, the last value_dim rows
- q_down    W_DQ   (q_rank, d)               q_a_proj        (None when q_rank is None)
- q_norm    RMSNorm(q_rank)                  q_a_layernorm   (None when q_rank is None)
- q_up      W_UQ   (num_heads * head_dim, q_rank or d)   q_b_proj (or q_proj): per head, the
                                                          first head_dim rows
- q_rope    W_QR   (num_heads * rope_dim, q_rank or d)   q_b_proj (or q_proj): per head, the
                                                          last rope_dim rows
- out_proj  W_O    (d, num_heads * value_dim)             o_proj

RoPE pairs dimension i with i + rope_dim / 2, as `apply_rotary`. DeepSeek's checkpoints pair
neighbours (2i, 2i + 1) instead (transformers' `rope_interleave=True`); `from_deepseek` reorders
the rows of W_KR and W_QR to the half-split pairing, which gives the same scores and the same
rotated keys that transformers caches.
"""

import math

import pytest
import torch

from attention_course import LatentCache, MultiHeadLatentAttention, data, latent_cache_bytes
from helpers.mla_reference import mla_by_loops
from tools.data import deepseek_reference as reference

pytest.importorskip("transformers")


def random_input(batch=2, seq=7, width=16, seed=0, dtype=torch.float64):
    return 0.5 * torch.randn(
        batch, seq, width, generator=torch.Generator().manual_seed(seed), dtype=dtype
    )


def course_copy(layer, made):
    return MultiHeadLatentAttention.from_deepseek(
        layer.state_dict(),
        made.num_attention_heads,
        interleaved=made.rope_interleave,
        base=made.rope_parameters["rope_theta"],
    )


CONFIGS = {
    "small": {},
    "no query latent (V2-Lite)": dict(q_lora_rank=None),
    "rope_interleave=False": dict(rope_interleave=False),
    "wider": dict(
        hidden_size=24,
        num_attention_heads=3,
        num_key_value_heads=3,
        kv_lora_rank=10,
        q_lora_rank=7,
        qk_nope_head_dim=5,
        qk_rope_head_dim=6,
        v_head_dim=8,
    ),
}


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS)
@pytest.mark.parametrize("absorb", [False, True], ids=["explicit", "absorbed"])
def test_equals_deepseek_v3_attention_in_float64(overrides, absorb):
    made = reference.config(**overrides)
    theirs = reference.random_layer(made)
    ours = course_copy(theirs, made)
    x = random_input(width=made.hidden_size)
    with reference.rms_norm_in_float64():
        expected, _ = reference.run(theirs, made, x, [x.shape[1]])
    with torch.no_grad():
        output, weights = ours(x, absorb=absorb)
    torch.testing.assert_close(output, expected, rtol=0, atol=1e-10)
    assert weights.shape == (2, made.num_attention_heads, 7, 7)
    assert (weights.triu(1) == 0).all()  # causal
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(2, made.num_attention_heads, 7, dtype=torch.float64)
    )


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS)
def test_prefill_then_decode_equals_recomputation_and_transformers_cache(overrides):
    made = reference.config(**overrides)
    theirs = reference.random_layer(made, seed=3)
    ours = course_copy(theirs, made)
    x = random_input(width=made.hidden_size, seq=9, seed=1)
    chunks = [4, 1, 3, 1]
    with reference.rms_norm_in_float64():
        whole, _ = reference.run(theirs, made, x, [9])
        stepped, their_cache = reference.run(theirs, made, x, chunks)
    torch.testing.assert_close(stepped, whole, rtol=0, atol=1e-12)  # transformers' own cache
    with torch.no_grad():
        full, _ = ours(x)
        for absorb in (False, True):
            cache, pieces, start = LatentCache(), [], 0
            for size in chunks:
                pieces.append(ours(x[:, start : start + size], cache, absorb=absorb)[0])
                start += size
            torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=0, atol=1e-12)
            torch.testing.assert_close(torch.cat(pieces, 1), stepped, rtol=0, atol=1e-10)
            latents, rope_keys = reference.cached(their_cache)
            torch.testing.assert_close(cache.latents, latents, rtol=0, atol=1e-12)
            torch.testing.assert_close(cache.rope_keys, rope_keys, rtol=0, atol=1e-12)
            assert cache.seen == len(cache) == 9
            assert cache.key_positions.tolist() == list(range(9))


def test_the_float64_formulas_are_transformers_own_up_to_float32_rounding():
    """The reference replaces three float32 steps of transformers (RoPE's angles, RMSNorm, the
    eager softmax) by float64 ones; unpatched, in float32, the course's layer agrees to 1e-5."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    made = reference.config()
    positions = torch.arange(40)
    cos, sin = DeepseekV3RotaryEmbedding(made)(torch.ones(1, dtype=torch.float32), positions[None])
    ours_cos, ours_sin = reference.cos_sin(made, positions)
    torch.testing.assert_close(cos.double(), ours_cos, rtol=0, atol=1e-5)
    torch.testing.assert_close(sin.double(), ours_sin, rtol=0, atol=1e-5)
    for implementation in ("eager", "sdpa"):
        made._attn_implementation = implementation
        theirs = reference.random_layer(made, dtype=torch.float32)
        rotary = DeepseekV3RotaryEmbedding(made)
        x = random_input(dtype=torch.float32, seq=12)
        expected, _ = reference.run(
            theirs, made, x, [12], rotary=lambda config, p, dtype: rotary(x, p[None])
        )
        with torch.no_grad():
            output, _ = course_copy(theirs, made)(x)
        torch.testing.assert_close(output, expected, rtol=0, atol=1e-5)


def test_deepseeks_interleaved_rope_rows_must_be_reordered():
    made = reference.config()
    theirs = reference.random_layer(made)
    x = random_input()
    with reference.rms_norm_in_float64():
        expected, _ = reference.run(theirs, made, x, [7])
    as_if_half_split = MultiHeadLatentAttention.from_deepseek(
        theirs.state_dict(), 4, interleaved=False
    )
    with torch.no_grad():
        assert (as_if_half_split(x)[0] - expected).abs().max() > 1e-2


def test_parameters_equal_deepseek_v3_attention_at_the_published_shape():
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    v3 = DeepseekV3Config()
    with torch.device("meta"):
        theirs = DeepseekV3Attention(v3, 0)
        ours = MultiHeadLatentAttention(
            v3.hidden_size,
            v3.num_attention_heads,
            v3.kv_lora_rank,
            v3.q_lora_rank,
            v3.qk_nope_head_dim,
            v3.qk_rope_head_dim,
            v3.v_head_dim,
        )
    count = sum(p.numel() for p in ours.parameters())
    assert count == sum(p.numel() for p in theirs.parameters()) == 187_107_328
    shapes = {name: tuple(p.shape) for name, p in ours.named_parameters()}
    assert shapes["kv_down.weight"] == (512, 7168) and shapes["k_up.weight"] == (128 * 128, 512)


# ------------------------------------------------------------------ the formulas, by loops


@pytest.mark.parametrize("absorb", [False, True], ids=["explicit", "absorbed"])
def test_equals_the_formulas_computed_by_loops(absorb):
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(
        12, 3, kv_rank=5, q_rank=7, head_dim=4, rope_dim=6, value_dim=2
    ).double()
    x = random_input(batch=2, seq=6, width=12, seed=4)
    with torch.no_grad():
        output, _ = layer(x, absorb=absorb)
    for sequence in range(2):
        torch.testing.assert_close(
            output[sequence], mla_by_loops(layer, x[sequence]), rtol=0, atol=1e-12
        )


# --------------------------------------------------------------- absorbed against explicit

SHAPES = [
    dict(embed_dim=32, num_heads=4, kv_rank=8),
    dict(embed_dim=24, num_heads=2, kv_rank=16, q_rank=6, head_dim=10, rope_dim=2, value_dim=7),
    dict(embed_dim=20, num_heads=5, kv_rank=3, q_rank=9, rope_dim=8),
]


@pytest.mark.parametrize("sizes", SHAPES, ids=lambda sizes: str(sizes))
def test_absorbed_equals_explicit_in_float64(sizes):
    torch.manual_seed(1)
    layer = MultiHeadLatentAttention(**sizes).double()
    x = random_input(batch=3, seq=11, width=sizes["embed_dim"], seed=2)
    with torch.no_grad():
        explicit, weights = layer(x)
        absorbed, absorbed_weights = layer(x, absorb=True)
        torch.testing.assert_close(absorbed, explicit, rtol=0, atol=1e-12)
        torch.testing.assert_close(absorbed_weights, weights, rtol=0, atol=1e-12)
        cache = LatentCache()
        steps = [layer(x[:, t : t + 1], cache, absorb=True)[0] for t in range(11)]
    torch.testing.assert_close(torch.cat(steps, 1), explicit, rtol=0, atol=1e-12)


def test_gradients_agree_on_both_paths():
    torch.manual_seed(2)
    layer = MultiHeadLatentAttention(16, 2, kv_rank=6, q_rank=5).double()
    x = random_input(batch=1, seq=5, width=16)
    grads = []
    for absorb in (False, True):
        layer.zero_grad()
        layer(x, absorb=absorb)[0].square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in layer.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=1e-10)


# ------------------------------------------------------------------------ the latent cache


@pytest.mark.parametrize(
    "dtype, size", [(torch.bfloat16, 2), (torch.float32, 4), (torch.float64, 8)]
)
def test_latent_cache_bytes_equal_the_formula(dtype, size):
    torch.manual_seed(3)
    layer = MultiHeadLatentAttention(32, 4, kv_rank=12, rope_dim=6).to(dtype)
    cache = LatentCache()
    with torch.no_grad():
        layer(random_input(batch=2, seq=5, width=32, dtype=dtype), cache)
        layer(random_input(batch=2, seq=3, width=32, dtype=dtype, seed=1), cache)
    assert cache.latents.shape == (2, 8, 12) and cache.rope_keys.shape == (2, 8, 6)
    assert cache.nbytes == latent_cache_bytes(
        batch_size=2, seq_len=8, num_layers=1, kv_rank=12, rope_dim=6, bytes_per_element=size
    )
    assert cache.nbytes == 2 * 8 * (12 + 6) * size
    assert LatentCache().nbytes == 0 and len(LatentCache()) == 0


def test_cache_refuses_what_does_not_continue_it():
    layer = MultiHeadLatentAttention(16, 2, kv_rank=4)
    cache = LatentCache()
    with torch.no_grad():
        layer(torch.randn(2, 3, 16), cache)
        with pytest.raises(ValueError, match=r"latent \(1, 1, 4\).*do not match the cache"):
            layer(torch.randn(1, 1, 16), cache)
    with pytest.raises(ValueError, match=r"latent \(2, 3, 4\).*rope_key \(2, 2, 4\)"):
        LatentCache().update(torch.randn(2, 3, 4), torch.randn(2, 2, 4))
    with pytest.raises(TypeError, match="cache must be a LatentCache"):
        layer(torch.randn(2, 3, 16), cache=object())


def test_half_precision_follows_the_input_and_stays_close():
    torch.manual_seed(4)
    layer = MultiHeadLatentAttention(32, 4, kv_rank=8, q_rank=12)
    x = random_input(batch=2, seq=9, width=32, dtype=torch.float32)
    with torch.no_grad():
        reference_output, _ = layer.double()(x.double())
        for dtype, atol in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2), (torch.float16, 5e-3)):
            for absorb in (False, True):
                output, weights = layer.to(dtype)(x.to(dtype), absorb=absorb)
                assert output.dtype == weights.dtype == dtype
                torch.testing.assert_close(output.double(), reference_output, rtol=0, atol=atol)


def test_sizes_and_their_defaults():
    layer = MultiHeadLatentAttention(64, 4, kv_rank=16)
    assert (layer.head_dim, layer.rope_dim, layer.value_dim) == (16, 8, 16)
    assert layer.q_down is None and layer.q_norm is None
    assert layer.q_up.weight.shape == (64, 64) and layer.scale == 1 / math.sqrt(24)
    with pytest.raises(ValueError, match="rope_dim must be even"):
        MultiHeadLatentAttention(64, 4, kv_rank=16, rope_dim=3)
    with pytest.raises(ValueError, match="give head_dim"):
        MultiHeadLatentAttention(30, 4, kv_rank=16)
    assert MultiHeadLatentAttention(30, 4, kv_rank=16, head_dim=5).rope_dim == 2


def test_from_deepseek_refuses_a_wrong_state_dict():
    state = reference.random_layer(reference.config()).state_dict()
    with pytest.raises(ValueError, match="lacks"):
        MultiHeadLatentAttention.from_deepseek({"o_proj.weight": state["o_proj.weight"]}, 4)
    with pytest.raises(ValueError, match="does not divide"):
        MultiHeadLatentAttention.from_deepseek(state, 7)
    with pytest.raises(ValueError, match="several dtypes"):
        MultiHeadLatentAttention.from_deepseek(
            {**state, "o_proj.weight": state["o_proj.weight"].float()}, 4
        )
    bias = torch.zeros(state["o_proj.weight"].shape[0], dtype=torch.float64)
    with pytest.raises(ValueError, match="o_proj.bias"):  # attention_bias=True
        MultiHeadLatentAttention.from_deepseek({**state, "o_proj.bias": bias}, 4)


# -------------------------------------------------------------------- the stored reference


def test_the_stored_reference_is_what_transformers_computes():
    """data/deepseek_v3_mla_reference.json, recomputed with the pinned transformers."""
    stored = data.load_deepseek_reference()
    fresh = reference.record()
    for name in ("x", "output", "cached_output", "cached_latents", "cached_rope_keys"):
        torch.testing.assert_close(
            stored[name], torch.tensor(fresh[name], dtype=torch.float64), rtol=0, atol=1e-14
        )
    for name, tensor in stored["weights"].items():
        assert torch.equal(tensor, torch.tensor(fresh["weights"][name], dtype=torch.float64))
    for name in (
        "config",
        "deepseek_v3_config_defaults",
        "deepseek_v2_config_defaults",
        "deepseek_v3_attention_parameters",
        "prefill",
    ):
        assert stored[name] == fresh[name], name


def test_the_course_layer_reproduces_the_stored_reference():
    stored = data.load_deepseek_reference()
    layer = MultiHeadLatentAttention.from_deepseek(
        stored["weights"], stored["config"]["num_attention_heads"]
    )
    with torch.no_grad():
        torch.testing.assert_close(layer(stored["x"])[0], stored["output"], rtol=0, atol=1e-10)
        cache, prefill = LatentCache(), stored["prefill"]
        pieces = [layer(stored["x"][:, :prefill], cache)[0]] + [
            layer(stored["x"][:, t : t + 1], cache, absorb=True)[0]
            for t in range(prefill, stored["x"].shape[1])
        ]
    torch.testing.assert_close(torch.cat(pieces, 1), stored["cached_output"], rtol=0, atol=1e-10)
    torch.testing.assert_close(cache.latents, stored["cached_latents"], rtol=0, atol=1e-12)
    torch.testing.assert_close(cache.rope_keys, stored["cached_rope_keys"], rtol=0, atol=1e-12)
