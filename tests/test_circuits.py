"""trace_decoder and direct_logit_attribution (chapter 14) against independent references:
transformers' Llama in float64 (its hidden states), the course's own DecoderBlock.attend with a
head silenced by ablated_heads (what one head writes), forward hooks on the projections (a path
patch done by other means), a loop over the vocabulary (the linearised final norm), and the
caches a pass fills (trace_caches)."""

import pytest
import torch
from test_decoding import hugging_face_twin, tiny, token_ids
from test_smollm2 import float64_rotary, rms_norm_in_its_dtype

from attention_course.pretrained import (
    ablated_heads,
    direct_logit_attribution,
    trace_caches,
    trace_decoder,
)


def test_residuals_and_logits_equal_transformers_hidden_states_in_float64(monkeypatch):
    """transformers' hidden_states: the embeddings, then each layer's output, the last one
    after the final norm. With its RoPE angles, RMSNorms and softmax in float64 they agree
    to 1e-10."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    model = tiny(dtype=torch.float32).to(torch.float64)  # weights exact in both dtypes
    twin = hugging_face_twin(model).to(torch.float64)
    twin.config._attn_implementation = "sdpa"  # eager's softmax is float32 whatever the dtype
    monkeypatch.setattr(twin.model.rotary_emb, "forward", float64_rotary(10000.0, 8))
    monkeypatch.setattr(LlamaRMSNorm, "forward", rms_norm_in_its_dtype)
    ids = token_ids(3, 17)
    with torch.no_grad():
        theirs = twin(ids, output_hidden_states=True)
    trace = trace_decoder(model, ids)
    for layer in range(len(model.blocks)):  # the stream entering each block
        torch.testing.assert_close(
            trace.residuals[layer], theirs.hidden_states[layer], rtol=0, atol=1e-10
        )
    torch.testing.assert_close(
        model.norm(trace.residuals[-1]), theirs.hidden_states[-1], rtol=0, atol=1e-10
    )
    torch.testing.assert_close(trace.logits, theirs.logits, rtol=0, atol=1e-10)
    _, weights = model.forward_with_weights(ids)
    for ours, expected in zip(trace.weights, weights):
        torch.testing.assert_close(ours, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
        {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8},
    ],
)
def test_a_trace_follows_the_models_rope_scaling(scaling):
    """Under chapter 10's rope_scaled, the trace's logits are the model's own, and differ from
    the unscaled ones (the scaling reached the trace)."""
    model = tiny(dtype=torch.float64)
    ids = token_ids(2, 21)
    with torch.no_grad():
        unscaled = model(ids)
        with model.rope_scaled(scaling):
            expected = model(ids)
            trace = trace_decoder(model, ids)
    torch.testing.assert_close(trace.logits, expected, rtol=0, atol=1e-10)
    assert (expected - unscaled).abs().max() > 1e-3


@pytest.mark.parametrize("layer", [0, 1])
def test_what_a_head_writes_is_what_silencing_it_removes(layer):
    model = tiny()
    ids = token_ids(2, 11, seed=1)
    trace = trace_decoder(model, ids, head_layers=[layer])
    block = model.blocks[layer]
    positions = torch.arange(ids.shape[1])
    normed = block.attention_norm(trace.residuals[layer])
    with torch.no_grad():
        everything = block.attend(normed, positions)[0]
        for head in range(block.attention.num_heads):
            with ablated_heads(model, [(layer, head)]):
                without = block.attend(normed, positions)[0]
            torch.testing.assert_close(
                trace.heads[layer][:, head], everything - without, rtol=0, atol=1e-12
            )
    assert set(trace.heads) == {layer}


def hooked_logits(model, ids, layer, path, source):
    """model(ids) with one projection of one layer fed the normed `source` stream."""
    projection = getattr(model.blocks[layer].attention, f"{path[0]}_proj")
    norm = model.blocks[layer].attention_norm

    def from_source(module, inputs, output):
        return torch.nn.functional.linear(norm(source), module.weight)

    handle = projection.register_forward_hook(from_source)
    try:
        with torch.no_grad():
            return model(ids)
    finally:
        handle.remove()


@pytest.mark.parametrize("path", ["query", "key", "value"])
def test_a_path_patch_equals_feeding_the_projection_another_stream(path):
    model = tiny(seed=2)
    ids = token_ids(2, 13, seed=3)
    with ablated_heads(model, [(0, 1), (0, 3)]):
        silenced = trace_decoder(model, ids)
    patched = trace_decoder(model, ids, patches={(1, path): silenced.residuals[1]})
    expected = hooked_logits(model, ids, 1, path, silenced.residuals[1])
    torch.testing.assert_close(patched.logits, expected, rtol=0, atol=1e-12)
    assert not torch.allclose(patched.logits, trace_decoder(model, ids).logits)


def test_patching_every_path_from_the_runs_own_stream_changes_nothing():
    model = tiny()
    ids = token_ids(2, 9)
    trace = trace_decoder(model, ids)
    patches = {
        (layer, path): trace.residuals[layer]
        for layer in (0, 1)
        for path in ("query", "key", "value")
    }
    torch.testing.assert_close(
        trace_decoder(model, ids, patches).logits, trace.logits, rtol=0, atol=1e-12
    )


def same_trace(a, b):
    return (
        torch.equal(a.logits, b.logits)
        and torch.equal(a.residuals, b.residuals)
        and len(a.weights) == len(b.weights)
        and all(torch.equal(x, y) for x, y in zip(a.weights, b.weights))
        and a.heads.keys() == b.heads.keys()
        and all(torch.equal(a.heads[layer], b.heads[layer]) for layer in a.heads)
    )


@pytest.mark.parametrize("path", ["query", "key", "value"])
def test_a_run_started_from_an_earlier_trace_is_the_full_run_bit_for_bit(path):
    """Layers before `start` taken from an earlier trace (heads silenced, or a path patched,
    from `start` on): the same logits, stream, weights and heads' writes as running them."""
    model = tiny(seed=2)
    ids = token_ids(2, 13, seed=3)
    intact = trace_decoder(model, ids, head_layers=[0, 1])
    with ablated_heads(model, [(1, 0)]):
        silenced = trace_decoder(model, ids, head_layers=[0])
        resumed = trace_decoder(model, ids, head_layers=[0], start=1, earlier=intact)
    assert same_trace(resumed, silenced)
    patches = {(1, path): silenced.residuals[1] + 0.5}
    full = trace_decoder(model, ids, patches, head_layers=[0, 1])
    assert same_trace(trace_decoder(model, ids, patches, [0, 1], 1, intact), full)
    assert not torch.equal(full.logits, intact.logits)
    assert same_trace(trace_decoder(model, ids, start=2, earlier=intact), trace_decoder(model, ids))


def test_a_started_run_refuses_what_it_cannot_reuse():
    model = tiny()
    ids = token_ids(2, 9)
    intact = trace_decoder(model, ids)
    with pytest.raises(ValueError, match="start=1 needs earlier"):
        trace_decoder(model, ids, start=1)
    with pytest.raises(ValueError, match=r"patches at layers \[0\] come before start=1"):
        trace_decoder(model, ids, {(0, "key"): intact.residuals[0]}, start=1, earlier=intact)
    with pytest.raises(ValueError, match=r"head_layers \[0\] come before start=1"):
        trace_decoder(model, ids, head_layers=[0], start=1, earlier=intact)
    with pytest.raises(ValueError, match="earlier's residuals"):
        trace_decoder(model, ids[:1], start=1, earlier=intact)
    with pytest.raises(ValueError, match="start=3 outside"):
        trace_decoder(model, ids, start=3, earlier=intact)


def test_direct_logit_attribution_by_a_loop_and_summing_to_the_logits():
    model = tiny()
    ids = token_ids(2, 7)
    trace = trace_decoder(model, ids, head_layers=[0, 1])
    final = trace.residuals[-1]
    got = direct_logit_attribution(model, trace.heads[1], final)  # (batch, H, seq, vocab)
    g, unembedding = model.norm.weight, model.lm_head.weight
    for b in range(2):
        for t in range(7):
            rms = (final[b, t].pow(2).mean() + model.norm.eps).sqrt()
            for h in range(trace.heads[1].shape[1]):
                for token in range(0, model.vocab_size, 7):
                    expected = (unembedding[token] * g * trace.heads[1][b, h, t]).sum() / rms
                    assert abs(got[b, h, t, token] - expected) < 1e-12
    # the stream is the embedding plus every sublayer's write: their attributions sum up
    writes = [trace.residuals[0]] + [
        trace.residuals[i + 1] - trace.residuals[i] for i in range(len(model.blocks))
    ]
    total = sum(direct_logit_attribution(model, w, final) for w in writes)
    torch.testing.assert_close(total, trace.logits, rtol=0, atol=1e-10)


def test_bad_arguments_name_themselves():
    model = tiny()
    ids = token_ids(1, 5)
    stream = torch.zeros(1, 5, 32, dtype=torch.float64)
    with pytest.raises(ValueError, match="path must be one of"):
        trace_decoder(model, ids, {(0, "keys"): stream})
    with pytest.raises(ValueError, match="layer 2 outside"):
        trace_decoder(model, ids, {(2, "key"): stream})
    with pytest.raises(ValueError, match=r"patches\[\(0, 'key'\)\] \(1, 4, 32\)"):
        trace_decoder(model, ids, {(0, "key"): stream[:, :4]})
    with pytest.raises(TypeError, match="patches must be a dict"):
        trace_decoder(model, ids, [stream])
    with pytest.raises(ValueError, match="head_layers' layer 5"):
        trace_decoder(model, ids, head_layers=[5])
    with pytest.raises(TypeError, match="model must be a TinyDecoder"):
        trace_decoder(torch.nn.Linear(2, 2), ids)
    with pytest.raises(ValueError, match="writes"):
        direct_logit_attribution(model, stream[:, :4], stream)
    with pytest.raises(ValueError, match="final_residual"):
        direct_logit_attribution(model, stream, stream[..., :8])


@pytest.mark.parametrize("window, sinks", [(None, 0), (4, 0), (3, 2)])
def test_trace_caches_are_the_caches_a_pass_fills(window, sinks):
    """The caches computed from a trace hold what the model's own pass over the ids leaves in
    its caches (float64: to 1e-12), and the model reads on from them alike."""
    model = tiny(seed=4)
    ids = token_ids(2, 9, seed=5)
    with torch.no_grad(), model.windowed(window, sinks):
        filled = model.new_caches()
        model(ids[:, :7], filled)
        mine = trace_caches(model, trace_decoder(model, ids[:, :7]))
        for ours, theirs in zip(mine, filled):
            assert torch.equal(ours.positions, theirs.positions) and ours.seen == theirs.seen
            torch.testing.assert_close(ours.keys, theirs.keys, rtol=0, atol=1e-12)
            torch.testing.assert_close(ours.values, theirs.values, rtol=0, atol=1e-12)
        reference = model(ids)[:, 7:]  # one pass without a cache
        torch.testing.assert_close(model(ids[:, 7:], mine), reference, rtol=0, atol=1e-12)
    with model.windowed(4, 1, renumber=True), pytest.raises(ValueError, match="renumber"):
        trace_caches(model, trace_decoder(model, ids))
