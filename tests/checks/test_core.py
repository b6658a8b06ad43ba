"""The checks' shared machinery: a stub waits for its answer (and fails when strict) in every
check, an answer that calls the package's own answer fails and everything is restored after,
check_attention_weights names the row that is wrong."""

import inspect

import pytest
import torch
from learner_answers import learner_nw, stub

import attention_course
from attention_course import (
    SIMILARITIES,
    attention_entropy,
    causal_mask,
    checks,
    cosine_scores,
    kv_cache_bytes,
    leave_one_out_mse,
    masked_softmax,
    nadaraya_watson,
    sinusoidal_positional_encoding,
)
from attention_course.checks import CheckFailed


def test_a_stub_is_not_yet_answered_and_fails_only_when_strict(capsys):
    """A learner's notebook runs on past an unanswered exercise; a grader's test fails."""
    assert checks.check_nadaraya_watson(stub) is None
    assert capsys.readouterr().out.startswith("Not yet answered: `stub` is still the stub.")
    with pytest.raises(CheckFailed, match="`stub` still raises NotImplementedError"):
        checks.check_nadaraya_watson(stub, strict=True)
    with pytest.raises(CheckFailed, match="shape"):  # a wrong answer fails either way
        checks.check_nadaraya_watson(lambda *a: learner_nw(*a)[:, None])


def any_stub(*args, **kwargs):
    raise NotImplementedError()


@pytest.mark.parametrize(
    "name", [n for n in dir(checks) if n.startswith("check_") and n != "check_attention_weights"]
)
def test_every_check_of_a_function_waits_for_an_answer(name, capsys):
    """Any check given a stub says "Not yet answered", and fails when strict."""
    check = getattr(checks, name)
    required = [
        p
        for p in inspect.signature(check).parameters.values()
        if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD
    ][1:]
    extra = [{"kernel": "gaussian"}[p.name] for p in required]
    assert check(any_stub, *extra) is None
    assert "Not yet answered: `any_stub`" in capsys.readouterr().out
    with pytest.raises(checks.NotAnswered):
        check(any_stub, *extra, strict=True)


@pytest.mark.parametrize(
    "weights, message",
    [
        (torch.tensor([[0.5, 0.5], [0.2, 0.3]]), r"row 1 sums to 0.5000, not 1"),
        (torch.tensor([[1.5, -0.5]]), r"row 0 has a negative weight"),
        (torch.tensor([[0.5, 0.5], [float("nan"), 1.0]]), r"row 1 contains NaN"),
    ],
)
def test_check_attention_weights_messages(weights, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_attention_weights(weights)


def test_check_attention_weights_accepts_batches(capsys):
    checks.check_attention_weights(torch.softmax(torch.randn(2, 3, 4), dim=-1))
    assert "all 6 rows" in capsys.readouterr().out


@pytest.mark.parametrize(
    "call",
    [
        lambda: checks.check_entropy(attention_entropy),
        lambda: checks.check_entropy(lambda p: attention_course.attention_entropy(p)),
        lambda: checks.check_masked_softmax(lambda s, v: masked_softmax(s, v)),
        lambda: checks.check_causal_mask(lambda n_q, n_k: causal_mask(n_q, n_k)),
        lambda: checks.check_nadaraya_watson(lambda q, k, v, h: nadaraya_watson(q, k, v, h)[0]),
        lambda: checks.check_leave_one_out(lambda k, v, h: leave_one_out_mse(k, v, h)),
        lambda: checks.check_self_attention(
            lambda x, q, k, v: torch.nn.functional.scaled_dot_product_attention(x @ q, x @ k, x @ v)
        ),
        lambda: checks.check_positional_encoding(sinusoidal_positional_encoding),
        lambda: checks.check_kv_cache_bytes(
            lambda *a: kv_cache_bytes(
                **dict(
                    zip(
                        [
                            "batch_size",
                            "seq_len",
                            "num_layers",
                            "num_kv_heads",
                            "head_dim",
                            "bytes_per_element",
                        ],
                        a,
                    )
                )
            )
        ),
    ],
)
def test_an_answer_that_calls_the_package_s_own_answer_fails(call):
    with pytest.raises(CheckFailed, match=r"calls `\w+`"):
        call()
    assert attention_course.cosine_scores is cosine_scores  # everything is restored
    assert SIMILARITIES["cosine"] is cosine_scores
    assert torch.nn.functional.scaled_dot_product_attention is not None
