"""The Gated DeltaNet layer against independent references: transformers' Qwen3NextGatedDeltaNet
(its pure-PyTorch path, run in float64) with the same weights, prefill and token-by-token decode
through both caches, and a loop over every token, channel and head written from the equations."""

import inspect
import math
import textwrap
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course import DeltaNetCache, GatedDeltaNet
from helpers.qwen3_next import small_qwen3_next_config

transformers = pytest.importorskip("transformers")
qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")

F64 = torch.float64
SIZES = dict(hidden=24, key_heads=2, value_heads=4, d_k=8, d_v=6, conv=4)


def normal(*shape, seed=0, dtype=F64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def max_error(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.double() - b.double()).abs().amax(tuple(range(a.dim()))).item() if a.numel() else 0.0


def qwen_config(value_heads=SIZES["value_heads"], conv=SIZES["conv"]):
    return small_qwen3_next_config(
        SIZES["hidden"], SIZES["key_heads"], value_heads, SIZES["d_k"], SIZES["d_v"], conv
    )


def float64_source(function, namespace, casts):
    """The reference function's own source, run in float64: transformers casts to float32 inside
    (`torch.float32`, `.float()`); those casts, and nothing else, become float64. `casts`: how
    many there must be."""
    source = textwrap.dedent(inspect.getsource(inspect.unwrap(function)))
    source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("@"))
    made = source.count("torch.float32") + source.count(".float()")
    assert made == casts, f"{function.__name__}: {made} float32 casts, expected {casts}"
    source = source.replace("torch.float32", "torch.float64").replace(".float()", ".double()")
    exec(source, namespace)
    return namespace[function.__name__]


def theirs(config, seed=0):
    """transformers' layer with random weights, in float64 throughout: its forward, its gated
    RMSNorm and its two gated-delta-rule functions recompiled from their source with the float32
    casts made float64, and the convolutions' pure-PyTorch functions (not fla's or
    causal-conv1d's kernels, whether installed or not)."""
    torch.manual_seed(seed)
    layer = qwen3_next.Qwen3NextGatedDeltaNet(config, 0).double()
    with torch.no_grad():
        for number, (name, parameter) in enumerate(sorted(layer.named_parameters())):
            noise = normal(*parameter.shape, seed=100 * seed + number)
            parameter.copy_(1 + 0.2 * noise if name == "norm.weight" else 0.5 * noise)
    namespace = dict(vars(qwen3_next))
    for name in ("causal_conv1d_fn", "causal_conv1d_update"):
        torch_path = inspect.unwrap(getattr(qwen3_next, name))
        assert torch_path.__module__ == qwen3_next.__name__  # transformers' own PyTorch code
        namespace[name] = torch_path
    for function in (
        qwen3_next.torch_chunk_gated_delta_rule,
        qwen3_next.torch_recurrent_gated_delta_rule,
    ):
        float64_source(function, namespace, 1)
    # forward's three: A_log.float(), a.float() and one in a comment
    forward = float64_source(qwen3_next.Qwen3NextGatedDeltaNet.forward, namespace, 3)
    norm = float64_source(qwen3_next.Qwen3NextRMSNormGated.forward, namespace, 2)
    layer.forward = types.MethodType(forward, layer)
    layer.norm.forward = types.MethodType(norm, layer.norm)
    return layer


def their_states(cache):
    """transformers' cache -> (the convolution's inputs (b, C, K), states (b, H_v, d_k, d_v))."""
    return cache.layers[0].conv_states[0], cache.layers[0].recurrent_states[0]


# ------------------------------------------------------------------ a loop over every token


def by_tokens(layer, x, conv_inputs=None, states=None):
    """The layer written out token by token from its equations, with the layer's weights:
    conv_inputs (b, K - 1, C) and states (b, H_v, d_k, d_v) to continue from (zeros)."""
    batch, n, _ = x.shape
    size, heads, value_heads = layer.conv_size, layer.num_heads, layer.num_value_heads
    d_k, d_v = layer.head_dim, layer.value_dim
    channels = 2 * heads * d_k + value_heads * d_v
    weight = layer.conv.weight[:, 0, :]  # (C, K)
    past = torch.zeros(batch, size - 1, channels, dtype=F64) if conv_inputs is None else conv_inputs
    states = torch.zeros(batch, value_heads, d_k, d_v, dtype=F64) if states is None else states
    past, states = past.clone(), states.clone()
    out = torch.zeros(batch, n, layer.embed_dim, dtype=F64)
    for b in range(batch):
        for t in range(n):
            token = x[b, t]
            mixed = layer.qkv_proj.weight @ token
            window = torch.cat([past[b], mixed[None]])  # (K, C): inputs t - K + 1 .. t
            conved = torch.zeros(channels, dtype=F64)
            for c in range(channels):
                total = sum(weight[c, i] * window[i, c] for i in range(size))
                conved[c] = total * torch.sigmoid(total)  # SiLU
            past[b] = window[1:]
            q_all = conved[: heads * d_k].reshape(heads, d_k)
            k_all = conved[heads * d_k : 2 * heads * d_k].reshape(heads, d_k)
            v_all = conved[2 * heads * d_k :].reshape(value_heads, d_v)
            z_all = (layer.z_proj.weight @ token).reshape(value_heads, d_v)
            beta = torch.sigmoid(layer.b_proj.weight @ token)
            a = layer.a_proj.weight @ token
            heads_out = []
            for h in range(value_heads):
                shared = h // (value_heads // heads)  # the key head of value head h
                q = q_all[shared] / math.sqrt(q_all[shared] @ q_all[shared] + 1e-6)
                k = k_all[shared] / math.sqrt(k_all[shared] @ k_all[shared] + 1e-6)
                q = q / math.sqrt(d_k)
                gamma = math.exp(
                    -math.exp(layer.A_log[h]) * math.log1p(math.exp(a[h] + layer.dt_bias[h]))
                )
                s = gamma * states[b, h]
                s = s + beta[h] * torch.outer(k, v_all[h] - s.T @ k)
                states[b, h] = s
                o = s.T @ q
                rms = math.sqrt(float((o * o).mean()) + layer.norm.eps)
                heads_out.append(layer.norm.weight * o / rms * F.silu(z_all[h]))
            out[b, t] = layer.out_proj.weight @ torch.cat(heads_out)
    return out, past, states


# ------------------------------------------------------------------ against transformers


@pytest.mark.parametrize("value_heads", [2, 4])
@pytest.mark.parametrize("n", [1, 3, 13, 70])
def test_prefill_equals_qwen3_next_in_float64(value_heads, n):
    """n = 1 and 3 are shorter than the convolution, 70 is more than one 64-token chunk;
    4 value heads share 2 key heads (GVA), 2 do not."""
    reference = theirs(qwen_config(value_heads))
    ours = GatedDeltaNet.from_qwen3_next(reference)
    x = normal(2, n, SIZES["hidden"], seed=1)
    with torch.no_grad():
        assert max_error(ours(x), reference(x)) < 1e-10


@pytest.mark.parametrize("prompt", [2, 3, 9])
def test_prefill_then_decode_through_both_caches_equals_qwen3_next(prompt):
    """A prompt (2 tokens, fewer than the convolution's 3 inputs held), then tokens one at a
    time, then a block of 4 through the cache: every output, the states and the convolution's
    inputs equal transformers' (which holds K inputs, one more than the K - 1 needed)."""
    config = qwen_config()
    reference = theirs(config)
    ours = GatedDeltaNet.from_qwen3_next(reference)
    x = normal(2, prompt + 9, SIZES["hidden"], seed=2)
    their_cache, our_cache = transformers.DynamicCache(config=config), DeltaNetCache()
    pieces = [(0, prompt)] + [(t, t + 1) for t in range(prompt, prompt + 5)]
    pieces.append((prompt + 5, prompt + 9))
    with torch.no_grad():
        for start, end in pieces:
            expected = reference(x[:, start:end], cache_params=their_cache)
            assert max_error(ours(x[:, start:end], our_cache), expected) < 1e-10
            conv_inputs, states = their_states(their_cache)
            assert max_error(our_cache.state, states) < 1e-10
            assert max_error(our_cache.conv_state, conv_inputs[..., 1:].transpose(1, 2)) < 1e-12
            assert our_cache.seen == end


def test_the_cache_keeps_a_constant_size_and_decoding_equals_the_whole_sequence():
    torch.manual_seed(0)
    layer = GatedDeltaNet(16, 2, 4, 3, num_value_heads=4, conv_size=3).double()
    x = normal(1, 30, 16, seed=3)
    cache, sizes, outputs = DeltaNetCache(), set(), []
    with torch.no_grad():
        whole = layer(x)
        for t in range(30):
            outputs.append(layer(x[:, t : t + 1], cache))
            sizes.add(cache.nbytes)
    assert max_error(torch.cat(outputs, dim=1), whole) < 1e-12
    # (K - 1) C inputs and H_v d_k d_v state entries, 8 bytes each
    assert sizes == {8 * (2 * (2 * 2 * 4 + 4 * 3) + 4 * 4 * 3)}


# ------------------------------------------------------------------ against the token loop


@pytest.mark.parametrize("conv_size", [1, 2, 4])
def test_equal_to_the_token_loop_on_a_random_layer(conv_size):
    torch.manual_seed(conv_size)
    layer = GatedDeltaNet(12, 2, 4, 3, num_value_heads=6, conv_size=conv_size, chunk_size=4)
    layer = layer.double()
    x = normal(2, 11, 12, seed=4)
    with torch.no_grad():
        expected, conv_inputs, states = by_tokens(layer, x[:, :7])
        cache = DeltaNetCache()
        assert max_error(layer(x[:, :7], cache), expected) < 1e-12
        assert max_error(cache.state, states) < 1e-12
        assert max_error(cache.conv_state, conv_inputs) < 1e-12
        expected, *_ = by_tokens(layer, x[:, 7:], conv_inputs, states)
        assert max_error(layer(x[:, 7:], cache), expected) < 1e-12


def test_the_convolution_is_causal_and_the_gate_matters():
    """Changing token 5 changes no output before it; zeroing the gate's weights zeroes the
    output (SiLU(0) = 0)."""
    torch.manual_seed(1)
    layer = GatedDeltaNet(8, 1, 4, 4).double()
    x = normal(1, 9, 8, seed=5)
    changed = x.clone()
    changed[0, 5] += 1.0
    with torch.no_grad():
        before, after = layer(x), layer(changed)
        assert torch.equal(before[:, :5], after[:, :5])
        assert max_error(before[:, 5:], after[:, 5:]) > 1e-3
        layer.z_proj.weight.zero_()
        assert layer(x).abs().max() == 0


# ------------------------------------------------------------------ doors, dtypes, devices


def test_bad_arguments_raise_naming_them():
    layer = GatedDeltaNet(8, 2, 4, 3, num_value_heads=4)
    with pytest.raises(ValueError, match="num_value_heads=3 must be a multiple of num_heads=2"):
        GatedDeltaNet(8, 2, 4, 3, num_value_heads=3)
    with pytest.raises(ValueError, match=r"x \(2, 5, 7\) must be \(batch, seq, embed_dim=8\)"):
        layer(torch.ones(2, 5, 7))
    with pytest.raises(ValueError, match="x .*float64.*weights"):
        layer(torch.ones(2, 5, 8, dtype=F64))
    with pytest.raises(TypeError, match="cache must be a DeltaNetCache or None, got KVCache"):
        from attention_course import KVCache

        layer(torch.ones(2, 5, 8), KVCache())
    cache = DeltaNetCache()
    layer(torch.ones(2, 5, 8), cache)
    with pytest.raises(ValueError, match=r"cache holds conv_state \(2, 3, 28\).*x \(3, 1, 8\)"):
        layer(torch.ones(3, 1, 8), cache)
    with pytest.raises(TypeError, match="layer must be a Qwen3NextGatedDeltaNet, got Linear"):
        GatedDeltaNet.from_qwen3_next(nn.Linear(3, 3))
    reference = qwen3_next.Qwen3NextGatedDeltaNet(qwen_config(), 0)
    reference.activation = "gelu"
    with pytest.raises(ValueError, match="layer's convolution has activation 'gelu'"):
        GatedDeltaNet.from_qwen3_next(reference)


@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 5e-2), (torch.float16, 5e-3)]
)
def test_the_layer_follows_its_dtype(dtype, tolerance):
    torch.manual_seed(2)
    layer = GatedDeltaNet(16, 2, 8, 4, num_value_heads=4).double()
    x = normal(2, 20, 16, seed=6)
    with torch.no_grad():
        exact = layer(x)
        low = GatedDeltaNet(16, 2, 8, 4, num_value_heads=4)
        low.load_state_dict(layer.state_dict())
        low = low.to(dtype)
        cache = DeltaNetCache()
        out = torch.cat([low(x[:, :12].to(dtype), cache), low(x[:, 12:].to(dtype), cache)], 1)
    assert out.dtype == cache.state.dtype == cache.conv_state.dtype == dtype
    assert max_error(out, exact) < tolerance * (1 + exact.abs().max().item())


def test_from_qwen3_next_keeps_the_weights_device_and_dtype():
    reference = qwen3_next.Qwen3NextGatedDeltaNet(qwen_config(), 0).to(torch.bfloat16)
    ours = GatedDeltaNet.from_qwen3_next(reference)
    assert {p.dtype for p in ours.parameters()} == {torch.bfloat16}
    reference = qwen3_next.Qwen3NextGatedDeltaNet(qwen_config(), 0).to("meta")
    assert {p.device.type for p in GatedDeltaNet.from_qwen3_next(reference).parameters()} == {
        "meta"
    }


def test_nothing_is_made_on_the_cpu_behind_the_callers_back():
    layer = GatedDeltaNet(8, 2, 4, 3, num_value_heads=4).to("meta")
    cache = DeltaNetCache()
    for n in (5, 1):
        out = layer(torch.empty(2, n, 8, device="meta"), cache)
        assert out.device.type == cache.state.device.type == "meta" and out.shape == (2, n, 8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_a_gpu_the_results_equal_the_cpus():
    torch.manual_seed(3)
    layer = GatedDeltaNet(16, 2, 8, 4, num_value_heads=4).double()
    x = normal(2, 70, 16, seed=7)
    with torch.no_grad():
        cpu_cache, gpu_cache = DeltaNetCache(), DeltaNetCache()
        cpu = [layer(x[:, :66], cpu_cache), layer(x[:, 66:67], cpu_cache)]
        gpu_layer = layer.cuda()
        gpu = [gpu_layer(x[:, :66].cuda(), gpu_cache), gpu_layer(x[:, 66:67].cuda(), gpu_cache)]
    assert all(max_error(a, b.cpu()) < 1e-12 for a, b in zip(cpu, gpu))
    assert max_error(cpu_cache.state, gpu_cache.state.cpu()) < 1e-12
