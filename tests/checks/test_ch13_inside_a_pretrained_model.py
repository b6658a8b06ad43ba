"""The checks of chapter 13's exercises (previous-word targets, ablating a head) accept correct
answers written independently and name the usual mistakes."""

import copy

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

from attention_course import checks
from attention_course.checks import CheckFailed


def previous_word_by_word_spans(word_ids):
    """Targets from the spans (first, last token) of each word."""
    n = len(word_ids)
    spans = {}
    for position, word in enumerate(word_ids):
        if word is not None:
            first, _ = spans.get(word, (position, position))
            spans[word] = (first, position)
    targets = torch.zeros(n, n, dtype=torch.bool)
    for word, (first, last) in spans.items():
        if word - 1 in spans:
            before_first, before_last = spans[word - 1]
            targets[first : last + 1, before_first : before_last + 1] = True
    return targets


def ablate_by_zeroing_values(attention, head):
    """Zero the head's value projection, weights and bias: its values are then
    zero, so its output is zero whatever its weights."""
    ablated = copy.deepcopy(attention)
    rows = slice(head * ablated.head_dim, (head + 1) * ablated.head_dim)
    with torch.no_grad():
        ablated.v_proj.weight[rows] = 0
        if ablated.v_proj.bias is not None:
            ablated.v_proj.bias[rows] = 0
    return ablated


INDEPENDENT_ANSWERS = [
    ("check_previous_word_targets", previous_word_by_word_spans),
    ("check_ablate_head", ablate_by_zeroing_values),
]


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
@pytest.mark.parametrize(
    "check, answer", INDEPENDENT_ANSWERS, ids=[name for name, _ in INDEPENDENT_ANSWERS]
)
def test_checks_pass_independent_answers(check, answer, seed, capsys):
    getattr(checks, check)(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def test_previous_word_check_explains_the_usual_mistakes():
    def previous_token(word_ids):
        n = len(word_ids)
        return torch.ones(n, n, dtype=torch.bool).tril(-1) & ~torch.ones(
            n, n, dtype=torch.bool
        ).tril(-2)

    with pytest.raises(CheckFailed, match="you marked the previous token"):
        checks.check_previous_word_targets(previous_token)

    def specials_as_minus_one(word_ids):  # None read as -1: [CLS] -> word 0
        ids = torch.tensor([-1 if w is None else w for w in word_ids])
        return ids[None, :] == ids[:, None] - 1

    with pytest.raises(CheckFailed, match="None marks"):
        checks.check_previous_word_targets(specials_as_minus_one)

    def same_word(word_ids):
        return previous_word_by_word_spans([None if w is None else w - 1 for w in word_ids]).T

    with pytest.raises(CheckFailed, match="you marked the next word"):
        checks.check_previous_word_targets(same_word)  # the next word, in fact

    def next_word(word_ids):  # the comparison the wrong way round
        ids = [-5 if w is None else w for w in word_ids]
        return torch.tensor([[b - 1 == a for b in ids] for a in ids])

    with pytest.raises(CheckFailed, match="you marked the next word"):
        checks.check_previous_word_targets(next_word)

    def own_word(word_ids):  # the "- 1" forgotten
        ids = [-5 if w is None else w for w in word_ids]
        return torch.tensor([[a == b and a >= 0 for b in ids] for a in ids])

    with pytest.raises(CheckFailed, match="the query's own word"):
        checks.check_previous_word_targets(own_word)


def test_ablation_check_explains_the_usual_mistakes():
    def in_place(attention, head):
        with torch.no_grad():
            columns = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
            attention.out_proj.weight[:, columns] = 0
        return attention

    with pytest.raises(CheckFailed, match="changed the original"):
        checks.check_ablate_head(in_place)

    def zeroing_rows(projection):
        """A wrong ablation: zero the head's rows of one projection's weight."""

        def ablate(attention, head):
            ablated = copy.deepcopy(attention)
            rows = slice(head * ablated.head_dim, (head + 1) * ablated.head_dim)
            with torch.no_grad():
                getattr(ablated, projection).weight[rows] = 0
            return ablated

        return ablate

    with pytest.raises(CheckFailed, match="value bias"):  # b_v still flows out
        checks.check_ablate_head(zeroing_rows("v_proj"))
    with pytest.raises(CheckFailed, match="query or key rows changes where the head looks"):
        checks.check_ablate_head(zeroing_rows("q_proj"))  # query-independent weights
    with pytest.raises(CheckFailed, match="query or key rows changes where the head looks"):
        checks.check_ablate_head(zeroing_rows("k_proj"))
    with pytest.raises(CheckFailed, match="you zeroed rows of out_proj"):
        checks.check_ablate_head(zeroing_rows("out_proj"))
    with pytest.raises(CheckFailed, match="return the ablated copy"):
        checks.check_ablate_head(lambda attention, head: attention.out_proj.weight * 0)
