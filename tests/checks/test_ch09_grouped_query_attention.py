"""The checks of chapter 9's exercises (repeating KV heads, the size of a KV cache) accept correct
answers written independently and reject wrong ones clearly."""

import math

import pytest
from learner_answers import HIDDEN_SEEDS

from attention_course import checks
from attention_course.checks import CheckFailed


def test_chapter_9_checks_accept_independent_answers(capsys):
    checks.check_kv_cache_bytes(lambda b, s, n_l, n_kv, d, size: 2 * b * s * n_l * n_kv * d * size)
    checks.check_repeat_kv(lambda kv, g: kv[:, :, None].expand(-1, -1, g, -1, -1).flatten(1, 2))
    assert capsys.readouterr().out.count("Correct") == 2


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: checks.check_kv_cache_bytes(
                lambda b, s, n_l, n_kv, d, size: b * s * n_l * n_kv * d * size
            ),
            r"keys AND values",
        ),
        (
            lambda: checks.check_repeat_kv(lambda kv, g: kv.repeat(1, g, 1, 1)),
            r"torch.repeat_interleave",
        ),
    ],
)
def test_chapter_9_checks_explain_wrong_answers(call, message):
    with pytest.raises(CheckFailed, match=message):
        call()


@pytest.mark.parametrize("seed", HIDDEN_SEEDS)
def test_other_seeds_give_other_cases_that_correct_answers_pass(seed, capsys):
    checks.check_kv_cache_bytes(lambda *a: 2 * math.prod(a), seed=seed)
    assert capsys.readouterr().out.count("Correct") == 1
