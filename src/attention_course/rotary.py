"""Rotary position embeddings, RoPE (Su et al. 2021; chapter 10).

Each pair of dimensions of a query or key is rotated by an angle proportional to
the token's position, so that the score q_m . k_n depends on the positions only
through m - n. Pairing as in Llama's Hugging Face implementation (half-split):
dimension i is paired with i + head_dim / 2 and turns at the frequency
theta_i = base^(-2i / head_dim), i = 0 .. head_dim / 2 - 1.
"""

import torch

from ._shapes import (
    require_float,
    require_floating_dtype,
    require_int,
    require_integer,
    require_number,
    require_tensor,
    shape_of,
)


def rotary_frequencies(head_dim, base=10000.0, *, device=None, dtype=None):
    """theta_i = base^(-2i / head_dim) for i < head_dim / 2 -> (head_dim / 2,)."""
    require_int("head_dim", head_dim)
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be even and >= 2, got {head_dim}")
    require_number("base", base, 1, strict=True)
    require_floating_dtype("dtype", dtype)
    return _frequencies(head_dim, base, device, dtype)


def _frequencies(head_dim, base, device, dtype):
    exponents = torch.arange(0, head_dim, 2, device=device, dtype=dtype)
    return base ** (-exponents / head_dim)


def _compute_dtypes(x):
    """(angles, products): angles m theta_i reach thousands of radians, so
    they are computed in float64 (float32 on Apple's MPS, which lacks it);
    the rotation itself in float64 for float64 inputs, else in float32."""
    angles = torch.float32 if x.device.type == "mps" else torch.float64
    products = torch.float64 if x.dtype == torch.float64 else torch.float32
    return angles, products


def _check_positions(positions, seq, device):
    if positions is None:
        return torch.arange(seq, device=device)
    require_tensor("positions", positions)
    if positions.shape != (seq,):
        raise ValueError(
            f"positions {shape_of(positions)} must be (seq,) = ({seq},), "
            "one position per token"
        )
    require_integer("positions", positions)
    return positions.to(device)


def apply_rotary(x, positions=None, base=10000.0):
    """Rotate x (..., seq, head_dim) by its positions (seq,) -> same shape, dtype.

    Pair (x_i, x_{i + head_dim/2}) at position m turns by the angle m theta_i:
    (x_i cos - x_{i+h} sin, x_i sin + x_{i+h} cos). Default positions 0..seq-1.
    """
    require_float("x", x)
    if x.dim() < 2 or x.shape[-1] < 2 or x.shape[-1] % 2:
        raise ValueError(
            f"x {shape_of(x)} must be (..., seq, head_dim) with an even head_dim"
        )
    positions = _check_positions(positions, x.shape[-2], x.device)
    require_number("base", base, 1, strict=True)
    return _rotate(x, positions, base)


def _rotate(x, positions, base):
    """apply_rotary for arguments its caller has checked (positions on x's device)."""
    head_dim = x.shape[-1]
    wide, work = _compute_dtypes(x)
    theta = _frequencies(head_dim, base, x.device, wide)
    angles = positions.to(wide)[:, None] * theta  # (seq, head_dim / 2)
    cos, sin = angles.cos().to(work), angles.sin().to(work)
    first, second = x.to(work).chunk(2, dim=-1)  # (..., seq, head_dim / 2)
    rotated = torch.cat(
        [first * cos - second * sin, first * sin + second * cos], dim=-1
    )
    return rotated.to(x.dtype)
