"""The checks of chapter 7's exercises (self-attention, the sinusoidal positional encoding) accept
correct answers written independently and reject wrong ones clearly."""

import math

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

from attention_course import checks
from attention_course.checks import CheckFailed


def encoding_by_loops(n, d):
    out = torch.zeros(n, d)
    for p in range(n):
        for i in range(0, d, 2):
            out[p, i] = math.sin(p / 10000 ** (i / d))
            out[p, i + 1] = math.cos(p / 10000 ** (i / d))
    return out


def test_chapter_7_checks_accept_independent_answers(capsys):
    def self_attention(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return torch.softmax(q @ k.T / q.shape[-1] ** 0.5, dim=-1) @ v

    checks.check_self_attention(self_attention)
    checks.check_positional_encoding(encoding_by_loops)
    assert capsys.readouterr().out.count("Correct") == 2


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: checks.check_self_attention(
                lambda x, q, k, v: torch.softmax((x @ q) @ (x @ k).T, -1) @ (x @ v)
            ),
            r"your output at index",
        ),
        (
            lambda: checks.check_positional_encoding(lambda n, d: torch.zeros(n, d)),
            r"your encoding at index",
        ),
    ],
)
def test_chapter_7_checks_explain_wrong_answers(call, message):
    with pytest.raises(CheckFailed, match=message):
        call()


def naive_self_attention(x, w_q, w_k, w_v):
    """No max subtraction: right for small scores, inf/inf = NaN for large ones."""
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    e = torch.exp(q @ k.T / q.shape[-1] ** 0.5)
    return e / e.sum(-1, keepdim=True) @ v


def test_self_attention_needs_the_max_subtraction():
    with pytest.raises(CheckFailed, match=r"scores around 1e3.*overflows to inf"):
        checks.check_self_attention(naive_self_attention)


@pytest.mark.parametrize("seed", HIDDEN_SEEDS)
def test_other_seeds_give_other_cases_that_correct_answers_pass(seed, capsys):
    checks.check_positional_encoding(encoding_by_loops, seed=seed)
    assert capsys.readouterr().out.count("Correct") == 1
