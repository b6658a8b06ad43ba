"""Check of chapter 17's exercise on gated attention: one causal attention layer with
Qwen3-Next's sigmoid output gate, from its projection weights."""

import torch

from .. import sinks as sink_module
from .core import CheckFailed, compare, integers, passed, random, run, self_check


def _split(x, q_weight, heads):
    """Each head's query and gate logits (heads, n, d_h) from q_proj, whose rows hold, head
    by head, the d_h query rows then the d_h gate rows (transformers' Qwen3NextAttention)."""
    n = x.shape[0]
    both = (x @ q_weight.T).view(n, heads, -1).transpose(0, 1)  # (H, n, 2 d_h)
    return both.chunk(2, dim=-1)


def _heads(x, weight, heads):
    """(n, d_model) @ weight.T split into (heads, n, d_h)."""
    return (x @ weight.T).view(x.shape[0], heads, -1).transpose(0, 1)


def _merged(output):
    """(heads, n, d_h) -> (n, heads * d_h), head by head."""
    return output.transpose(0, 1).reshape(output.shape[1], -1)


def _read(x, query, weights_k, weights_v, heads, scaled=True):
    """Each head's causal softmax read, before any gate: (heads, n, d_h); scores times
    1/sqrt(d_h) unless `scaled` is False."""
    key, value = _heads(x, weights_k, heads), _heads(x, weights_v, heads)
    scores = query @ key.transpose(-2, -1)
    if scaled:
        scores = scores / query.shape[-1] ** 0.5
    causal = torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1) @ value


def _reference(x, q_weight, k_weight, v_weight, o_weight, heads):
    """float64, by the package's gated_attention."""
    x, q_weight, k_weight, v_weight, o_weight = (
        t.double() for t in (x, q_weight, k_weight, v_weight, o_weight)
    )
    query, gate = _split(x, q_weight, heads)
    key, value = _heads(x, k_weight, heads), _heads(x, v_weight, heads)
    output, _ = sink_module.gated_attention(
        query[None], key[None], value[None], gate[None], is_causal=True
    )
    return _merged(output[0]) @ o_weight.T


def _gated_mistakes(x, q_weight, k_weight, v_weight, o_weight, heads):
    """(what a typical slip returns, why it is wrong), in float64."""
    x, q_weight, k_weight, v_weight, o_weight = (
        t.double() for t in (x, q_weight, k_weight, v_weight, o_weight)
    )
    query, gate = _split(x, q_weight, heads)
    read = _read(x, query, k_weight, v_weight, heads)  # (H, n, d_h)
    sig = torch.sigmoid(gate)
    # queries and gates as the two halves of the whole projection
    first, second = (x @ q_weight.T).chunk(2, dim=-1)  # (n, H d_h) each
    halves_query = first.view(x.shape[0], heads, -1).transpose(0, 1)
    halves = _read(x, halves_query, k_weight, v_weight, heads) * torch.sigmoid(
        second.view(x.shape[0], heads, -1).transpose(0, 1)
    )
    mistakes = [
        (
            _merged(read * gate) @ o_weight.T,
            "the gate multiplies the output by sigmoid(g), not by g: without the sigmoid "
            "it is not between 0 and 1 and can flip the output's sign",
        ),
        (
            _merged(read) @ o_weight.T,
            "the head's output is not gated: multiply it, element by element, by "
            "sigmoid(g), the second half of each head's rows of q_proj",
        ),
        (
            _merged(read * (1 - torch.sigmoid(gate))) @ o_weight.T,
            "the gate is sigmoid(g), not 1 - sigmoid(g) = sigmoid(-g)",
        ),
        (
            _merged(_read(x, query, k_weight, v_weight, heads, scaled=False) * sig) @ o_weight.T,
            "the scores are not scaled: divide them by sqrt(d_h), with d_h = "
            "q_weight.shape[0] // (2 * heads), before the softmax",
        ),
        (
            _merged(_read(x, gate, k_weight, v_weight, heads) * torch.sigmoid(query)) @ o_weight.T,
            "query and gate are swapped: within each head's 2 d_h rows of q_proj the "
            "first d_h make the query, the last d_h the gate logits",
        ),
        (
            _merged(halves) @ o_weight.T,
            "q_proj's rows hold, head by head, that head's d_h query rows then its d_h gate "
            "rows: split its output per head, (n, heads, 2 d_h), then in two, not the whole "
            "width in two halves",
        ),
    ]
    if o_weight.shape[0] == o_weight.shape[1]:
        merged_gate = _merged(gate)  # (n, H d_h), only meets o_proj's output if square
        mistakes.append(
            (
                (_merged(read) @ o_weight.T) * torch.sigmoid(merged_gate),
                "the gate acts on the heads' outputs BEFORE o_proj, where each element "
                "belongs to one head: Qwen3-Next gates the merged heads, then projects",
            )
        )
    return mistakes


def _gated_cases(seed):
    """(case, x (n, d_model), q_weight (2 H d_h, d_model), k_weight, v_weight (H d_h,
    d_model), o_weight (d_model, H d_h), heads); the first has d_model = H d_h, where a gate
    after o_proj still has the right shape."""
    sizes = [(5, 8, 2, 4), (6, 6, 3, 3), (4, 10, 2, 6)]  # (n, d_model, heads, d_h)
    if seed:
        heads, d_h = integers(seed, 3, 1, 4, 700), integers(seed, 3, 2, 6, 701)
        lengths, widths = integers(seed, 3, 2, 8, 702), integers(seed, 3, 3, 12, 703)
        sizes = [(lengths[0], heads[0] * d_h[0], heads[0], d_h[0])] + list(
            zip(lengths[1:], widths[1:], heads[1:], d_h[1:])
        )
    names = ["d_model = heads * d_h", "random", "large gate logits"]
    for number, (name, (n, d_model, heads, d_h)) in enumerate(zip(names, sizes)):
        weights = [
            random(shape, seed, 710 + 5 * number + i) / d_model**0.5
            for i, shape in enumerate(
                [(2 * heads * d_h, d_model), (heads * d_h, d_model), (heads * d_h, d_model)]
            )
        ]
        o_weight = random((d_model, heads * d_h), seed, 713 + 5 * number) / d_model**0.5
        x = random((n, d_model), seed, 714 + 5 * number)
        if number == 2:
            weights[0] = weights[0] * 4
        yield (
            f"{name}: {n} tokens, d_model {d_model}, {heads} heads of {d_h}",
            x,
            *weights,
            o_weight,
            heads,
        )


@self_check
def check_gated_attention(fn, seed=0):
    """Check fn(x (n, d_model), q_weight (2 H d_h, d_model), k_weight (H d_h, d_model),
    v_weight (H d_h, d_model), o_weight (d_model, H d_h), heads) -> (n, d_model): causal
    attention whose heads' outputs are multiplied, element by element, by sigmoid of the gate
    logits that q_proj makes beside each head's query (each head's 2 d_h rows: query, then
    gate), merged and projected by o_proj, as Qwen3-Next's full-attention layers.
    Chapter 17, exercise 7."""
    cases = list(_gated_cases(seed))
    for case, *args in cases:
        expected = _reference(*args)
        got = run(
            fn,
            tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args),
            case,
            forbidden=(sink_module.gated_attention,),
        )
        if (
            isinstance(got, torch.Tensor)
            and got.shape == expected.shape
            and torch.isfinite(got).all()
        ):
            for wrong, hint in _gated_mistakes(*args):
                if torch.allclose(got.detach().double(), wrong, atol=1e-5) and not torch.allclose(
                    wrong, expected, atol=1e-5
                ):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "output", atol=1e-5)
    passed("your gated attention layer", len(cases))
