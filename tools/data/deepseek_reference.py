"""Write data/deepseek_v3_mla_reference.json: what `transformers`' DeepseekV3Attention (multi-head
latent attention) computes on a small random configuration, and the attention sizes of
DeepseekV3Config's and DeepseekV2Config's defaults. Chapter 15 checks the course's
MultiHeadLatentAttention against these numbers without importing transformers.

The record holds the layer's weights (its state dict, float64, every digit), an input of
SEQ tokens, the output of one causal pass, the outputs of PREFILL tokens followed by one token at
a time through transformers' DynamicCache, and what that cache holds at the end (the latents and
the rotated RoPE keys).

transformers computes RoPE's angles and its RMSNorms in float32 whatever the layer's dtype, and its
eager attention takes the softmax in float32: in float64 this reference therefore uses the SDPA
attention (float64 throughout), cos and sin from float64 angles (the formula of
DeepseekV3RotaryEmbedding), and DeepseekV3RMSNorm's formula without its cast to float32, so that
the comparison can be made to 1e-10. tests/test_latent.py checks that the float32 originals differ
from these only by float32 rounding, and recomputes this file.

Run once by hand (`python -m tools.data.deepseek_reference`); record the printed SHA-256 in
data/README.md and in attention_course.data.DEEPSEEK_REFERENCE_SHA256.
"""

import contextlib
import hashlib
import json

import torch

from tools import ROOT

OUT = ROOT / "data" / "deepseek_v3_mla_reference.json"
# A small DeepSeek-V3 attention layer: every size different, so that a mix-up shows.
CONFIG = dict(
    hidden_size=16,
    num_attention_heads=4,
    num_key_value_heads=4,
    kv_lora_rank=8,
    q_lora_rank=12,
    qk_nope_head_dim=6,
    qk_rope_head_dim=4,
    v_head_dim=3,
    num_hidden_layers=1,
    max_position_embeddings=64,
)
SEQ, PREFILL, SEED = 6, 4, 15
ATTENTION_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "rope_interleave",
)


def config(**overrides):
    """A DeepseekV3Config of the small layer (overrides change fields), SDPA attention."""
    from transformers import DeepseekV3Config

    made = DeepseekV3Config(**{**CONFIG, **overrides})
    made._attn_implementation = "sdpa"
    return made


def rms_norm_in_its_dtype(self, x):
    """DeepseekV3RMSNorm's formula without its cast to float32."""
    return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


@contextlib.contextmanager
def rms_norm_in_float64():
    """Within the block, DeepseekV3RMSNorm computes in its input's dtype."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek

    original = deepseek.DeepseekV3RMSNorm.forward
    deepseek.DeepseekV3RMSNorm.forward = rms_norm_in_its_dtype
    try:
        yield
    finally:
        deepseek.DeepseekV3RMSNorm.forward = original


def random_layer(made, seed=SEED, dtype=torch.float64):
    """transformers' DeepseekV3Attention with random weights (std 0.5), in eval mode."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    torch.manual_seed(seed)
    return randomized(DeepseekV3Attention(made, layer_idx=0), seed, dtype)


def randomized(module, seed, dtype=torch.float64):
    """The module in dtype, eval mode, every parameter (norms included) drawn N(0, 0.5^2)."""
    module = module.to(dtype).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(
                0.5 * torch.randn(parameter.shape, generator=generator, dtype=torch.float64)
            )
    return module


def cos_sin(made, positions, dtype=torch.float64):
    """DeepseekV3RotaryEmbedding's (cos, sin) (1, L, rope_dim) from float64 angles."""
    dim = made.qk_rope_head_dim
    inverse = made.rope_parameters["rope_theta"] ** (
        -torch.arange(0, dim, 2, dtype=torch.float64) / dim
    )
    angles = positions.to(torch.float64)[None, :, None] * inverse  # (1, L, dim / 2)
    angles = torch.cat([angles, angles], dim=-1)  # as transformers lays out
    return angles.cos().to(dtype), angles.sin().to(dtype)


def causal_bias(n_queries, n_keys, dtype=torch.float64):
    """Additive mask (1, 1, L, S): 0 where query t may see key s <= t (new queries last)."""
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool).tril(n_keys - n_queries)
    return torch.zeros(n_queries, n_keys, dtype=dtype).masked_fill(~allowed, -torch.inf)[None, None]


def run(layer, made, x, chunks, rotary=cos_sin):
    """Feed x (batch, SEQ, hidden) to the layer in chunks (sizes); with more than one chunk
    through a DynamicCache. Returns (outputs (batch, SEQ, hidden), cache or None)."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=made) if len(chunks) > 1 else None
    outputs, start = [], 0
    with torch.no_grad():
        for size in chunks:
            positions = torch.arange(start, start + size)
            output, _ = layer(
                x[:, start : start + size],
                rotary(made, positions, x.dtype),
                causal_bias(size, start + size, x.dtype),
                past_key_values=cache,
            )
            outputs.append(output)
            start += size
    return torch.cat(outputs, dim=1), cache


def cached(cache):
    """What a DynamicCache of one MLA layer holds: latents (batch, S, kv_rank) and rotated
    RoPE keys (batch, S, rope_dim), both stored as one-head tensors."""
    layer = cache.layers[0]
    return layer.keys[:, 0], layer.values[:, 0]


def default_sizes():
    """The attention fields of DeepseekV3Config() and DeepseekV2Config(), and the parameters
    of DeepseekV3Attention at DeepseekV3Config's defaults (built without memory)."""
    from transformers import DeepseekV2Config, DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    v3, v2 = DeepseekV3Config(), DeepseekV2Config()
    with torch.device("meta"):
        parameters = sum(p.numel() for p in DeepseekV3Attention(v3, 0).parameters())
    return (
        {name: getattr(v3, name) for name in ATTENTION_FIELDS},
        {name: getattr(v2, name) for name in ATTENTION_FIELDS if hasattr(v2, name)},
        parameters,
    )


def record():
    import transformers

    made = config()
    layer = random_layer(made)
    x = 0.5 * torch.randn(
        1,
        SEQ,
        CONFIG["hidden_size"],
        generator=torch.Generator().manual_seed(SEED + 1),
        dtype=torch.float64,
    )
    with rms_norm_in_float64():
        whole, _ = run(layer, made, x, [SEQ])
        stepped, cache = run(layer, made, x, [PREFILL] + [1] * (SEQ - PREFILL))
    latents, rope_keys = cached(cache)
    v3, v2, parameters = default_sizes()
    return {
        "computed_by": f"transformers {transformers.__version__} DeepseekV3Attention, float64, "
        "SDPA attention, RoPE angles and RMSNorms in float64 "
        "(tools/data/deepseek_reference.py)",
        "config": {
            **CONFIG,
            "rope_theta": made.rope_parameters["rope_theta"],
            "rope_interleave": made.rope_interleave,
        },
        "weights": {name: tensor.tolist() for name, tensor in layer.state_dict().items()},
        "x": x.tolist(),
        "output": whole.tolist(),
        "prefill": PREFILL,
        "cached_output": stepped.tolist(),
        "cached_latents": latents.tolist(),
        "cached_rope_keys": rope_keys.tolist(),
        "deepseek_v3_config_defaults": v3,
        "deepseek_v2_config_defaults": v2,
        "deepseek_v3_attention_parameters": parameters,
    }


def main():
    OUT.write_text(json.dumps(record(), indent=None) + "\n")
    print(OUT.name, "sha256", hashlib.sha256(OUT.read_bytes()).hexdigest())


if __name__ == "__main__":
    main()
