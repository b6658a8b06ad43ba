"""The check of chapter 17's exercise on gated attention (check_gated_attention):
independent correct answers pass, on the visible and the hidden seeds; each plausible slip
fails with the hint that names it."""

import pytest
import torch
from learner_answers import SEEDS

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed


def layer_by_loops(x, q_weight, k_weight, v_weight, o_weight, heads, slip=None):
    """Head by head and query by query, with torch.nn.functional's pieces; `slip` names a
    mistake to make instead."""
    n, d_h = x.shape[0], k_weight.shape[0] // heads
    projected = x @ q_weight.T  # (n, 2 H d_h)
    outputs = []
    for h in range(heads):
        rows = projected[:, 2 * h * d_h : 2 * (h + 1) * d_h]
        if slip == "halves":  # queries and gates as the two halves of the whole width
            half = projected.shape[1] // 2
            rows = torch.cat(
                [projected[:, h * d_h : (h + 1) * d_h], projected[:, half + h * d_h :][:, :d_h]],
                1,
            )
        query, gate = rows[:, :d_h], rows[:, d_h:]
        if slip == "swapped":  # the gate rows taken for the query and back
            query, gate = gate, query
        scale = 1.0 if slip == "unscaled" else d_h**-0.5
        key = x @ k_weight[h * d_h : (h + 1) * d_h].T
        value = x @ v_weight[h * d_h : (h + 1) * d_h].T
        head = torch.stack(
            [
                torch.softmax(query[t] @ key[: t + 1].T * scale, -1) @ value[: t + 1]
                for t in range(n)
            ]
        )  # (n, d_h)
        if slip == "raw":
            head = head * gate
        elif slip != "after" and slip != "none":
            head = head * torch.sigmoid(gate)
        outputs.append(head)
    merged = torch.cat(outputs, 1)  # (n, H d_h)
    output = merged @ o_weight.T
    if slip == "after":
        gates = torch.cat(
            [projected[:, (2 * h + 1) * d_h : (2 * h + 2) * d_h] for h in range(heads)], 1
        )
        output = output * torch.sigmoid(gates)
    return output


def layer_by_sdpa(x, q_weight, k_weight, v_weight, o_weight, heads):
    """All heads at once, with PyTorch's scaled_dot_product_attention."""
    n = x.shape[0]
    both = (x @ q_weight.T).view(n, heads, 2, -1)  # (n, H, query | gate, d_h)
    query, gate = both[:, :, 0].transpose(0, 1), both[:, :, 1].transpose(0, 1)
    key = (x @ k_weight.T).view(n, heads, -1).transpose(0, 1)
    value = (x @ v_weight.T).view(n, heads, -1).transpose(0, 1)
    read = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True)
    return (read * gate.sigmoid()).transpose(0, 1).reshape(n, -1) @ o_weight.T


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [layer_by_loops, layer_by_sdpa])
def test_gated_attention_check_passes_independent_answers(answer, seed, capsys):
    checks.check_gated_attention(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def slipping(name):
    return lambda *args: layer_by_loops(*args, slip=name)


def through_the_package(x, q_weight, k_weight, v_weight, o_weight, heads):
    n = x.shape[0]
    both = (x @ q_weight.T).view(n, heads, 2, -1).transpose(0, 1)
    key = (x @ k_weight.T).view(n, heads, -1).transpose(0, 1)
    value = (x @ v_weight.T).view(n, heads, -1).transpose(0, 1)
    out, _ = attention_course.gated_attention(
        both[None, :, :, 0], key[None], value[None], both[None, :, :, 1], is_causal=True
    )
    return out[0].transpose(0, 1).reshape(n, -1) @ o_weight.T


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (slipping("raw"), "not by g: without the sigmoid"),
        (slipping("none"), "the head's output is not gated"),
        (slipping("after"), "BEFORE o_proj"),
        (slipping("halves"), "split its output per head"),
        (slipping("unscaled"), "the scores are not scaled"),
        (slipping("swapped"), "query and gate are swapped"),
        (
            lambda *args: layer_by_loops(*args[:-1], args[-1]) * 0 + 1,
            "your output at index",
        ),
        (through_the_package, "calls `gated_attention`"),
    ],
)
def test_gated_attention_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_gated_attention(wrong)


def test_one_minus_sigmoid_is_named():
    def flipped(x, q_weight, k_weight, v_weight, o_weight, heads):
        # sigmoid(-g): the gate logits negated
        d_h = k_weight.shape[0] // heads
        q_rows = q_weight.view(heads, 2, d_h, -1).clone()
        q_rows[:, 1] = -q_rows[:, 1]
        return layer_by_sdpa(x, q_rows.reshape(q_weight.shape), k_weight, v_weight, o_weight, heads)

    with pytest.raises(CheckFailed, match="not 1 - sigmoid"):
        checks.check_gated_attention(flipped)


def test_the_gated_attention_stub_waits_for_its_answer(capsys):
    def stub(*args):
        raise NotImplementedError

    assert checks.check_gated_attention(stub) is None
    assert "Not yet answered" in capsys.readouterr().out
    with pytest.raises(checks.NotAnswered):
        checks.check_gated_attention(stub, strict=True)
