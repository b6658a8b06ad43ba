"""Reading a decoder's circuits (chapter 14).

- `trace_decoder`: one pass of a `TinyDecoder` that records the residual stream entering
  every block and what each head of chosen layers adds to it, and that can compute a layer's
  queries, keys or values from another run's residual stream (a *path patch*);
- `direct_logit_attribution`: what a vector written into the residual stream adds to the
  logits directly, through the final RMSNorm with its scale taken from the actual stream;
- `trace_caches`: the KV caches a traced pass would have filled, from its residual stream.
"""

from collections import namedtuple

import torch

from .. import _kernels
from .._scaling import rotate
from .._shapes import (
    is_integer,
    require_float,
    require_instance,
    require_int,
    shape_of,
    type_name,
)
from ..decoding import TinyDecoder

PATHS = ("query", "key", "value")

DecoderTrace = namedtuple("DecoderTrace", "logits weights residuals heads")
DecoderTrace.__doc__ = """What `trace_decoder` records: logits (batch, seq, vocab); weights, a
list of N attention weights (batch, H, seq, seq); residuals (N + 1, batch, seq, embed_dim), the
stream entering each block and, last, the stream leaving the last block (before the final
norm); heads, a dict layer -> (batch, H, seq, embed_dim), what each head of that layer adds to
the stream. Chapter 14."""


def _check_patches(patches, model, ids):
    """patches: {(layer, path): residual (batch, seq, embed_dim)} -> {layer: {path: tensor}}."""
    if patches is None:
        return {}
    if not isinstance(patches, dict):
        raise TypeError(
            f"patches must be a dict {{(layer, path): residual}} or None, got {type_name(patches)}"
        )
    by_layer = {}
    dtype = model.embed.weight.dtype
    for key, residual in patches.items():
        if not (isinstance(key, tuple) and len(key) == 2 and is_integer(key[0])):
            raise TypeError(f"patches' keys must be (layer, path) pairs, got {key!r}")
        layer, path = int(key[0]), key[1]
        if not 0 <= layer < len(model.blocks):
            raise ValueError(
                f"patches' layer {layer} outside the model's {len(model.blocks)} layers"
            )
        if path not in PATHS:
            raise ValueError(f"patches' path must be one of {PATHS}, got {path!r}")
        require_float(f"patches[{key!r}]", residual, 3)
        expected = (*ids.shape, model.config.embed_dim)
        if tuple(residual.shape) != expected or residual.dtype != dtype:
            raise ValueError(
                f"patches[{key!r}] {shape_of(residual)} ({residual.dtype}) must be a residual "
                f"stream (batch, seq, embed_dim) = {expected} in the model's dtype {dtype}"
            )
        by_layer.setdefault(layer, {})[path] = residual.to(ids.device)
    return by_layer


def _check_head_layers(head_layers, model):
    if isinstance(head_layers, (str, bytes)) or not hasattr(head_layers, "__iter__"):
        raise TypeError(
            f"head_layers must be a list of layer numbers, got {type_name(head_layers)}"
        )
    layers = list(head_layers)
    for layer in layers:
        if not is_integer(layer):
            raise TypeError(f"head_layers must hold integer layer numbers, got {layer!r}")
        if not 0 <= int(layer) < len(model.blocks):
            raise ValueError(
                f"head_layers' layer {layer} outside the model's {len(model.blocks)} layers"
            )
    return {int(layer) for layer in layers}


def _check_start(start, earlier, model, ids, by_layer, recorded):
    """start (a layer number) and earlier (a DecoderTrace of the same ids, or None)."""
    require_int("start", start, 0)
    layers = len(model.blocks)
    if start > layers:
        raise ValueError(f"start={start} outside the model's {layers} layers (0 to {layers})")
    if earlier is None:
        if start:
            raise ValueError(
                f"start={start} needs earlier, the trace whose layers 0 to {start - 1} it reuses"
            )
        return
    require_instance("earlier", earlier, DecoderTrace, "a DecoderTrace (from trace_decoder)")
    expected = (layers + 1, *ids.shape, model.config.embed_dim)
    residuals = earlier.residuals
    if tuple(residuals.shape) != expected or residuals.dtype != model.embed.weight.dtype:
        raise ValueError(
            f"earlier's residuals {shape_of(residuals)} ({residuals.dtype}) must be a trace of "
            f"these ids: (N + 1, batch, seq, embed_dim) = {expected} in the model's dtype"
        )
    early_patches = sorted(layer for layer in by_layer if layer < start)
    if early_patches:
        raise ValueError(
            f"patches at layers {early_patches} come before start={start}: layers before start "
            "are not run again, so they cannot be patched"
        )
    missing = sorted(layer for layer in recorded if layer < start and layer not in earlier.heads)
    if missing:
        raise ValueError(
            f"head_layers {missing} come before start={start} and earlier did not record them"
        )


def _attention(block, x, positions, sources):
    """Block attention with each path read from `sources` (path -> residual) or from x:
    (per-head writes (batch, H, L, embed_dim), weights (batch, H, L, L))."""
    layer = block.attention
    # each path reads its own stream, or the patch's, through the block's norm
    normed = {path: block.attention_norm(sources.get(path, x)) for path in PATHS}
    # project: q (batch, H, L, d_h); k, v (batch, H_kv, L, d_h)
    q = _kernels.split_heads(layer.q_proj(normed["query"]), layer.num_heads)
    k = _kernels.split_heads(layer.k_proj(normed["key"]), layer.num_kv_heads)
    v = _kernels.split_heads(layer.v_proj(normed["value"]), layer.num_kv_heads)
    # rotate queries and keys at their positions, in one call as the block does,
    # with the config's RoPE scaling if it has one (chapter 10)
    rotated = rotate(torch.cat([q, k], dim=1), positions, block.base, block.config.rope_scaling)
    q, k = rotated.split([q.shape[1], k.shape[1]], dim=1)
    # causal (and windowed) attention: outputs (batch, H, L, d_h)
    mask = _kernels.allowed_by_position(positions, positions, block.window, block.sinks)
    outputs, weights = _kernels.grouped_attention(q, k, v, mask.to(x.device))
    # head h writes its output through its d_h columns of W_O: (batch, H, L, embed_dim)
    w_o = layer.out_proj.weight.reshape(-1, layer.num_heads, layer.head_dim)  # (D, H, d_h)
    return torch.einsum("bhld,ehd->bhle", outputs, w_o), weights


@torch.no_grad()
def trace_decoder(model, ids, patches=None, head_layers=(), start=0, earlier=None):
    """One pass of a TinyDecoder over ids (batch, seq), without a cache -> DecoderTrace.

    Records the residual stream entering each block (and leaving the last) and, for each
    layer in head_layers, what each of its heads writes into the stream. With patches,
    {(layer, path): residual (batch, seq, embed_dim)} with path "query", "key" or "value",
    that layer computes that path from the given stream (through its own attention norm)
    instead of its own: e.g. its keys from a run in which earlier heads were silenced, its
    queries and values intact.

    start, earlier: a run that differs from an earlier trace of the same ids only from
    layer `start` on (patches there or later, or heads silenced there or later) need not
    run layers 0 to start - 1 again: their stream, weights and heads' writes are taken
    from `earlier`, and the trace is the one a full pass gives, bit for bit. Chapter 14."""
    require_instance("model", model, TinyDecoder, "a TinyDecoder")
    model._check_ids(ids)
    by_layer = _check_patches(patches, model, ids)
    recorded = _check_head_layers(head_layers, model)
    _check_start(start, earlier, model, ids, by_layer, recorded)
    positions = torch.arange(ids.shape[1], device=ids.device)
    if start:
        # layers 0 to start - 1 as the earlier run computed them; x enters layer start
        residuals = list(earlier.residuals[: start + 1])  # (batch, seq, embed_dim) each
        weights = list(earlier.weights[:start])
        heads = {layer: earlier.heads[layer] for layer in recorded if layer < start}
        x = residuals[-1]
    else:
        x = model.embed(ids)  # (batch, seq, embed_dim)
        residuals, weights, heads = [x], [], {}
    for number, block in enumerate(model.blocks):
        if number < start:
            continue
        # attention sublayer: x + the sum of what its heads write
        writes, layer_weights = _attention(block, x, positions, by_layer.get(number, {}))
        x = x + writes.sum(dim=1)
        # feed-forward sublayer, as in DecoderBlock
        h = block.mlp_norm(x)
        x = x + block.down_proj(torch.nn.functional.silu(block.gate_proj(h)) * block.up_proj(h))
        residuals.append(x)
        weights.append(layer_weights)
        if number in recorded:
            heads[number] = writes
    logits = model.lm_head(model.norm(x))
    return DecoderTrace(logits, weights, torch.stack(residuals), heads)


@torch.no_grad()
def direct_logit_attribution(model, writes, final_residual):
    """What vectors written into the residual stream add to the logits directly.

    writes (batch, ..., seq, embed_dim), e.g. heads' outputs through W_O; final_residual
    (batch, seq, embed_dim), the stream the final RMSNorm actually reads. The norm is
    linearised there: its division by the stream's root mean square is kept fixed, so each
    write maps to g * write / rms(final_residual) and then through the unembedding ->
    (batch, ..., seq, vocab). The writes that sum to the final stream map to logits that sum to the
    model's logits. Chapter 14."""
    require_instance("model", model, TinyDecoder, "a TinyDecoder")
    require_float("final_residual", final_residual, 3)
    require_float("writes", writes, None)
    width = model.config.embed_dim
    if final_residual.shape[-1] != width:
        raise ValueError(
            f"final_residual {shape_of(final_residual)} must be (batch, seq, embed_dim={width})"
        )
    dtype = model.embed.weight.dtype
    for name, tensor in (("writes", writes), ("final_residual", final_residual)):
        if tensor.dtype != dtype:
            raise ValueError(
                f"{name} {shape_of(tensor)} is {tensor.dtype}: it must be in the model's "
                f"dtype {dtype}"
            )
    batch, seq = final_residual.shape[:2]
    if writes.dim() < 3 or (writes.shape[0], *writes.shape[-2:]) != (batch, seq, width):
        raise ValueError(
            f"writes {shape_of(writes)} must be (batch, ..., seq, embed_dim) with "
            f"(batch, seq, embed_dim) = {shape_of(final_residual)}, final_residual's"
        )
    norm = model.norm
    eps = torch.finfo(final_residual.dtype).eps if norm.eps is None else norm.eps
    # the final norm's scale, fixed at the actual stream: (batch, 1 ..., seq, 1)
    rms = (final_residual.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    rms = rms.reshape(batch, *(1,) * (writes.dim() - 3), seq, 1)
    return model.lm_head(writes * norm.weight / rms)


@torch.no_grad()
def trace_caches(model, trace):
    """The KV caches a pass over the traced ids would have filled, without a second pass: one
    KVCache per layer, as model.new_caches() makes them (the model's window and sinks), holding
    the keys and values that layer computes from the stream the trace recorded entering it
    (through its attention norm; keys rotated at positions 0, 1, ...). For a trace without
    patches (a patched layer's keys read another stream); caches that renumber positions, which
    hold keys before RoPE, are refused. Chapter 14."""
    require_instance("model", model, TinyDecoder, "a TinyDecoder")
    require_instance("trace", trace, DecoderTrace, "a DecoderTrace (from trace_decoder)")
    residuals = trace.residuals
    layers, width, dtype = len(model.blocks), model.config.embed_dim, model.embed.weight.dtype
    if (
        residuals.dim() != 4
        or (residuals.shape[0], residuals.shape[3]) != (layers + 1, width)
        or residuals.dtype != dtype
    ):
        raise ValueError(
            f"trace's residuals {shape_of(residuals)} ({residuals.dtype}) must be a trace of this "
            f"model: (N + 1 = {layers + 1}, batch, seq, embed_dim = {width}) in its dtype {dtype}"
        )
    if model.config.renumber:
        raise ValueError(
            "the model's caches renumber positions (windowed(..., renumber=True)) and hold keys "
            "before RoPE: trace_caches fills caches of keys rotated at their positions"
        )
    positions = torch.arange(residuals.shape[2], device=residuals.device)
    caches = model.new_caches()
    for block, cache, x in zip(model.blocks, caches, residuals):
        layer = block.attention
        # the layer's keys and values from the stream entering it: (batch, H_kv, seq, d_h)
        normed = block.attention_norm(x)
        k = _kernels.split_heads(layer.k_proj(normed), layer.num_kv_heads)
        v = _kernels.split_heads(layer.v_proj(normed), layer.num_kv_heads)
        # keys rotated at their positions, as the layer caches them (chapter 10's scaling too)
        cache._append(rotate(k, positions, block.base, block.config.rope_scaling), v)
    return caches
