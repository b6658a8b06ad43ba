"""The checks of chapter 3's exercises (the temperature for a number of effective keys, top-k
attention) accept correct answers written independently and name the usual slips."""

import math

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

from attention_course import checks
from attention_course.checks import CheckFailed


def temperature_by_log_bisection(scores, k_eff, in_bits=False, entropy_only=False):
    """An independent answer: bisection on ln tau over a fixed wide range, entropy written out
    with log-sum-exp. in_bits / entropy_only: the usual slips (2^H with H in nats read as bits,
    or the entropy itself set to k_eff)."""
    s = scores.double()

    def k_of(log_tau):
        z = s / math.exp(log_tau)
        log_w = z - torch.logsumexp(z, 0)
        entropy = -(log_w.exp() * log_w).sum().item()
        if entropy_only:
            return entropy
        return math.exp(entropy / math.log(2) if in_bits else entropy)

    low, high = -40.0, 40.0
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if k_of(middle) < k_eff else (low, middle)
    return math.exp((low + high) / 2)


def top_k_by_sorting(scores, k):
    """An independent answer: for each row, sort, keep the first k indices, softmax by hand
    after subtracting the row's largest kept score."""
    flat = scores.double().reshape(-1, scores.shape[-1])
    out = torch.zeros_like(flat)
    for r, row in enumerate(flat):
        order = sorted(range(len(row)), key=lambda i: -row[i].item())[:k]
        top = max(row[i].item() for i in order)
        e = {i: math.exp(row[i].item() - top) for i in order}
        total = sum(e.values())
        for i in order:
            out[r, i] = e[i] / total
    return out.reshape(scores.shape)


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
def test_chapter_3_checks_pass_independent_answers(seed, capsys):
    checks.check_temperature_for(temperature_by_log_bisection, seed=seed)
    checks.check_top_k_attention(top_k_by_sorting, seed=seed)
    assert capsys.readouterr().out.count("Correct") == 2


def test_temperature_check_names_the_usual_slips():
    with pytest.raises(CheckFailed, match="k_eff is e to the entropy"):
        checks.check_temperature_for(
            lambda s, k: temperature_by_log_bisection(s, k, entropy_only=True)
        )
    with pytest.raises(CheckFailed, match="entropy in bits"):
        checks.check_temperature_for(lambda s, k: temperature_by_log_bisection(s, k, in_bits=True))
    with pytest.raises(CheckFailed, match="expected a positive number"):
        checks.check_temperature_for(lambda s, k: -1.0)
    with pytest.raises(CheckFailed, match="k_eff is"):
        checks.check_temperature_for(lambda s, k: 1.0)  # a fixed guess


def test_top_k_check_names_the_usual_slips():
    with pytest.raises(CheckFailed, match="softmax over every score"):
        checks.check_top_k_attention(lambda s, k: torch.softmax(s, -1))

    def exp_by_hand(s, k):
        kept = s >= s.topk(k, dim=-1).values[..., -1:]
        e = torch.exp(s) * kept
        return e / e.sum(-1, keepdim=True)

    with pytest.raises(CheckFailed, match="overflows"):
        checks.check_top_k_attention(exp_by_hand)

    def not_renormalised(s, k):
        kept = s >= s.topk(k, dim=-1).values[..., -1:]
        return torch.softmax(s, -1) * kept

    with pytest.raises(CheckFailed, match="renormalise"):
        checks.check_top_k_attention(not_renormalised)
