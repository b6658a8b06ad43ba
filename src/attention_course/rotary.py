"""Rotary position embeddings, RoPE (Su et al. 2021; chapter 10).

- `apply_rotary`: the pair (x_i, x_{i + d/2}) of a query or key at position m turns by the
  angle m theta_i, theta_i = base^(-2i / d): Llama's half-split pairing, as in transformers,
  so that a score depends on the positions only through their offset;
- `scaling`: a config's `rope_parameters` ("linear", "dynamic", "llama3", "yarn"), with the
  names and results of transformers' ROPE_INIT_FUNCTIONS; each type's rule is stated in the
  function of `_scaling` that computes it (shared with TinyDecoder's layers). C, the context
  the rules stretch, is the dict's "original_max_position_embeddings"; a "dynamic" dict has
  none, and transformers uses the config's max_position_embeddings, which `context=` passes;
- `interleaved_to_half_split`: rows of W_Q and W_K from the (2i, 2i + 1) pairing of GGUF files
  and DeepSeek's checkpoints (chapters 14-15).
"""

from . import _kernels
from ._scaling import attention_factor, check_scaling, frequencies, rotate
from ._shapes import (
    check_positions,
    check_rope_head_dim,
    require_float,
    require_floating_dtype,
    require_int,
    require_number,
    require_rank,
    shape_of,
)


def rotary_frequencies(
    head_dim, base=10000.0, *, scaling=None, seq_len=None, context=None, device=None, dtype=None
):
    """theta_i = base^(-2i / head_dim) for i < head_dim / 2 -> (head_dim / 2,),
    rescaled as `scaling` says (chapter 10 derives each type); seq_len, the
    current length, and context, C when the dict has no
    "original_max_position_embeddings" (a config's max_position_embeddings,
    as transformers takes it), matter to "dynamic" only. Chapter 10."""
    check_rope_head_dim(head_dim)
    require_number("base", base, 1, strict=True)
    scaling = check_scaling(scaling, base, context)
    if seq_len is not None:
        require_int("seq_len", seq_len, 1)
    require_floating_dtype("dtype", dtype)
    return frequencies(head_dim, base, device, dtype, scaling, seq_len)


def rotary_attention_factor(scaling=None):
    """The factor on rotated queries and keys (scores: its square) -> float.

    1 except for "yarn": scaling["attention_factor"] if given, else
    0.1 ln(factor) + 1 (Peng et al.'s sqrt(1/t)); with DeepSeek's "mscale"
    and "mscale_all_dim", the ratio of two such factors (DeepSeek-V3's
    attention then scales its scores itself). Chapter 10."""
    return attention_factor(check_scaling(scaling, frequencies=False))


def apply_rotary(x, positions=None, base=10000.0, *, scaling=None, context=None):
    """Rotate x (..., seq, head_dim) by its positions (seq,) -> same shape, dtype.

    Pair (x_i, x_{i + head_dim/2}) at position m turns by the angle m theta_i:
    (x_i cos - x_{i+h} sin, x_i sin + x_{i+h} cos). Default positions 0..seq-1.
    With `scaling` (a config's rope_parameters) the frequencies are rescaled
    and the result multiplied by rotary_attention_factor(scaling), as
    transformers does; "dynamic" takes max(positions) + 1 as the length and
    its C from context when the dict has none (rotary_frequencies). Chapter 10.
    """
    require_float("x", x)
    if x.dim() < 2 or x.shape[-1] < 2 or x.shape[-1] % 2:
        raise ValueError(f"x {shape_of(x)} must be (..., seq, head_dim) with an even head_dim")
    positions = check_positions(positions, x.shape[-2], x.device)
    require_number("base", base, 1, strict=True)
    return rotate(x, positions, base, check_scaling(scaling, base, context))


def interleaved_to_half_split(weight, num_heads):
    """Rows of W_Q or W_K (num_heads * head_dim, in) from the interleaved
    pairing of GGUF files and DeepSeek's checkpoints, where RoPE rotates rows
    2i and 2i + 1 of each head together, to the half-split pairing of
    `apply_rotary` (rows i and i + head_dim / 2): within each head, the even
    rows first, then the odd ones. Chapter 14."""
    require_rank("weight", weight, 2)
    require_int("num_heads", num_heads, 1)
    rows, columns = weight.shape
    if rows % (2 * num_heads):
        raise ValueError(
            f"weight {shape_of(weight)} does not split into {num_heads} heads of an even size"
        )
    return _kernels.interleaved_to_half_split(weight, num_heads)
