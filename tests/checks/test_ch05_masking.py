"""The checks of chapter 5's exercises (the masked softmax, the causal mask) accept correct answers
written independently and reject wrong ones clearly."""

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

from attention_course import checks
from attention_course.checks import CheckFailed


def test_chapter_5_checks_accept_independent_answers(capsys):
    def loop_masked_softmax(scores, valid_lens):
        out = torch.zeros_like(scores)
        for b in range(scores.shape[0]):
            for i in range(scores.shape[1]):
                n = int(valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i])
                if n:
                    out[b, i, :n] = torch.softmax(scores[b, i, :n], dim=0)
        return out

    checks.check_masked_softmax(loop_masked_softmax)
    checks.check_causal_mask(
        lambda n_q, n_k: torch.tensor([[j <= i for j in range(n_k)] for i in range(n_q)])
    )
    assert capsys.readouterr().out.count("Correct") == 2


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: checks.check_masked_softmax(
                lambda s, v: torch.softmax(
                    s.masked_fill(
                        torch.arange(s.shape[-1])
                        >= (v[:, None, None] if v.dim() == 1 else v[:, :, None]),
                        float("-inf"),
                    ),
                    -1,
                )
            ),
            r"a sequence of length 0.*holds nan.*no valid key",
        ),
        (
            lambda: checks.check_causal_mask(
                lambda n_q, n_k: ~torch.ones(n_q, n_k, dtype=torch.bool).tril()
            ),
            r"inverted",
        ),
        (
            lambda: checks.check_causal_mask(
                lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
            ),
            r"2 queries, 5 keys.*query 0 may not attend to key 1",
        ),
        (
            lambda: checks.check_causal_mask(lambda n_q, n_k: torch.ones(n_q, n_k).tril()),
            r"dtype torch.float32",
        ),
    ],
)
def test_chapter_5_checks_explain_wrong_answers(call, message):
    with pytest.raises(CheckFailed, match=message):
        call()


@pytest.mark.parametrize("seed", HIDDEN_SEEDS)
def test_other_seeds_give_other_cases_that_correct_answers_pass(seed, capsys):
    checks.check_causal_mask(
        lambda n_q, n_k: torch.ones(n_q, n_k, dtype=torch.bool).tril(), seed=seed
    )
    assert capsys.readouterr().out.count("Correct") == 1
