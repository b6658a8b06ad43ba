"""The checks of chapter 1's exercises (Nadaraya–Watson regression, kernel weights, leave-one-out
error) accept correct answers written independently and reject wrong ones clearly."""

import pytest
import torch
from learner_answers import HIDDEN_SEEDS, learner_nw, stub

from attention_course import checks, nadaraya_watson
from attention_course.checks import CheckFailed


def naive_nw(queries, keys, values, bandwidth):
    """exp() then divide: right in the middle of the data, 0/0 = NaN far from it."""
    kernel = torch.exp(-(((queries[:, None] - keys[None, :]) / bandwidth) ** 2) / 2)
    return (kernel @ values) / kernel.sum(dim=1)


def test_correct_answers_pass(capsys):
    checks.check_nadaraya_watson(learner_nw)
    checks.check_kernel_weights(
        lambda q, k, h: torch.softmax(-(((q[:, None] - k) / h) ** 2) / 2, 1), "gaussian"
    )

    def epanechnikov(q, k, h):
        kernel = (1 - ((q[:, None] - k[None, :]) / h) ** 2).clamp(min=0)
        return kernel / kernel.sum(dim=1, keepdim=True)

    checks.check_kernel_weights(epanechnikov, "epanechnikov")

    def loo(keys, values, h):
        errors = []
        for i in range(len(keys)):
            keep = torch.arange(len(keys)) != i
            errors.append(
                (learner_nw(keys[i : i + 1], keys[keep], values[keep], h) - values[i]) ** 2
            )
        return torch.cat(errors).mean().item()

    checks.check_leave_one_out(loo)
    assert capsys.readouterr().out.count("Correct") == 4


def test_underflow_is_explained():
    with pytest.raises(CheckFailed, match=r"a query far from every key.*underflow"):
        checks.check_nadaraya_watson(naive_nw)


def test_wrong_shape_and_value_are_reported():
    with pytest.raises(CheckFailed, match=r"shape \(5, 1\), expected \(5,\)"):
        checks.check_nadaraya_watson(lambda *a: learner_nw(*a)[:, None])
    with pytest.raises(CheckFailed, match=r"index \(0,\) is .*expected"):
        checks.check_nadaraya_watson(lambda q, k, v, h: learner_nw(q, k, v, 2 * h))


def test_unnormalised_kernel_weights_name_the_row():
    def unnormalised(q, k, h):
        return (1 - ((q[:, None] - k[None, :]) / h) ** 2).clamp(min=0)

    with pytest.raises(CheckFailed, match=r"row 0 sums to .*, not 1"):
        checks.check_kernel_weights(unnormalised, "epanechnikov")


def test_in_sample_error_gets_a_hint():
    def in_sample(keys, values, h):
        return torch.mean((learner_nw(keys, keys, values, h) - values) ** 2).item()

    with pytest.raises(CheckFailed, match="mask each point's own key"):
        checks.check_leave_one_out(in_sample)


def test_unknown_kernel_is_a_value_error():
    with pytest.raises(ValueError, match="unknown kernel"):
        checks.check_kernel_weights(stub, "triangle")


def test_kernel_nan_is_blamed_on_underflow_only_where_it_underflows():
    with pytest.raises(CheckFailed, match=r"a query far from every key.*underflows to 0"):
        checks.check_nadaraya_watson(naive_nw)
    with pytest.raises(CheckFailed, match=r"holds nan at index \(0,\)$"):
        checks.check_nadaraya_watson(lambda q, k, v, h: learner_nw(q, k, v, h) * float("nan"))


@pytest.mark.parametrize("seed", HIDDEN_SEEDS)
def test_other_seeds_give_other_cases_that_correct_answers_pass(seed, capsys):
    checks.check_nadaraya_watson(learner_nw, seed=seed)
    assert capsys.readouterr().out.count("Correct") == 1


def test_a_hard_coded_answer_fails_the_other_seeds():
    public_cases = checks.ch01_attention_pooling.regression_cases(0)
    answers = {tuple(q.tolist()): nadaraya_watson(q, k, v, h)[0] for _, q, k, v, h in public_cases}

    def memorised(q, k, v, h):
        return answers[tuple(q.tolist())]

    with pytest.raises(CheckFailed):
        checks.check_nadaraya_watson(memorised, seed=1)


def test_unnormalised_regression_weights_get_a_hint():
    def unnormalised(queries, keys, values, bandwidth):
        return torch.exp(-(((queries[:, None] - keys[None]) / bandwidth) ** 2) / 2) @ values

    with pytest.raises(CheckFailed, match="do each query's weights sum to 1"):
        checks.check_nadaraya_watson(unnormalised)
    checks.check_nadaraya_watson(learner_nw)  # a right answer meets no such complaint
