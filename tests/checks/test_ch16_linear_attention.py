"""The checks of chapter 16's exercises (linear attention, the gated delta rule): independent
correct answers pass, on the visible and the hidden seeds; typical wrong answers fail with a
hint that names the mistake."""

import math

import pytest
import torch
from learner_answers import SEEDS

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed


def recurrence_with_a_state(phi_q, phi_k, values):
    """The exercise's answer: S and z updated token by token, then read."""
    state = torch.zeros(phi_k.shape[1], values.shape[1], dtype=values.dtype)
    normaliser = torch.zeros(phi_k.shape[1], dtype=values.dtype)
    outputs = []
    for q, k, v in zip(phi_q, phi_k, values):
        state = state + torch.outer(k, v)
        normaliser = normaliser + k
        outputs.append(q @ state / (q @ normaliser))
    return torch.stack(outputs)


def recurrence_by_prefix_sums(phi_q, phi_k, values):
    """Every state at once: cumulative sums of the outer products."""
    states = torch.cumsum(phi_k[:, :, None] * values[:, None, :], dim=0)  # (n, f, d_v)
    sums = torch.cumsum(phi_k, dim=0)  # (n, f)
    return torch.einsum("tf,tfv->tv", phi_q, states) / (phi_q * sums).sum(1, keepdim=True)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [recurrence_with_a_state, recurrence_by_prefix_sums])
def test_linear_recurrence_check_passes_independent_answers(answer, seed, capsys):
    checks.check_linear_recurrence(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def read_before_write(phi_q, phi_k, values):
    state = torch.zeros(phi_k.shape[1], values.shape[1])
    normaliser = torch.zeros(phi_k.shape[1])
    outputs = []
    for q, k, v in zip(phi_q, phi_k, values):
        outputs.append(q @ state / (q @ normaliser))
        state, normaliser = state + torch.outer(k, v), normaliser + k
    return torch.stack(outputs)


def read_before_write_but_first_token_patched(phi_q, phi_k, values):
    out = read_before_write(phi_q, phi_k, values)
    out[0] = values[0]
    return out


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (
            lambda q, k, v: torch.einsum(
                "tf,tfv->tv", q, torch.cumsum(k[:, :, None] * v[:, None, :], 0)
            ),
            "not normalised",
        ),
        (lambda q, k, v: torch.softmax(torch.log(q @ k.T), 1) @ v, "every query reads every key"),
        (lambda q, k, v: torch.cumsum(v, 0) / torch.arange(1, len(v) + 1)[:, None], "running mean"),
        (
            lambda q, k, v: (
                torch.einsum("tf,tfv->tv", q, torch.cumsum(k[:, :, None] * v[:, None, :], 0))
                / (q @ k.sum(0))[:, None]
            ),
            "normaliser sums every key",
        ),
        (read_before_write, "0 / 0 is NaN"),
        (read_before_write_but_first_token_patched, "its own key and value too"),
        (lambda q, k, v: recurrence_with_a_state(q, k, v)[:, :1], "shape"),
        (lambda q, k, v: 1.01 * recurrence_with_a_state(q, k, v), "outputs at index"),
        (
            lambda q, k, v: attention_course.linear_attention(q, k, v, feature_map="identity"),
            "calls `linear_attention`",
        ),
    ],
)
def test_linear_recurrence_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_linear_recurrence(wrong)
    assert attention_course.linear.linear_attention is attention_course.linear_attention


def delta_step_as_a_matrix(state, key, value, beta, gamma):
    """gamma (I - beta k k^T) S + beta k v^T: the step as one linear map of S."""
    eye = torch.eye(len(key), dtype=state.dtype)
    return gamma * (eye - beta * torch.outer(key, key)) @ state + beta * torch.outer(key, value)


def delta_step_by_entries(state, key, value, beta, gamma):
    new = torch.zeros_like(state)
    for i in range(state.shape[0]):
        for j in range(state.shape[1]):
            predicted = sum(gamma * state[c, j] * key[c] for c in range(len(key)))
            new[i, j] = gamma * state[i, j] + beta * key[i] * (value[j] - predicted)
    return new


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [delta_step_as_a_matrix, delta_step_by_entries])
def test_gated_delta_step_check_passes_independent_answers(answer, seed, capsys):
    checks.check_gated_delta_step(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda s, k, v, b, g: g * (s + b * torch.outer(k, v - s.T @ k)), "decayed after writing"),
        (lambda s, k, v, b, g: g * s + b * torch.outer(k, v - s.T @ k), "with the decayed state"),
        (lambda s, k, v, b, g: g * s + b * torch.outer(k, v), "linear attention's update"),
        (lambda s, k, v, b, g: s + b * torch.outer(k, v - s.T @ k), "the state is not decayed"),
        (
            lambda s, k, v, b, g: g * s + torch.outer(k, b * v - g * s.T @ k),
            "beta multiplies the whole error",
        ),
        (lambda s, k, v, b, g: g * s + b * torch.outer(k, v + g * s.T @ k), "not v \\+ S'\\^T k"),
        (
            lambda s, k, v, b, g: (
                g * s + b * torch.outer(k, v - g * s @ k)
                if s.shape[0] == s.shape[1]
                else delta_step_as_a_matrix(s, k, v, b, g)
            ),
            "k @ S in code",
        ),
        (lambda s, k, v, b, g: delta_step_as_a_matrix(s, k, v, b, g).T, "not u k\\^T"),
        (lambda s, k, v, b, g: delta_step_as_a_matrix(s, k, v, b, g) + 1e-3, "new state at index"),
        (
            lambda s, k, v, b, g: attention_course.delta_rule(
                k[None],
                k[None],
                v[None],
                torch.tensor([b]),
                torch.tensor([math.log(g)]),
                initial_state=s,
            )[1],
            "calls `delta_rule`",
        ),
    ],
)
def test_gated_delta_step_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_gated_delta_step(wrong)


def test_chapter_16_checks_refuse_answers_that_only_fit_the_visible_cases():
    cases = checks.ch16_linear_attention._delta_step_cases(0)
    visible = {tuple(state.shape) for _, state, *_ in cases}

    def memorised(state, key, value, beta, gamma):
        if tuple(state.shape) in visible:
            return delta_step_as_a_matrix(state, key, value, beta, gamma)
        return state

    checks.check_gated_delta_step(memorised)
    with pytest.raises(CheckFailed):
        for seed in (1, 2):
            checks.check_gated_delta_step(memorised, seed=seed)


def test_chapter_16_stubs_wait_for_their_answers(capsys):
    def stub(*args):
        raise NotImplementedError

    for check in (checks.check_linear_recurrence, checks.check_gated_delta_step):
        assert check(stub) is None
        assert "Not yet answered" in capsys.readouterr().out
        with pytest.raises(checks.NotAnswered):
            check(stub, strict=True)


# ------------------------------------------------------------------ exercise 3: the layer's parts


def convolution_by_conv1d(x, weight, held):
    """PyTorch's depthwise conv1d over [held; x] without padding."""
    window = torch.cat([held, x])  # (w - 1 + L, C)
    out = torch.nn.functional.conv1d(window.T[None], weight[:, None, :], groups=x.shape[1])
    return torch.nn.functional.silu(out[0].T), window[len(window) - (weight.shape[1] - 1) :]


def convolution_by_loops(x, weight, held):
    """Every output channel by channel, the held inputs updated token by token."""
    size = weight.shape[1]
    outputs = []
    for token in x:
        window = torch.cat([held, token[None]])  # (K, C)
        summed = (weight.T * window).sum(0)
        outputs.append(summed * torch.sigmoid(summed))
        held = window[1:]
    return torch.stack(outputs), held[len(held) - (size - 1) :]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [convolution_by_conv1d, convolution_by_loops])
def test_short_convolution_check_passes_independent_answers(answer, seed, capsys):
    checks.check_short_convolution(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def same_padding(x, weight, held):
    """A centred convolution: output t reads later tokens too."""
    size = weight.shape[1]
    padded = torch.nn.functional.pad(x.T[None], ((size - 1) // 2, size // 2))
    out = torch.nn.functional.conv1d(padded, weight[:, None, :], groups=x.shape[1])
    return torch.nn.functional.silu(out[0].T), convolution_by_conv1d(x, weight, held)[1]


def without_the_cache(x, weight, held):
    return convolution_by_conv1d(x, weight, torch.zeros_like(held))


def flipped_taps(x, weight, held):
    return convolution_by_conv1d(x, weight.flip(1), held)


def _linear(x, weight, held):
    window = torch.cat([held, x])
    out = torch.nn.functional.conv1d(window.T[None], weight[:, None, :], groups=x.shape[1])
    return out[0].T


def old_held(x, weight, held):
    return convolution_by_conv1d(x, weight, held)[0], held


def last_of_x_only(x, weight, held):
    """The new tokens' last w - 1, padded with zeros when fewer: loses the held ones."""
    size = weight.shape[1] - 1
    padded = torch.cat([torch.zeros_like(held), x])
    return convolution_by_conv1d(x, weight, held)[0], padded[len(padded) - size :]


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (same_padding, "not causal"),
        (without_the_cache, "ignore the held inputs"),
        (flipped_taps, "taps are reversed"),
        (lambda x, w, h: (_linear(x, w, h), convolution_by_conv1d(x, w, h)[1]), "SiLU is missing"),
        (old_held, "are the old ones"),
        (last_of_x_only, "held inputs at index"),
        (lambda x, w, h: convolution_by_conv1d(x, w, h)[0], "return two tensors"),
    ],
)
def test_short_convolution_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_short_convolution(wrong)


def gated_norm_as_the_layer(out, gate, weight, eps):
    """torch's RMSNorm, then the SiLU gate."""
    norm = torch.nn.RMSNorm(out.shape[-1], eps=eps, dtype=out.dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm(out) * torch.nn.functional.silu(gate)


def gated_norm_by_rows(out, gate, weight, eps):
    rows = []
    for o, z in zip(out, gate):
        rms = math.sqrt(float((o**2).sum()) / len(o) + eps)
        rows.append(weight * o / rms * z / (1 + torch.exp(-z)))
    return torch.stack(rows)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("answer", [gated_norm_as_the_layer, gated_norm_by_rows])
def test_gated_rms_norm_check_passes_independent_answers(answer, seed, capsys):
    checks.check_gated_rms_norm(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def rms(x, eps):
    return torch.sqrt((x**2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (lambda o, z, w, e: w * o / rms(o, e), "gate is forgotten"),
        (
            lambda o, z, w, e: (
                w * (o * torch.nn.functional.silu(z)) / rms(o * torch.nn.functional.silu(z), e)
            ),
            "normalised the gated output",
        ),
        (lambda o, z, w, e: w * o / rms(o, e) * torch.sigmoid(z), "not sigmoid"),
        (
            lambda o, z, w, e: (
                w * torch.nn.functional.normalize(o, dim=-1) * torch.nn.functional.silu(z)
            ),
            "not of their sum",
        ),
        (lambda o, z, w, e: o / rms(o, e) * torch.nn.functional.silu(z), "learned weight"),
        (lambda o, z, w, e: 1.01 * gated_norm_by_rows(o, z, w, e), "normalised output at index"),
    ],
)
def test_gated_rms_norm_check_names_the_usual_mistakes(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_gated_rms_norm(wrong)


def test_chapter_16_layer_checks_wait_for_their_answers(capsys):
    def stub(*args):
        raise NotImplementedError

    for check in (checks.check_short_convolution, checks.check_gated_rms_norm):
        assert check(stub) is None
        assert "Not yet answered" in capsys.readouterr().out
