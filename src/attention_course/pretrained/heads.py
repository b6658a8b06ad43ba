"""Tools for reading and silencing the heads of a real model (chapters 13 and 14)."""

import contextlib

import torch

from .._shapes import is_integer, require_float, require_rank, shape_of, type_name
from ..masking import valid_lens_mask
from ..multihead import GroupedQueryAttention, MultiHeadAttention


def attention_layers(model):
    """The attention module of each layer, in order: an encoder's .layers or a decoder's
    .blocks, each holding an .attention (MultiHeadAttention or GroupedQueryAttention).
    Chapter 13."""
    stack = getattr(model, "layers", None) or getattr(model, "blocks", None)
    if stack is None:
        raise TypeError(
            f"model must have .layers or .blocks of attention layers, got {type(model).__name__}"
        )
    attentions = [getattr(layer, "attention", None) for layer in stack]
    if not attentions or not all(
        isinstance(attention, (MultiHeadAttention, GroupedQueryAttention))
        for attention in attentions
    ):
        raise TypeError(
            f"model must have .layers or .blocks whose .attention is a "
            f"MultiHeadAttention or GroupedQueryAttention, got {type_name(model)}"
        )
    return attentions


@contextlib.contextmanager
def ablated_heads(model, heads):
    """Within the block, each (layer, head) in `heads` contributes nothing:
    its head_dim input columns of that layer's out_proj are zeroed, which is
    the same as zeroing the head's output. The weights come back after.
    `model`: a SentenceEncoder (its .layers) or a TinyDecoder (its .blocks). Chapter 13."""
    layers = attention_layers(model)
    if isinstance(heads, (str, bytes)) or not hasattr(heads, "__iter__"):
        raise TypeError(f"heads must be a list of (layer, head) pairs, got {type_name(heads)}")
    heads = list(heads)
    for pair in heads:
        if not (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and all(is_integer(index) for index in pair)
        ):
            raise TypeError(f"heads must be (layer, head) pairs of integers, got {pair!r}")
    heads = [(int(layer), int(head)) for layer, head in heads]
    n_heads = layers[0].num_heads
    for layer, head in heads:
        if not (0 <= layer < len(layers) and 0 <= head < n_heads):
            raise ValueError(
                f"head ({layer}, {head}) outside the model's "
                f"{len(layers)} layers of {n_heads} heads"
            )
    saved = {layer: layers[layer].out_proj.weight.clone() for layer, _ in heads}
    try:
        with torch.no_grad():
            for layer, head in heads:
                attention = layers[layer]
                columns = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
                attention.out_proj.weight[:, columns] = 0
        yield model
    finally:
        with torch.no_grad():
            for layer, weight in saved.items():
                layers[layer].out_proj.weight.copy_(weight)


def attention_to(weights, targets, valid_lens):
    """How much attention each head puts on a pattern's target keys.

    weights: a sequence of (batch, H, L, L) tensors (one per layer);
    targets: bool (batch, L, L), True where key j is a target of query i.
    Returns (per_head (layers, H), per_sentence (batch, layers, H)): the
    weight on the targets summed over keys and averaged over the valid
    queries that have at least one target (pooled over all sentences for
    per_head). A sentence without any such query raises ValueError.
    Chapter 13.
    """
    if not isinstance(weights, (list, tuple)) or not weights:
        raise TypeError(
            f"weights must be a list of (batch, H, L, L) tensors, one per layer, "
            f"got {type_name(weights)}"
        )
    for index, layer_weights in enumerate(weights):
        require_float(f"weights[{index}]", layer_weights, 4)
        if layer_weights.shape != weights[0].shape:
            raise ValueError(
                f"weights[{index}] {shape_of(layer_weights)} and weights[0] "
                f"{shape_of(weights[0])} must have one shape"
            )
    weights = torch.stack(tuple(weights), dim=1)  # (batch, layers, H, L, L)
    require_rank("targets", targets, 3)
    if targets.dtype != torch.bool:
        raise ValueError(f"targets {shape_of(targets)} must be a bool mask, got {targets.dtype}")
    if targets.shape != weights.shape[:1] + weights.shape[-2:]:
        raise ValueError(
            f"targets {shape_of(targets)} must be (batch, L, L) for weights {shape_of(weights)}"
        )
    length = targets.shape[-1]
    valid = valid_lens_mask(valid_lens, 1, length)[:, 0]  # (batch, L)
    counted = targets.any(-1) & valid  # (batch, L queries)
    if not counted.any(-1).all():
        missing = (~counted.any(-1)).nonzero().flatten().tolist()
        raise ValueError(f"sentences {missing} have no query with a target")
    on_targets = (weights * targets[:, None, None].to(weights.dtype)).sum(-1)
    counted = counted[:, None, None].to(weights.dtype)  # (batch, 1, 1, L)
    per_sentence = (on_targets * counted).sum(-1) / counted.sum(-1)
    per_head = (on_targets * counted).sum((0, -1)) / counted.sum((0, -1))
    return per_head, per_sentence
