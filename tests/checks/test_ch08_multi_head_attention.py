"""The checks of chapter 8's exercises (splitting into heads, the parameter count of multi-head
attention) accept correct answers written independently and reject wrong ones clearly."""

import pytest
from learner_answers import HIDDEN_SEEDS

from attention_course import checks
from attention_course.checks import CheckFailed


def test_chapter_8_checks_accept_independent_answers(capsys):
    checks.check_split_heads(
        lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).permute(0, 2, 1, 3)
    )
    checks.check_mha_parameter_count(lambda e, h, bias: 4 * e * e + (4 * e if bias else 0))
    assert capsys.readouterr().out.count("Correct") == 2


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: checks.check_split_heads(lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1)),
            r"your heads at index",
        ),
        (lambda: checks.check_mha_parameter_count(lambda e, h, bias: 3 * e * e), r"you count"),
    ],
)
def test_chapter_8_checks_explain_wrong_answers(call, message):
    with pytest.raises(CheckFailed, match=message):
        call()


@pytest.mark.parametrize("seed", HIDDEN_SEEDS)
def test_other_seeds_give_other_cases_that_correct_answers_pass(seed, capsys):
    checks.check_mha_parameter_count(
        lambda e, h, bias: 4 * e * e + (4 * e if bias else 0), seed=seed
    )
    assert capsys.readouterr().out.count("Correct") == 1
