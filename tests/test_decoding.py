"""KVCache, decoding_mask and TinyDecoder against independent references:
brute-force loops over positions, PyTorch's lower-right causal mask, plain
concatenation of everything appended, and Llama and Mistral as implemented in
Hugging Face transformers, with the same weights copied in."""

import pytest
import torch
from torch.nn.attention.bias import causal_lower_right

from attention_course import KVCache, TinyDecoder, decoding_mask

VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, HIDDEN = 50, 32, 4, 2, 2, 48


def random(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def tiny(window=None, sinks=0, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    model = TinyDecoder(
        VOCAB,
        WIDTH,
        HEADS,
        KV_HEADS,
        LAYERS,
        window,
        hidden_dim=HIDDEN,
        sinks=sinks,
    )
    return model.to(dtype).eval()


def token_ids(batch, seq, seed=0):
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


# decoding_mask ----------------------------------------------------------------


def mask_by_loops(queries, keys, window, sinks):
    return torch.tensor(
        [
            [s <= t and (window is None or s > t - window or s < sinks) for s in keys.tolist()]
            for t in queries.tolist()
        ]
    )


@pytest.mark.parametrize("window, sinks", [(None, 0), (1, 0), (3, 0), (3, 2), (20, 1)])
def test_mask_equals_a_loop_over_positions(window, sinks):
    queries, keys = torch.tensor([0, 4, 5, 9, 12]), torch.tensor([0, 1, 2, 5, 6, 7, 8, 9, 12])
    assert torch.equal(
        decoding_mask(queries, keys, window, sinks),
        mask_by_loops(queries, keys, window, sinks),
    )


@pytest.mark.parametrize("new, cached", [(1, 7), (3, 5), (6, 0)])
def test_a_chunk_after_the_cache_is_pytorchs_lower_right_causal_mask(new, cached):
    """Through PyTorch's public API: SDPA given causal_lower_right's bias and
    SDPA given our mask weigh the same keys, so the outputs agree (values
    one-hot per key make every weight visible)."""
    queries, keys = torch.arange(cached, cached + new), torch.arange(cached + new)
    mask = decoding_mask(queries, keys)  # (new, cached + new)
    query = random(1, 1, new, 4, seed=1)
    key = random(1, 1, cached + new, 4, seed=2)
    value = torch.eye(cached + new, dtype=torch.float64)[None, None]
    theirs = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=causal_lower_right(new, cached + new)
    )
    ours = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    assert torch.equal(theirs[0, 0] > 0, mask)  # weight exactly where allowed


# KVCache ----------------------------------------------------------------------


def chunks(lengths, seed=0, batch=2, heads=2, head_dim=4):
    """(key, value) pairs of the given lengths, and their concatenation."""
    pairs = [
        (
            random(batch, heads, n, head_dim, seed=seed + 2 * i),
            random(batch, heads, n, head_dim, seed=seed + 2 * i + 1),
        )
        for i, n in enumerate(lengths)
    ]
    return (
        pairs,
        torch.cat([k for k, _ in pairs], 2),
        torch.cat([v for _, v in pairs], 2),
    )


def test_cache_returns_everything_appended_in_order():
    cache = KVCache()
    pairs, all_keys, all_values = chunks([5, 1, 1, 3])
    total = 0
    for key, value in pairs:
        keys, values = cache.update(key, value)
        total += key.shape[2]
        assert torch.equal(keys, all_keys[:, :, :total])
        assert torch.equal(values, all_values[:, :, :total])
        assert len(cache) == cache.seen == total
        assert torch.equal(cache.key_positions, torch.arange(total))


@pytest.mark.parametrize("window, sinks", [(1, 0), (4, 0), (4, 2), (20, 0)])
def test_window_keeps_the_last_tokens_and_the_sinks(window, sinks):
    cache = KVCache(window=window, sinks=sinks)
    pairs, all_keys, all_values = chunks([5, 1, 1, 3, 1])
    total, held_before = 0, 0
    for key, value in pairs:
        keys, _ = cache.update(key, value)
        total += key.shape[2]
        assert keys.shape[2] == held_before + key.shape[2]  # held + new, before eviction
        kept = [p for p in range(total) if p >= total - window or p < sinks]
        assert cache.positions.tolist() == kept
        assert torch.equal(cache.keys, all_keys[:, :, kept])
        assert torch.equal(cache.values, all_values[:, :, kept])
        held_before = len(cache)
    assert len(cache) == min(total, window + sinks)


@pytest.mark.parametrize(
    "dtype, size", [(torch.float16, 2), (torch.float32, 4), (torch.float64, 8)]
)
def test_nbytes_is_two_tensors_of_batch_heads_tokens_head_dim(dtype, size):
    cache = KVCache(window=6)
    for _ in range(4):
        cache.update(
            torch.zeros(3, 2, 2, 8, dtype=dtype),
            torch.zeros(3, 2, 2, 8, dtype=dtype),
        )
    assert len(cache) == 6
    assert cache.nbytes == 2 * 3 * 2 * 6 * 8 * size  # K and V, B, H_kv, tokens, d_h
    assert KVCache().nbytes == 0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"window": 0}, "window"),
        ({"window": -2}, "window"),
        ({"sinks": -1, "window": 3}, "sinks"),
        ({"sinks": 2}, "sinks need a window"),
    ],
)
def test_bad_cache_settings_raise(options, message):
    with pytest.raises(ValueError, match=message):
        KVCache(**options)


@pytest.mark.parametrize("options", [{"window": 2.5}, {"window": True}, {"window": "3"}])
def test_cache_settings_of_the_wrong_type_raise_type_error(options):
    with pytest.raises(TypeError, match=r"window must be an integer"):
        KVCache(**options)


def test_a_first_update_refuses_keys_and_values_of_different_dtypes():
    cache = KVCache()
    with pytest.raises(
        ValueError,
        match=r"key \(1, 2, 3, 4\) \(torch.float32, cpu\) and "
        r"value \(1, 2, 3, 4\) \(torch.float64, cpu\)",
    ):
        cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4, dtype=torch.float64))
    assert len(cache) == 0 and cache.nbytes == 0
    with pytest.raises(ValueError, match=r"key \(1, 2, 3, 4\) must hold floating-point"):
        cache.update(*[torch.zeros(1, 2, 3, 4, dtype=torch.long)] * 2)


def test_bad_updates_raise_naming_the_shapes():
    cache = KVCache()
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        cache.update(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"key \(1, 2, 3, 4\) .* and value \(1, 2, 3, 5\)"):
        cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 5))
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    for wrong in (
        torch.zeros(2, 2, 1, 4),
        torch.zeros(1, 1, 1, 4),
        torch.zeros(1, 2, 1, 8),
        torch.zeros(1, 2, 1, 4, dtype=torch.float64),
    ):
        with pytest.raises(ValueError, match=r"does not match the cache \(1, 2, 3, 4\)"):
            cache.update(wrong, wrong)
    assert len(cache) == 3  # nothing was appended


# TinyDecoder against Llama and Mistral in transformers ------------------------


def hugging_face_twin(model, window=None, **settings):
    """A transformers Llama (or Mistral, with a sliding window) with model's
    weights; settings override the config's (rope_parameters, ...)."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
    )

    sizes = dict(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        intermediate_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    sizes.update(settings)
    if window is None:
        config, family = LlamaConfig(**sizes), LlamaForCausalLM
    else:
        config, family = (
            MistralConfig(sliding_window=window, **sizes),
            MistralForCausalLM,
        )
    config._attn_implementation = "eager"
    twin = family(config).to(torch.float32).eval()
    ours = {
        "embed.weight": "model.embed_tokens.weight",
        "norm.weight": "model.norm.weight",
        "lm_head.weight": "lm_head.weight",
    }
    names = {
        "attention_norm": "input_layernorm",
        "mlp_norm": "post_attention_layernorm",
        "attention.q_proj": "self_attn.q_proj",
        "attention.k_proj": "self_attn.k_proj",
        "attention.v_proj": "self_attn.v_proj",
        "attention.out_proj": "self_attn.o_proj",
        "gate_proj": "mlp.gate_proj",
        "up_proj": "mlp.up_proj",
        "down_proj": "mlp.down_proj",
    }
    for layer in range(LAYERS):
        for mine, theirs in names.items():
            ours[f"blocks.{layer}.{mine}.weight"] = f"model.layers.{layer}.{theirs}.weight"
    state = model.state_dict()
    assert set(state) == set(ours)  # every weight is mapped
    twin.load_state_dict({ours[name]: tensor.float() for name, tensor in state.items()})
    return twin


@pytest.mark.parametrize("window", [None, 5])
def test_logits_equal_llama_and_mistral_in_transformers(window):
    model = tiny(window, dtype=torch.float32)
    twin = hugging_face_twin(model, window)
    ids = token_ids(3, 17)
    with torch.no_grad():
        # Llama rounds its rotary angles (up to about 16 rad here) in float32
        torch.testing.assert_close(model(ids), twin(ids).logits, rtol=0, atol=1e-4)


# RoPE scaling in every layer (chapter 10): C = 16 tokens, texts of 13 and 40
CONTEXT = 16
SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": CONTEXT},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": CONTEXT,
    },
}


@pytest.mark.parametrize("kind", SCALINGS)
@pytest.mark.parametrize("length", [13, 40])
def test_scaled_logits_equal_transformers_with_rope_parameters(kind, length):
    """transformers' Llama with the scaling in its config: its own rotary
    module (dynamic NTK recomputed for the length, YaRN's factor on cos and
    sin) in every layer."""
    model = tiny(dtype=torch.float32)
    rope = {**SCALINGS[kind], "rope_theta": 10000.0}
    twin = hugging_face_twin(model, max_position_embeddings=CONTEXT, rope_parameters=rope)
    ids = token_ids(2, length, seed=3)
    # a "dynamic" dict holds no C: transformers takes max_position_embeddings
    scaling = dict(twin.config.rope_parameters)
    if kind == "dynamic":
        scaling.setdefault("original_max_position_embeddings", CONTEXT)
    with torch.no_grad():
        plain = model(ids)
        with model.rope_scaled(scaling) as scaled:
            ours = scaled(ids)
        theirs = twin(ids).logits
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)
    torch.testing.assert_close(model(ids), plain, rtol=0, atol=0)  # restored
    if kind == "dynamic" and length <= CONTEXT:  # unchanged up to C
        torch.testing.assert_close(ours, plain, rtol=0, atol=1e-5)
    else:
        assert (ours - plain).abs().max() > 1e-2  # the scaling changes the logits


@pytest.mark.parametrize("kind", ["linear", "yarn", "llama3"])
def test_scaled_logits_equal_transformers_in_float64(kind, monkeypatch):
    """transformers' Llama computes RoPE's angles, its RMSNorms and its eager softmax in
    float32 whatever its dtype. With its rotary module's forward in float64 (the frequencies,
    which the rotary tests check against ROPE_INIT_FUNCTIONS, with its own attention_scaling,
    YaRN's factor), RMSNorm's formula in float64 and PyTorch's attention, the rest of the
    wiring (every layer, the factor on queries and keys) agrees to 1e-10 beyond C."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from attention_course import rotary_frequencies

    model = tiny().float().double()  # weights the twin holds exactly (it loads float32)
    rope = {**SCALINGS[kind], "rope_theta": 10000.0}
    twin = hugging_face_twin(model, max_position_embeddings=CONTEXT, rope_parameters=rope)
    twin = twin.to(torch.float64)
    twin.config._attn_implementation = "sdpa"  # the eager softmax is taken in float32
    # LlamaRMSNorm computes in float32 whatever its dtype: its formula in float64
    monkeypatch.setattr(
        LlamaRMSNorm,
        "forward",
        lambda self, x: (
            self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        ),
    )
    rotary = twin.model.rotary_emb
    frequencies = rotary_frequencies(WIDTH // HEADS, scaling=rope, dtype=torch.float64)

    def forward(x, position_ids):
        angles = position_ids[..., None].to(torch.float64) * frequencies  # (batch, n, d/2)
        angles = torch.cat([angles, angles], dim=-1)  # half-split layout
        factor = rotary.attention_scaling
        return (angles.cos() * factor).to(x.dtype), (angles.sin() * factor).to(x.dtype)

    monkeypatch.setattr(rotary, "forward", forward)
    ids = token_ids(2, 40, seed=6)
    with torch.no_grad(), model.rope_scaled(rope):
        torch.testing.assert_close(model(ids), twin(ids).logits, rtol=0, atol=1e-10)


def test_a_model_built_with_scaling_equals_the_scaled_context_in_float64():
    built = TinyDecoder(
        VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, hidden_dim=HIDDEN, scaling=SCALINGS["yarn"]
    )
    model = tiny()
    built.load_state_dict(model.state_dict())
    built = built.to(torch.float64).eval()
    ids = token_ids(1, 30, seed=4)
    with torch.no_grad(), model.rope_scaled(SCALINGS["yarn"]):
        torch.testing.assert_close(built(ids), model(ids), rtol=0, atol=1e-12)
        # and a cached, chunked pass equals the full one (static frequencies)
        caches = built.new_caches()
        pieces = [
            built(ids[:, :20], caches),
            built(ids[:, 20:21], caches),
            built(ids[:, 21:], caches),
        ]
        torch.testing.assert_close(torch.cat(pieces, 1), model(ids), rtol=0, atol=1e-12)


def test_a_new_base_in_every_layer_equals_a_model_built_with_it():
    """The NTK-aware base change: b' = b kappa^(d / (d - 2)) in every layer."""
    model, ids = tiny(), token_ids(2, 25, seed=5)
    torch.manual_seed(0)
    rebuilt = TinyDecoder(
        VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, hidden_dim=HIDDEN, base=10000.0 * 4 ** (8 / 6)
    )
    rebuilt.load_state_dict(model.state_dict())
    rebuilt = rebuilt.to(torch.float64).eval()
    with torch.no_grad():
        plain = model(ids)
        with model.rope_scaled(base=10000.0 * 4 ** (8 / 6)):
            torch.testing.assert_close(model(ids), rebuilt(ids), rtol=0, atol=1e-12)
        assert model.config.rope_base == 10000.0
        torch.testing.assert_close(model(ids), plain, rtol=0, atol=0)
        assert (rebuilt(ids) - plain).abs().max() > 1e-3


def test_bad_scaling_names_the_argument():
    model = tiny()
    with pytest.raises(ValueError, match=r"scaling\['factor'\]"):
        with model.rope_scaled({"rope_type": "linear", "factor": 0.5}):
            pass
    with pytest.raises(ValueError, match="context_length"):  # "dynamic" needs C
        with model.rope_scaled({"rope_type": "dynamic", "factor": 2.0}):
            pass
    with pytest.raises(TypeError, match="scaling"):
        TinyDecoder(VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, scaling=[2.0])


def test_greedy_tokens_equal_transformers_generate():
    model = tiny(dtype=torch.float32, seed=3)
    twin = hugging_face_twin(model)
    prompt = token_ids(2, 6, seed=4)
    theirs = twin.generate(
        prompt,
        max_new_tokens=20,
        do_sample=False,
        min_new_tokens=20,
        pad_token_id=0,
        eos_token_id=None,
    )
    assert torch.equal(model.generate(prompt, 20), theirs)


# the cache inside the decoder -------------------------------------------------


@pytest.mark.parametrize("window, sinks", [(None, 0), (4, 0), (4, 2), (40, 0)])
def test_chunked_decoding_with_caches_equals_one_full_pass(window, sinks):
    model = tiny(window, sinks, seed=1)
    ids = token_ids(2, 19, seed=2)
    full = model(ids)  # no cache, one pass
    caches, pieces, start = model.new_caches(), [], 0
    for size in (6, 1, 1, 4, 1, 1, 5):  # prefill, then steps and chunks
        pieces.append(model(ids[:, start : start + size], caches))
        start += size
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=0, atol=1e-12)
    held = 19 if window is None else min(19, window + sinks)
    assert all(len(cache) == held for cache in caches)


@pytest.mark.parametrize("window, sinks", [(None, 0), (5, 0), (3, 2), (4, 1), (9, 0)])
def test_prefix_caches_read_on_as_caches_that_read_the_first_tokens(window, sinks):
    """The first 5 tokens cut from caches that read 8, then the rest: the logits of one
    windowed pass without a cache, and the keys and values of caches fed the 5 tokens."""
    model = tiny(seed=1)
    ids = token_ids(2, 13, seed=2)
    with torch.no_grad():
        caches = model.new_caches()
        model(ids[:, :8], caches)  # the full model reads 8 tokens
        with model.windowed(window, sinks):
            reference = model(ids)  # one pass, the window's mask
            fed = model.new_caches()
            model(ids[:, :5], fed)
            cut = model.prefix_caches(caches, 5)
            for mine, theirs in zip(cut, fed):
                assert torch.equal(mine.positions, theirs.positions)
                torch.testing.assert_close(mine.keys, theirs.keys, rtol=0, atol=1e-12)
                torch.testing.assert_close(mine.values, theirs.values, rtol=0, atol=1e-12)
            continued = model(ids[:, 5:], cut)
    torch.testing.assert_close(continued, reference[:, 5:], rtol=0, atol=1e-12)
    assert all(len(cache) == 8 for cache in caches)  # the given caches are left as they were


def test_prefix_caches_refuse_tokens_a_window_would_not_read_whole():
    model = tiny(seed=1)
    ids = token_ids(1, 8)
    caches = model.new_caches()
    model(ids, caches)
    with model.windowed(3, 1), pytest.raises(ValueError, match=r"length=5 .* window \+ sinks"):
        model.prefix_caches(caches, 5)
    with pytest.raises(ValueError, match=r"first length=9 tokens"):
        model.prefix_caches(caches, 9)  # more than they hold
    with model.windowed(3):
        dropped = model.new_caches()
        model(ids, dropped)  # tokens 0 to 4 left the window
    with pytest.raises(ValueError, match=r"first length=2 tokens"):
        model.prefix_caches(dropped, 2)
    with model.windowed(4, 1, renumber=True), pytest.raises(ValueError, match="renumber"):
        model.prefix_caches(caches, 3)  # the renumbered caches hold unrotated keys


@pytest.mark.parametrize("keep", [1, 3, 7, 0])
def test_logits_to_keep_gives_the_last_positions_logits(keep):
    """As transformers' logits_to_keep: the last k positions of the full logits, with and
    without a cache (the tiny model is float64: equal to 1e-12); 0 keeps every position."""
    model = tiny(4, 1, seed=3)
    ids = token_ids(2, 7, seed=8)
    with torch.no_grad():
        full = model(ids)
        alone = model(ids, logits_to_keep=keep)
        caches = model.new_caches()
        model(ids[:, :3], caches, logits_to_keep=1)
        cached = model(ids[:, 3:], caches, logits_to_keep=min(keep, 4))
    kept = keep or 7  # positions kept: 0 means all
    assert alone.shape == (2, kept, model.vocab_size)
    torch.testing.assert_close(alone, full[:, -kept:], rtol=0, atol=1e-12)
    torch.testing.assert_close(cached, full[:, -min(kept, 4) :], rtol=0, atol=1e-12)


@pytest.mark.parametrize("window, sinks", [(None, 0), (3, 0), (3, 1)])
def test_generate_with_and_without_the_cache_and_teacher_forcing_agree(window, sinks):
    model = tiny(window, sinks, seed=5)
    prompt = token_ids(3, 5, seed=6)
    cached = model.generate(prompt, 12)
    assert torch.equal(cached, model.generate(prompt, 12, use_cache=False))
    assert torch.equal(cached[:, :5], prompt)
    # each generated token is the argmax of one full pass over the final
    # sequence
    with torch.no_grad():
        assert torch.equal(model(cached[:, :-1]).argmax(-1)[:, 4:], cached[:, 5:])


def test_a_window_changes_logits_only_beyond_the_window():
    full, windowed = tiny(seed=7), tiny(window=6, seed=7)
    ids = token_ids(1, 15)
    with torch.no_grad():
        a, b = full(ids), windowed(ids)
    torch.testing.assert_close(a[:, :6], b[:, :6], rtol=0, atol=1e-12)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=1e-6)
    wide = tiny(window=15, seed=7)
    torch.testing.assert_close(wide(ids), a, rtol=0, atol=1e-12)  # W >= T: full attention


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_logits_and_cache_follow_the_model_dtype(dtype):
    model = tiny(dtype=dtype)
    assert model(token_ids(1, 4)).dtype == dtype
    caches = model.new_caches()
    model(token_ids(1, 4), caches)
    assert caches[0].keys.dtype == dtype


def test_bad_decoder_inputs_raise_naming_the_shapes():
    model = tiny()
    with pytest.raises(ValueError, match=r"ids \(1, 3\) must hold integer"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"ids \(1, 2\) must lie in \[0, vocab_size=50\)"):
        model(torch.tensor([[3, 50]]))
    with pytest.raises(ValueError, match="must have 2 dimensions"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"seq >= 1"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="1 caches for 2 layers"):
        model(token_ids(1, 2), [KVCache()])
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(token_ids(1, 2), -1)
    with pytest.raises(ValueError, match="window"):
        TinyDecoder(VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, window=0)
    with pytest.raises(ValueError, match="num_heads=4 must be divisible by num_kv_heads=3"):
        TinyDecoder(VOCAB, WIDTH, HEADS, 3, LAYERS)


def test_a_blocks_attention_weights_follow_the_mask_and_sum_to_one():
    model = tiny(window=3, sinks=1, seed=8)
    block, positions = model.blocks[0], torch.arange(9)
    x = model.embed(token_ids(2, 9))
    with torch.no_grad():
        _, weights = block.attend(block.attention_norm(x), positions)
    allowed = mask_by_loops(positions, positions, 3, 1)
    assert weights.shape == (2, HEADS, 9, 9)
    assert torch.all(weights[..., ~allowed] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 9).double())


def greedy_by_hand(model, ids, steps, stop_id):
    """Greedy decoding by full passes; a row that produced stop_id repeats it."""
    tokens = ids
    for _ in range(steps):
        with torch.no_grad():
            next_token = model(tokens)[:, -1].argmax(-1, keepdim=True)
        done = (tokens[:, ids.shape[1] :] == stop_id).any(-1, keepdim=True)
        tokens = torch.cat([tokens, next_token.masked_fill(done, stop_id)], dim=1)
        if (tokens[:, ids.shape[1] :] == stop_id).any(-1).all():
            break
    return tokens


def test_generation_stops_once_every_row_produced_the_stop_token():
    model, ids = tiny(), token_ids(3, 4, seed=1)
    free = model.generate(ids, 12)
    stop_id = free[0, 6].item()  # a token row 0 produces at its third new step
    stopped = model.generate(ids, 12, stop_id=stop_id)
    assert stopped.tolist() == greedy_by_hand(model, ids, 12, stop_id).tolist()
    assert stopped.shape[1] <= free.shape[1]
    assert stopped[0, 6:].eq(stop_id).all()  # row 0 repeats it once it has stopped
    assert model.generate(ids, 12, stop_id=stop_id, use_cache=False).equal(stopped)
    with pytest.raises(ValueError, match="stop_id"):
        model.generate(ids, 3, stop_id=-1)


def test_a_real_models_sizes_tied_embeddings_and_norm_eps():
    model = TinyDecoder(
        VOCAB,
        WIDTH,
        HEADS,
        KV_HEADS,
        LAYERS,
        hidden_dim=HIDDEN,
        base=500.0,
        norm_eps=1e-5,
        tie_embeddings=True,
    )
    assert model.lm_head.weight is model.embed.weight
    assert {m.eps for m in model.modules() if isinstance(m, torch.nn.RMSNorm)} == {1e-5}
    assert {block.base for block in model.blocks} == {500.0}
    assert model.blocks[0].gate_proj.out_features == HIDDEN
    untied = TinyDecoder(VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, hidden_dim=HIDDEN)
    assert untied.lm_head.weight is not untied.embed.weight
    assert (
        sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in model.parameters())
        == VOCAB * WIDTH
    )  # one matrix fewer


def test_forward_with_weights_gives_the_logits_and_each_blocks_own_weights():
    """Layer by layer, the weights a block's attend() gives on the previous block's output."""
    model, ids = tiny(), token_ids(2, 7, seed=3)
    logits, weights = model.forward_with_weights(ids)
    with torch.no_grad():
        torch.testing.assert_close(logits, model(ids), rtol=0, atol=0)
    positions = torch.arange(7)
    x = model.embed(ids)
    with torch.no_grad():
        for block, got in zip(model.blocks, weights):
            _, expected = block.attend(block.attention_norm(x), positions)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            x = block(x, positions)
    assert len(weights) == LAYERS and weights[0].shape == (2, HEADS, 7, 7)
    torch.testing.assert_close(weights[-1].sum(-1), torch.ones(2, HEADS, 7, dtype=x.dtype))


@pytest.mark.parametrize("window, sinks", [(3, 0), (3, 2)])
def test_a_windowed_model_reads_as_one_built_with_the_window(window, sinks):
    model, ids = tiny(), token_ids(2, 9, seed=4)
    built = tiny(window=window, sinks=sinks)  # the same seed: the same weights
    with torch.no_grad():
        full = model(ids)
        with model.windowed(window, sinks):
            torch.testing.assert_close(model(ids), built(ids), rtol=0, atol=0)
            caches = model.new_caches()
            assert (caches[0].window, caches[0].sinks) == (window, sinks)
            chunked = torch.cat([model(ids[:, :4], caches), model(ids[:, 4:], caches)], 1)
            torch.testing.assert_close(chunked, built(ids), rtol=0, atol=1e-12)
        torch.testing.assert_close(model(ids), full, rtol=0, atol=0)  # restored
    assert model.window is None and all(b.window is None for b in model.blocks)
    with pytest.raises(ValueError, match="sinks need a window"):
        with model.windowed(None, 2):
            pass


def test_decoder_inputs_of_the_wrong_kind_raise_clear_errors():
    model = tiny()
    with pytest.raises(
        ValueError, match=r"ids \(1, 3\) must hold integer token ids .* got torch.uint8"
    ):
        model(torch.zeros(1, 3, dtype=torch.uint8))
    with pytest.raises(TypeError, match=r"caches must be a list of KVCache.*NoneType"):
        model(token_ids(1, 2), [None, None])
    with pytest.raises(TypeError, match=r"caches must be a list of KVCache.*got KVCache"):
        model(token_ids(1, 2), KVCache())
    with pytest.raises(TypeError, match=r"ids must be a torch.Tensor, got list"):
        model.generate([[1, 2]], 3)
    with pytest.raises(ValueError, match=r"stop_id=50 must lie in \[0, vocab_size=50\)"):
        model.generate(token_ids(1, 2), 3, stop_id=50)
    caches = model.new_caches()
    caches[0].update(
        torch.zeros(1, KV_HEADS, 1, WIDTH // HEADS, dtype=torch.float64),
        torch.zeros(1, KV_HEADS, 1, WIDTH // HEADS, dtype=torch.float64),
    )
    with pytest.raises(ValueError, match=r"caches hold different numbers of tokens \[0, 1\]"):
        model(token_ids(1, 2), caches)
    with pytest.raises(ValueError, match=r"TinyDecoder's base\) must be > 1, got 1.0"):
        TinyDecoder(VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, base=1.0)
    with pytest.raises(ValueError, match=r"hidden_dim must be an integer >= 1, got 0"):
        TinyDecoder(VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, hidden_dim=0)
