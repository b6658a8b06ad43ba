"""Positional information (chapter 6): attention alone cannot tell positions apart."""

import torch


def sinusoidal_positional_encoding(num_positions, dim, base=10000.0):
    """The sinusoidal encoding of Vaswani et al. (2017): (num_positions, dim) with
    P[p, 2i] = sin(p / base^(2i/dim)) and P[p, 2i+1] = cos(p / base^(2i/dim)); dim must be even."""
    if num_positions < 1 or dim < 2 or dim % 2:
        raise ValueError(f"need num_positions >= 1 and an even dim >= 2, got ({num_positions}, {dim})")
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]       # (P, 1)
    frequencies = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
    angles = positions * frequencies                                             # (P, dim/2)
    encoding = torch.empty(num_positions, dim, dtype=torch.float64)
    encoding[:, 0::2], encoding[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return encoding.to(torch.get_default_dtype())
