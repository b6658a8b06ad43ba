"""The checks of chapter 4's exercises (the entropy of attention weights, the query Jacobian)
accept correct answers written independently and reject wrong ones clearly."""

import pytest
import torch

from attention_course import checks
from attention_course.checks import CheckFailed


def test_chapter_4_checks_accept_independent_answers(capsys):
    checks.check_entropy(lambda p: -torch.special.xlogy(p, p).sum(-1))
    assert capsys.readouterr().out.count("Correct") == 1


def test_chapter_4_checks_explain_wrong_answers():
    with pytest.raises(CheckFailed, match=r"one-hot rows .* holds nan .*0 \* log 0"):
        checks.check_entropy(lambda p: -(p * p.log()).sum(-1))


def jacobian_by_finite_differences(query, keys, step=1e-6):
    """Central differences of o(q) = softmax(K q / sqrt(d)) K: an independent answer."""

    def attend(q):
        return torch.softmax(keys @ q / q.shape[0] ** 0.5, dim=0) @ keys

    columns = [
        (attend(query + step * e) - attend(query - step * e)) / (2 * step)
        for e in torch.eye(len(query), dtype=query.dtype)
    ]
    return torch.stack(columns, dim=1)


def test_query_jacobian_check(capsys):
    checks.check_query_jacobian(jacobian_by_finite_differences)
    assert "All 4 test cases" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match=r"sqrt\(d\) = .* times too large"):
        checks.check_query_jacobian(
            lambda q, k: jacobian_by_finite_differences(q, k) * q.shape[0] ** 0.5
        )
    with pytest.raises(CheckFailed, match=r"calls `jacobian`"):
        checks.check_query_jacobian(
            lambda q, k: torch.autograd.functional.jacobian(
                lambda x: torch.softmax(k @ x / len(x) ** 0.5, 0) @ k, q
            )
        )
