"""Checks of chapter 16's exercises: causal linear attention as a recurrence, and one step of the
gated delta rule."""

import torch

from .. import linear
from .core import CheckFailed, compare, integers, passed, random, run, self_check


def _recurrence_reference(phi_q, phi_k, values, causal_offset=0, normalize=True):
    """float64 causal linear attention by a double loop: output t reads keys j <= t
    (j < t with causal_offset 1), weights phi_q[t] . phi_k[j], divided by their sum."""
    phi_q, phi_k, values = phi_q.double(), phi_k.double(), values.double()
    output = torch.zeros(len(phi_q), values.shape[1], dtype=torch.float64)
    for t in range(len(phi_q)):
        weights = [phi_q[t] @ phi_k[j] for j in range(t + 1 - causal_offset)]
        total = sum(weights, torch.tensor(0.0, dtype=torch.float64))
        numerator = sum(
            (w * values[j] for j, w in enumerate(weights)),
            torch.zeros(values.shape[1], dtype=torch.float64),
        )
        output[t] = numerator / total if normalize else numerator
    return output


def _recurrence_cases(seed):
    """(case, phi_q (n, f), phi_k (n, f), values (n, d_v)), positive features."""
    sizes = [
        ("1 token, 3 features, d_v 2", 1, 3, 2),
        ("6 tokens, 4 features, d_v 3", 6, 4, 3),
        ("10 tokens, 2 features, d_v 5", 10, 2, 5),
        ("9 tokens, 8 features, d_v 1", 9, 8, 1),
    ]
    if seed:
        numbers = zip(*(integers(seed, 4, 1, 12, 200 + k) for k in range(3)))
        sizes = [
            (f"random case {m}: {n} tokens, {f} features, d_v {v}", n, f, v)
            for m, (n, f, v) in enumerate(numbers)
        ]
    for number, (case, n, f, d_v) in enumerate(sizes):
        phi_q, phi_k = (
            torch.nn.functional.elu(random((n, f), seed, 210 + 3 * number + j)) + 1
            for j in range(2)
        )
        yield case, phi_q, phi_k, random((n, d_v), seed, 212 + 3 * number)


def _recurrence_mistakes(phi_q, phi_k, values):
    """(what a typical wrong answer computes, why it is wrong)."""
    every_key = phi_q.double() @ phi_k.double().T
    mistakes = [
        (
            _recurrence_reference(phi_q, phi_k, values, normalize=False),
            "your outputs are not normalised: divide S_t^T phi(q_t) by phi(q_t) . z_t, where "
            "z_t = phi(k_1) + ... + phi(k_t) is the second part of the state",
        ),
        (
            (every_key / every_key.sum(1, keepdim=True)) @ values.double(),
            "every query reads every key: the recurrence must give token t only the keys "
            "j <= t, reading the state right after adding token t",
        ),
        (
            torch.cumsum(values.double(), 0) / torch.arange(1, len(values) + 1)[:, None],
            "that is the running mean of the values: the weights phi(q_t) . phi(k_j) are missing",
        ),
        (
            _recurrence_reference(phi_q, phi_k, values, normalize=False)
            / every_key.sum(1, keepdim=True),
            "your numerator is causal but your normaliser sums every key: divide "
            "by phi(q_t) . z_t with z_t = phi(k_1) + ... + phi(k_t), the keys "
            "so far",
        ),
    ]
    if len(values) > 1:
        shifted = _recurrence_reference(phi_q, phi_k, values, causal_offset=1)[1:]
        mistakes.append(
            (
                torch.cat([values[:1].double(), shifted]),
                "token t must read its own key and value too: add token t to the "
                "state before reading it",
            )
        )
    return mistakes


@self_check
def check_linear_recurrence(fn, seed=0):
    """Check fn(phi_q (n, f), phi_k (n, f), values (n, d_v)) -> (n, d_v): causal linear
    attention, output t = sum_(j <= t) (phi_q[t] . phi_k[j]) values[j] divided by
    sum_(j <= t) phi_q[t] . phi_k[j], computed with the recurrence. Chapter 16, exercise 1."""
    cases = list(_recurrence_cases(seed))
    for case, phi_q, phi_k, values in cases:
        expected = _recurrence_reference(phi_q, phi_k, values)
        got = run(
            fn,
            (phi_q.clone(), phi_k.clone(), values.clone()),
            case,
            forbidden=(linear.linear_attention,),
        )
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for wrong, hint in _recurrence_mistakes(phi_q, phi_k, values):
                if torch.allclose(got.detach().double(), wrong, atol=1e-5) and not torch.allclose(
                    wrong, expected, atol=1e-5
                ):
                    raise CheckFailed(f"case '{case}': {hint}")

        def explain(index):
            if index[0] == 0:
                return (
                    "the first token's weight sum is 0: did you read the state before "
                    "adding token 0 to it? Then 0 / 0 is NaN"
                )
            return None

        compare(got, expected, case, "outputs", atol=1e-5, explain_nan=explain)
    passed("your causal linear-attention recurrence", len(cases))


def _delta_step_reference(state, key, value, beta, gamma, mistake=None):
    """float64 gated delta-rule step on a (d_k, d_v) state, or a typical mistake."""
    state, key, value = state.double(), key.double(), value.double()
    decayed = gamma * state
    if mistake == "decay after":
        return gamma * (state + beta * torch.outer(key, value - state.T @ key))
    if mistake == "undecayed prediction":
        return decayed + beta * torch.outer(key, value - state.T @ key)
    if mistake == "no decay":
        return state + beta * torch.outer(key, value - state.T @ key)
    if mistake == "beta on the value":
        return decayed + torch.outer(key, beta * value - decayed.T @ key)
    if mistake == "no correction":
        return decayed + beta * torch.outer(key, value)
    if mistake == "sign":
        return decayed + beta * torch.outer(key, value + decayed.T @ key)
    if mistake == "transposed read":  # a shape error unless d_k == d_v
        if state.shape[0] != state.shape[1]:
            return None
        return decayed + beta * torch.outer(key, value - decayed @ key)
    return decayed + beta * torch.outer(key, value - decayed.T @ key)


_DELTA_MISTAKES = (
    (
        "decay after",
        "you decayed after writing: the rule lets the old state fade first, "
        "S' = gamma S, then predicts with S' and writes the correction undecayed",
    ),
    (
        "undecayed prediction",
        "predict the value with the decayed state, (gamma S)^T k: the "
        "correction is beta (v - (gamma S)^T k)",
    ),
    (
        "no correction",
        "that writes beta k v^T, linear attention's update: the delta rule "
        "writes the error, beta k (v - S'^T k)^T, with S' = gamma S",
    ),
    ("sign", "the error is v minus the prediction, v - S'^T k, not v + S'^T k"),
    (
        "no decay",
        "the state is not decayed: the gate gamma multiplies it first, S' = "
        "gamma S, before the prediction and the write",
    ),
    (
        "beta on the value",
        "beta multiplies the whole error, beta k (v - S'^T k)^T, not only the value",
    ),
    (
        "transposed read",
        "the state is (d_k, d_v): its prediction for a key k is S^T k "
        "(k @ S in code), a vector of size d_v",
    ),
)


def _delta_step_cases(seed):
    """(case, state (d_k, d_v), key (d_k,), value (d_v,), beta, gamma)."""
    sizes = [
        ("d_k 4, d_v 3, beta 0.5, gamma 0.9", 4, 3, 0.5, 0.9),
        ("d_k 3 = d_v 3, beta 0.8, gamma 0.7", 3, 3, 0.8, 0.7),
        ("no decay (gamma 1), beta 1", 5, 2, 1.0, 1.0),
        ("beta 0: nothing written", 2, 4, 0.0, 0.6),
        ("d_k 6 = d_v 6, beta 0.3, gamma 0.95", 6, 6, 0.3, 0.95),
    ]
    if seed:
        dims = zip(*(integers(seed, 4, 1, 9, 220 + k) for k in range(2)))
        gates = random((4, 2), seed, 222).sigmoid().tolist()
        sizes = [
            (f"random case {m}: d_k {k}, d_v {v}", k, v, round(b, 3), round(g, 3))
            for m, ((k, v), (b, g)) in enumerate(zip(dims, gates))
        ]
        sizes.append(("random square case", 4, 4, 0.7, 0.8))
    for number, (case, d_k, d_v, beta, gamma) in enumerate(sizes):
        state = random((d_k, d_v), seed, 230 + 3 * number)
        key = torch.nn.functional.normalize(random((d_k,), seed, 231 + 3 * number), dim=0)
        yield case, state, key, random((d_v,), seed, 232 + 3 * number), beta, gamma


@self_check
def check_gated_delta_step(fn, seed=0):
    """Check fn(state (d_k, d_v), key (d_k,), value (d_v,), beta, gamma) -> the new state
    (d_k, d_v) after one step of the gated delta rule: S' = gamma S, then
    S' + beta k (v - S'^T k)^T. beta and gamma are Python floats. Chapter 16, exercise 2."""
    cases = list(_delta_step_cases(seed))
    for case, state, key, value, beta, gamma in cases:
        expected = _delta_step_reference(state, key, value, beta, gamma)
        got = run(
            fn,
            (state.clone(), key.clone(), value.clone(), beta, gamma),
            case,
            forbidden=(linear.delta_rule,),
        )
        if isinstance(got, torch.Tensor) and got.shape == expected.shape[::-1] != expected.shape:
            raise CheckFailed(
                f"case '{case}': your state has shape {tuple(got.shape)}, "
                f"expected {tuple(expected.shape)} = (d_k, d_v): write "
                "k u^T (torch.outer(key, u)), not u k^T"
            )
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for mistake, hint in _DELTA_MISTAKES:
                wrong = _delta_step_reference(state, key, value, beta, gamma, mistake)
                if wrong is not None and (
                    torch.allclose(got.detach().double(), wrong, atol=1e-5)
                    and not torch.allclose(wrong, expected, atol=1e-5)
                ):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "new state", atol=1e-5)
    passed("your gated delta-rule step", len(cases))


def _convolution_reference(x, weight, held, mistake=None):
    """float64 SiLU of the causal depthwise convolution of x (n, C) with weight (C, w), continuing
    held (w - 1, C) -> (outputs (n, C), the last w - 1 inputs (w - 1, C)); or a typical mistake."""
    x, weight, held = x.double(), weight.double(), held.double()
    if mistake == "zeros":
        held = torch.zeros_like(held)
    if mistake == "flipped":
        weight = weight.flip(1)
    size = weight.shape[1]
    window = torch.cat([held, x])  # (w - 1 + n, C): inputs t - w + 1 .. t for output t
    summed = torch.stack([(weight.T * window[t : t + size]).sum(0) for t in range(len(x))]).reshape(
        len(x), -1
    )
    out = summed if mistake == "no silu" else torch.nn.functional.silu(summed)
    return out, window[len(window) - (size - 1) :]


_CONVOLUTION_MISTAKES = (
    (
        "zeros",
        "your first outputs ignore the held inputs: the cache carries the last w - 1 inputs of "
        "the previous tokens, and output t reads them where t - w + 1 < 0 (zeros only at the "
        "very start)",
    ),
    (
        "flipped",
        "your taps are reversed: weight[:, w - 1] multiplies the newest input (x_t), weight[:, 0] "
        "the oldest (PyTorch's conv1d slides the filter without flipping it)",
    ),
    ("no silu", "SiLU is missing: the layer applies SiLU to the convolution's output"),
)


def _convolution_cases(seed):
    """(case, x (n, C), weight (C, w), held (w - 1, C))."""
    sizes = [
        ("5 tokens, 3 channels, 4 taps", 5, 3, 4),
        ("1 token (decoding), 4 channels, 4 taps", 1, 4, 4),
        ("2 tokens, fewer than the 3 held, 2 channels", 2, 2, 4),
        ("7 tokens, 2 taps", 7, 3, 2),
    ]
    if seed:
        numbers = zip(*(integers(seed, 4, low, 8, 240 + k) for k, low in enumerate((1, 1, 2))))
        sizes = [
            (f"random case {m}: {n} tokens, {c} channels, {k} taps", n, c, k)
            for m, (n, c, k) in enumerate(numbers)
        ]
        sizes.append(("random short case: 1 token, 5 taps", 1, 3, 5))
    for number, (case, n, channels, size) in enumerate(sizes):
        yield (
            case,
            random((n, channels), seed, 250 + 3 * number),
            random((channels, size), seed, 251 + 3 * number),
            random((size - 1, channels), seed, 252 + 3 * number),
        )


def _close(got, wrong):
    return (
        isinstance(got, torch.Tensor)
        and got.shape == wrong.shape
        and torch.allclose(got.detach().cpu().double(), wrong, atol=1e-5)
    )


@self_check
def check_short_convolution(fn, seed=0):
    """Check fn(x (n, C), weight (C, w), held (w - 1, C)) -> (outputs (n, C), held (w - 1, C)):
    the short causal depthwise convolution of Gated DeltaNet, output t = SiLU(sum_i weight[:, i]
    * p_(t - w + 1 + i)) over the inputs p = [held; x], and the last w - 1 inputs, the cache for
    the next call. Chapter 16, exercise 5."""
    cases = list(_convolution_cases(seed))
    for case, x, weight, held in cases:
        expected, expected_held = _convolution_reference(x, weight, held)
        got = run(fn, (x.clone(), weight.clone(), held.clone()), case)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(
                f"case '{case}': return two tensors, (outputs (n, C), held (w - 1, C)), "
                f"got {type(got).__name__}"
            )
        out, new_held = got
        if len(x) > 1 and isinstance(out, torch.Tensor) and out.shape == expected.shape:
            changed = x.clone()
            changed[-1] += 1.0  # the last token changed: no earlier output may move
            again = run(fn, (changed, weight.clone(), held.clone()), case)[0]
            if not torch.allclose(
                again[:-1].detach().cpu().double(), out[:-1].detach().cpu().double(), atol=1e-9
            ):
                raise CheckFailed(
                    f"case '{case}': your convolution is not causal: changing the last token "
                    "changed earlier outputs; output t may read inputs t - w + 1 .. t only "
                    "(pad on the left, with the held inputs, never on the right)"
                )
        for mistake, hint in _CONVOLUTION_MISTAKES:
            wrong = _convolution_reference(x, weight, held, mistake)[0]
            if _close(out, wrong) and not torch.allclose(wrong, expected, atol=1e-5):
                raise CheckFailed(f"case '{case}': {hint}")
        compare(out, expected, case, "outputs", atol=1e-5)
        if _close(new_held, held.double()) and not torch.allclose(held.double(), expected_held):
            raise CheckFailed(
                f"case '{case}': the held inputs you return are the old ones: return the "
                "last w - 1 inputs of [held; x], the next call's left context"
            )
        compare(new_held, expected_held, case, "held inputs", atol=1e-12)
    passed("your short causal convolution and its cache", len(cases))


def _gated_norm_reference(out, gate, weight, eps, mistake=None):
    """float64 gated RMSNorm: weight * out / sqrt(mean(out^2) + eps) * SiLU(gate); or a mistake."""
    out, gate, weight = out.double(), gate.double(), weight.double()
    if mistake == "gate first":  # normalise the gated output (norm after the gate)
        out = out * torch.nn.functional.silu(gate)
    rms = torch.sqrt((out * out).mean(-1, keepdim=True) + eps)
    if mistake == "l2":
        rms = torch.sqrt((out * out).sum(-1, keepdim=True) + eps)
    normed = weight * out / rms
    if mistake in ("no gate", "gate first"):
        return normed
    if mistake == "sigmoid":
        return normed * torch.sigmoid(gate)
    if mistake == "no weight":
        return out / rms * torch.nn.functional.silu(gate)
    return normed * torch.nn.functional.silu(gate)


_GATED_NORM_MISTAKES = (
    (
        "no gate",
        "the output gate is forgotten: multiply the normalised output by SiLU(z), the gate",
    ),
    (
        "gate first",
        "you normalised the gated output: Gated DeltaNet normalises first, then multiplies by "
        "SiLU(z) (RMSNorm(o) * SiLU(z), norm before gate)",
    ),
    ("sigmoid", "the gate is SiLU(z) = z sigmoid(z), not sigmoid(z)"),
    ("l2", "divide by the root of the mean of the squares over d_v, not of their sum"),
    ("no weight", "the norm's learned weight (one per channel) is missing"),
)


def _gated_norm_cases(seed):
    """(case, out (n, d_v), gate (n, d_v), weight (d_v,), eps)."""
    sizes = [
        ("3 tokens, d_v 4", 3, 4, 1e-6),
        ("1 token, d_v 6", 1, 6, 1e-6),
        ("eps 0.5", 4, 2, 0.5),
    ]
    if seed:
        numbers = zip(*(integers(seed, 3, 1, 8, 260 + k) for k in range(2)))
        sizes = [
            (f"random case {m}: {n} tokens, d_v {d}", n, d, 1e-6)
            for m, (n, d) in enumerate(numbers)
        ]
    for number, (case, n, d_v, eps) in enumerate(sizes):
        yield (
            case,
            random((n, d_v), seed, 270 + 3 * number),
            random((n, d_v), seed, 271 + 3 * number),
            1 + 0.3 * random((d_v,), seed, 272 + 3 * number),
            eps,
        )


@self_check
def check_gated_rms_norm(fn, seed=0):
    """Check fn(out (n, d_v), gate (n, d_v), weight (d_v,), eps) -> (n, d_v): Gated DeltaNet's
    output norm, weight * out / sqrt(mean(out^2) + eps) * SiLU(gate), per token.
    Chapter 16, exercise 5."""
    cases = list(_gated_norm_cases(seed))
    for case, out, gate, weight, eps in cases:
        expected = _gated_norm_reference(out, gate, weight, eps)
        got = run(fn, (out.clone(), gate.clone(), weight.clone(), eps), case)
        for mistake, hint in _GATED_NORM_MISTAKES:
            wrong = _gated_norm_reference(out, gate, weight, eps, mistake)
            if _close(got, wrong) and not torch.allclose(wrong, expected, atol=1e-5):
                raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "normalised output", atol=1e-5)
    passed("your gated RMSNorm", len(cases))
