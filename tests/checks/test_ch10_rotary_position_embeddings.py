"""The checks of chapter 10's exercises (RoPE, rotary self-attention, Llama 3.1's frequencies,
next-token losses) accept correct answers written independently and name the usual mistakes."""

import math

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

import attention_course
from attention_course import apply_rotary, checks
from attention_course.checks import CheckFailed
from helpers.rotary_reference import rotate_by_matrices


def rotary_attention_by_loops(x, w_q, w_k, w_v, rotate_values=False, causal=True):
    seq = len(x)
    positions = torch.arange(seq)
    q = rotate_by_matrices(x.double() @ w_q.double(), positions)
    k = rotate_by_matrices(x.double() @ w_k.double(), positions)
    v = x.double() @ w_v.double()
    if rotate_values:
        v = rotate_by_matrices(v, positions)
    out = []
    for i in range(seq):
        seen = range(i + 1) if causal else range(seq)
        scores = torch.stack([q[i] @ k[j] for j in seen])
        weights = torch.softmax(scores / math.sqrt(q.shape[1]), dim=0)
        out.append(sum(w * v[j] for j, w in enumerate(weights)))
    return torch.stack(out)


def llama3_by_wavelengths(theta, factor, low, high, context, slip=None):
    """Llama 3.1's rule pair by pair, as Meta's reference code states it (by
    wavelength), or with one of the usual slips."""
    frequencies = []
    for frequency in theta.tolist():
        wavelength = 2 * math.pi / frequency
        if slip == "no 2 pi":
            wavelength = 1 / frequency
        new = frequency * factor if slip == "multiplied" else frequency / factor
        if wavelength < context / high:
            kept, divided = frequency, new
        elif wavelength > context / low:
            kept, divided = new, frequency
        else:
            smooth = (context / wavelength - low) / (high - low)
            if slip == "reversed blend":
                smooth = 1 - smooth
            if slip == "no blend":
                smooth = 1.0
            kept = divided = smooth * frequency + (1 - smooth) * new
            if slip == "divisor blended":
                kept = divided = frequency / (smooth + (1 - smooth) * factor)
        frequencies.append(divided if slip == "swapped" else kept)
    return torch.tensor(frequencies, dtype=theta.dtype)


def rotate_with_exponents_missing_the_two(x, positions, base=10000.0, sign=-1):
    """RoPE with the frequencies base^(-i/d): the common slip; sign=+1 gives
    base^(+2i/d), the exponent's sign forgotten."""
    half = x.shape[-1] // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) / x.shape[-1])
    if sign > 0:
        theta = base ** (torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    angles = positions.double()[:, None] * theta
    first, second = x.double().chunk(2, dim=-1)
    return torch.cat(
        [
            first * angles.cos() - second * angles.sin(),
            first * angles.sin() + second * angles.cos(),
        ],
        dim=-1,
    )


def next_token_losses_by_loops(logits, ids, slip=None):
    """-log of the softmax probability of the next token, position by position,
    with math.exp and math.log; or one of the usual slips."""
    batch, length, _ = logits.shape
    rows = []
    for b in range(batch):
        row = []
        targets = range(length) if slip == "own token" else range(length - 1)
        for t in targets:
            # (position of the logits, position of the token they are scored on)
            row_at, token_at = {
                "own token": (t, t),
                "unshifted": (t, t),
                "first dropped": (t + 1, t + 1),
                "backwards": (t + 1, t),
            }.get(slip, (t, t + 1))
            scores = logits[b, row_at].tolist()
            target = ids[b, token_at].item()
            top = max(scores)
            normaliser = top + math.log(sum(math.exp(s - top) for s in scores))
            loss = normaliser - scores[target]
            row.append(loss / math.log(2) if slip == "bits" else loss)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


INDEPENDENT_ANSWERS = [
    ("check_rotary", rotate_by_matrices),
    ("check_rotary_attention", rotary_attention_by_loops),
    ("check_llama3_frequencies", llama3_by_wavelengths),
    ("check_next_token_losses", next_token_losses_by_loops),
    (
        "check_next_token_losses",
        lambda logits, ids: torch.nn.functional.cross_entropy(
            logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none"
        ),
    ),
]


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
@pytest.mark.parametrize(
    "check, answer", INDEPENDENT_ANSWERS, ids=[name for name, _ in INDEPENDENT_ANSWERS]
)
def test_checks_pass_independent_answers(check, answer, seed, capsys):
    getattr(checks, check)(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def test_rotary_checks_explain_the_usual_mistakes():
    with pytest.raises(CheckFailed, match="neighbouring dimensions"):
        checks.check_rotary(lambda x, p: rotate_by_matrices(x, p, "adjacent"))
    with pytest.raises(CheckFailed, match="-m theta_i"):
        checks.check_rotary(lambda x, p: rotate_by_matrices(x, p, sign=-1.0))
    with pytest.raises(CheckFailed, match="rotated x at index"):
        checks.check_rotary(lambda x, p: x)
    with pytest.raises(CheckFailed, match="calls `apply_rotary`"):
        checks.check_rotary(apply_rotary)
    with pytest.raises(CheckFailed, match="rotated the values too"):
        checks.check_rotary_attention(lambda *a: rotary_attention_by_loops(*a, rotate_values=True))
    with pytest.raises(CheckFailed, match="attention output at index"):
        checks.check_rotary_attention(
            lambda x, w_q, w_k, w_v: rotary_attention_by_loops(x, w_q, w_k, w_v).flip(0)
        )


def test_rotary_check_names_frequencies_missing_the_two():
    with pytest.raises(CheckFailed, match=r"base\^\(-i/d\).*base\^\(-2i/d\)"):
        checks.check_rotary(rotate_with_exponents_missing_the_two)


@pytest.mark.parametrize(
    "slip, message",
    [
        ("swapped", "divided the fast pairs"),
        ("reversed blend", "two weights are swapped"),
        ("no blend", "are blended, not"),
        ("no 2 pi", "one turn is 2 pi radians"),
        ("multiplied", "do not multiply"),
        ("divisor blended", "blend the frequencies, not the divisors"),
    ],
)
def test_llama3_check_names_the_usual_slips(slip, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_llama3_frequencies(lambda *a: llama3_by_wavelengths(*a, slip=slip))


def test_llama3_check_refuses_the_package_s_answer():
    def via_the_package(theta, factor, low, high, context):
        scaling = {
            "rope_type": "llama3",
            "factor": factor,
            "low_freq_factor": low,
            "high_freq_factor": high,
            "original_max_position_embeddings": context,
        }
        return attention_course.rotary_frequencies(
            2 * len(theta), 500000.0, scaling=scaling, dtype=theta.dtype
        )

    with pytest.raises(CheckFailed, match="calls `rotary_frequencies`"):
        checks.check_llama3_frequencies(via_the_package)


def test_rotary_attention_check_names_the_wrong_scale():
    # scaling W_q by c multiplies every score by c
    unscaled = lambda x, w_q, w_k, w_v: rotary_attention_by_loops(
        x, w_q * w_q.shape[1] ** 0.5, w_k, w_v
    )
    with pytest.raises(CheckFailed, match="not scaled"):
        checks.check_rotary_attention(unscaled)
    by_model_width = lambda x, w_q, w_k, w_v: rotary_attention_by_loops(
        x, w_q * (w_q.shape[1] / w_q.shape[0]) ** 0.5, w_k, w_v
    )
    with pytest.raises(CheckFailed, match="sqrt\\(d_model\\)"):
        checks.check_rotary_attention(by_model_width)


def test_rotary_check_names_growing_frequencies_and_positions_ignored():
    with pytest.raises(CheckFailed, match=r"frequencies grow with i, base\^\(\+2i/d\)"):
        checks.check_rotary(lambda x, p: rotate_with_exponents_missing_the_two(x, p, sign=1))
    with pytest.raises(CheckFailed, match="its own position, positions\\[j\\]"):
        checks.check_rotary(lambda x, p: rotate_by_matrices(x, torch.arange(len(x))))


def test_rotary_attention_check_names_a_missing_causal_mask():
    with pytest.raises(CheckFailed, match="not causal"):
        checks.check_rotary_attention(lambda *a: rotary_attention_by_loops(*a, causal=False))


@pytest.mark.parametrize(
    "slip, message",
    [
        ("own token", "own token"),
        ("bits", "nats"),
    ],
)
def test_next_token_check_names_the_usual_slips(slip, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_next_token_losses(lambda *a: next_token_losses_by_loops(*a, slip=slip))


@pytest.mark.parametrize(
    "slip, message",
    [
        ("unshifted", r"not with ids\[:, :-1\]"),
        ("first dropped", r"own token from position 1"),
        ("backwards", "wrong way"),
    ],
)
def test_next_token_check_names_each_shift_slip_in_its_first_case(slip, message):
    # the first case already tells the slips apart (its two ids differ)
    with pytest.raises(CheckFailed, match=f"case 'one text of 2 tokens': .*{message}"):
        checks.check_next_token_losses(lambda *a: next_token_losses_by_loops(*a, slip=slip))


def test_next_token_check_names_a_wrong_shift_and_a_missing_normaliser():
    def backwards(logits, ids):
        return next_token_losses_by_loops(logits.flip(1), ids.flip(1)).flip(1)

    with pytest.raises(CheckFailed, match="wrong way"):
        checks.check_next_token_losses(backwards)
    with pytest.raises(CheckFailed, match="logsumexp"):
        checks.check_next_token_losses(
            lambda logits, ids: -logits[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
        )
    with pytest.raises(CheckFailed, match="losses at index"):
        checks.check_next_token_losses(
            lambda logits, ids: next_token_losses_by_loops(logits, ids) + 0.1
        )
