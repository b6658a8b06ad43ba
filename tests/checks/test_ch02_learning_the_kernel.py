"""The checks of chapter 2's exercises (per-key bandwidths, batched kernel regression) accept
correct answers written independently and reject wrong ones clearly."""

import pytest
import torch
from learner_answers import HIDDEN_SEEDS, learner_nw

from attention_course import checks, nadaraya_watson
from attention_course.checks import CheckFailed


def test_chapter_2_checks_accept_independent_answers(capsys):
    checks.check_per_key_weights(
        lambda q, k, h: torch.softmax(-(((q[:, None] - k[None, :]) / h[None, :]) ** 2) / 2, dim=1)
    )
    assert capsys.readouterr().out.count("Correct") == 1


def test_chapter_2_checks_explain_wrong_answers():
    with pytest.raises(CheckFailed, match=r"your weights at index"):
        checks.check_per_key_weights(
            lambda q, k, h: torch.softmax(-(((q[:, None] - k) / h.mean()) ** 2) / 2, 1)
        )


def batched_regression_by_bmm(queries, keys, values, bandwidth):
    """A learner's answer: one (B, n_q, n_k) weight stack and one torch.bmm."""
    scores = -(((queries[:, :, None] - keys[:, None, :]) / bandwidth) ** 2) / 2
    return torch.bmm(torch.softmax(scores, dim=-1), values[:, :, None]).squeeze(-1)


def test_batched_regression_check_accepts_a_bmm_answer(capsys):
    for seed in HIDDEN_SEEDS:
        checks.check_batched_regression(batched_regression_by_bmm, seed=seed)
    assert capsys.readouterr().out.count("All 4 test cases") == len(HIDDEN_SEEDS)


def test_batched_regression_check_explains_wrong_answers():
    def pooled(queries, keys, values, bandwidth):  # every set sees every key
        flat_k, flat_v = keys.flatten(), values.flatten()
        return torch.stack([learner_nw(q, flat_k, flat_v, bandwidth) for q in queries])

    def naive(queries, keys, values, bandwidth):  # exp() then divide
        kernel = torch.exp(-(((queries[:, :, None] - keys[:, None, :]) / bandwidth) ** 2) / 2)
        return (kernel @ values[:, :, None]).squeeze(-1) / kernel.sum(-1)

    with pytest.raises(CheckFailed, match=r"attend to the keys of every data set"):
        checks.check_batched_regression(pooled)
    with pytest.raises(CheckFailed, match=r"a query far from every key.*underflows to 0"):
        checks.check_batched_regression(naive)
    with pytest.raises(CheckFailed, match=r"your predictions at index"):
        checks.check_batched_regression(
            lambda q, k, v, h: batched_regression_by_bmm(q, k, v, 2 * h)
        )


def test_batched_regression_check_refuses_the_package_s_answer():
    def delegated(queries, keys, values, bandwidth):
        return torch.stack(
            [nadaraya_watson(q, k, v, bandwidth)[0] for q, k, v in zip(queries, keys, values)]
        )

    with pytest.raises(CheckFailed, match=r"calls `nadaraya_watson`"):
        checks.check_batched_regression(delegated)
