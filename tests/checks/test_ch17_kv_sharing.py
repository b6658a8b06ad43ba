"""The check of chapter 17's exercise on cross-layer KV sharing (check_kv_sources):
independent correct answers pass, on the visible and the hidden seeds; each plausible slip
fails with the hint that names it."""

import pytest
import torch
from learner_answers import SEEDS

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed


def sources_by_search(layer_types, num_kv_shared_layers):
    """Walk back from where sharing starts to the nearest layer of the same type."""
    first = len(layer_types) - num_kv_shared_layers
    sources = []
    for i, kind in enumerate(layer_types):
        j = i if i < first else first - 1
        while layer_types[j] != kind:
            j -= 1
        sources.append(j)
    return sources


def sources_by_dictionary(layer_types, num_kv_shared_layers):
    """One pass: remember the last layer of each type until sharing starts."""
    first = len(layer_types) - num_kv_shared_layers
    last, sources = {}, []
    for i, kind in enumerate(layer_types):
        if i < first:
            last[kind] = i
        sources.append(last[kind])
    return tuple(sources)


def sources_as_tensor(layer_types, num_kv_shared_layers):
    return torch.tensor(sources_by_search(layer_types, num_kv_shared_layers))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [sources_by_search, sources_by_dictionary, sources_as_tensor])
def test_kv_sources_check_passes_independent_answers(answer, seed, capsys):
    checks.check_kv_sources(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def last_before_sharing(layer_types, n):
    """Slip: every shared layer reads the last layer before sharing, whatever its type."""
    first = len(layer_types) - n
    return list(range(first)) + [first - 1] * n


def first_of_type(layer_types, n):
    """Slip: the first earlier layer of the same type, not the last."""
    first = len(layer_types) - n
    return [i if i < first else layer_types.index(kind) for i, kind in enumerate(layer_types)]


def chained(layer_types, n):
    """Slip: the nearest earlier layer of the same type, shared ones included."""
    first = len(layer_types) - n
    return [
        i if i < first else max(j for j in range(i) if layer_types[j] == kind)
        for i, kind in enumerate(layer_types)
    ]


def none_for_own(layer_types, n):
    """Slip: None, not its own index, for a layer that keeps its keys and values."""
    first = len(layer_types) - n
    return [None if i < first else s for i, s in enumerate(sources_by_search(layer_types, n))]


def one_too_many(layer_types, n):
    """Slip: the last n + 1 layers share."""
    return sources_by_search(layer_types, n + 1) if n + 1 < len(layer_types) else None


def one_too_few(layer_types, n):
    """Slip: the last n - 1 layers share."""
    return sources_by_search(layer_types, max(n - 1, 0))


def previous_layer(layer_types, n):
    """Slip: CLA's adjacent pairs, each shared layer reading the one below it."""
    first = len(layer_types) - n
    return [i if i < first else i - 1 for i in range(len(layer_types))]


def last_of_type_overall(layer_types, n):
    """Slip: the last layer of the same type in the whole stack."""
    return [
        i if i < len(layer_types) - n else max(j for j, k in enumerate(layer_types) if k == kind)
        for i, kind in enumerate(layer_types)
    ]


def minus_one_for_own(layer_types, n):
    """Slip: -1 for a layer that keeps its own keys and values."""
    first = len(layer_types) - n
    return [-1 if i < first else s for i, s in enumerate(sources_by_search(layer_types, n))]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (one_too_few, "no fewer"),
        (previous_layer, "is shared itself|is full_attention|is sliding_attention"),
        (last_of_type_overall, "is shared itself and computes no keys"),
        (minus_one_for_own, "the index of a layer, 0 to"),
        (last_before_sharing, "of its OWN type"),
        (first_of_type, "the LAST earlier layer of its type"),
        (chained, "cannot read another shared layer"),
        (none_for_own, "its entry is its own index"),
        (one_too_many, "sharing starts at layer len"),
        (lambda types, n: sources_by_search(types, n)[:-1], "one per layer"),
        (lambda types, n: 3, "expected a list"),
        (lambda types, n: list(attention_course.kv_sharing(types, n)), "calls `kv_sharing`"),
    ],
)
def test_kv_sources_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_kv_sources(wrong)


def test_the_kv_sources_stub_waits_for_its_answer(capsys):
    def stub(*args):
        raise NotImplementedError

    assert checks.check_kv_sources(stub) is None
    assert "Not yet answered" in capsys.readouterr().out
    with pytest.raises(checks.NotAnswered):
        checks.check_kv_sources(stub, strict=True)
