"""Checks of chapter 4's exercises: the entropy of attention weights, and the Jacobian of
attention with respect to its query, written without automatic differentiation."""

import torch

from .. import attention
from .core import CheckFailed, compare, passed, random, run, self_check


@self_check
def check_entropy(fn, seed=0):
    """Check fn(weights (..., n)) -> entropies (...): -sum p log p in nats over the last axis,
    with 0 log 0 = 0. Chapter 4, exercise 1."""
    cases = [
        ("uniform over 64", torch.full((64,), 1 / 64)),
        ("a batch of random rows", torch.softmax(random((3, 5), seed), dim=-1)),
        ("one-hot rows (0 log 0 = 0)", torch.eye(4)),
        ("rows with some exact zeros", torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.0, 0.8]])),
    ]
    for case, weights in cases:

        def explain(index, weights=weights):
            if (weights[index] == 0).any():
                return (
                    "this row has weights that are exactly 0, and 0 * log 0 = 0 * (-inf) "
                    "is NaN in floating point; the entropy takes 0 log 0 = 0 (use "
                    "torch.special.xlogy(p, p), or drop the zero weights)"
                )
            return None

        got = run(fn, (weights,), case, forbidden=(attention.attention_entropy,))
        compare(got, attention.attention_entropy(weights), case, "entropy", explain_nan=explain)
    passed("your entropy", len(cases))


@self_check
def check_query_jacobian(fn, seed=0):
    """Check fn(query (d,), keys (n, d)) -> (d, d): the Jacobian with respect to the query of
    attention whose values are its keys, o(q) = sum_i alpha_i k_i with
    alpha = softmax(K q / sqrt(d)), written without automatic differentiation.
    Chapter 4, exercise 3."""
    cases = [
        ("d = 2, three keys", 2, 3, 1.0),
        ("d = 8, twelve keys", 8, 12, 1.0),
        ("one key", 4, 1, 1.0),
        ("long keys, a saturated softmax", 6, 5, 6.0),
    ]
    answers = (torch.autograd.functional.jacobian, torch.func.jacrev, torch.func.jacfwd)
    for number, (case, d, n, scale) in enumerate(cases):
        query = random((d,), seed, number).double()
        keys = random((n, d), seed, 10 + number).double() * scale

        def attend(q, keys=keys):
            return torch.softmax(keys @ q / d**0.5, dim=0) @ keys  # (d,)

        expected = torch.autograd.functional.jacobian(attend, query)  # (d, d)
        got = run(fn, (query, keys), case, forbidden=answers)
        if (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and torch.allclose(got, expected * d**0.5, atol=1e-7)
            and n > 1
        ):
            raise CheckFailed(
                f"case '{case}': your Jacobian is sqrt(d) = {d**0.5:.3g} times too "
                "large: the scores are divided by sqrt(d), and so is their gradient"
            )
        compare(got, expected, case, "Jacobian")
    passed("your query Jacobian", len(cases))
