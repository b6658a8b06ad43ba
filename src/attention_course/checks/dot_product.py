"""Checks of Part II (chapters 3-5): similarities, entropy, the softmax's Jacobian, masks."""

import math

import torch

from .. import attention, masking
from .core import (CheckFailed, passed, self_check, run, compare, random, integers,
                   weights_problem)


@self_check
def check_entropy(fn, seed=0):
    """Check fn(weights (..., n)) -> entropies (...): -sum p log p in nats over the last axis,
    with 0 log 0 = 0."""
    cases = [("uniform over 64", torch.full((64,), 1 / 64)),
             ("a batch of random rows", torch.softmax(random((3, 5), seed), dim=-1)),
             ("one-hot rows (0 log 0 = 0)", torch.eye(4)),
             ("rows with some exact zeros", torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.0, 0.8]]))]
    for case, weights in cases:
        def explain(index, weights=weights):
            if (weights[index] == 0).any():
                return ("this row has weights that are exactly 0, and 0 * log 0 = 0 * (-inf) "
                        "is NaN in floating point; the entropy takes 0 log 0 = 0 (use "
                        "torch.special.xlogy(p, p), or drop the zero weights)")
            return None
        got = run(fn, (weights,), case, forbidden=(attention.attention_entropy,))
        compare(got, attention.attention_entropy(weights), case, "entropy", explain_nan=explain)
    passed("your entropy", len(cases))


@self_check
def check_query_jacobian(fn, seed=0):
    """Check fn(query (d,), keys (n, d)) -> (d, d): the Jacobian with respect to the query of
    attention whose values are its keys, o(q) = sum_i alpha_i k_i with
    alpha = softmax(K q / sqrt(d)), written without automatic differentiation."""
    cases = [("d = 2, three keys", 2, 3, 1.0), ("d = 8, twelve keys", 8, 12, 1.0),
             ("one key", 4, 1, 1.0), ("long keys, a saturated softmax", 6, 5, 6.0)]
    answers = (torch.autograd.functional.jacobian, torch.func.jacrev, torch.func.jacfwd)
    for number, (case, d, n, scale) in enumerate(cases):
        query = random((d,), seed, number).double()
        keys = random((n, d), seed, 10 + number).double() * scale

        def attend(q, keys=keys):
            return torch.softmax(keys @ q / d**0.5, dim=0) @ keys            # (d,)
        expected = torch.autograd.functional.jacobian(attend, query)         # (d, d)
        got = run(fn, (query, keys), case, forbidden=answers)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and torch.allclose(
                got, expected * d**0.5, atol=1e-7) and n > 1:
            raise CheckFailed(f"case '{case}': your Jacobian is sqrt(d) = {d**0.5:.3g} times too "
                              "large: the scores are divided by sqrt(d), and so is their gradient")
        compare(got, expected, case, "Jacobian")
    passed("your query Jacobian", len(cases))


@self_check
def check_masked_softmax(fn, seed=0):
    """Check fn(scores (b, n_q, n_k), valid_lens (b,) or (b, n_q)) -> weights (b, n_q, n_k):
    softmax over the first valid_len keys, zero elsewhere, and all zeros when valid_len is 0."""
    cases = [("one length per sequence", (2, 2, 4), torch.tensor([2, 3])),
             ("one length per query", (2, 3, 4), torch.tensor([[1, 3, 4], [2, 2, 4]])),
             ("a sequence of length 0", (2, 2, 3), torch.tensor([0, 3]))]
    answers = (masking.masked_softmax, masking.softmax_with_mask)
    for number, (case, shape, valid_lens) in enumerate(cases):
        scores = random(shape, seed, number)
        expected = masking.masked_softmax(scores, valid_lens)
        lengths = valid_lens[:, None].expand(shape[:2]) if valid_lens.dim() == 1 else valid_lens

        def explain(index, lengths=lengths):
            if lengths[index[0], index[1]] == 0:
                return ("this query has no valid key, so its softmax is over scores that are all "
                        "-inf: 0/0 = NaN; return zeros for such rows")
            return None
        got = run(fn, (scores, valid_lens), case, forbidden=answers)
        compare(got, expected, case, "weights", explain_nan=explain)
    passed("your masked softmax", len(cases))


@self_check
def check_causal_mask(fn, seed=0):
    """Check fn(n_queries, n_keys) -> bool (n_queries, n_keys), True where attending is allowed,
    top-left aligned as PyTorch's is_causal."""
    cases = [(4, 4), (2, 5), (5, 2), (1, 1)]
    if seed:
        cases = list(zip(integers(seed, 4, 1, 9), integers(seed, 4, 1, 9, 1)))
    for n_queries, n_keys in cases:
        case = f"{n_queries} queries, {n_keys} keys"
        got = run(fn, (n_queries, n_keys), case, forbidden=(masking.causal_mask,))
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            raise CheckFailed(f"case '{case}': your mask has dtype {got.dtype}; use torch.bool "
                              "(True = may attend)")
        expected = torch.tensor([[key <= query for key in range(n_keys)]
                                 for query in range(n_queries)])
        if (isinstance(got, torch.Tensor) and got.shape == expected.shape
                and not torch.equal(got, expected)):
            if torch.equal(got, ~expected):
                raise CheckFailed(f"case '{case}': your mask is inverted: here True must mean "
                                  "'may attend', as in scaled_dot_product_attention")
            row, column = (got != expected).nonzero()[0].tolist()
            allowed = "may" if expected[row, column] else "may not"
            raise CheckFailed(f"case '{case}': query {row} {allowed} attend to key {column}, "
                              "but your mask says the opposite")
        compare(got.float() if isinstance(got, torch.Tensor) else got, expected.float(), case,
                "mask")
    passed("your causal mask", len(cases))


def _effective_keys(scores, temperature):
    """exp(entropy) of softmax(scores / temperature), in float64."""
    return torch.exp(attention.attention_entropy(torch.softmax(scores / temperature, dim=-1)))


@self_check
def check_temperature_for(fn, seed=0):
    """Check fn(scores (n,), k_eff) -> the temperature tau > 0 at which softmax(scores / tau) has
    exp(entropy) = k_eff, to a relative error of 1e-5 (scores with a unique maximum, 1 < k_eff <
    n)."""
    toy = torch.tensor([0.707, 0.601, 0.354, 0.255, -0.106, -0.170])
    cases = [("six scores, k_eff = 2", toy, 2.0),
             ("ten random scores, k_eff = 3.5", random((10,), seed, 1), 3.5),
             ("scores in the hundreds, k_eff = 1.5", random((8,), seed, 2) * 300, 1.5),
             ("scores within 0.001, k_eff = 7", random((8,), seed, 3) * 1e-3, 7.0)]
    if seed:
        sizes = integers(seed, 4, 3, 30, 4)
        cases = [(f"random case {k}, n = {n}", random((n,), seed, 5 + k)
                  * 10.0 ** (k - 1), 1.0 + (n - 1.0) * (k + 1) / 5)
                 for k, n in enumerate(sizes)]
    for case, scores, k_eff in cases:
        scores = scores.double()
        got = run(fn, (scores.clone(), k_eff), case)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)) or not math.isfinite(got) or got <= 0:
            raise CheckFailed(f"case '{case}': your temperature is {got!r}; expected a "
                              "positive number")
        reached = _effective_keys(scores, got).item()
        if abs(reached - k_eff) > 1e-5 * k_eff:
            entropy = math.log(reached)
            if abs(entropy - k_eff) < 1e-3 * k_eff:
                raise CheckFailed(f"case '{case}': at your temperature the *entropy* is {k_eff}; "
                                  "k_eff is e to the entropy")
            if k_eff > math.log(len(scores)) and reached > len(scores) * (1 - 1e-6):
                raise CheckFailed(f"case '{case}': at your temperature {got:.6g} the weights "
                                  "are uniform; an entropy of k_eff is out of reach here: "
                                  "k_eff is e to the entropy")
            if abs(math.exp(entropy / math.log(2)) - k_eff) < 1e-3 * k_eff:
                raise CheckFailed(f"case '{case}': you exponentiated an entropy in bits; "
                                  "k_eff = e^H with H in nats (or 2^H with H in bits)")
            raise CheckFailed(f"case '{case}': at your temperature {got:.6g}, k_eff is "
                              f"{reached:.6f}, not {k_eff}")
    passed("your temperature search", len(cases))


def _top_k_reference(scores, k):
    """Softmax over each row's k largest scores (no ties in the cases), 0 elsewhere."""
    kept = scores.double().topk(k, dim=-1).indices
    blocked = torch.ones_like(scores, dtype=torch.bool).scatter(-1, kept, False)
    return torch.softmax(scores.double().masked_fill(blocked, float("-inf")), dim=-1)


@self_check
def check_top_k_attention(fn, seed=0):
    """Check fn(scores (..., n), k) -> weights (..., n): the softmax of each row's k largest
    scores, exactly 0 for the others."""
    cases = [("three rows of six, k = 2", (3, 6), 2, 1.0),
             ("a batch of rows, k = 1", (2, 4, 5), 1, 1.0),
             ("k = n", (2, 4), 4, 1.0), ("scores around 1e3, k = 3", (2, 7), 3, 1e3)]
    if seed:
        sizes = integers(seed, 4, 2, 12, 6)
        cases = [(f"random case {j}", (3, n), 1 + integers(seed, 1, 0, n, 7 + j)[0],
                  10.0 ** integers(seed, 1, -1, 4, 11 + j)[0]) for j, n in enumerate(sizes)]
    for number, (case, shape, k, scale) in enumerate(cases):
        scores = random(shape, seed, 20 + number) * scale
        expected = _top_k_reference(scores, k)
        got = run(fn, (scores.clone(), k), case)
        problem = weights_problem(got) if isinstance(got, torch.Tensor) else None
        if problem and "NaN" in problem and scale > 100:
            raise CheckFailed(f"case '{case}': {problem}: exp of scores around 1e3 overflows; "
                              "block the other scores with -inf and let torch.softmax subtract "
                              "the largest score")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            everything = torch.softmax(scores.double(), -1)
            if (not torch.allclose(expected, everything, atol=1e-6)
                    and torch.allclose(got.double(), everything, atol=1e-6)):
                raise CheckFailed(f"case '{case}': your weights are the softmax over every "
                                  "score; only the k largest of each row may get weight")
            if problem and "sums to" in problem:
                raise CheckFailed(f"case '{case}': {problem}: renormalise over the k kept "
                                  "scores (a softmax over them alone)")
        compare(got.double() if isinstance(got, torch.Tensor) else got, expected, case, "weights")
    passed("your top-k attention", len(cases))
