"""Checks of chapter 5's exercises: the masked softmax over valid lengths, and the causal mask."""

import torch

from .. import masking
from .core import CheckFailed, compare, integers, passed, random, run, self_check


@self_check
def check_masked_softmax(fn, seed=0):
    """Check fn(scores (b, n_q, n_k), valid_lens (b,) or (b, n_q)) -> weights (b, n_q, n_k):
    softmax over the first valid_len keys, zero elsewhere, and all zeros when valid_len is 0.
    Chapter 5, exercise 1."""
    cases = [
        ("one length per sequence", (2, 2, 4), torch.tensor([2, 3])),
        ("one length per query", (2, 3, 4), torch.tensor([[1, 3, 4], [2, 2, 4]])),
        ("a sequence of length 0", (2, 2, 3), torch.tensor([0, 3])),
    ]
    answers = (masking.masked_softmax, masking.softmax_with_mask)
    for number, (case, shape, valid_lens) in enumerate(cases):
        scores = random(shape, seed, number)
        expected = masking.masked_softmax(scores, valid_lens)
        lengths = valid_lens[:, None].expand(shape[:2]) if valid_lens.dim() == 1 else valid_lens

        def explain(index, lengths=lengths):
            if lengths[index[0], index[1]] == 0:
                return (
                    "this query has no valid key, so its softmax is over scores that are all "
                    "-inf: 0/0 = NaN; return zeros for such rows"
                )
            return None

        got = run(fn, (scores, valid_lens), case, forbidden=answers)
        compare(got, expected, case, "weights", explain_nan=explain)
    passed("your masked softmax", len(cases))


@self_check
def check_causal_mask(fn, seed=0):
    """Check fn(n_queries, n_keys) -> bool (n_queries, n_keys), True where attending is allowed,
    top-left aligned as PyTorch's is_causal. Chapter 5, exercise 2."""
    cases = [(4, 4), (2, 5), (5, 2), (1, 1)]
    if seed:
        cases = list(zip(integers(seed, 4, 1, 9), integers(seed, 4, 1, 9, 1)))
    for n_queries, n_keys in cases:
        case = f"{n_queries} queries, {n_keys} keys"
        got = run(fn, (n_queries, n_keys), case, forbidden=(masking.causal_mask,))
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            raise CheckFailed(
                f"case '{case}': your mask has dtype {got.dtype}; use torch.bool "
                "(True = may attend)"
            )
        expected = torch.tensor(
            [[key <= query for key in range(n_keys)] for query in range(n_queries)]
        )
        if (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and not torch.equal(got, expected)
        ):
            if torch.equal(got, ~expected):
                raise CheckFailed(
                    f"case '{case}': your mask is inverted: here True must mean "
                    "'may attend', as in scaled_dot_product_attention"
                )
            row, column = (got != expected).nonzero()[0].tolist()
            allowed = "may" if expected[row, column] else "may not"
            raise CheckFailed(
                f"case '{case}': query {row} {allowed} attend to key {column}, "
                "but your mask says the opposite"
            )
        compare(
            got.float() if isinstance(got, torch.Tensor) else got, expected.float(), case, "mask"
        )
    passed("your causal mask", len(cases))
