"""Tools for reading and silencing the heads of a real model (chapters 13 and 14)."""

import contextlib

import torch

from .._shapes import require_rank, shape_of
from ..masking import valid_lens_mask


def attention_layers(model):
    """The attention module of each layer, in order: an encoder's .layers or a decoder's
    .blocks, each holding an .attention (MultiHeadAttention or GroupedQueryAttention)."""
    stack = getattr(model, "layers", None) or getattr(model, "blocks", None)
    if stack is None:
        raise TypeError(f"model must have .layers or .blocks of attention layers, got "
                        f"{type(model).__name__}")
    return [layer.attention for layer in stack]


@contextlib.contextmanager
def ablated_heads(model, heads):
    """Within the block, each (layer, head) in `heads` contributes nothing:
    its head_dim input columns of that layer's out_proj are zeroed, which is
    the same as zeroing the head's output. The weights come back after.
    `model`: a SentenceEncoder (its .layers) or a TinyDecoder (its .blocks)."""
    layers = attention_layers(model)
    heads = [(int(layer), int(head)) for layer, head in heads]
    n_heads = layers[0].num_heads
    for layer, head in heads:
        if not (0 <= layer < len(layers) and 0 <= head < n_heads):
            raise ValueError(f"head ({layer}, {head}) outside the model's "
                             f"{len(layers)} layers of {n_heads} heads")
    saved = {layer: layers[layer].out_proj.weight.clone() for layer, _ in heads}
    try:
        with torch.no_grad():
            for layer, head in heads:
                attention = layers[layer]
                columns = slice(head * attention.head_dim,
                                (head + 1) * attention.head_dim)
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
    """
    weights = torch.stack(tuple(weights), dim=1)  # (batch, layers, H, L, L)
    require_rank("targets", targets, 3)
    if targets.shape != weights.shape[:1] + weights.shape[-2:]:
        raise ValueError(f"targets {shape_of(targets)} must be (batch, L, L) "
                         f"for weights {shape_of(weights)}")
    length = targets.shape[-1]
    valid = valid_lens_mask(valid_lens, 1, length)[:, 0]  # (batch, L)
    counted = targets.any(-1) & valid                     # (batch, L queries)
    if not counted.any(-1).all():
        missing = (~counted.any(-1)).nonzero().flatten().tolist()
        raise ValueError(f"sentences {missing} have no query with a target")
    on_targets = (weights * targets[:, None, None].to(weights.dtype)).sum(-1)
    counted = counted[:, None, None].to(weights.dtype)    # (batch, 1, 1, L)
    per_sentence = (on_targets * counted).sum(-1) / counted.sum(-1)
    per_head = (on_targets * counted).sum((0, -1)) / counted.sum((0, -1))
    return per_head, per_sentence
