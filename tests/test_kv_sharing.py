"""Cross-layer KV sharing (attention_course.costs.kv_sharing, attention_costs on Gemma 3n;
chapter 17), against the pinned transformers' Gemma 3n.

(a) Which layer reads which keys and values: kv_sharing against the `kv_shared_layer_index` and
    `is_kv_shared_layer` of transformers' own Gemma3nTextAttention layers, on tiny configs, and
    against a brute-force rule written here.
(b) Cache bytes: attention_costs on Gemma 3n's sizes (E4B: Gemma3nTextConfig's defaults; E2B:
    30 layers, the last 10 shared, as its released config.json) against a count made from
    transformers' DynamicCache for that config (which layers it gives a cache, full or
    sliding), and on a tiny Gemma3nTextModel against the bytes its cache holds after a prompt.
(c) Attention: the course's attention (projections, RMSNorms, RoPE, KVCache, masks,
    scaled_dot_product_attention) of a layer that keeps its keys and values and of a layer that
    reads them, prefilling then decoding token by token, equals transformers'
    Gemma3nTextAttention through its DynamicCache and `shared_kv_states`, weights copied, in
    float64 within 1e-10 (transformers' RMSNorm computes in float32; the test patches it to
    compute in its input's dtype, and passes RoPE's cos and sin computed in float64).
"""

import contextlib
import math
import types

import pytest
import torch

from attention_course import (
    KVCache,
    apply_rotary,
    attention_costs,
    decoding_mask,
    kv_sharing,
    scaled_dot_product_attention,
)
from helpers.weights import randomized

transformers = pytest.importorskip("transformers")
gemma3n = pytest.importorskip("transformers.models.gemma3n.modeling_gemma3n")

S, F = "sliding_attention", "full_attention"


def tiny_config(layer_types, num_shared, window=3, **sizes):
    """A tiny Gemma3nTextConfig: every size that the attention does not read kept small."""
    sizes = dict(
        dict(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=8), **sizes
    )
    config = transformers.Gemma3nTextConfig(
        num_hidden_layers=len(layer_types),
        layer_types=list(layer_types),
        num_kv_shared_layers=num_shared,
        sliding_window=window,
        vocab_size=12,
        vocab_size_per_layer_input=12,
        hidden_size_per_layer_input=4,
        intermediate_size=8,
        laurel_rank=2,
        altup_num_inputs=2,
        activation_sparsity_pattern=[0.0] * len(layer_types),
        attn_implementation="eager",
        **sizes,
    )
    return config


# ------------------------------------------------------------- (a) which layer reads which


def sources_by_brute_force(layer_types, num_shared):
    """For each layer i: i if it is before the shared ones; else the largest j before them with
    layer_types[j] == layer_types[i] (searched one index at a time)."""
    first = len(layer_types) - num_shared
    sources = []
    for i, kind in enumerate(layer_types):
        if i < first:
            sources.append(i)
            continue
        j = first - 1
        while layer_types[j] != kind:
            j -= 1
        sources.append(j)
    return tuple(sources)


PATTERNS = [
    ([S, F, S, F], 2),
    ([S, S, S, S, F] * 3, 5),
    ([S, S, S, S, F] * 4, 10),
    ([F, S, S, F, S, S], 3),
    ([S, F, F], 1),
    ([F, F], 0),
]


@pytest.mark.parametrize("layer_types, num_shared", PATTERNS)
def test_sharing_equals_transformers_layers_and_brute_force(layer_types, num_shared):
    config = tiny_config(layer_types, num_shared)
    sources = kv_sharing(layer_types, num_shared)
    assert sources == sources_by_brute_force(layer_types, num_shared)
    for index in range(len(layer_types)):
        theirs = gemma3n.Gemma3nTextAttention(config, index)
        shared = theirs.is_kv_shared_layer
        assert shared == (sources[index] != index)
        if shared:
            assert theirs.kv_shared_layer_index == sources[index]
            assert not hasattr(theirs, "k_proj")  # no key or value weights at all
        # transformers hands on the K/V of exactly the layers that some shared layer reads
        readers = [j for j in range(len(sources)) if sources[j] == index and j != index]
        assert theirs.store_full_length_kv or not readers


def test_sharing_refuses_what_transformers_could_not_build():
    with pytest.raises(ValueError, match="layer_types: shared layer 3 is 'full'"):
        kv_sharing([S, S, S, F], 1)  # no full layer before sharing starts
    with pytest.raises(ValueError, match="num_kv_shared_layers must leave"):
        kv_sharing([S, F], 2)
    with pytest.raises(ValueError, match="num_kv_shared_layers"):
        kv_sharing([S, F], -1)
    with pytest.raises(TypeError, match="num_kv_shared_layers"):
        kv_sharing([S, F], 1.0)
    with pytest.raises(TypeError, match="layer_types"):
        kv_sharing("full_attention", 0)


# ------------------------------------------------------------------------ (b) cache bytes

E4B = dict()  # Gemma3nTextConfig's defaults are Gemma 3n E4B's text model
E2B = dict(num_hidden_layers=30, num_kv_shared_layers=10)  # E2B's config.json


@pytest.mark.parametrize("sizes", [E4B, E2B], ids=["E4B", "E2B"])
@pytest.mark.parametrize("n", [100, 512, 513, 32_768])
def test_released_sizes_count_only_the_layers_transformers_caches(sizes, n):
    """A count made from transformers: one cache layer per layer it gives a cache (the
    shared ones get none), n tokens in a full one, min(n, w) in a sliding one (the w keys a
    step reads, the package's convention; test_costs checks the w - 1 kept between steps)."""
    config = transformers.Gemma3nTextConfig(**sizes)
    cache = transformers.DynamicCache(config=config)
    token = 2 * config.num_key_value_heads * config.head_dim * 2  # a key and a value, bf16
    counted = sum(
        (min(n, config.sliding_window) if layer.is_sliding else n) * token for layer in cache.layers
    )
    ours = attention_costs(config, n)
    assert ours.cache_bytes == counted
    assert len(cache.layers) == config.num_hidden_layers - config.num_kv_shared_layers
    assert ours.layer_cache_bytes[len(cache.layers) :] == (0,) * config.num_kv_shared_layers
    # without sharing, the same model keeps every layer's cache
    unshared = transformers.Gemma3nTextConfig(**dict(sizes, num_kv_shared_layers=0))
    full_layers = config.layer_types.count(F)
    assert attention_costs(unshared, n).cache_bytes == token * (
        full_layers * n + (config.num_hidden_layers - full_layers) * min(n, config.sliding_window)
    )


def test_both_released_sizes_keep_the_same_twenty_caches():
    e4b, e2b = transformers.Gemma3nTextConfig(**E4B), transformers.Gemma3nTextConfig(**E2B)
    for config in (e4b, e2b):
        kinds = attention_costs(config, 8).layer_kinds
        assert kinds.count("full") == 4 and kinds.count("sliding") == 16
    assert attention_costs(e4b, 4096).cache_bytes == attention_costs(e2b, 4096).cache_bytes
    assert attention_costs(e4b, 4096).flops_per_token > attention_costs(e2b, 4096).flops_per_token


@pytest.mark.parametrize("n", [2, 6])
def test_tiny_model_cache_holds_what_attention_costs_counts(n):
    layer_types, num_shared, window = [S, F, S, F, S, F], 2, 4
    config = tiny_config(layer_types, num_shared, window=window)
    torch.manual_seed(0)
    model = transformers.Gemma3nForCausalLM(config).eval()
    ids = torch.randint(0, 12, (1, n), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    held = [layer.keys.numel() * 4 + layer.values.numel() * 4 for layer in cache.layers]
    ours = attention_costs(config, n, bytes_per_element=4)
    token = 2 * config.num_key_value_heads * config.head_dim * 4
    # a sliding layer keeps w - 1 tokens between steps, the package counts the w a step reads
    missing = sum(token for kind in ours.layer_kinds if kind == "sliding" and n >= window)
    assert ours.cache_bytes == sum(held) + missing
    assert len(held) == len(layer_types) - num_shared


def test_costs_refuse_a_sharing_count_transformers_would_ignore():
    """transformers shares nothing when num_kv_shared_layers covers every layer (its
    `layer_idx >= first > 0`): the package refuses that count, and one that is no integer."""
    for count, error in ((2, ValueError), (None, TypeError), (1.5, TypeError)):
        config = types.SimpleNamespace(**tiny_config([S, F], 0).to_dict())
        config.num_kv_shared_layers = count
        with pytest.raises(error, match="config.num_kv_shared_layers"):
            attention_costs(config, 4)


# -------------------------------------------------------------------------- (c) attention


@contextlib.contextmanager
def rms_norm_in_its_dtype():
    """Within the block, Gemma3nRMSNorm computes in its input's dtype (not float32)."""
    original = gemma3n.Gemma3nRMSNorm.forward

    def forward(self, x):
        normed = x * torch.pow(x.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        return normed * self.weight if self.with_scale else normed

    gemma3n.Gemma3nRMSNorm.forward = forward
    try:
        yield
    finally:
        gemma3n.Gemma3nRMSNorm.forward = original


def rope_cos_sin(positions, head_dim, base):
    """transformers' (cos, sin) (1, L, head_dim), computed in float64."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.double()[:, None] * inv_freq[None]
    angles = torch.cat([angles, angles], dim=-1)[None]
    return angles.cos(), angles.sin()


def rms(x, weight=None, eps=1e-6):
    normed = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return normed if weight is None else normed * weight


class CourseLayer:
    """Gemma 3n's attention written with the course's parts: q, k, v projections, RMSNorms
    on each head's query, key (scaled) and value (not scaled), RoPE (apply_rotary), a KVCache
    (with the window for a sliding layer), the mask of chapter 11 and the package's attention
    with scale 1. A layer that shares reads `kv` handed on by its source layer."""

    def __init__(self, theirs, config):
        self.w = {name: p.detach() for name, p in theirs.state_dict().items()}
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.d = config.head_dim
        self.window = config.sliding_window if theirs.is_sliding else None
        self.base = config.rope_parameters[theirs.layer_type]["rope_theta"]
        self.shared = theirs.is_kv_shared_layer
        self.cache = None if self.shared else KVCache(window=self.window)

    def split(self, x, heads):  # (batch, L, heads * d) -> (batch, heads, L, d)
        return x.view(*x.shape[:2], heads, self.d).transpose(1, 2)

    def __call__(self, x, positions, kv=None):
        w = self.w
        q = rms(self.split(x @ w["q_proj.weight"].T, self.heads), w["q_norm.weight"])
        q = apply_rotary(q, positions, self.base)
        if not self.shared:
            k = rms(self.split(x @ w["k_proj.weight"].T, self.kv_heads), w["k_norm.weight"])
            v = rms(self.split(x @ w["v_proj.weight"].T, self.kv_heads))
            k = apply_rotary(k, positions, self.base)
            k, v = self.cache.update(k, v)
            kv = (k, v, self.cache.key_positions)
        k, v, key_positions = kv  # a shared layer: its source's, of this very step
        allowed = decoding_mask(positions, key_positions, window=self.window)
        group = self.heads // self.kv_heads
        out, _ = scaled_dot_product_attention(
            q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), allowed, scale=1.0
        )
        out = out.transpose(1, 2).reshape(*x.shape[:2], -1) @ w["o_proj.weight"].T
        return out, kv


@pytest.mark.parametrize(
    "layer_types, num_shared, window, chunks",
    [
        ([S, F, S, F], 2, 3, [5, 1, 1, 1]),
        ([S, S, F, S, F], 2, 4, [2, 3, 1, 1, 2]),
        ([F, S, S, F, S, S], 3, 2, [6, 1, 1]),
    ],
)
def test_shared_layers_equal_gemma3n_attention_through_its_cache(
    layer_types, num_shared, window, chunks
):
    config = tiny_config(layer_types, num_shared, window=window)
    config._attn_implementation = "sdpa"  # the eager path takes its softmax in float32
    theirs = [
        randomized(gemma3n.Gemma3nTextAttention(config, i), seed=i) for i in range(len(layer_types))
    ]
    ours = [CourseLayer(layer, config) for layer in theirs]
    sources = kv_sharing(layer_types, num_shared)
    their_cache = transformers.DynamicCache(config=config)
    x = 0.5 * torch.randn(
        2,
        sum(chunks),
        config.hidden_size,
        generator=torch.Generator().manual_seed(9),
        dtype=torch.float64,
    )
    start, worst = 0, 0.0
    with torch.no_grad(), rms_norm_in_its_dtype():
        for size in chunks:
            chunk = x[:, start : start + size]
            positions = torch.arange(start, start + size)
            keys = torch.arange(start + size)
            shared_kv, handed_on = {}, {}
            for index, (their_layer, our_layer) in enumerate(zip(theirs, ours)):
                # transformers' additive mask for this layer's type (1, 1, L, S)
                sliding = their_layer.is_sliding
                allowed = decoding_mask(positions, keys, window=window if sliding else None)
                if sliding:  # its cache then holds the last w - 1 keys and this step's
                    held = min(start, window - 1)
                    allowed = allowed[:, start - held :]
                mask = torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(
                    ~allowed, -math.inf
                )
                cos_sin = rope_cos_sin(positions, config.head_dim, our_layer.base)
                expected, _ = their_layer(
                    chunk,
                    cos_sin,
                    mask[None, None],
                    past_key_values=their_cache,
                    shared_kv_states=shared_kv,
                )
                got, handed_on[index] = our_layer(chunk, positions, handed_on.get(sources[index]))
                worst = max(worst, (got - expected).abs().max().item())
            start += size
    assert worst < 1e-10


def test_a_shared_layer_reads_its_sources_keys_not_its_own():
    """Sharing changes the output: the same shared layer's weights, given the keys and values
    of another layer of its type, give another answer (the test above could not pass by
    accident of every layer computing the same thing)."""
    layer_types = [S, F, S, F, S, F]
    config = tiny_config(layer_types, 2)
    theirs = [randomized(gemma3n.Gemma3nTextAttention(config, i), seed=i) for i in range(6)]
    ours = [CourseLayer(layer, config) for layer in theirs]
    x = 0.5 * torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    positions = torch.arange(5)
    kv = {i: ours[i](x, positions)[1] for i in range(4)}
    right, _ = ours[5](x, positions, kv[3])
    wrong, _ = ours[5](x, positions, kv[1])
    assert (right - wrong).abs().max() > 1e-3
