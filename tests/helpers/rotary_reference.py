"""A brute-force RoPE reference for the tests: one explicit rotation matrix per
position, built entry by entry (independent of the package and of the checks)."""

import math

import torch


def rotation_matrix(position, head_dim, base=10000.0, pairs="half", sign=1.0):
    """(head_dim, head_dim): a 2-D rotation of each pair of dimensions, pairs
    "half" (i, i + head_dim/2), Llama's, or "adjacent" (2i, 2i + 1)."""
    half = head_dim // 2
    matrix = torch.eye(head_dim, dtype=torch.float64)
    for i in range(half):
        a, b = (i, i + half) if pairs == "half" else (2 * i, 2 * i + 1)
        angle = sign * position * base ** (-2 * i / head_dim)
        matrix[a, a] = matrix[b, b] = math.cos(angle)
        matrix[a, b], matrix[b, a] = -math.sin(angle), math.sin(angle)
    return matrix


def rotate_by_matrices(x, positions, pairs="half", sign=1.0):
    """x (seq, head_dim), positions (seq,) -> each row turned by its matrix."""
    return torch.stack(
        [
            rotation_matrix(int(m), x.shape[-1], pairs=pairs, sign=sign) @ row
            for m, row in zip(positions, x.double())
        ]
    )
