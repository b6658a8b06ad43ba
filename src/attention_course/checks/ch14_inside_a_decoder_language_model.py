"""Checks of chapter 14's exercises: undoing the GGUF converter's reordering of W_Q and W_K rows,
the targets of an induction head, the key-path patch's weights and direct logit attribution."""

import torch

from .. import rotary
from .core import CheckFailed, compare, generator, passed, random, run, self_check


def _converter_permute(weight, num_heads):
    """llama.cpp's convert_hf_to_gguf reordering of W_Q / W_K rows: half-split -> interleaved
    (within each head, row i of the first half and row i of the second half become rows
    2i and 2i + 1)."""
    rows, columns = weight.shape
    return (
        weight.reshape(num_heads, 2, rows // num_heads // 2, columns)
        .transpose(1, 2)
        .reshape(rows, columns)
    )


def _half_split_cases(seed):
    """(name, half-split weight, num_heads): the original rows the answer must recover."""
    shapes = [
        ("1 head of 8", 1, 8, 5),
        ("3 heads of 8", 3, 8, 6),
        ("9 heads of 64, as SmolLM2's W_Q", 9, 64, 7),
        ("2 heads of 2", 2, 2, 3),
    ]
    return [
        (name, random((heads * head_dim, columns), seed, number), heads)
        for number, (name, heads, head_dim, columns) in enumerate(shapes)
    ]


@self_check
def check_half_split_rows(fn, seed=0):
    """Check fn(weight (num_heads * head_dim, in), num_heads) -> the same rows in the
    half-split order: the inverse of the GGUF converter's reordering of W_Q and W_K.
    Chapter 14, exercise 1."""
    cases = _half_split_cases(seed)
    for case, original, heads in cases:
        gguf_rows = _converter_permute(original, heads)
        got = run(fn, (gguf_rows, heads), case, forbidden=(rotary.interleaved_to_half_split,))
        if isinstance(got, torch.Tensor) and got.shape == original.shape:
            if torch.equal(got, _converter_permute(gguf_rows, heads)) and not torch.equal(
                got, original
            ):
                raise CheckFailed(
                    f"case '{case}': you applied the converter's reordering "
                    "again; undo it: rows 2i and 2i + 1 of each head go back "
                    "to rows i and i + head_dim / 2"
                )
            whole = gguf_rows.reshape(1, -1, 2, gguf_rows.shape[1]).transpose(1, 2)
            if heads > 1 and torch.equal(got, whole.reshape(gguf_rows.shape)):
                raise CheckFailed(
                    f"case '{case}': you reordered the rows of all heads "
                    "together; each head's rows are reordered on their own "
                    "(reshape to (num_heads, head_dim // 2, 2, in) first)"
                )
        compare(got, original, case, "rows", atol=0)
    passed("your reordering of W_Q and W_K rows", len(cases))


def _induction_target_cases(seed):
    """(name, ids (L,)): token sequences with repeats, so that targets exist."""
    rng = generator(seed)
    return [
        ("12 tokens from 4", torch.randint(0, 4, (12,), generator=rng)),
        ("30 tokens from 6", torch.randint(0, 6, (30,), generator=rng)),
        ("9 tokens repeated once", torch.randperm(9, generator=rng).repeat(2)),
    ]


def _targets_by_loops(ids, shift):
    """Bool (L, L): key s with ids[s - shift] == ids[t], shift <= s <= t."""
    length = len(ids)
    targets = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for s in range(shift, t + 1):
            targets[t, s] = bool(ids[s - shift] == ids[t])
    return targets


def _induction_slips(ids):
    """(wrong targets, hint) of the usual slips: the key before the occurrence,
    key s = t left out, key 0 marked by a roll that wraps round."""
    expected = _targets_by_loops(ids, shift=1)
    before = torch.zeros_like(expected)
    before[:, :-1] = ids[None, 1:] == ids[:, None]  # ids[s + 1] == ids[t]
    wrapped = (ids.roll(1)[None, :] == ids[:, None]) & torch.ones_like(expected).tril()
    return [
        (
            before & torch.ones_like(expected).tril(-1),
            "you marked the key before the earlier occurrence, ids[s + 1] == "
            "ids[t]; an induction head looks at the key after it, ids[s - 1] "
            "== ids[t]",
        ),
        (
            expected & torch.ones_like(expected).tril(-1),
            "you left out key s = t: when ids[t - 1] == ids[t] the query's own "
            "key follows the earlier occurrence, so 1 <= s <= t, not s < t",
        ),
        (
            wrapped,
            "key 0 follows no token, but your shift wraps round (torch.roll "
            "compares key 0 with the last token): key 0 is never a target",
        ),
    ]


@self_check
def check_induction_targets(fn, seed=0):
    """Check fn(ids (L,)) -> bool (L, L), True where key s follows an earlier occurrence of
    query t's token: ids[s - 1] == ids[t], 1 <= s <= t (an induction head's targets).
    Chapter 14, exercise 2."""
    cases = _induction_target_cases(seed)
    for case, ids in cases:
        expected = _targets_by_loops(ids, shift=1)
        got = run(fn, (ids.clone(),), case)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if got.dtype != torch.bool:
                raise CheckFailed(f"case '{case}': return a bool matrix, got {got.dtype}")
            if torch.equal(
                got, _targets_by_loops(ids, shift=0) & ~torch.eye(len(ids), dtype=torch.bool)
            ):
                raise CheckFailed(
                    f"case '{case}': you marked the earlier occurrence of the "
                    "token itself (a duplicate-token head's target); an "
                    "induction head looks at the key after it, s with "
                    "ids[s - 1] == ids[t]"
                )
            for wrong, hint in _induction_slips(ids):
                if torch.equal(got, wrong) and not torch.equal(wrong, expected):
                    raise CheckFailed(f"case '{case}': {hint}")
            if (got & ~torch.ones_like(got).tril()).any():
                raise CheckFailed(
                    f"case '{case}': a key after its query is marked; a decoder "
                    "query t sees only keys s <= t"
                )
        compare(
            got.to(torch.int64) if isinstance(got, torch.Tensor) else got,
            expected.to(torch.int64),
            case,
            "targets",
            atol=0,
        )
    passed("your induction targets", len(cases))


def _rope_by_formula(x, base):
    """Half-split RoPE of x (L, d) at positions 0 .. L-1, pair (i, i + d/2) turned by t theta_i,
    theta_i = base^(-2i/d): the formula written out, in float64."""
    length, dim = x.shape
    half = dim // 2
    theta = base ** (-torch.arange(half, dtype=torch.float64) * 2 / dim)  # (d/2,)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * theta  # (L, d/2)
    first, second = x[:, :half], x[:, half:]
    return torch.cat(
        [
            first * angles.cos() - second * angles.sin(),
            first * angles.sin() + second * angles.cos(),
        ],
        dim=1,
    )


def _patched_weights_by_formula(
    x,
    source,
    w_q,
    w_k,
    base,
    queries_from_x=True,
    rotate_keys=True,
    rotate_queries=True,
    causal=True,
    scaled=True,
):
    """softmax over keys s <= t of q_t . k_s / sqrt(d): q from x, k from source (and the slips)."""
    q = (x if queries_from_x else source) @ w_q.T
    q = _rope_by_formula(q, base) if rotate_queries else q
    k = (source if queries_from_x else x) @ w_k.T
    k = _rope_by_formula(k, base) if rotate_keys else k
    scores = q @ k.T / (q.shape[1] ** 0.5 if scaled else 1.0)
    if causal:
        upper = torch.ones_like(scores, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(upper, float("-inf"))
    return scores.softmax(dim=-1)


def _patched_cases(seed):
    """(name, x, source, w_q, w_k, base): one head's streams and projections, float64."""
    shapes = [
        ("6 tokens, width 8, d_h 4", 6, 8, 4, 10000.0),
        ("9 tokens, width 12, d_h 6", 9, 12, 6, 100.0),
        ("1 token", 1, 4, 2, 10000.0),
    ]
    cases = []
    for number, (name, length, width, dim, base) in enumerate(shapes):
        x, source = (random((length, width), seed, 10 * number + k).double() for k in (0, 1))
        w_q, w_k = (random((dim, width), seed, 10 * number + k).double() for k in (2, 3))
        cases.append((name, x, source, w_q, w_k, base))
    return cases


@self_check
def check_key_patched_weights(fn, seed=0):
    """Check fn(x (L, D), source (L, D), w_q (d, D), w_k (d, D), base) -> (L, L): one head's
    causal attention weights with queries RoPE(x W_Q^T) and keys RoPE(source W_K^T) (half-split
    RoPE at positions 0 .. L-1), scaled by 1/sqrt(d): the key-path patch, exercise 6.
    Chapter 14."""
    cases = _patched_cases(seed)
    for case, x, source, w_q, w_k, base in cases:
        expected = _patched_weights_by_formula(x, source, w_q, w_k, base)
        got = run(fn, (x.clone(), source.clone(), w_q, w_k, base), case)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and len(x) > 1:
            slips = [
                (
                    dict(queries_from_x=False),
                    "your queries come from source and your keys from "
                    "x; the patch is the other way round: keys from source, queries from x",
                ),
                (
                    dict(rotate_keys=False),
                    "your keys are not rotated: RoPE turns keys as well as "
                    "queries, by their own positions",
                ),
                (
                    dict(rotate_keys=False, rotate_queries=False),
                    "your queries and keys are not rotated: RoPE turns both by their positions",
                ),
                (
                    dict(causal=False),
                    "a query sees keys after it: mask keys s > t before the softmax",
                ),
                (dict(scaled=False), "scale the scores by 1 / sqrt(d), d the head size"),
            ]
            for options, hint in slips:
                wrong = _patched_weights_by_formula(x, source, w_q, w_k, base, **options)
                if torch.allclose(got.double(), wrong, atol=1e-8) and not torch.allclose(
                    wrong, expected, atol=1e-8
                ):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "weights", atol=1e-8)
    passed("your key-patched attention weights", len(cases))


def _attribution_by_loop(write, final, gain, unembedding, eps, own_norm=False, with_gain=True):
    """(L, V): for each position, the write scaled as the final RMSNorm scales the stream,
    dotted with each token's unembedding row (and the slips)."""
    out = torch.empty(write.shape[0], unembedding.shape[0], dtype=torch.float64)
    for t in range(write.shape[0]):
        stream = write[t] if own_norm else final[t]
        rms = (stream.pow(2).mean() + eps).sqrt()
        scaled = write[t] * (gain if with_gain else 1.0) / rms
        for token in range(unembedding.shape[0]):
            out[t, token] = (unembedding[token] * scaled).sum()
    return out


def _attribution_cases(seed):
    """(name, write (n, d_model), final (n, d_model), gain (d_model,), unembedding (n_vocab,
    d_model), eps), float64."""
    shapes = [
        ("5 positions, width 8, 11 tokens", 5, 8, 11, 1e-5),
        ("3 positions, width 6, 20 tokens", 3, 6, 20, 1e-6),
    ]
    cases = []
    for number, (name, length, width, vocab, eps) in enumerate(shapes):
        write, final = (random((length, width), seed, 10 * number + k).double() for k in (4, 5))
        final = 3 * final  # the whole stream is larger than one head's write
        gain = 1 + random((width,), seed, 10 * number + 6).double().abs()
        unembedding = random((vocab, width), seed, 10 * number + 7).double()
        cases.append((name, write, final, gain, unembedding, eps))
    return cases


@self_check
def check_logit_attribution(fn, seed=0):
    """Check fn(write (n, d_model), final_residual (n, d_model), gain (d_model,), unembedding
    (n_vocab, d_model), eps) -> (n, n_vocab): the direct logit attribution of a write, the
    final RMSNorm linearised at the actual stream (gamma * write / rms(final_residual), then the
    unembedding). Chapter 14, exercise 7."""
    cases = _attribution_cases(seed)
    for case, write, final, gain, unembedding, eps in cases:
        expected = _attribution_by_loop(write, final, gain, unembedding, eps)
        got = run(fn, (write.clone(), final.clone(), gain, unembedding, eps), case)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            slips = [
                (
                    dict(own_norm=True),
                    "you normalised the write by its own root mean square; "
                    "the final norm divides by the whole stream's, final_residual's",
                ),
                (dict(with_gain=False), "you left out the norm's scale g (gain)"),
            ]
            for options, hint in slips:
                wrong = _attribution_by_loop(write, final, gain, unembedding, eps, **options)
                if torch.allclose(got.double(), wrong, atol=1e-8):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "attribution", atol=1e-8)
    passed("your direct logit attribution", len(cases))


def _streaming_positions_by_loop(t, window, sinks, wide=0, with_sinks=True, once=True):
    """(text positions, cache positions) of the keys query t reads, one token at a time:
    the first `sinks` tokens and the last `window` (t among them), each once, numbered
    0, 1, ... inside the cache. The options make the usual slips."""
    firsts = list(range(min(sinks, t + 1))) if with_sinks else []
    recent = list(range(max(0, t - window + 1 - wide), t + 1))
    text = firsts + [s for s in recent if s not in firsts] if once else firsts + recent
    return torch.tensor(text), torch.arange(len(text))


def _streaming_cases(seed):
    """(name, t, window, sinks): before, at and past the window's filling; with no sinks."""
    rng = generator(seed)
    t, window, sinks = (
        int(torch.randint(low, high, (1,), generator=rng))
        for low, high in ((40, 200), (3, 20), (1, 5))
    )
    return [
        ("t = 3, window 4, 2 sinks", 3, 4, 2),
        ("t = 5, window 4, 2 sinks", 5, 4, 2),
        ("t = 20, window 4, 2 sinks", 20, 4, 2),
        ("t = 20, window 6, no sinks", 20, 6, 0),
        ("t = 10, window 1, 1 sink", 10, 1, 1),
        (f"t = {t}, window {window}, {sinks} sinks", t, window, sinks),
    ]


def _same_positions(got, expected):
    """Whether got is a tensor of expected's shape and values."""
    return (
        isinstance(got, torch.Tensor) and got.shape == expected.shape and torch.equal(got, expected)
    )


@self_check
def check_streaming_positions(fn, seed=0):
    """Check fn(t, window, sinks) -> (text positions (n,), cache positions (n,)): the keys a
    query at text position t reads through a StreamingLLM cache fed one token at a time (the
    first `sinks` tokens and the last `window`, t included, each once, in order) and their
    positions inside the cache, 0, ..., n - 1. Chapter 14, exercise 8."""
    cases = _streaming_cases(seed)
    for case, t, window, sinks in cases:
        text, inside = _streaming_positions_by_loop(t, window, sinks)
        got = run(fn, (t, window, sinks), case)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(
                f"case '{case}': return a tuple (text positions, cache positions), "
                f"got {type(got).__name__}"
            )
        got_text, got_inside = (
            g.to(torch.int64) if isinstance(g, torch.Tensor) else g for g in got
        )
        slips = [
            (
                dict(wide=1),
                "your window holds window + 1 keys: it holds the query's own token and "
                "the window - 1 before it",
            ),
            (
                dict(with_sinks=False),
                "you left out the sinks: the first `sinks` tokens stay in the cache whatever t is",
            ),
            (
                dict(once=False),
                "a token that is both a sink and in the window is held once: count it once",
            ),
        ]
        for options, hint in slips:
            wrong, _ = _streaming_positions_by_loop(t, window, sinks, **options)
            if _same_positions(got_text, wrong) and not _same_positions(wrong, text):
                raise CheckFailed(f"case '{case}': {hint}")
        compare(got_text, text, case, "text positions", atol=0)
        if _same_positions(got_inside, text) and not _same_positions(text, inside):
            raise CheckFailed(
                f"case '{case}': those are the text's positions again; inside the cache "
                "the keys are numbered 0, 1, ..., n - 1 in order, sinks first, so the "
                "query (the last key) sits at n - 1"
            )
        compare(got_inside, inside, case, "cache positions", atol=0)
    passed("your StreamingLLM positions", len(cases))
