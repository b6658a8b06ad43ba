"""Checks of chapter 3's exercises: the temperature that gives a number of effective keys, and
top-k attention."""

import math

import torch

from .. import attention
from .core import CheckFailed, compare, integers, passed, random, run, self_check, weights_problem


def _effective_keys(scores, temperature):
    """exp(entropy) of softmax(scores / temperature), in float64."""
    return torch.exp(attention.attention_entropy(torch.softmax(scores / temperature, dim=-1)))


@self_check
def check_temperature_for(fn, seed=0):
    """Check fn(scores (n,), k_eff) -> the temperature tau > 0 at which softmax(scores / tau) has
    exp(entropy) = k_eff, to a relative error of 1e-5 (scores with a unique maximum, 1 < k_eff <
    n). Chapter 3, exercise 1."""
    toy = torch.tensor([0.707, 0.601, 0.354, 0.255, -0.106, -0.170])
    cases = [
        ("six scores, k_eff = 2", toy, 2.0),
        ("ten random scores, k_eff = 3.5", random((10,), seed, 1), 3.5),
        ("scores in the hundreds, k_eff = 1.5", random((8,), seed, 2) * 300, 1.5),
        ("scores within 0.001, k_eff = 7", random((8,), seed, 3) * 1e-3, 7.0),
    ]
    if seed:
        sizes = integers(seed, 4, 3, 30, 4)
        cases = [
            (
                f"random case {k}, n = {n}",
                random((n,), seed, 5 + k) * 10.0 ** (k - 1),
                1.0 + (n - 1.0) * (k + 1) / 5,
            )
            for k, n in enumerate(sizes)
        ]
    for case, scores, k_eff in cases:
        scores = scores.double()
        got = run(fn, (scores.clone(), k_eff), case)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or not math.isfinite(got) or got <= 0:
            raise CheckFailed(
                f"case '{case}': your temperature is {got!r}; expected a positive number"
            )
        reached = _effective_keys(scores, got).item()
        if abs(reached - k_eff) > 1e-5 * k_eff:
            entropy = math.log(reached)
            if abs(entropy - k_eff) < 1e-3 * k_eff:
                raise CheckFailed(
                    f"case '{case}': at your temperature the *entropy* is {k_eff}; "
                    "k_eff is e to the entropy"
                )
            if k_eff > math.log(len(scores)) and reached > len(scores) * (1 - 1e-6):
                raise CheckFailed(
                    f"case '{case}': at your temperature {got:.6g} the weights "
                    "are uniform; an entropy of k_eff is out of reach here: "
                    "k_eff is e to the entropy"
                )
            if abs(math.exp(entropy / math.log(2)) - k_eff) < 1e-3 * k_eff:
                raise CheckFailed(
                    f"case '{case}': you exponentiated an entropy in bits; "
                    "k_eff = e^H with H in nats (or 2^H with H in bits)"
                )
            raise CheckFailed(
                f"case '{case}': at your temperature {got:.6g}, k_eff is {reached:.6f}, not {k_eff}"
            )
    passed("your temperature search", len(cases))


def _top_k_reference(scores, k):
    """Softmax over each row's k largest scores (no ties in the cases), 0 elsewhere."""
    kept = scores.double().topk(k, dim=-1).indices
    blocked = torch.ones_like(scores, dtype=torch.bool).scatter(-1, kept, False)
    return torch.softmax(scores.double().masked_fill(blocked, float("-inf")), dim=-1)


@self_check
def check_top_k_attention(fn, seed=0):
    """Check fn(scores (..., n), k) -> weights (..., n): the softmax of each row's k largest
    scores, exactly 0 for the others. Chapter 3, exercise 2."""
    cases = [
        ("three rows of six, k = 2", (3, 6), 2, 1.0),
        ("a batch of rows, k = 1", (2, 4, 5), 1, 1.0),
        ("k = n", (2, 4), 4, 1.0),
        ("scores around 1e3, k = 3", (2, 7), 3, 1e3),
    ]
    if seed:
        sizes = integers(seed, 4, 2, 12, 6)
        cases = [
            (
                f"random case {j}",
                (3, n),
                1 + integers(seed, 1, 0, n, 7 + j)[0],
                10.0 ** integers(seed, 1, -1, 4, 11 + j)[0],
            )
            for j, n in enumerate(sizes)
        ]
    for number, (case, shape, k, scale) in enumerate(cases):
        scores = random(shape, seed, 20 + number) * scale
        expected = _top_k_reference(scores, k)
        got = run(fn, (scores.clone(), k), case)
        problem = weights_problem(got) if isinstance(got, torch.Tensor) else None
        if problem and "NaN" in problem and scale > 100:
            raise CheckFailed(
                f"case '{case}': {problem}: exp of scores around 1e3 overflows; "
                "block the other scores with -inf and let torch.softmax subtract "
                "the largest score"
            )
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            everything = torch.softmax(scores.double(), -1)
            if not torch.allclose(expected, everything, atol=1e-6) and torch.allclose(
                got.double(), everything, atol=1e-6
            ):
                raise CheckFailed(
                    f"case '{case}': your weights are the softmax over every "
                    "score; only the k largest of each row may get weight"
                )
            if problem and "sums to" in problem:
                raise CheckFailed(
                    f"case '{case}': {problem}: renormalise over the k kept "
                    "scores (a softmax over them alone)"
                )
        compare(got.double() if isinstance(got, torch.Tensor) else got, expected, case, "weights")
    passed("your top-k attention", len(cases))
