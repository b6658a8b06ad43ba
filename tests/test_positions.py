"""The sinusoidal encoding against its formula, entry by entry."""

import math

import pytest
import torch

from attention_course import sinusoidal_positional_encoding


def test_matches_formula():
    encoding = sinusoidal_positional_encoding(12, 6)
    for p in range(12):
        for i in range(3):
            angle = p / 10000 ** (2 * i / 6)
            assert encoding[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert encoding[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_relative_shift_is_a_rotation():
    """P[p + k] is a fixed linear (rotation) map of P[p] for every p: the reason for sin/cos
    pairs."""
    encoding = sinusoidal_positional_encoding(40, 8).double()
    shift = 3
    solution = torch.linalg.lstsq(encoding[:-shift], encoding[shift:]).solution
    torch.testing.assert_close(encoding[:-shift] @ solution, encoding[shift:], atol=1e-6, rtol=0)


@pytest.mark.parametrize("args", [(0, 4), (5, 3), (5, 0)])
def test_bad_sizes(args):
    with pytest.raises(ValueError, match="even dim"):
        sinusoidal_positional_encoding(*args)
