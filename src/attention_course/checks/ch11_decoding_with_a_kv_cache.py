"""Checks of chapter 11's exercises: the sliding-window mask and cache update (exercise 1), and
greedy generation with a KV cache wired by hand (exercise 2), run on small random TinyDecoders
whose forward passes are tripwires, counting the tokens each cache receives."""

import contextlib
import copy as copy_module
import math

import torch

from .. import decoding, masking, rotary
from .core import (
    CheckFailed,
    compare,
    generator,
    integers,
    passed,
    random,
    run,
    self_check,
    tripwire,
)


def _window_cases(seed):
    """(case, query positions, key positions, window) for the sliding-window
    checks: a decoding step, a chunk of new queries, a window wider than the
    sequence, and keys left after older ones were evicted."""
    cases = [
        ("one new token at position 9, window 4", [9], range(10), 4),
        ("a chunk of 4 new tokens, window 3", range(6, 10), range(10), 3),
        ("window 100 wider than the sequence", range(3, 7), range(7), 100),
        ("keys 5..10 left in the cache, window 5", [10], range(5, 11), 5),
    ]
    if seed:
        lengths = integers(seed, 3, 2, 12, 110)
        windows = integers(seed, 3, 1, 8, 111)
        cases = [
            (f"random case {n}: {m} tokens, window {w}", range(m - 1 - n, m), range(m), w)
            for n, (m, w) in enumerate(zip(lengths, windows))
            if m > n
        ]
    for case, queries, keys, window in cases:
        yield case, torch.tensor(list(queries)), torch.tensor(list(keys)), window


def _window_by_loops(queries, keys, window, inclusive=False, itself=True):
    reach = window + 1 if inclusive else window  # keys t - reach < s <= t
    last = 0 if itself else 1  # itself=False: keys t - reach < s < t
    return torch.tensor(
        [[t - reach < s <= t - last for s in keys.tolist()] for t in queries.tolist()]
    )


@self_check
def check_sliding_window_mask(fn, seed=0):
    """Check fn(query_positions (L,), key_positions (S,), window) -> bool (L, S):
    True where the query at position t may attend to the key at position s,
    that is t - window < s <= t (the token itself and the window - 1 before it).
    Chapter 11, exercise 1 (a)."""
    n_cases = 0
    for case, queries, keys, window in _window_cases(seed):
        expected = _window_by_loops(queries, keys, window)
        got = run(fn, (queries, keys, window), case, forbidden=(masking.decoding_mask,))
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            raise CheckFailed(
                f"case '{case}': your mask has dtype {got.dtype}; "
                "use torch.bool (True = may attend)"
            )
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            hints = [
                (~expected, "your mask is inverted: True must mean 'may attend'"),
                (
                    _window_by_loops(queries, keys, window, inclusive=True),
                    "your window lets a query see window + 1 keys; with "
                    "window W it sees itself and the W - 1 keys before it",
                ),
                (
                    torch.ones(len(queries), len(keys), dtype=torch.bool).tril(),
                    "your mask is aligned top-left by index; compare "
                    "positions instead (new queries come after the cache)",
                ),
                (
                    _window_by_loops(queries, keys, window, itself=False),
                    "a query may not see itself in your mask: the window "
                    "holds the token itself and the window - 1 before it, "
                    "t - window < s <= t",
                ),
                (
                    _window_by_loops(queries, keys, window, inclusive=True, itself=False),
                    "your window is shifted by one, t - window <= s < t: the "
                    "token itself is in it, and key t - window is not",
                ),
            ]
            for wrong, hint in hints:
                if torch.equal(got, wrong) and not torch.equal(wrong, expected):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(
            got.float() if isinstance(got, torch.Tensor) else got, expected.float(), case, "mask"
        )
        n_cases += 1
    passed("your sliding-window mask", n_cases)


def _cache_cases(seed):
    """(case, held keys, new keys, window) for check_cache_append."""
    shapes = [
        ("empty cache, a prompt of 5, no window", 0, 5, None),
        ("4 held, 1 new, window 3", 4, 1, 3),
        ("2 held, 3 new, window 4", 2, 3, 4),
        ("6 held, 1 new, window 10", 6, 1, 10),
    ]
    if seed:
        held = integers(seed, 3, 0, 8, 120)
        new = integers(seed, 3, 1, 5, 121)
        windows = integers(seed, 3, 1, 7, 122)
        shapes = [
            (f"random case {n}", h, t, w) for n, (h, t, w) in enumerate(zip(held, new, windows))
        ]
    for number, (case, held, new, window) in enumerate(shapes):
        keys = random((2, 3, held + new, 4), seed, 130 + number)
        yield case, keys[:, :, :held], keys[:, :, held:], window


@self_check
def check_cache_append(fn, seed=0):
    """Check fn(held (batch, kv_heads, n, d), new (batch, kv_heads, t, d),
    window) -> (attend_to, kept): attend_to is held followed by new along the
    token axis; kept is attend_to's last `window` tokens (all when window is
    None). Chapter 11, exercise 1 (b)."""
    n_cases = 0
    for case, held, new, window in _cache_cases(seed):
        tokens = [held[:, :, i] for i in range(held.shape[2])]
        tokens += [new[:, :, i] for i in range(new.shape[2])]
        expected_all = torch.stack(tokens, dim=2)  # token by token
        start = 0 if window is None else max(0, len(tokens) - window)
        expected_kept = torch.stack(tokens[start:], dim=2)
        got = run(fn, (held.clone(), new.clone(), window), case)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"case '{case}': return two tensors, (attend_to, kept)")
        attend_to, kept = got
        if (
            window is not None
            and window < new.shape[3]
            and isinstance(kept, torch.Tensor)
            and torch.equal(kept, expected_all[..., -window:])
        ):
            raise CheckFailed(
                f"case '{case}': you kept the last window entries of the "
                "head dimension (the last axis); the tokens are on axis 2: "
                "attend_to[:, :, -window:]"
            )
        if (
            isinstance(attend_to, torch.Tensor)
            and attend_to.shape == expected_kept.shape
            and expected_kept.shape != expected_all.shape
        ):
            raise CheckFailed(
                f"case '{case}': attend_to holds only the last "
                "window tokens; the new queries must see every "
                "held key and the new ones before anything is "
                "dropped"
            )
        if (
            isinstance(kept, torch.Tensor)
            and kept.shape == expected_kept.shape
            and window is not None
            and window < len(tokens)
            and torch.equal(kept, expected_all[:, :, :window])
        ):
            raise CheckFailed(
                f"case '{case}': you kept the first window "
                "tokens; a sliding window keeps the last ones"
            )
        compare(attend_to, expected_all, case, "attend_to")
        compare(kept, expected_kept, case, "kept")
        n_cases += 1
    passed("your cache update", n_cases)


# exercise 2: generation with a cache, wired by hand -------------------------

_CHECK_BASE = 500.0  # not apply_rotary's default, so a forgotten base shows

_MASK_HINTS = {
    "top-left": "your mask is aligned top-left (is_causal=True, or tril() "
    "without an offset): L new queries after S - L cached keys "
    "sit at positions S - L ... S - 1, so query i may see keys "
    "0 ... S - L + i; use the bottom-right mask, torch.ones(L, S, "
    "dtype=torch.bool).tril(S - L)",
    "none": "the prompt's queries see keys after them: a prompt (or a chunk "
    "of it) needs the causal mask, bottom-right aligned after the "
    "cache, torch.ones(L, S, dtype=torch.bool).tril(S - L)",
}
_POSITIONS_HINT = (
    "the RoPE positions restart at 0 at every step (or chunk): "
    "the new tokens continue the text, so their positions are "
    "cache.seen, cache.seen + 1, ... (read before the update)"
)
_BASE_HINT = (
    "you rotate with apply_rotary's default base 10000, not the block's: "
    "pass base=block.base (SmolLM2's is 100000, and these models' "
    f"{_CHECK_BASE:g})"
)
_REPEAT_HINT = (
    "your query heads read the wrong key-value heads: .repeat(group, 1) "
    "cycles the heads (0, 1, 0, 1), but query heads 0 ... group - 1 share "
    "key-value head 0; use repeat_interleave(group, dim=1), or "
    "enable_gqa=True"
)
_ROTATED_AGAIN_HINT = (
    "the cached keys are rotated a second time: rotate each key once, at "
    "its own position, before cache.update, and use the keys that update "
    "returns as they are"
)
_SCALE_HINT = (
    "your scores are not divided by sqrt(d_h), the head dimension: softmax(q k^T / sqrt(d_h))"
)
_REFEED_HINT = (
    "the prompt's last token is read again after the prefill, so "
    "its key and value are appended twice: after the prefill, "
    "read only the newly generated token"
)


def _generation_mask(mode, n_new, n_all, positions, cache):
    """Bool (L, S) by one of the ways a learner may build it."""
    ones = torch.ones(n_new, n_all, dtype=torch.bool)
    if mode == "bottom-right":
        return ones.tril(n_all - n_new)
    if mode == "positions":
        return masking.decoding_mask(positions, cache.key_positions)
    if mode == "top-left" or (mode == "top-left-prefill" and n_new > 1):
        return ones.tril()
    return ones  # "none", or one token without a mask


def _layer_by_hand(block, x, positions, cache, mask_mode, slip=None):
    """One pre-norm block on new tokens x (batch, L, d) at positions (L,);
    slip: "default base", "repeat" (GQA heads cycled), "rotated again" (the
    cached keys rotated once more after the update) or "no scale"."""
    layer, h = block.attention, block.attention_norm(x)
    q = layer.q_proj(h).unflatten(-1, (layer.num_heads, -1)).transpose(1, 2)
    k = layer.k_proj(h).unflatten(-1, (layer.num_kv_heads, -1)).transpose(1, 2)
    v = layer.v_proj(h).unflatten(-1, (layer.num_kv_heads, -1)).transpose(1, 2)
    base = 10000.0 if slip == "default base" else block.base
    q = rotary.apply_rotary(q, positions, base)  # (batch, H, L, d_h)
    k, v = cache.update(rotary.apply_rotary(k, positions, base), v)
    if slip == "rotated again":  # every held key turned once more
        k = rotary.apply_rotary(k, torch.arange(k.shape[2]), base)
    group = layer.num_heads // layer.num_kv_heads
    if slip == "repeat":
        k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
    else:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = _generation_mask(mask_mode, q.shape[2], k.shape[2], positions, cache)
    scale = 1 if slip == "no scale" else math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1) / scale).masked_fill(~mask, -math.inf)  # (batch, H, L, S)
    heads = torch.softmax(scores, -1) @ v
    x = x + layer.out_proj(heads.transpose(1, 2).flatten(2))
    h = block.mlp_norm(x)
    return x + block.down_proj(torch.nn.functional.silu(block.gate_proj(h)) * block.up_proj(h))


@torch.no_grad()
def _generate_by_hand(
    model,
    ids,
    max_new_tokens,
    chunk,
    positions="absolute",
    mask="bottom-right",
    refeed=False,
    slip=None,
):
    """Cached greedy decoding, right (the defaults) or with one of the usual
    slips: positions "restart" at 0 on every call, a mask aligned "top-left"
    (always, or "top-left-prefill": only on chunks of several tokens) or
    "none", the prompt's last token read again after the prefill (refeed),
    or one of _layer_by_hand's slips."""
    caches = [decoding.KVCache() for _ in model.blocks]

    def read(new):  # (batch, L) -> last logits
        start = 0 if positions == "restart" else caches[0].seen
        where = torch.arange(start, start + new.shape[1])
        x = model.embed(new)
        for block, cache in zip(model.blocks, caches):
            x = _layer_by_hand(block, x, where, cache, mask, slip)
        return model.lm_head(model.norm(x[:, -1]))  # (batch, vocab)

    step = chunk or ids.shape[1]
    for start in range(0, ids.shape[1], step):
        logits = read(ids[:, start : start + step])
    tokens = ids
    for number in range(max_new_tokens):
        if refeed:  # read the last token, generated or not
            logits = read(tokens[:, -1:])
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        if not refeed and number < max_new_tokens - 1:
            logits = read(tokens[:, -1:])
    return tokens


# single causes first: on one new token the top-left mask (is_causal=True)
# and restarted positions with a mask from them both show only key 0, and the
# softmax of one key is 1 whatever its rotation, so both give the same tokens
_GENERATION_SLIPS = [
    (dict(mask="top-left-prefill"), [_MASK_HINTS["top-left"]]),
    (dict(mask="top-left"), [_MASK_HINTS["top-left"]]),
    (dict(mask="none"), [_MASK_HINTS["none"]]),
    (dict(positions="restart"), [_POSITIONS_HINT]),
    (dict(slip="default base"), [_BASE_HINT]),
    (dict(slip="repeat"), [_REPEAT_HINT]),
    (dict(slip="rotated again"), [_ROTATED_AGAIN_HINT]),
    (dict(slip="no scale"), [_SCALE_HINT]),
    (dict(refeed=True), [_REFEED_HINT]),
    (dict(positions="restart", mask="positions"), [_POSITIONS_HINT]),
    (
        dict(positions="restart", mask="top-left-prefill"),
        [_POSITIONS_HINT, _MASK_HINTS["top-left"]],
    ),
    (dict(positions="restart", mask="top-left"), [_POSITIONS_HINT, _MASK_HINTS["top-left"]]),
]


def _generation_cases(seed):
    """(case, model, ids (batch, P), max_new_tokens, chunk): small random
    float64 TinyDecoders (multi-head, grouped-query, multi-query) whose RoPE
    base is not apply_rotary's default."""
    shapes = [
        ("a prompt of 6 tokens, 8 new, 4 heads sharing 2 KV heads", 1, 6, 8, None, 2),
        ("a one-token prompt, 10 new, multi-head", 1, 1, 10, None, 4),
        ("a prompt of 9 tokens in chunks of 4, 6 new, multi-query", 1, 9, 6, 4, 1),
        ("2 prompts of 7 tokens in chunks of 3, 5 new", 2, 7, 5, 3, 2),
    ]
    if seed:
        lengths = integers(seed, 4, 5, 13, 160)
        new = integers(seed, 4, 3, 11, 161)
        chunks = integers(seed, 4, 2, 5, 162)
        shapes = [
            (
                f"random case {n}: {1 + n % 2} prompt(s) of {p} tokens"
                + (f" in chunks of {c}" if n % 2 else "")
                + f", {t} new",
                1 + n % 2,
                p,
                t,
                c if n % 2 else None,
                (4, 2, 1, 2)[n],
            )
            for n, (p, t, c) in enumerate(zip(lengths, new, chunks))
        ]
    for number, (case, batch, prompt, new, chunk, kv_heads) in enumerate(shapes):
        with torch.random.fork_rng(devices=[]):  # the caller's seed stays
            torch.manual_seed(1234 + 1000 * seed + 170 + number)
            model = decoding.TinyDecoder(29, 32, 4, kv_heads, 2, base=_CHECK_BASE).double()
        with torch.no_grad():  # attention, and so positions, decide tokens
            model.embed.weight.mul_(0.2)
            for block in model.blocks:
                for projection, scale in (
                    (block.attention.q_proj, 2.5),
                    (block.attention.k_proj, 2.5),
                    (block.attention.v_proj, 2.0),
                ):
                    projection.weight.mul_(scale)
        ids = torch.randint(0, 29, (batch, prompt), generator=generator(seed, 180 + number))
        yield case, model.eval(), ids, new, chunk


def _without_shortcuts(model):
    """A copy of model whose forward passes (the model's and its blocks') and
    generate raise _Delegated: the answer must wire the blocks' parts."""
    copy = copy_module.deepcopy(model)
    shortcuts = [
        (copy, "forward", "model(...)"),
        (copy, "generate", "model.generate"),
        (copy, "forward_with_weights", "model.forward_with_weights"),
    ]
    for block in copy.blocks:
        shortcuts += [
            (block, "forward", "block(...)"),
            (block, "attend", "block.attend"),
            (block, "_attend", "block._attend"),
            (block, "forward_with_weights", "block.forward_with_weights"),
        ]
    for module, name, shown in shortcuts:
        object.__setattr__(module, name, tripwire(shown))
    return copy


@contextlib.contextmanager
def _counting_appends(appended):
    """While active, appended[id(cache)] counts the tokens each KVCache
    receives through update()."""
    update = decoding.KVCache.update

    def counted(cache, key, value):
        appended[id(cache)] = appended.get(id(cache), 0) + key.shape[2]
        return update(cache, key, value)

    decoding.KVCache.update = counted
    try:
        yield
    finally:
        decoding.KVCache.update = update


def _generation_hint(model, ids, new, chunk, got, expected, appended, read):
    """Why the tokens `got` differ from `expected`: the first slip that
    explains them, or None."""
    text, layers = ids.shape[1] + new, len(model.blocks)
    if appended and len(appended) < layers:
        return (
            f"your function fills {len(appended)} KVCache for {layers} "
            "layers: every layer keeps its own keys and values, so one "
            "KVCache per block"
        )
    if appended and max(appended.values()) > text:
        return (
            f"a cache received {max(appended.values())} tokens for a "
            f"text of {text}: each token's key and value are appended "
            "once (one cache.update per layer and step)"
        )
    for options, hints in _GENERATION_SLIPS:
        wrong = _generate_by_hand(model, ids, new, chunk, **options)
        if torch.equal(got, wrong) and not torch.equal(wrong, expected):
            return "; and ".join(hints)
    if sum(read) > text:
        return (
            f"your function reads {sum(read)} token positions for a "
            f"text of {text}: with the cache each token goes through the "
            "model once"
        )
    return None


@self_check
def check_generate_cached(fn, seed=0):
    """Check fn(model, ids (batch, P), max_new_tokens, chunk=None) -> greedy
    tokens (batch, P + max_new_tokens), computed from model's embedding,
    blocks (their norms, projections and feed-forward parts), final norm and
    output layer with one KVCache per layer: the prompt in chunks of `chunk`
    tokens (at once when None), then one new token per step. The tokens must
    equal model.generate(ids, max_new_tokens, use_cache=False). Chapter 11, exercise 2."""
    n_cases = 0
    for case, model, ids, new, chunk in _generation_cases(seed):
        expected = model.generate(ids, new, use_cache=False)
        learners = _without_shortcuts(model)
        appended, read = {}, []
        learners.embed.register_forward_hook(
            lambda module, args, output: read.append(args[0].shape[-1])
        )
        with _counting_appends(appended), torch.no_grad():
            got = run(fn, (learners, ids.clone(), new), case, kwargs={"chunk": chunk})
        if (
            isinstance(got, torch.Tensor)
            and got.dim() == 2
            and got.shape[1] == new < expected.shape[1]
        ):
            raise CheckFailed(
                f"case '{case}': you returned the {new} new "
                "tokens only; return the prompt followed by "
                "them, (batch, P + max_new_tokens)"
            )
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            got = got.detach().cpu()
            if not torch.equal(got, expected):
                hint = _generation_hint(model, ids, new, chunk, got, expected, appended, read)
                row, column = (got != expected).nonzero()[0].tolist()
                raise CheckFailed(
                    f"case '{case}': "
                    + (
                        hint
                        or (
                            f"row {row}, token {column} is {got[row, column]}, "
                            f"generation without a cache gives "
                            f"{expected[row, column]}"
                        )
                    )
                )
            if chunk and max(read, default=0) > chunk:
                raise CheckFailed(
                    f"case '{case}': your function reads {max(read)} tokens "
                    f"at once; read the prompt in chunks of at most "
                    f"chunk={chunk} tokens"
                )
            if sum(read) > ids.shape[1] + new:
                raise CheckFailed(
                    f"case '{case}': your function reads {sum(read)} token "
                    f"positions for a text of {ids.shape[1] + new}: with the "
                    "cache each token goes through the model once"
                )
        compare(
            got.to(torch.int64) if isinstance(got, torch.Tensor) else got,
            expected,
            case,
            "tokens",
            atol=0,
        )
        n_cases += 1
    passed("your cached generation", n_cases)
