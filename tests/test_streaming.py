"""StreamingLLM's renumbered positions (KVCache(renumber=True), chapter 14) against an
independent brute-force decoder: per layer, plain lists of unrotated keys and values; at each
call the keys some query of the call may see (the sinks, then the window of its first query,
then the new tokens) numbered 0, 1, ..., n - 1 and rotated at those positions by a RoPE written
here, the queries at their own keys' numbers, and PyTorch's scaled_dot_product_attention with
each query's window and sinks as its mask. Float64 to 1e-10. One token at a time this is the
paper's rule (the query and its keys at 0, ..., n - 1); for calls of several tokens it is the
course's choice, which the loop restates rather than derives (the paper's code evicts before a
chunk and reads it causally). Also: with nothing evicted,
renumbering changes nothing; and chapter 14's stored stream past SmolLM2's context
(data/streaming_past_context.json) is what tools/data/streaming_past_context.py computes."""

import importlib.util
import pathlib

import pytest
import torch
import torch.nn.functional as F

from attention_course import KVCache, TinyDecoder

VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, HIDDEN, BASE = 50, 32, 4, 2, 2, 48, 10000.0
ROOT = pathlib.Path(__file__).resolve().parents[1]


def tiny(seed=0):
    torch.manual_seed(seed)
    model = TinyDecoder(VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, hidden_dim=HIDDEN, base=BASE)
    return model.double().eval()


def token_ids(batch, seq, seed=0):
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def rope(x, positions):
    """x (..., n, d) rotated at positions (n,): pair (i, i + d/2) turns by p * BASE^(-2i/d)."""
    half = x.shape[-1] // 2
    theta = BASE ** (-torch.arange(half, dtype=torch.float64) * 2 / x.shape[-1])
    angle = positions.double()[:, None] * theta
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1)


def brute_force(model, ids, sizes, window, sinks):
    """Logits (batch, seq, vocab) of ids read in calls of the given sizes, by the rule above."""
    state = model.state_dict()
    keys = [[] for _ in range(LAYERS)]  # per layer: unrotated (batch, H_kv, d_h), one per token
    values = [[] for _ in range(LAYERS)]
    d_h, logits, start = WIDTH // HEADS, [], 0
    for size in sizes:
        new = list(range(start, start + size))
        first_sees = [s for s in range(start) if s < sinks or s > start - window]
        numbered = first_sees + new  # the keys some query of this call may see
        numbers = torch.arange(len(numbered))
        x = state["embed.weight"][ids[:, start : start + size]]
        for layer in range(LAYERS):
            p = f"blocks.{layer}."
            h = F.rms_norm(x, (WIDTH,), state[p + "attention_norm.weight"], 1e-6)
            q = (h @ state[p + "attention.q_proj.weight"].T).unflatten(-1, (HEADS, d_h))
            k = (h @ state[p + "attention.k_proj.weight"].T).unflatten(-1, (KV_HEADS, d_h))
            v = (h @ state[p + "attention.v_proj.weight"].T).unflatten(-1, (KV_HEADS, d_h))
            keys[layer] += list(k.unbind(1))
            values[layer] += list(v.unbind(1))
            held_k = torch.stack([keys[layer][s] for s in numbered], 2)  # (batch, H_kv, n, d_h)
            held_v = torch.stack([values[layer][s] for s in numbered], 2)
            held_k = rope(held_k, numbers).repeat_interleave(HEADS // KV_HEADS, 1)
            held_v = held_v.repeat_interleave(HEADS // KV_HEADS, 1)
            q = rope(q.transpose(1, 2), numbers[len(first_sees) :])  # (batch, H, size, d_h)
            allowed = torch.tensor(
                [[s <= t and (s < sinks or s > t - window) for s in numbered] for t in new]
            )
            heads = F.scaled_dot_product_attention(q, held_k, held_v, attn_mask=allowed)
            x = x + heads.transpose(1, 2).flatten(2) @ state[p + "attention.out_proj.weight"].T
            h = F.rms_norm(x, (WIDTH,), state[p + "mlp_norm.weight"], 1e-6)
            gate = F.silu(h @ state[p + "gate_proj.weight"].T) * (h @ state[p + "up_proj.weight"].T)
            x = x + gate @ state[p + "down_proj.weight"].T
        x = F.rms_norm(x, (WIDTH,), state["norm.weight"], 1e-6)
        logits.append(x @ state["lm_head.weight"].T)
        start += size
    return torch.cat(logits, 1)


def renumbered(model, ids, sizes, window, sinks, renumber=True):
    with torch.no_grad(), model.windowed(window, sinks, renumber=renumber):
        caches, pieces, start = model.new_caches(), [], 0
        for size in sizes:
            pieces.append(model(ids[:, start : start + size], caches))
            start += size
    return torch.cat(pieces, 1), caches


@pytest.mark.parametrize("window, sinks", [(5, 0), (5, 2), (4, 4), (1, 1)])
@pytest.mark.parametrize("sizes", [(1,) * 24, (6, 1, 3, 1, 4, 1, 8)])
def test_renumbered_positions_equal_a_brute_force_loop(window, sinks, sizes):
    model, ids = tiny(seed=1), token_ids(2, sum(sizes), seed=2)
    ours, caches = renumbered(model, ids, sizes, window, sinks)
    expected = brute_force(model, ids, sizes, window, sinks)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-10)
    assert all(cache.renumber and len(cache) == window + sinks for cache in caches)
    # the plain cache keeps the text's positions: with sinks the gap between them
    # and the window differs; without, every position moves alike and RoPE,
    # which sees only differences, gives the same logits
    plain, _ = renumbered(model, ids, sizes, window, sinks, renumber=False)
    if sinks:
        assert (plain - ours).abs().max() > 1e-3
    else:
        torch.testing.assert_close(plain, ours, rtol=0, atol=1e-10)


def test_one_token_at_a_time_no_position_exceeds_the_cache():
    cache = KVCache(window=3, sinks=2, renumber=True)
    for t in range(12):
        cache.update(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2))
        seen = [s for s in cache.key_positions.tolist() if s < 2 or s > t - 3]
        visible = cache.renumbered(torch.tensor(seen))
        assert visible.tolist() == list(range(len(seen)))  # 0, ..., n - 1, the query last


@pytest.mark.parametrize("window, sinks", [(30, 0), (30, 2), (24, 1)])
def test_with_nothing_evicted_renumbering_changes_nothing(window, sinks):
    model, ids, sizes = tiny(seed=3), token_ids(2, 24, seed=4), (6, 1, 1, 8, 1, 7)
    ours, _ = renumbered(model, ids, sizes, window, sinks)
    plain, _ = renumbered(model, ids, sizes, window, sinks, renumber=False)
    assert torch.equal(ours, plain)
    with torch.no_grad():
        torch.testing.assert_close(ours, model(ids), rtol=0, atol=1e-12)


def test_renumber_settings_of_the_wrong_kind_raise():
    with pytest.raises(TypeError, match="renumber must be a bool"):
        KVCache(4, 1, renumber="yes")
    with pytest.raises(TypeError, match="renumber must be a bool"):
        with tiny().windowed(4, 1, renumber=1):
            pass
    with pytest.raises(TypeError, match="positions"):
        KVCache(4, renumber=True).renumbered([1, 2])


# the stored stream past SmolLM2's declared context ------------------------------------


def test_the_stored_stream_is_what_the_script_computes():
    """The text is CPython 3.11's pydoc topics; the first chunks of every variant,
    recomputed by the script's own code, match the stored losses."""
    import hashlib

    pytest.importorskip("gguf")
    from attention_course.data import (
        data_dir,
        load_python_reference_sections,
        load_streaming_past_context,
    )

    record = load_streaming_past_context()
    readme = (data_dir() / "README.md").read_text()
    for name in ("python_reference_sections.txt", "streaming_past_context.json"):
        assert hashlib.sha256((data_dir() / name).read_bytes()).hexdigest() in readme
    spec = importlib.util.spec_from_file_location(
        "streaming_past_context", ROOT / "tools/data/streaming_past_context.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    if script.sys.version_info[:2] == (3, 11):
        assert load_python_reference_sections() == script.reference_text()
    model, ids = script.load()
    assert ids.shape[1] == record["tokens"] > record["declared_context"] == 8192
    for name, settings in script.VARIANTS.items():
        assert record["variants"][name] == settings
        losses = script.chunk_losses(model, ids, settings, script.CHECKED_CHUNKS)
        stored = record["chunk_losses"][name]
        assert len(stored) == -(-(record["tokens"] - 1) // record["chunk"])
        assert losses == pytest.approx(stored[: script.CHECKED_CHUNKS], abs=1e-4)


def test_chunked_renumbering_reaches_window_plus_sinks_plus_chunk_minus_two():
    """Token by token no position exceeds window + sinks - 1; a chunk of c tokens moves its
    last query to window + sinks + c - 2 (chapter 14 prints 382 for 252 + 4 and 128)."""
    for window, sinks, chunk in [(252, 4, 128), (6, 2, 1), (6, 2, 4), (5, 0, 3)]:
        cache, highest = KVCache(window, sinks, renumber=True), 0
        for start in range(0, 5 * max(chunk, window), chunk):
            piece = torch.zeros(1, 1, chunk, 1)
            cache.update(piece, piece)
            queries = torch.arange(start, start + chunk)
            highest = max(highest, int(cache.renumbered(queries).max()))
            keys = cache.renumbered(cache.key_positions)
            assert int(keys.max()) == int(cache.renumbered(queries).max())
        assert highest == window + sinks + chunk - 2, (window, sinks, chunk)
