"""Positional information (chapter 7): attention alone cannot tell positions apart.

The sinusoidal encoding is computed in float64 (float32 on MPS), so its angles stay exact for
long sequences, and returned in the caller's dtype on the caller's device.
"""

import torch

from ._shapes import require_floating_dtype, require_int, require_number


def sinusoidal_positional_encoding(num_positions, dim, base=10000.0, *, device=None, dtype=None):
    """The sinusoidal encoding of Vaswani et al. (2017): (num_positions, dim) with
    P[p, 2i] = sin(p / base^(2i/dim)) and P[p, 2i+1] = cos(p / base^(2i/dim)); dim must be even.

    Computed in float64 (exact angles for long sequences), returned in `dtype` (default: torch's
    default dtype) on `device` (default: the CPU), so that it can be added to a model's inputs
    where they live. Chapter 7."""
    require_int("num_positions", num_positions)
    require_int("dim", dim)
    require_number("base", base, 0, strict=True)
    require_floating_dtype("dtype", dtype)
    if num_positions < 1 or dim < 2 or dim % 2:
        raise ValueError(
            f"need num_positions >= 1 and an even dim >= 2, got ({num_positions}, {dim})"
        )
    wide = torch.float32 if torch.device(device or "cpu").type == "mps" else torch.float64
    positions = torch.arange(num_positions, dtype=wide, device=device)[:, None]  # (P, 1)
    frequencies = base ** (-torch.arange(0, dim, 2, dtype=wide, device=device) / dim)  # (dim/2,)
    angles = positions * frequencies  # (P, dim/2)
    encoding = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(1)  # (P, dim)
    return encoding.to(dtype or torch.get_default_dtype())
