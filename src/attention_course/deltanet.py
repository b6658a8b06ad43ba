"""Gated DeltaNet, the whole layer around the gated delta rule (Yang, Kautz and Hatamizadeh 2025;
Qwen3-Next's linear-attention layers; chapter 16).

Notable:
- from a token x: q, k, v = W_qkv x, passed through a short causal depthwise convolution (one
  filter of K taps per channel) and SiLU; q and k L2-normalised (q then scaled by 1/sqrt(d_k));
  beta = sigmoid(W_b x); the decay g = -exp(A_log) softplus(W_a x + dt_bias) < 0; the gated
  delta rule (`linear.delta_rule`) per value head; each head's output RMS-normalised and
  multiplied by SiLU(W_z x), the output gate; then the output projection;
- value heads sharing key heads ("GVA"): num_value_heads is a multiple r of num_heads, and value
  head h reads query and key head h // r, as grouped-query attention shares keys (chapter 9);
- decoding: a `DeltaNetCache` carries the convolution's last K - 1 inputs and the delta rule's
  states (num_value_heads, head_dim, value_dim), both of a size that does not grow with the
  tokens seen;
- `from_qwen3_next` copies the weights of transformers' Qwen3NextGatedDeltaNet (duck-typed: the
  package does not import transformers), whose fused projections in_proj_qkvz and in_proj_ba
  interleave q, k, v, z (and b, a) key head by key head; tests/test_deltanet.py checks the
  layer against it in float64, prefill and token-by-token decode.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import _kernels
from ._shapes import (
    check_sequence,
    require_instance,
    require_int,
    require_number,
    shape_of,
    type_name,
)
from .linear import delta_rule

# what transformers' (and fla's) l2norm adds under the square root: x / sqrt(|x|^2 + eps)
L2_EPS = 1e-6


class DeltaNetCache:
    """One Gated DeltaNet layer's decode cache: `conv_state` (batch, K - 1, conv channels), the
    last K - 1 inputs of the short convolution, and `state` (batch, num_value_heads, head_dim,
    value_dim), the gated delta rule's states. Their size does not depend on the number of
    tokens seen. Filled by GatedDeltaNet.forward(x, cache); `seen` counts the tokens appended,
    `nbytes` the bytes held. Chapter 16.
    """

    def __init__(self):
        self.conv_state = self.state = None
        self.seen = 0

    @property
    def nbytes(self):
        if self.state is None:
            return 0
        held = (self.conv_state, self.state)
        return sum(tensor.numel() * tensor.element_size() for tensor in held)

    def _store(self, conv_state, state, tokens):
        self.conv_state, self.state = conv_state, state
        self.seen += tokens


def _check_sizes(embed_dim, num_heads, head_dim, value_dim, num_value_heads, conv_size):
    """The sizes, checked: num_value_heads (default num_heads) returned."""
    for name, value in (
        ("embed_dim", embed_dim),
        ("num_heads", num_heads),
        ("head_dim", head_dim),
        ("value_dim", value_dim),
        ("conv_size", conv_size),
    ):
        require_int(name, value, 1)
    if num_value_heads is None:
        return num_heads
    require_int("num_value_heads", num_value_heads, 1)
    if num_value_heads % num_heads:
        raise ValueError(
            f"num_value_heads={num_value_heads} must be a multiple of num_heads={num_heads}: "
            "each key head serves the same number of value heads"
        )
    return num_value_heads


def _inverse_softplus(y):
    return y + torch.log(-torch.expm1(-y))


class GatedDeltaNet(nn.Module):
    """A Gated DeltaNet layer (Yang, Kautz and Hatamizadeh 2025), as Qwen3-Next's linear layers.
    Sizes (transformers' Qwen3NextConfig names): embed_dim d (hidden_size), num_heads H_k
    query-and-key heads (linear_num_key_heads), head_dim d_k (linear_key_head_dim), value_dim
    d_v (linear_value_head_dim), num_value_heads H_v (linear_num_value_heads; a multiple of H_k,
    default H_k), conv_size K (linear_conv_kernel_dim), norm_eps (rms_norm_eps, the gated
    RMSNorm's), chunk_size (the chunkwise form's chunk for inputs of several tokens).

    forward(x (batch, L, embed_dim), cache=None) -> (batch, L, embed_dim), causal; with a
    DeltaNetCache the new tokens continue the cached ones (prefill, then one token at a time).
    Equal to transformers' Qwen3NextGatedDeltaNet with the same weights (`from_qwen3_next`).
    Chapter 16.
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        head_dim,
        value_dim,
        num_value_heads=None,
        conv_size=4,
        norm_eps=1e-6,
        chunk_size=64,
    ):
        super().__init__()
        num_value_heads = _check_sizes(
            embed_dim, num_heads, head_dim, value_dim, num_value_heads, conv_size
        )
        require_number("norm_eps", norm_eps, 0)
        require_int("chunk_size", chunk_size, 1)
        self._build(embed_dim, num_heads, head_dim, value_dim, num_value_heads, conv_size, norm_eps)
        self.chunk_size = chunk_size

    def _build(self, embed_dim, num_heads, head_dim, value_dim, num_value_heads, conv_size, eps):
        self.embed_dim, self.num_heads, self.num_value_heads = embed_dim, num_heads, num_value_heads
        self.head_dim, self.value_dim, self.conv_size = head_dim, value_dim, conv_size
        self.key_width = num_heads * head_dim  # H_k d_k
        self.value_width = num_value_heads * value_dim  # H_v d_v
        self.conv_channels = 2 * self.key_width + self.value_width  # [q | k | v]
        self.qkv_proj = nn.Linear(embed_dim, self.conv_channels, bias=False)
        self.z_proj = nn.Linear(embed_dim, self.value_width, bias=False)  # the output gate
        self.b_proj = nn.Linear(embed_dim, num_value_heads, bias=False)  # beta's logits
        self.a_proj = nn.Linear(embed_dim, num_value_heads, bias=False)  # the decay's input
        # one filter of K taps per channel (depthwise); causal padding is done in forward
        self.conv = nn.Conv1d(
            self.conv_channels,
            self.conv_channels,
            conv_size,
            groups=self.conv_channels,
            bias=False,
        )
        # A = exp(A_log) in [1, 16], dt = softplus(dt_bias) in [0.001, 0.1], as fla initialises
        self.A_log = nn.Parameter(torch.empty(num_value_heads).uniform_(1, 16).log())
        dt = torch.empty(num_value_heads).uniform_(math.log(1e-3), math.log(0.1)).exp()
        self.dt_bias = nn.Parameter(_inverse_softplus(dt))
        self.norm = nn.RMSNorm(value_dim, eps=eps)
        self.out_proj = nn.Linear(self.value_width, embed_dim, bias=False)

    # ------------------------------------------------------------------ the forward pass

    def forward(self, x, cache=None):
        """The forward pass of the class docstring. Chapter 16."""
        check_sequence("x", x, self.embed_dim, self.qkv_proj.weight.dtype)
        if cache is not None:
            require_instance("cache", cache, DeltaNetCache, "a DeltaNetCache or None")
            self._check_cache(cache, x)
        return self._forward(x, cache)

    def _forward(self, x, cache):
        batch, length, _ = x.shape
        # the projections: [q | k | v] for the convolution, the gate z, beta's and g's inputs
        mixed = self.qkv_proj(x)  # (b, L, 2 H_k d_k + H_v d_v)
        # the short causal convolution: each channel mixes its own last K inputs, the K - 1
        # before the first new token coming from the cache (zeros at the start)
        conved, conv_state = self._convolve(mixed, None if cache is None else cache.conv_state)
        q, k, v = conved.split([self.key_width, self.key_width, self.value_width], dim=-1)
        q = _kernels.split_heads(q, self.num_heads)  # (b, H_k, L, d_k)
        k = _kernels.split_heads(k, self.num_heads)  # (b, H_k, L, d_k)
        v = _kernels.split_heads(v, self.num_value_heads)  # (b, H_v, L, d_v)
        # unit queries and keys (q also scaled by 1 / sqrt(d_k)), then shared: value head h
        # reads key head h // r (GVA)
        q = _l2_normalise(q) / math.sqrt(self.head_dim)
        k = _l2_normalise(k)
        group = self.num_value_heads // self.num_heads  # r
        q, k = (t.repeat_interleave(group, dim=1) for t in (q, k))  # (b, H_v, L, d_k)
        # beta_t = sigmoid(b_t) in (0, 1); g_t = -exp(A_log) softplus(a_t + dt_bias) < 0
        beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)  # (b, H_v, L)
        decay_rate = self.A_log.exp()  # A = exp(A_log) > 0, one per value head
        log_decay = -decay_rate * F.softplus(self.a_proj(x) + self.dt_bias)  # (b, L, H_v)
        log_decay = log_decay.transpose(1, 2)  # (b, H_v, L)
        # the gated delta rule per value head, from the cached state
        state = None if cache is None else cache.state
        chunk = 1 if length == 1 else min(self.chunk_size, max(length, 1))
        # (delta_rule checks these tensors, which the layer made: a few cheap checks per call)
        out, state = delta_rule(q, k, v, beta, log_decay, chunk, state)  # (b, H_v, L, d_v)
        if cache is not None:
            cache._store(conv_state, state, length)
        # the gated RMSNorm: each head's output normalised, times SiLU(z), the output gate
        gate = _kernels.split_heads(self.z_proj(x), self.num_value_heads)  # (b, H_v, L, d_v)
        out = self.norm(out) * F.silu(gate)
        # the output projection of the heads side by side
        return self.out_proj(_kernels.merge_heads(out))  # (b, L, d)

    def _convolve(self, mixed, held):
        """SiLU of the causal depthwise convolution of mixed (b, L, C), continuing held
        (b, K - 1, C) or zeros -> (output (b, L, C), the last K - 1 inputs (b, K - 1, C))."""
        if held is None:
            held = mixed.new_zeros(mixed.shape[0], self.conv_size - 1, mixed.shape[2])
        window = torch.cat([held, mixed], dim=1)  # (b, K - 1 + L, C)
        # output t = sum_i w_i x_(t - K + 1 + i): no padding, so never a future input
        out = F.conv1d(window.transpose(1, 2), self.conv.weight, groups=self.conv_channels)
        last = window[:, window.shape[1] - (self.conv_size - 1) :]  # (b, K - 1, C)
        return F.silu(out).transpose(1, 2), last

    def _check_cache(self, cache, x):
        """A cache holding states must continue x: its batch, sizes, dtype and device."""
        if cache.state is None:
            return
        conv = (x.shape[0], self.conv_size - 1, self.conv_channels)
        state = (x.shape[0], self.num_value_heads, self.head_dim, self.value_dim)
        held = cache.conv_state, cache.state
        if (
            tuple(cache.conv_state.shape) != conv
            or tuple(cache.state.shape) != state
            or any(t.dtype != x.dtype or t.device != x.device for t in held)
        ):
            raise ValueError(
                f"cache holds conv_state {shape_of(cache.conv_state)} and state "
                f"{shape_of(cache.state)} ({cache.state.dtype}, {cache.state.device}); x "
                f"{shape_of(x)} ({x.dtype}, {x.device}) needs {conv} and {state} in its "
                "dtype and on its device: give each layer and batch its own cache"
            )

    # ------------------------------------------------------------------ transformers' weights

    @classmethod
    def from_qwen3_next(cls, layer):
        """The layer holding the weights of `layer`, a transformers Qwen3NextGatedDeltaNet
        (read by its attribute names: in_proj_qkvz, in_proj_ba, conv1d, A_log, dt_bias, norm,
        out_proj and the sizes num_k_heads, ...), its fused projections split into q, k, v, z,
        b and a. The layer lives on the device and in the dtype of the weights. Chapter 16."""
        require_instance("layer", layer, nn.Module, "a Qwen3NextGatedDeltaNet")
        missing = [name for name in _QWEN_NAMES if not hasattr(layer, name)]
        if missing:
            raise TypeError(
                f"layer must be a Qwen3NextGatedDeltaNet, got {type_name(layer)} "
                f"(it lacks {missing})"
            )
        if layer.activation not in ("silu", "swish") or layer.conv1d.bias is not None:
            raise ValueError(
                f"layer's convolution has activation {layer.activation!r} and bias "
                f"{layer.conv1d.bias is not None}: this layer has SiLU and no bias"
            )
        heads, value_heads = layer.num_k_heads, layer.num_v_heads
        d_k, d_v = layer.head_k_dim, layer.head_v_dim
        like = layer.out_proj.weight
        mine = cls._of_checked_sizes(
            like.shape[0],
            heads,
            d_k,
            d_v,
            value_heads,
            layer.conv_kernel_size,
            layer.layer_norm_epsilon,
        ).to(like.device, like.dtype)
        r = value_heads // heads
        # in_proj_qkvz: per key head [q (d_k) | k (d_k) | v (r d_v) | z (r d_v)] rows
        qkvz = layer.in_proj_qkvz.weight.reshape(heads, 2 * d_k + 2 * r * d_v, -1)
        q, k, v, z = qkvz.split([d_k, d_k, r * d_v, r * d_v], dim=1)
        # in_proj_ba: per key head [b (r) | a (r)] rows
        b, a = layer.in_proj_ba.weight.reshape(heads, 2 * r, -1).split([r, r], dim=1)
        width = like.shape[0]
        weights = {
            "qkv_proj.weight": torch.cat([t.reshape(-1, width) for t in (q, k, v)]),
            "z_proj.weight": z.reshape(-1, width),
            "b_proj.weight": b.reshape(-1, width),
            "a_proj.weight": a.reshape(-1, width),
            "conv.weight": layer.conv1d.weight,  # channels [q | k | v], as ours
            "A_log": layer.A_log,
            "dt_bias": layer.dt_bias,
            "norm.weight": layer.norm.weight,
            "out_proj.weight": like,
        }
        mine.load_state_dict({name: t.detach() for name, t in weights.items()})
        return mine

    @classmethod
    def _of_checked_sizes(cls, embed_dim, heads, d_k, d_v, value_heads, conv_size, eps):
        """The layer for sizes read off a transformers layer (which checked them)."""
        layer = _kernels.built(cls, embed_dim, heads, d_k, d_v, value_heads, conv_size, eps)
        layer.chunk_size = 64  # transformers' chunk
        return layer


_QWEN_NAMES = (
    "in_proj_qkvz",
    "in_proj_ba",
    "conv1d",
    "A_log",
    "dt_bias",
    "norm",
    "out_proj",
    "num_k_heads",
    "num_v_heads",
    "head_k_dim",
    "head_v_dim",
    "conv_kernel_size",
    "activation",
    "layer_norm_epsilon",
)


def _l2_normalise(x):
    """x / sqrt(|x|^2 + 1e-6) over the last axis, as transformers' and fla's l2norm."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)
