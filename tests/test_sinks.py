"""Learned attention sinks (gpt-oss, chapter 17) against independent references: the pinned
transformers' gpt-oss eager attention with masks built by transformers' own mask functions
(float64, to 1e-12), a whole two-layer GptOssModel (a sliding-window layer and a full one)
with its weights read by the course's functions, a brute-force loop over rows, the closed
form of the sink's share, and the package's own scaled_dot_product_attention when the sinks
are -inf."""

import math
import types

import pytest
import torch

from attention_course import (
    decoding_mask,
    scaled_dot_product_attention,
    sink_attention,
    sink_softmax,
)
from attention_course.multihead import merge_heads, split_heads
from attention_course.rotary import apply_rotary

gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
masking_utils = pytest.importorskip("transformers.masking_utils")

F64 = torch.float64


def normal(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def max_error(a, b):
    return (a.double() - b.double()).abs().max().item()


def qkv(batch=2, heads=8, kv_heads=2, n_q=7, n_k=7, d=5, d_v=4, seed=0):
    return (
        normal(batch, heads, n_q, d, seed=seed),
        normal(batch, kv_heads, n_k, d, seed=seed + 1),
        normal(batch, kv_heads, n_k, d_v, seed=seed + 2),
    )


def theirs(query, key, value, sinks, mask=None, scale=None):
    """transformers' gpt-oss eager attention: (output (b, H, L, d_v), weights (b, H, L, S)).
    It reads `sinks`, `num_key_value_groups` and `training` from the layer it is given."""
    layer = types.SimpleNamespace(
        sinks=sinks, training=False, num_key_value_groups=query.shape[1] // key.shape[1]
    )
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    output, weights = gpt_oss.eager_attention_forward(layer, query, key, value, mask, scale)
    return output.transpose(1, 2), weights  # theirs is (b, L, H, d_v)


def their_mask(n_q, n_k, window=None, batch=2):
    """transformers' additive mask (batch, 1, n_q, n_k) for queries at the last n_q of n_k
    positions: causal, or causal within a sliding window as gpt-oss's sliding layers."""
    function = (
        masking_utils.causal_mask_function
        if window is None
        else masking_utils.sliding_window_causal_mask_function(window)
    )
    return masking_utils.eager_mask(
        batch_size=batch,
        q_length=n_q,
        kv_length=n_k,
        q_offset=n_k - n_q,
        mask_function=function,
        dtype=F64,
    )


def our_mask(n_q, n_k, window=None):
    """The same positions as their_mask, as the course's bool mask (n_q, n_k)."""
    return decoding_mask(torch.arange(n_k - n_q, n_k), torch.arange(n_k), window=window)


# --------------------------------------------------------------------- against transformers

GROUPS = {
    "8 heads, 2 KV heads": (8, 2),
    "4 heads, 4 KV heads": (4, 4),
    "6 heads, 1 KV head": (6, 1),
}


@pytest.mark.parametrize("heads, kv_heads", GROUPS.values(), ids=GROUPS)
@pytest.mark.parametrize(
    "n_q, n_k, window",
    [(7, 7, None), (7, 7, 3), (3, 9, 3), (1, 9, 4), (9, 9, 1)],
    ids=["causal", "window 3", "3 new of 9, window 3", "decoding 1 of 9, window 4", "window 1"],
)
def test_equals_gpt_oss_eager_attention(heads, kv_heads, n_q, n_k, window):
    query, key, value = qkv(heads=heads, kv_heads=kv_heads, n_q=n_q, n_k=n_k)
    sinks = normal(heads, seed=5)
    expected, expected_weights = theirs(query, key, value, sinks, their_mask(n_q, n_k, window))
    for options in (
        {"attn_mask": our_mask(n_q, n_k, window)},
        {"attn_mask": their_mask(n_q, n_k, window)},
    ):  # float, finfo.min
        output, weights = sink_attention(query, key, value, sinks, **options)
        assert output.shape == expected.shape and weights.shape == expected_weights.shape
        assert max_error(output, expected) < 1e-12
        assert max_error(weights, expected_weights) < 1e-12
    if window is None and n_q == n_k:
        output, weights = sink_attention(query, key, value, sinks, is_causal=True)
        assert max_error(output, expected) < 1e-12
        assert max_error(weights, expected_weights) < 1e-12


def test_equals_gpt_oss_without_a_mask_with_a_scale_and_large_sinks():
    query, key, value = qkv(n_q=4, n_k=6)
    for sinks in (normal(8, seed=3), 30 * normal(8, seed=4), torch.full((8,), -30.0, dtype=F64)):
        expected, expected_weights = theirs(query, key, value, sinks, None, scale=0.7)
        output, weights = sink_attention(query, key, value, sinks, scale=0.7)
        assert max_error(output, expected) < 1e-12
        assert max_error(weights, expected_weights) < 1e-12


def identity_keys(scores):
    """Keys that make transformers' eager attention score exactly `scores` (b, H, L, S): the
    query is the row of scores, the keys the unit vectors, the scale 1."""
    n_k, heads = scores.shape[-1], scores.shape[1]
    return torch.eye(n_k, dtype=scores.dtype).expand(scores.shape[0], heads, n_k, n_k)


@pytest.mark.parametrize("size", [1.0, 1000.0], ids=["scores ~ 1", "scores ~ 1000"])
def test_sink_softmax_equals_gpt_oss_weights(size):
    scores = size * normal(2, 3, 5, 6, seed=1)
    sinks = size * normal(3, seed=2)
    blocked = torch.zeros(2, 1, 5, 6, dtype=F64)
    blocked[..., 1, 2:4] = -math.inf  # transformers adds a mask: -inf there
    blocked[..., 3, :] = -math.inf  # a fully masked row
    values = normal(2, 3, 6, 2, seed=3)
    _, expected = theirs(scores, identity_keys(scores), values, sinks, blocked, scale=1.0)
    weights = sink_softmax(scores + blocked, sinks)
    assert torch.isfinite(weights).all()
    assert max_error(weights, expected) < 1e-12
    assert (weights[..., 1, 2:4] == 0).all() and (weights[..., 3, :] == 0).all()


def test_sink_softmax_takes_any_batch_dimensions():
    scores, sinks = normal(2, 3, 4, 5, 6, seed=1), normal(4, seed=2)
    weights = sink_softmax(scores, sinks)
    assert weights.shape == scores.shape
    for i in range(2):
        assert torch.equal(weights[i], sink_softmax(scores[i], sinks))


# ------------------------------------------------------------ a whole gpt-oss model, layer by layer


def tiny_gpt_oss():
    """A two-layer GptOssModel in float64, eager: layer 0 slides a window of 3, layer 1 sees
    everything; plain RoPE, random sinks."""
    config = gpt_oss.GptOssConfig(
        num_hidden_layers=2,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=3,
        hidden_size=32,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=6,
        intermediate_size=16,
        num_local_experts=2,
        num_experts_per_tok=1,
        vocab_size=50,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
        attn_implementation="eager",
        experts_implementation="eager",
    )
    torch.manual_seed(0)
    model = gpt_oss.GptOssModel(config).to(F64).eval()
    with torch.no_grad():
        for number, layer in enumerate(model.layers):
            layer.self_attn.sinks.copy_(normal(8, seed=10 + number))
    return model


def test_a_gpt_oss_model_s_attention_layers(monkeypatch):
    """Run the model; record what each layer's attention receives (the rotated queries and
    keys, the values, the mask the model built for that layer type) and returns; the course's
    sink_attention, given our own decoding_mask, gives the same weights and the same layer
    output after o_proj (1e-12), and RoPE from apply_rotary the same queries and keys
    (transformers computes RoPE's angles in float32: 1e-6)."""
    model = tiny_gpt_oss()
    calls, original = [], gpt_oss.eager_attention_forward

    def recording(layer, query, key, value, mask, scaling, **options):
        output, weights = original(layer, query, key, value, mask, scaling, **options)
        calls.append(
            dict(layer=layer, query=query, key=key, value=value, mask=mask, weights=weights)
        )
        return output, weights

    inputs, outputs = [], []

    def record_layer(module, args, kwargs, output):
        inputs.append(kwargs["hidden_states"])
        outputs.append(output[0])

    for layer in model.layers:
        layer.self_attn.register_forward_hook(record_layer, with_kwargs=True)
    monkeypatch.setattr(gpt_oss, "eager_attention_forward", recording)
    ids = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model(ids)
    assert [call["layer"].sliding_window for call in calls] == [3, None]
    positions = torch.arange(9)
    for call, x, expected in zip(calls, inputs, outputs):
        attention = call["layer"]
        mask = decoding_mask(positions, positions, window=attention.sliding_window)
        assert torch.equal(call["mask"] == 0, mask.expand(2, 1, 9, 9))  # theirs: 0 or min
        with torch.no_grad():
            heads, weights = sink_attention(
                call["query"], call["key"], call["value"], attention.sinks, attn_mask=mask
            )
            output = attention.o_proj(merge_heads(heads))
            query = apply_rotary(split_heads(attention.q_proj(x), 8), positions, 1000.0)
            key = apply_rotary(split_heads(attention.k_proj(x), 2), positions, 1000.0)
        assert max_error(weights, call["weights"]) < 1e-12
        assert max_error(output, expected) < 1e-12
        assert max_error(query, call["query"]) < 1e-6 and max_error(key, call["key"]) < 1e-6
        assert (weights.sum(-1) < 1).all()  # every sink took some weight


# ------------------------------------------------------------------ other references


def loop_reference(query, key, value, sinks, allowed, scale):
    """Row by row with Python floats: w_s = e^(z_s) / (e^b + sum e^(z_s')) over the allowed
    keys s of the row; query head h reads KV head h // (H // H_kv)."""
    batch, heads, n_q, _ = query.shape
    group = heads // key.shape[1]
    output = torch.zeros(batch, heads, n_q, value.shape[-1], dtype=F64)
    for b in range(batch):
        for h in range(heads):
            k, v = key[b, h // group], value[b, h // group]
            for t in range(n_q):
                keys = [s for s in range(key.shape[2]) if allowed[t, s]]
                z = {s: scale * float(query[b, h, t] @ k[s]) for s in keys}
                top = max([float(sinks[h])] + list(z.values()))
                total = math.exp(float(sinks[h]) - top) + sum(math.exp(z[s] - top) for s in z)
                for s in keys:
                    output[b, h, t] += math.exp(z[s] - top) / total * v[s]
    return output


def test_equals_a_loop_over_rows():
    query, key, value = qkv(heads=6, kv_heads=3, n_q=5, n_k=8, seed=3)
    sinks = normal(6, seed=4)
    allowed = normal(5, 8, seed=6) > -0.3
    allowed[2] = False  # a fully masked row
    output, _ = sink_attention(query, key, value, sinks, attn_mask=allowed, scale=0.6)
    assert max_error(output, loop_reference(query, key, value, sinks, allowed, 0.6)) < 1e-12
    assert (output[:, :, 2] == 0).all()


@pytest.mark.parametrize("sink", [-math.inf, -1e4], ids=["-inf", "-1e4"])
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_sinks_of_minus_infinity_give_plain_attention(sink, mask):
    query, key, value = qkv(n_q=6, n_k=6)
    masks = {
        "none": {},
        "causal": {"is_causal": True},
        "bool": {"attn_mask": normal(6, 6, seed=7) > -0.5},
        "float": {"attn_mask": normal(2, 8, 6, 6, seed=8)},
    }
    output, weights = sink_attention(
        query, key, value, torch.full((8,), sink, dtype=F64), **masks[mask]
    )
    expected, expected_weights = scaled_dot_product_attention(
        query, key.repeat_interleave(4, dim=1), value.repeat_interleave(4, dim=1), **masks[mask]
    )
    assert max_error(output, expected) < 1e-13
    assert max_error(weights, expected_weights) < 1e-13


def test_the_sink_s_share_is_a_sigmoid():
    """1 - (row sum) = exp(b) / (exp(b) + sum exp(z)) = sigmoid(b - logsumexp(z))."""
    scores, sinks = 3 * normal(2, 4, 5, 7, seed=1), normal(4, seed=2)
    scores[0, 1, 2, :3] = -math.inf
    share = 1 - sink_softmax(scores, sinks).sum(-1)
    closed_form = torch.sigmoid(sinks[:, None] - torch.logsumexp(scores, dim=-1))
    assert max_error(share, closed_form) < 1e-14
    assert (share > 0).all() and (share < 1).all()


def test_a_fully_masked_row_is_zero_with_finite_gradients():
    query, key, value = qkv(n_q=5, n_k=5)
    blocked_rows = torch.ones(5, 5, dtype=torch.bool).tril()
    blocked_rows[1] = False  # by a bool mask
    bias = torch.zeros(5, 5, dtype=F64)
    bias[3] = -math.inf  # by a float mask
    for sinks in (normal(8, seed=3), torch.full((8,), -math.inf, dtype=F64)):
        for mask, row in ((blocked_rows, 1), (bias, 3)):
            inputs = [t.clone().requires_grad_(True) for t in (query, key, value, sinks)]
            output, weights = sink_attention(*inputs, attn_mask=mask)
            assert (output[:, :, row] == 0).all() and (weights[:, :, row] == 0).all()
            assert torch.isfinite(output).all() and torch.isfinite(weights).all()
            grads = torch.autograd.grad((output**2).sum() + weights.sum(), inputs)
            assert all(torch.isfinite(grad).all() for grad in grads[:3])
            if torch.isfinite(sinks).all():
                assert torch.isfinite(grads[3]).all()
    scores = torch.full((1, 2, 3, 4), -math.inf, dtype=F64, requires_grad=True)
    for sinks in (torch.zeros(2, dtype=F64), torch.full((2,), -math.inf, dtype=F64)):
        weights = sink_softmax(scores, sinks)
        assert torch.equal(weights, torch.zeros_like(weights))
        (grad,) = torch.autograd.grad(weights.sum(), scores)
        assert torch.equal(grad, torch.zeros_like(grad))


def test_gradients_reach_the_sinks_and_equal_transformers():
    query, key, value = qkv(n_q=6, n_k=6)
    ours = [t.clone().requires_grad_(True) for t in (query, key, value, normal(8, seed=3))]
    their = [t.clone().requires_grad_(True) for t in ours]
    output, _ = sink_attention(*ours, is_causal=True)
    expected, _ = theirs(*their, their_mask(6, 6))
    weight = normal(*output.shape, seed=9)
    our_grads = torch.autograd.grad((weight * output).sum(), ours)
    their_grads = torch.autograd.grad((weight * expected).sum(), their)
    assert our_grads[3].abs().min() > 0  # every sink learns
    for ours_grad, their_grad in zip(our_grads, their_grads):
        assert max_error(ours_grad, their_grad) < 1e-12
    assert torch.autograd.gradcheck(
        lambda q, k, v, b: sink_attention(q, k, v, b, is_causal=True)[0],
        [
            t.detach()[:1, :4, :4].clone().requires_grad_(True)
            if t.dim() == 4
            else t.detach()[:4].clone().requires_grad_(True)
            for t in ours
        ],
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_sink_far_above_or_below_the_scores_stays_finite(dtype):
    """exp(b - max z) overflows float32 for b - max z > 88: the shift must include the sink.
    Weights and gradients stay finite and match transformers' in float64."""
    scores = normal(1, 3, 4, 5, seed=1)
    sinks = torch.tensor([200.0, -200.0, 1.0], dtype=F64)
    _, expected = theirs(scores, identity_keys(scores), normal(1, 3, 5, 2), sinks, None, scale=1.0)
    low_scores = scores.to(dtype).requires_grad_(True)
    low_sinks = sinks.to(dtype).requires_grad_(True)
    weights = sink_softmax(low_scores, low_sinks)
    assert weights.dtype == dtype
    assert max_error(weights, expected) < 4 * torch.finfo(dtype).eps
    grads = torch.autograd.grad(
        (normal(*weights.shape, seed=2).to(dtype) * weights).sum(), (low_scores, low_sinks)
    )
    assert all(torch.isfinite(grad).all() for grad in grads)


def test_a_larger_sink_takes_a_larger_share():
    scores = normal(1, 1, 4, 6, seed=2)
    shares = [
        1 - sink_softmax(scores, torch.tensor([b], dtype=F64)).sum(-1)
        for b in (-2.0, 0.0, 2.0, 6.0)
    ]
    assert all((a < b).all() for a, b in zip(shares, shares[1:]))
    assert (shares[-1] > 0.9).all()


# ------------------------------------------------------------------------------ bad input


def test_bad_input_names_the_shapes():
    scores = normal(2, 3, 4, 5)
    with pytest.raises(
        ValueError,
        match=r"sinks \(4,\).*\(heads,\) = \(3,\).*scores "
        r"\(2, 3, 4, 5\)",
    ):
        sink_softmax(scores, normal(4))
    with pytest.raises(ValueError, match=r"scores must be \(\.\.\., heads, n_q, n_k\)"):
        sink_softmax(normal(4, 5), normal(4))
    with pytest.raises(TypeError, match="sinks must be a torch.Tensor"):
        sink_softmax(scores, [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="sinks .* must share a dtype"):
        sink_softmax(scores, normal(3, dtype=torch.float32))
    query, key, value = qkv()
    with pytest.raises(ValueError, match=r"sinks \(2,\).*\(heads,\) = \(8,\).*query"):
        sink_attention(query, key, value, normal(2))
    with pytest.raises(ValueError, match=r"query \(2, 8, 7, 5\), key \(2, 3, 7, 5\)"):
        sink_attention(query, normal(2, 3, 7, 5), normal(2, 3, 7, 4), normal(8))
    with pytest.raises(ValueError, match="either attn_mask or is_causal"):
        sink_attention(query, key, value, normal(8), attn_mask=our_mask(7, 7), is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask \(6, 7\) does not broadcast"):
        sink_attention(query, key, value, normal(8), attn_mask=our_mask(6, 7))
