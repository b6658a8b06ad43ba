"""Checks of chapter 6's exercises: one decoder step of scaled dot-product attention over padded
keys, and the states of a bidirectional encoder built from two GRUs."""

import torch

from .. import attention, masking
from .core import CheckFailed, compare, integers, passed, random, run, self_check


def _decoder_step_cases(seed):
    """(name, batch, n_k, d, d_v, valid_lens) for the one-decoder-step check."""
    cases = [
        ("batch of 3, lengths 4, 2, 5", 3, 5, 4, 3, [4, 2, 5]),
        ("one sequence, no padding", 1, 6, 8, 2, [6]),
        ("a sequence of length 1", 2, 4, 2, 5, [1, 3]),
    ]
    if seed:
        sizes = integers(seed, 3, 1, 7, 20)
        cases = [
            (
                f"random case {number}",
                batch,
                n_k,
                d,
                d_v,
                integers(seed, batch, 1, n_k + 1, 30 + number),
            )
            for number, (batch, n_k, d, d_v) in enumerate(
                zip(
                    sizes,
                    integers(seed, 3, 2, 9, 21),
                    integers(seed, 3, 1, 9, 22),
                    integers(seed, 3, 1, 6, 23),
                )
            )
        ]
    return cases


def _reference_context(scores, values, lengths):
    """float64 softmax over the first lengths[b] scores of each row, then the weighted sum."""
    weights = torch.zeros_like(scores, dtype=torch.float64)
    for b, length in enumerate(lengths):
        weights[b, :length] = torch.softmax(scores[b, :length].double(), dim=0)
    return (weights[:, :, None] * values.double()).sum(dim=1), weights


@self_check
def check_dot_product_step(fn, seed=0):
    """Check fn(query (batch, d), keys (batch, n_k, d), values (batch, n_k, d_v), valid_lens
    (batch,)) -> context (batch, d_v), with scores q . k_i / sqrt(d) over the first valid_len
    keys. Chapter 6, exercise 2."""
    cases = _decoder_step_cases(seed)
    answers = (
        masking.masked_softmax,
        masking.softmax_with_mask,
        attention.scaled_dot_product_attention,
        torch.nn.functional.scaled_dot_product_attention,
    )
    for number, (case, batch, n_k, d, d_v, lengths) in enumerate(cases):
        query = random((batch, d), seed, 60 + number)
        keys = random((batch, n_k, d), seed, 70 + number)
        values = random((batch, n_k, d_v), seed, 80 + number)
        scores = (keys.double() @ query.double()[:, :, None]).squeeze(-1) / d**0.5
        expected, _ = _reference_context(scores, values, lengths)
        got = run(fn, (query, keys, values, torch.tensor(lengths)), case, forbidden=answers)
        if isinstance(got, torch.Tensor):
            got = got.double()
        if (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and d > 1
            and torch.allclose(
                got, _reference_context(scores * d**0.5, values, lengths)[0], atol=1e-5
            )
        ):
            raise CheckFailed(
                f"case '{case}': your context is that of unscaled scores "
                "q . k_i; divide them by sqrt(d)"
            )
        compare(got, expected, case, "context vector")
    passed("your dot-product attention step", len(cases))


def _gru_pair(seed, embed_dim, hidden):
    """Two float64 nn.GRU(embed_dim, hidden, batch_first=True), drawn from the seed without
    touching the global random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4321 + seed)
        return tuple(torch.nn.GRU(embed_dim, hidden, batch_first=True).double() for _ in range(2))


def _bidirectional_by_loops(embedded, lengths, forward, backward, mistake=None):
    """Each sequence alone, its own n tokens read both ways -> (batch, n_max, 2 hidden), zero at
    the pads. mistake: "flip" reverses the padded sequence, "unflipped" leaves the backward
    states in reading order, "swapped" stacks [backward; forward]."""
    hidden = forward.hidden_size
    out = torch.zeros(*embedded.shape[:2], 2 * hidden, dtype=torch.float64)
    with torch.no_grad():
        for b, n in enumerate(lengths):
            x = embedded[b : b + 1].double()
            ahead = forward(x)[0][0, :n]
            read = x.flip(1) if mistake == "flip" else x[:, :n].flip(1)
            behind = backward(read)[0][0]
            behind = behind[:n] if mistake == "unflipped" else behind.flip(0)[:n]
            pair = (behind, ahead) if mistake == "swapped" else (ahead, behind)
            out[b, :n] = torch.cat(pair, dim=-1)
    return out


@self_check
def check_bidirectional_states(fn, seed=0):
    """Check fn(embedded (batch, n_max, e), valid_lens (batch,), forward, backward) -> (batch,
    n_max, 2 d): at each real position i of a sequence of length n, the forward GRU's state after
    x_1..x_i stacked on the backward GRU's state after x_n..x_i (pads ignored).
    Chapter 6, exercise 1."""
    cases = [
        ("lengths 3, 1, 5 in a batch of 5 positions", 5, 4, 3, [3, 1, 5]),
        ("no padding", 4, 3, 2, [4, 4]),
        ("one sequence and 3 pads", 6, 2, 4, [3]),
    ]
    if seed:
        sizes = integers(seed, 3, 2, 8, 90)
        cases = [
            (f"random case {k}", n_max, e, d, integers(seed, 3, 1, n_max + 1, 91 + k))
            for k, (n_max, e, d) in enumerate(
                zip(sizes, integers(seed, 3, 1, 6, 92), integers(seed, 3, 1, 6, 93))
            )
        ]
        cases[0] = cases[0][:4] + ([cases[0][1]] + cases[0][4][1:],)  # a full-length one
    hints = {
        "flip": "your backward GRU reads the padding first: reverse each sequence within "
        "its own length, so that it starts at that sequence's last real token",
        "unflipped": "your backward states are in reading order: position i must hold the "
        "state that has read x_n, ..., x_i, so put them back in place",
        "swapped": "your halves are swapped: stack [forward; backward]",
    }
    for number, (case, n_max, embed_dim, hidden, lengths) in enumerate(cases):
        forward, backward = _gru_pair(seed + number, embed_dim, hidden)
        embedded = random((len(lengths), n_max, embed_dim), seed, 95 + number).double()
        valid_lens = torch.tensor(lengths)
        expected = _bidirectional_by_loops(embedded, lengths, forward, backward)
        with torch.no_grad():
            got = run(fn, (embedded.clone(), valid_lens, forward, backward), case)
        real = torch.arange(n_max)[None, :] < valid_lens[:, None]  # (batch, n_max)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            got = got.detach().double().masked_fill(~real[:, :, None], 0.0)
            for mistake, hint in hints.items():
                wrong = _bidirectional_by_loops(embedded, lengths, forward, backward, mistake)
                if not torch.allclose(wrong, expected, atol=1e-6) and torch.allclose(
                    got, wrong, atol=1e-6
                ):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "states")
    passed("your bidirectional encoder", len(cases))
