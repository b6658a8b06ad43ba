"""The checks of chapter 6's exercises (a bidirectional encoder from two GRUs, one decoder step
of dot-product attention) accept correct answers written independently and name the usual
slips."""

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

from attention_course import checks
from attention_course.checks import CheckFailed


def context_by_loops(scores, values, valid_lens):
    """An independent answer: one sequence at a time, softmax over its real keys only."""
    rows = [
        torch.softmax(scores[b, :n], dim=0) @ values[b, :n]
        for b, n in enumerate(valid_lens.tolist())
    ]
    return torch.stack(rows)


def dot_step_by_loops(query, keys, values, valid_lens):
    scores = torch.einsum("bd,bnd->bn", query, keys) / query.shape[-1] ** 0.5
    return context_by_loops(scores, values, valid_lens)


def test_decoder_step_checks_reject_wrong_answers():
    with pytest.raises(CheckFailed, match=r"divide them by sqrt\(d\)"):
        checks.check_dot_product_step(
            lambda q, k, v, n: context_by_loops(torch.einsum("bd,bnd->bn", q, k), v, n)
        )


def test_decoder_step_checks_reject_delegation():
    def via_sdpa(query, keys, values, valid_lens):
        allowed = torch.arange(keys.shape[1])[None, None, :] < valid_lens[:, None, None]
        return torch.nn.functional.scaled_dot_product_attention(
            query[:, None], keys, values, attn_mask=allowed
        )[:, 0]

    with pytest.raises(CheckFailed, match="calls `scaled_dot_product_attention`"):
        checks.check_dot_product_step(via_sdpa)


INDEPENDENT_ANSWERS = [
    ("check_dot_product_step", dot_step_by_loops),
]


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
@pytest.mark.parametrize(
    "check, answer", INDEPENDENT_ANSWERS, ids=[name for name, _ in INDEPENDENT_ANSWERS]
)
def test_checks_pass_independent_answers(check, answer, seed, capsys):
    getattr(checks, check)(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def bidirectional_by_packing(embedded, valid_lens, forward, backward, flip_batch=False):
    """An independent answer: PyTorch's own bidirectional GRU on packed sequences, with the
    two GRUs' weights copied in. flip_batch: the usual mistake (reverse the padded batch)."""
    if flip_batch:
        ahead, _ = forward(embedded)
        behind, _ = backward(embedded.flip(1))
        return torch.cat([ahead, behind.flip(1)], dim=-1)
    both = torch.nn.GRU(
        forward.input_size, forward.hidden_size, batch_first=True, bidirectional=True
    ).to(embedded.dtype)
    with torch.no_grad():
        for name, value in forward.named_parameters():
            getattr(both, name).copy_(value)
        for name, value in backward.named_parameters():
            getattr(both, name + "_reverse").copy_(value)
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        embedded, valid_lens, batch_first=True, enforce_sorted=False
    )
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(
        both(packed)[0], batch_first=True, total_length=embedded.shape[1]
    )
    return out


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
def test_chapter_6_checks_pass_independent_answers(seed, capsys):
    checks.check_bidirectional_states(bidirectional_by_packing, seed=seed)
    assert capsys.readouterr().out.count("Correct") == 1


def test_bidirectional_check_names_the_usual_slips():
    with pytest.raises(CheckFailed, match="reads the padding first"):
        checks.check_bidirectional_states(lambda *a: bidirectional_by_packing(*a, flip_batch=True))
    with pytest.raises(CheckFailed, match="halves are swapped"):
        checks.check_bidirectional_states(
            lambda *a: bidirectional_by_packing(*a).roll(a[3].hidden_size, dims=-1)
        )
    with pytest.raises(CheckFailed, match="states"):
        checks.check_bidirectional_states(lambda e, n, f, b: torch.cat([f(e)[0], f(e)[0]], dim=-1))
