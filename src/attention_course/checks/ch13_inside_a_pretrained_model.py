"""Checks of chapter 13's exercises: the previous-word targets of a tokenized sentence, and the
ablation of one head of a multi-head attention layer."""

import copy
import math

import torch

from .. import multihead
from .core import CheckFailed, compare, generator, passed, random, run, self_check


def _word_id_cases(seed):
    """Word ids as the tokenizer gives them: None for [CLS] and [SEP], and
    words of 1 to 4 pieces; a first case without any word, one of one word."""
    rng = generator(seed, 13)
    cases = [
        ("[CLS] [SEP] only", [None, None]),
        ("one word of three pieces", [None, 0, 0, 0, None]),
    ]
    for number in range(5):
        n_words = int(torch.randint(2, 7, (1,), generator=rng))
        pieces = torch.randint(1, 5, (n_words,), generator=rng).tolist()
        word_ids = (
            [None] + [word for word, count in enumerate(pieces) for _ in range(count)] + [None]
        )
        cases.append((f"random sentence {number} ({n_words} words)", word_ids))
    return cases


def _previous_word_by_loops(word_ids):
    n = len(word_ids)
    targets = torch.zeros(n, n, dtype=torch.bool)
    for i, word in enumerate(word_ids):
        for j, other in enumerate(word_ids):
            if word is not None and other is not None and other == word - 1:
                targets[i, j] = True
    return targets


@self_check
def check_previous_word_targets(fn, seed=0):
    """Check fn(word_ids) -> bool (n, n): True where key j is a piece of the
    word just before query i's word. word_ids: one entry per token, the index
    of its word, or None for [CLS] and [SEP] (which have no targets and are
    never targets). Chapter 13, exercise 1."""
    cases = _word_id_cases(seed)
    for case, word_ids in cases:
        got = run(fn, (list(word_ids),), case)
        expected = _previous_word_by_loops(word_ids)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            compare(got, expected.double(), case, "targets")
        got = got.detach().cpu().bool()
        n = len(word_ids)
        previous_token = torch.zeros(n, n, dtype=torch.bool)
        previous_token[torch.arange(1, n), torch.arange(n - 1)] = True
        if torch.equal(got, previous_token) and not torch.equal(got, expected):
            raise CheckFailed(
                f"case '{case}': you marked the previous token; "
                "mark every piece of the previous word, from "
                "every piece of the current word"
            )
        words = torch.tensor([-2 if w is None else w for w in word_ids])
        real = words >= 0
        same_word = (words[None, :] == words[:, None]) & real[None, :] & real[:, None]
        for wrong, hint in (
            (
                expected.T,
                "you marked the next word; key j is a target when its word "
                "is the one just before query i's",
            ),
            (
                same_word,
                "you marked the pieces of the query's own word; mark those "
                "of the word just before it",
            ),
        ):
            if torch.equal(got, wrong) and not torch.equal(wrong, expected):
                raise CheckFailed(f"case '{case}': {hint}")
        wrong = (got != expected).nonzero()
        if len(wrong):
            i, j = wrong[0].tolist()
            should = "should be" if expected[i, j] else "should not be"
            raise CheckFailed(
                f"case '{case}' (word_ids {word_ids}): key {j} (word "
                f"{word_ids[j]}) {should} a target of query {i} (word "
                f"{word_ids[i]}); None marks [CLS] and [SEP], never targets"
            )
    passed("your previous-word targets", len(cases))


def _heads_by_hand(attention, x, zeroed_head=None):
    """MultiHeadAttention's output computed head by head, one head's output
    replaced by zeros."""
    outputs = []
    for head in range(attention.num_heads):
        rows = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
        q, k, v = (
            torch.nn.functional.linear(x, p.weight[rows], None if p.bias is None else p.bias[rows])
            for p in (attention.q_proj, attention.k_proj, attention.v_proj)
        )
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(attention.head_dim), dim=-1)
        output = weights @ v
        outputs.append(torch.zeros_like(output) if head == zeroed_head else output)
    return attention.out_proj(torch.cat(outputs, dim=-1))


def _ablation_slips(attention, head):
    """(wrongly ablated copy, hint) of the usual slips."""
    columns = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
    slips = []
    for name in ("q_proj", "k_proj"):
        for with_bias in (False, True):
            wrong = copy.deepcopy(attention)
            projection = getattr(wrong, name)
            with torch.no_grad():
                projection.weight[columns] = 0
                if with_bias and projection.bias is not None:
                    projection.bias[columns] = 0
            hint = (
                "zeroing the head's query or key rows changes where the head looks "
                "(its weights), not that it outputs a mix of values: zero the "
                "head's columns of out_proj (or its value rows and value bias)"
            )
            slips.append((wrong, hint))
    wrong = copy.deepcopy(attention)
    with torch.no_grad():
        wrong.out_proj.weight[columns] = 0
    slips.append(
        (
            wrong,
            "you zeroed rows of out_proj, output features to which every head "
            "writes; head h enters out_proj through its columns h d_h ... "
            "(h + 1) d_h - 1",
        )
    )
    return slips


@self_check
def check_ablate_head(fn, seed=0):
    """Check fn(attention, head) -> a copy of the MultiHeadAttention
    `attention` in which head `head` contributes nothing (its output is zero
    before out_proj) and every other head is unchanged; `attention` itself must
    stay as it was. Chapter 13, exercise 2."""
    cases = [
        ("8 wide, 2 heads, head 0", 8, 2, 0, True),
        ("12 wide, 3 heads, head 2", 12, 3, 2, True),
        ("16 wide, 4 heads, head 1, no bias", 16, 4, 1, False),
    ]
    for number, (case, width, n_heads, head, bias) in enumerate(cases):
        torch.manual_seed(1234 + 1000 * seed + number)
        attention = multihead.MultiHeadAttention(width, n_heads, bias=bias)
        if bias:
            with torch.no_grad():  # non-zero biases, so forgetting one shows
                for projection in (attention.v_proj, attention.out_proj):
                    projection.bias.normal_()
        x = random((2, 5, width), seed, number)
        before = {k: v.clone() for k, v in attention.state_dict().items()}
        with torch.no_grad():
            expected = _heads_by_hand(attention, x, zeroed_head=head)
        ablated = run(fn, (attention, head), case)
        after = attention.state_dict()
        if any(not torch.equal(before[k], after[k]) for k in before):
            raise CheckFailed(
                f"case '{case}': you changed the original "
                "layer's weights; change a copy "
                "(copy.deepcopy(attention))"
            )
        if not isinstance(ablated, torch.nn.Module):
            raise CheckFailed(
                f"case '{case}': return the ablated copy of "
                f"the layer, not a {type(ablated).__name__}"
            )
        with torch.no_grad():
            got = run(ablated, (x, x, x), case)
        got = got[0] if isinstance(got, tuple) else got
        if bias and isinstance(got, torch.Tensor):
            v_bias_left = attention.v_proj.bias[
                head * (width // n_heads) : (head + 1) * (width // n_heads)
            ]
            leaked = attention.out_proj.weight[
                :, head * (width // n_heads) : (head + 1) * (width // n_heads)
            ]
            with torch.no_grad():
                if torch.allclose(got, expected + v_bias_left @ leaked.T, atol=1e-5):
                    raise CheckFailed(
                        f"case '{case}': the head still outputs its value "
                        "bias (the weights sum to 1, so sum_j a_ij b_v = "
                        "b_v); zero the bias too, or zero the head's "
                        "columns of out_proj instead"
                    )
        if isinstance(got, torch.Tensor):
            for wrong, hint in _ablation_slips(attention, head):
                with torch.no_grad():
                    slipped = wrong(x, x, x)
                slipped = slipped[0] if isinstance(slipped, tuple) else slipped
                if got.shape == slipped.shape and torch.allclose(got, slipped, atol=1e-5):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "ablated layer's output")
    passed("your head ablation", len(cases))
