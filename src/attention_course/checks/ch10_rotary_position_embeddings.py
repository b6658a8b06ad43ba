"""Checks of chapter 10's exercises: RoPE, rotary self-attention, Llama 3.1's frequency
scaling, and next-token losses. Each compares with a float64 reference and names the usual
slips (the wrong pairs, the wrong sign, frequencies base^(-i/d), the shift of the targets)."""

import math

import torch

from .. import rotary
from .core import CheckFailed, compare, integers, passed, random, run, self_check


def _rotate_reference(x, positions, pairs, sign=1.0, base=10000.0, step=2):
    """float64 RoPE of x (..., seq, d): pairs "half" (i, i + d/2), Llama's, or
    "adjacent" (2i, 2i + 1), the complex form's; sign -1 turns backwards;
    step 1 gives the frequencies base^(-i/d) of a common slip, step -2 the
    growing frequencies base^(+2i/d) of another."""
    x = x.double()
    d = x.shape[-1]
    exponents = abs(step) * torch.arange(d // 2, dtype=torch.float64)
    theta = base ** (-exponents / d if step > 0 else exponents / d)
    angles = sign * positions.double()[:, None] * theta  # (seq, d/2)
    cos, sin = angles.cos(), angles.sin()
    if pairs == "half":
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


_ROTARY_MISTAKES = (
    (
        dict(pairs="adjacent"),
        "you paired neighbouring dimensions (2i, 2i+1); "
        "this exercise pairs dimension i with i + head_dim/2, as Llama does",
    ),
    (
        dict(pairs="half", sign=-1.0),
        "you rotated by -m theta_i: "
        "the second half is x_i sin + x_(i+d/2) cos, the first x_i cos - x_(i+d/2) sin",
    ),
    (
        dict(pairs="half", step=1),
        "your frequencies are base^(-i/d); pair i "
        "turns at theta_i = base^(-2i/d), i = 0 .. d/2 - 1 (the exponents "
        "torch.arange(0, d, 2) / d)",
    ),
    (
        dict(pairs="half", step=-2),
        "your frequencies grow with i, base^(+2i/d); they fall: theta_i = "
        "base^(-2i/d), so pair 0 turns fastest (1 radian per position)",
    ),
)


def _rotary_cases(seed):
    cases = [
        ("head_dim 2, positions 0..3", 4, 2),
        ("head_dim 8, positions 0..5", 6, 8),
        ("head_dim 16, scattered positions below 5000", 7, 16),
    ]
    if seed:
        cases = [
            (f"random case {n}", seq, 2 * half)
            for n, (seq, half) in enumerate(
                zip(integers(seed, 3, 1, 12, 90), integers(seed, 3, 1, 12, 91))
            )
        ]
    for number, (case, seq, d) in enumerate(cases):
        positions = torch.arange(seq)
        if number == 2:
            positions = torch.tensor(integers(seed, seq, 0, 5000, 92))
        yield case, random((seq, d), seed, 93 + number), positions


@self_check
def check_rotary(fn, seed=0):
    """Check fn(x (seq, head_dim), positions (seq,)) -> RoPE of x with base
    10000 and Llama's pairing of dimension i with i + head_dim/2. Chapter 10, exercise 1."""
    n_cases = 0
    for case, x, where in _rotary_cases(seed):
        expected = _rotate_reference(x, where, "half")
        got = run(fn, (x, where), case, forbidden=(rotary.apply_rotary,))
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            by_index = (
                dict(positions=torch.arange(len(where))),
                "you rotated row j by the angle j theta_i; rotate each row by "
                "its own position, positions[j] theta_i",
            )
            for options, hint in (*_ROTARY_MISTAKES, by_index):
                options = {"positions": where, **options}
                wrong = _rotate_reference(x, pairs=options.pop("pairs", "half"), **options)
                close = torch.allclose(got.detach().double(), wrong, atol=1e-4)
                if close and not torch.allclose(wrong, expected, atol=1e-4):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "rotated x", atol=1e-4)
        n_cases += 1
    passed("your rotary embedding", n_cases)


def _rotary_attention_reference(x, w_q, w_k, w_v, scale, rotate_values=False, causal=True):
    q, k, v = (x.double() @ w.double() for w in (w_q, w_k, w_v))
    positions = torch.arange(len(x))
    q = _rotate_reference(q, positions, "half")
    k = _rotate_reference(k, positions, "half")
    if rotate_values:
        v = _rotate_reference(v, positions, "half")
    allowed = torch.ones(len(x), len(x), dtype=torch.bool).tril(0 if causal else len(x))
    scores = (q @ k.T * scale).masked_fill(~allowed, -torch.inf)
    return torch.softmax(scores, -1) @ v


@self_check
def check_rotary_attention(fn, seed=0):
    """Check fn(x (seq, d_model), W_q, W_k, W_v (d_model, d)) -> causal
    self-attention output (seq, d) with RoPE on queries and keys only, scores
    scaled by 1 / sqrt(d). Chapter 10, exercise 2."""
    n_cases = 0
    for case, x, _ in _rotary_cases(seed):
        seq, d_model = x.shape
        d = d_model + 2  # the head size differs from d_model
        w_q, w_k, w_v = (random((d_model, d), seed, 100 + k) / d_model**0.5 for k in range(3))
        weights = (x, w_q, w_k, w_v)
        expected = _rotary_attention_reference(*weights, d**-0.5)
        got = run(fn, weights, case, forbidden=(rotary.apply_rotary,))
        mistakes = [
            (
                _rotary_attention_reference(*weights, d**-0.5, True),
                "you rotated the values too; RoPE turns only queries and keys",
            ),
            (
                _rotary_attention_reference(*weights, 1.0),
                "the scores are not scaled; divide them by sqrt(d)",
            ),
            (
                _rotary_attention_reference(*weights, d_model**-0.5),
                "you scaled by sqrt(d_model); the scale is sqrt(d), the size of queries and keys",
            ),
            (
                _rotary_attention_reference(*weights, d**-0.5, causal=False),
                "your attention is not causal: query t may attend only to "
                "keys s <= t (mask the later ones with -inf before the softmax)",
            ),
        ]
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and seq > 1:
            for wrong, hint in mistakes:
                if torch.allclose(got.detach().double(), wrong, atol=1e-4) and not torch.allclose(
                    wrong, expected, atol=1e-4
                ):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "attention output", atol=1e-4)
        n_cases += 1
    passed("your rotary self-attention", n_cases)


def _llama3_reference(theta, factor, low, high, context, mistake=None):
    """float64 Llama 3.1 frequencies, or one of the usual mistakes."""
    theta = theta.double()
    turns = context * theta / (2 * math.pi)  # r_i, turns over C
    if mistake == "radians":
        turns = context * theta
    blend = ((turns - low) / (high - low)).clamp(0, 1)  # 1 kept, 0 divided
    inside = (blend > 0) & (blend < 1)
    if mistake == "inverted":
        blend = 1 - blend
    elif mistake in ("swapped", "blend reversed"):
        swap = ~inside if mistake == "swapped" else inside
        blend = torch.where(swap, 1 - blend, blend)
    elif mistake in ("cut at low", "cut at high"):
        bound = low if mistake == "cut at low" else high
        blend = (turns >= bound).double()
    if mistake == "divisor blended":
        return theta / (blend + (1 - blend) * factor)
    divisor = 1 / factor if mistake != "multiplied" else factor
    return theta * (blend + (1 - blend) * divisor)


_SWAPPED = (
    "you divided the fast pairs and kept the slow ones; pairs that "
    "turn more than high_freq_factor times over the context are kept, "
    "those turning fewer than low_freq_factor times divided by factor"
)
_LLAMA3_MISTAKES = {
    "swapped": _SWAPPED,
    "inverted": _SWAPPED,
    "blend reversed": "in the middle band the two weights are swapped: "
    "gamma_i = (r_i - low) / (high - low) multiplies "
    "theta_i (kept), 1 - gamma_i multiplies theta_i / "
    "factor",
    "cut at low": "the pairs between the bounds (low_freq_factor < r_i < "
    "high_freq_factor turns) are blended, not kept: "
    "gamma_i theta_i + (1 - gamma_i) theta_i / factor",
    "cut at high": "the pairs between the bounds (low_freq_factor < r_i < "
    "high_freq_factor turns) are blended, not divided: "
    "gamma_i theta_i + (1 - gamma_i) theta_i / factor",
    "radians": "r_i, the number of turns over the context, is "
    "context * theta_i / (2 pi): one turn is 2 pi radians",
    "multiplied": "the slow pairs must turn slower: divide their frequency "
    "by factor, do not multiply it",
    "divisor blended": "between the bounds blend the frequencies, not the "
    "divisors: gamma_i theta_i + (1 - gamma_i) theta_i / factor, not "
    "theta_i / (gamma_i + (1 - gamma_i) factor)",
}


def _llama3_cases(seed):
    """(case, theta (d/2,), factor, low, high, context)."""
    cases = [
        (
            "Llama 3.1 8B: d 128, base 500,000, factor 8, bounds 1 and 4 turns, context 8,192",
            128,
            5e5,
            8.0,
            1.0,
            4.0,
            8192,
        ),
        (
            "Llama 3.2 1B: d 64, base 500,000, factor 32, bounds 1 and 4 turns, context 8,192",
            64,
            5e5,
            32.0,
            1.0,
            4.0,
            8192,
        ),
        (
            "d 16, base 10,000, factor 4, bounds 1 and 4 turns, context 600",
            16,
            1e4,
            4.0,
            1.0,
            4.0,
            600,
        ),
    ]
    if seed:
        halves = integers(seed, 3, 4, 65, 140)
        factors = integers(seed, 3, 2, 33, 141)
        contexts = integers(seed, 3, 256, 16385, 142)
        lows = integers(seed, 3, 1, 3, 143)
        cases = [
            (
                f"random case {n}: d {2 * h}, factor {f}, bounds {low} and "
                f"{4 * low} turns, context {c}",
                2 * h,
                1e4 * 50 ** (n % 2),
                float(f),
                float(low),
                4.0 * low,
                c,
            )
            for n, (h, f, c, low) in enumerate(zip(halves, factors, contexts, lows))
        ]
    for case, d, base, factor, low, high, context in cases:
        theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        yield case, theta, factor, low, high, context


@self_check
def check_llama3_frequencies(fn, seed=0):
    """Check fn(theta (d/2,), factor, low_freq_factor, high_freq_factor,
    context) -> Llama 3.1's frequencies (d/2,): theta_i kept where pair i
    turns r_i = context theta_i / 2 pi > high_freq_factor times over the
    context, theta_i / factor where r_i < low_freq_factor, and
    gamma_i theta_i + (1 - gamma_i) theta_i / factor between, with
    gamma_i = (r_i - low_freq_factor) / (high_freq_factor - low_freq_factor).
    Chapter 10, exercise 5."""
    n_cases = 0
    for case, theta, *options in _llama3_cases(seed):
        expected = _llama3_reference(theta, *options)
        got = run(fn, (theta.clone(), *options), case, forbidden=(rotary.rotary_frequencies,))
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for mistake, hint in _LLAMA3_MISTAKES.items():
                wrong = _llama3_reference(theta, *options, mistake=mistake)
                if torch.allclose(
                    got.detach().double() / theta, wrong / theta, rtol=0, atol=1e-6
                ) and not torch.allclose(wrong / theta, expected / theta, rtol=0, atol=1e-6):
                    raise CheckFailed(f"case '{case}': {hint}")
            got = got.detach().double() / theta
        compare(got, expected / theta, case, "frequency ratio theta'_i / theta_i", atol=1e-6)
        n_cases += 1
    passed("your Llama 3.1 frequencies", n_cases)


def _next_token_reference(logits, ids, mistake=None):
    """float64 losses -log p(ids[:, t + 1] | logits[:, t]) (batch, n - 1),
    or one of the usual mistakes."""
    logits = logits.double()
    scored, targets = logits[:, :-1], ids[:, 1:]  # token t predicts token t + 1
    if mistake == "own token":
        scored, targets = logits, ids
    elif mistake == "backwards":
        scored, targets = logits[:, 1:], ids[:, :-1]
    elif mistake == "unshifted":
        scored, targets = logits[:, :-1], ids[:, :-1]
    elif mistake == "first dropped":
        scored, targets = logits[:, 1:], ids[:, 1:]
    chosen = scored.gather(-1, targets[..., None])[..., 0]  # (batch, n - 1)
    if mistake == "no normaliser":
        return -chosen
    losses = scored.logsumexp(-1) - chosen
    if mistake == "bits":
        return losses / math.log(2)
    if mistake == "log probability":
        return -losses
    return losses


_NEXT_TOKEN_MISTAKES = {
    "own token": "you scored each position's own token; the logits at position t "
    "predict the next token, ids[:, t + 1], so there are n - 1 losses",
    "backwards": "you shifted the wrong way: the logits at position t predict "
    "ids[:, t + 1] (logits[:, :-1] against ids[:, 1:])",
    "unshifted": "the logits at position t predict the next token: compare "
    "logits[:, :-1] with ids[:, 1:], not with ids[:, :-1]",
    "first dropped": "you scored each position's own token from position 1 on; the logits at "
    "position t predict ids[:, t + 1]: compare logits[:, :-1] with ids[:, 1:], not logits[:, 1:]",
    "no normaliser": "a loss is -log softmax(logits)[token]: subtract the "
    "logsumexp of the row from the chosen logit before negating",
    "bits": "the loss is in nats (natural log), not bits: do not divide by ln 2",
    "log probability": "the loss is minus the log-probability of the right token",
}


def _next_token_cases(seed):
    shapes = [
        ("one text of 2 tokens", 1, 2, 3),
        ("two texts of 5", 2, 5, 7),
        ("three texts of 9", 3, 9, 11),
    ]
    if seed:
        shapes = [
            (f"random case {n}", batch, length, vocab)
            for n, (batch, length, vocab) in enumerate(
                zip(
                    integers(seed, 3, 1, 4, 110),
                    integers(seed, 3, 2, 12, 111),
                    integers(seed, 3, 3, 20, 112),
                )
            )
        ]
    for number, (case, batch, length, vocab) in enumerate(shapes):
        logits = 3 * random((batch, length, vocab), seed, 113 + number)
        ids = torch.tensor(integers(seed, batch * length, 0, vocab, 120 + number))
        if number == 0 and not seed:  # distinct ids, so each shift slip differs
            ids = torch.tensor([2, 0])
        yield case, logits, ids.reshape(batch, length)


@self_check
def check_next_token_losses(fn, seed=0):
    """Check fn(logits (batch, n, vocab), ids (batch, n)) -> the next-token
    losses (batch, n - 1): entry t is -log softmax(logits[b, t])[ids[b, t + 1]],
    in nats. Chapter 10, exercise 6."""
    n_cases = 0
    for case, logits, ids in _next_token_cases(seed):
        expected = _next_token_reference(logits, ids)
        got = run(fn, (logits.clone(), ids.clone()), case)
        if isinstance(got, torch.Tensor):
            for mistake, hint in _NEXT_TOKEN_MISTAKES.items():
                wrong = _next_token_reference(logits, ids, mistake)
                if (
                    got.shape == wrong.shape
                    and torch.allclose(got.detach().double(), wrong, atol=1e-6)
                    and not (
                        wrong.shape == expected.shape and torch.allclose(wrong, expected, atol=1e-6)
                    )
                ):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "losses", atol=1e-6)
        n_cases += 1
    passed("your next-token losses", n_cases)
