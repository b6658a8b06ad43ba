"""Checks of Part IV (chapters 10-14): RoPE, KV caches and windows, online softmax and tiles, real
models' heads and weights."""

import collections
import contextlib
import copy as copy_module
import itertools
import math

import torch

from .. import decoding, measure, multihead, rotary, tiled
from .core import (
    CheckFailed,
    NotAnswered,
    passed,
    self_check,
    run,
    compare,
    generator,
    random,
    integers,
    tripwire,
)


def _rotate_reference(x, positions, pairs, sign=1.0, base=10000.0, step=2):
    """float64 RoPE of x (..., seq, d): pairs "half" (i, i + d/2), Llama's, or
    "adjacent" (2i, 2i + 1), the complex form's; sign -1 turns backwards;
    step 1 gives the frequencies base^(-i/d) of a common slip."""
    x = x.double()
    d = x.shape[-1]
    exponents = step * torch.arange(d // 2, dtype=torch.float64)
    theta = base ** (-exponents / d)
    angles = sign * positions.double()[:, None] * theta   # (seq, d/2)
    cos, sin = angles.cos(), angles.sin()
    if pairs == "half":
        a, b = x[..., : d // 2], x[..., d // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


_ROTARY_MISTAKES = (
    (dict(pairs="adjacent"), "you paired neighbouring dimensions (2i, 2i+1); "
     "this exercise pairs dimension i with i + head_dim/2, as Llama does"),
    (dict(pairs="half", sign=-1.0), "you rotated by -m theta_i: "
     "the second half is x_i sin + x_(i+d/2) cos, the first x_i cos - x_(i+d/2) sin"),
    (dict(pairs="half", step=1), "your frequencies are base^(-i/d); pair i "
     "turns at theta_i = base^(-2i/d), i = 0 .. d/2 - 1 (the exponents "
     "torch.arange(0, d, 2) / d)"),
)


def _rotary_cases(seed):
    cases = [("head_dim 2, positions 0..3", 4, 2),
             ("head_dim 8, positions 0..5", 6, 8),
             ("head_dim 16, scattered positions below 5000", 7, 16)]
    if seed:
        cases = [(f"random case {n}", seq, 2 * half) for n, (seq, half) in
                 enumerate(zip(integers(seed, 3, 1, 12, 90),
                               integers(seed, 3, 1, 12, 91)))]
    for number, (case, seq, d) in enumerate(cases):
        positions = torch.arange(seq)
        if number == 2:
            positions = torch.tensor(integers(seed, seq, 0, 5000, 92))
        yield case, random((seq, d), seed, 93 + number), positions


@self_check
def check_rotary(fn, seed=0):
    """Check fn(x (seq, head_dim), positions (seq,)) -> RoPE of x with base
    10000 and Llama's pairing of dimension i with i + head_dim/2."""
    n_cases = 0
    for case, x, where in _rotary_cases(seed):
        expected = _rotate_reference(x, where, "half")
        got = run(fn, (x, where), case, forbidden=(rotary.apply_rotary,))
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for options, hint in _ROTARY_MISTAKES:
                wrong = _rotate_reference(x, where, **options)
                close = torch.allclose(got.detach().double(), wrong, atol=1e-4)
                if close and not torch.allclose(wrong, expected, atol=1e-4):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "rotated x", atol=1e-4)
        n_cases += 1
    passed("your rotary embedding", n_cases)


def _rotary_attention_reference(x, w_q, w_k, w_v, scale, rotate_values=False):
    q, k, v = (x.double() @ w.double() for w in (w_q, w_k, w_v))
    positions = torch.arange(len(x))
    q = _rotate_reference(q, positions, "half")
    k = _rotate_reference(k, positions, "half")
    if rotate_values:
        v = _rotate_reference(v, positions, "half")
    allowed = torch.ones(len(x), len(x), dtype=torch.bool).tril()
    scores = (q @ k.T * scale).masked_fill(~allowed, -torch.inf)
    return torch.softmax(scores, -1) @ v


@self_check
def check_rotary_attention(fn, seed=0):
    """Check fn(x (seq, d_model), W_q, W_k, W_v (d_model, d)) -> causal
    self-attention output (seq, d) with RoPE on queries and keys only, scores
    scaled by 1 / sqrt(d)."""
    n_cases = 0
    for case, x, _ in _rotary_cases(seed):
        seq, d_model = x.shape
        d = d_model + 2                    # the head size differs from d_model
        w_q, w_k, w_v = (random((d_model, d), seed, 100 + k) / d_model**0.5
                         for k in range(3))
        weights = (x, w_q, w_k, w_v)
        expected = _rotary_attention_reference(*weights, d**-0.5)
        got = run(fn, weights, case, forbidden=(rotary.apply_rotary,))
        mistakes = [
            (_rotary_attention_reference(*weights, d**-0.5, True),
             "you rotated the values too; RoPE turns only queries and keys"),
            (_rotary_attention_reference(*weights, 1.0),
             "the scores are not scaled; divide them by sqrt(d)"),
            (_rotary_attention_reference(*weights, d_model**-0.5),
             "you scaled by sqrt(d_model); the scale is sqrt(d), the size of "
             "queries and keys")]
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and seq > 1:
            for wrong, hint in mistakes:
                if (torch.allclose(got.detach().double(), wrong, atol=1e-4)
                        and not torch.allclose(wrong, expected, atol=1e-4)):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got, expected, case, "attention output", atol=1e-4)
        n_cases += 1
    passed("your rotary self-attention", n_cases)


def _llama3_reference(theta, factor, low, high, context, mistake=None):
    """float64 Llama 3.1 frequencies, or one of the usual mistakes."""
    theta = theta.double()
    turns = context * theta / (2 * math.pi)       # r_i, turns over C
    if mistake == "radians":
        turns = context * theta
    blend = ((turns - low) / (high - low)).clamp(0, 1)   # 1 kept, 0 divided
    inside = (blend > 0) & (blend < 1)
    if mistake == "inverted":
        blend = 1 - blend
    elif mistake in ("swapped", "blend reversed"):
        swap = ~inside if mistake == "swapped" else inside
        blend = torch.where(swap, 1 - blend, blend)
    elif mistake in ("cut at low", "cut at high"):
        bound = low if mistake == "cut at low" else high
        blend = (turns >= bound).double()
    divisor = 1 / factor if mistake != "multiplied" else factor
    return theta * (blend + (1 - blend) * divisor)


_SWAPPED = ("you divided the fast pairs and kept the slow ones; pairs that "
            "turn more than high_freq_factor times over the context are kept, "
            "those turning fewer than low_freq_factor times divided by factor")
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
}


def _llama3_cases(seed):
    """(case, theta (d/2,), factor, low, high, context)."""
    cases = [("Llama 3.1 8B: d 128, base 500,000, factor 8, bounds 1 and 4 "
              "turns, context 8,192", 128, 5e5, 8.0, 1.0, 4.0, 8192),
             ("Llama 3.2 1B: d 64, base 500,000, factor 32, bounds 1 and 4 "
              "turns, context 8,192", 64, 5e5, 32.0, 1.0, 4.0, 8192),
             ("d 16, base 10,000, factor 4, bounds 1 and 4 turns, context "
              "600", 16, 1e4, 4.0, 1.0, 4.0, 600)]
    if seed:
        halves = integers(seed, 3, 4, 65, 140)
        factors = integers(seed, 3, 2, 33, 141)
        contexts = integers(seed, 3, 256, 16385, 142)
        lows = integers(seed, 3, 1, 3, 143)
        cases = [(f"random case {n}: d {2 * h}, factor {f}, bounds {low} and "
                  f"{4 * low} turns, context {c}", 2 * h, 1e4 * 50 ** (n % 2),
                  float(f), float(low), 4.0 * low, c)
                 for n, (h, f, c, low) in
                 enumerate(zip(halves, factors, contexts, lows))]
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
    gamma_i = (r_i - low_freq_factor) / (high_freq_factor - low_freq_factor)."""
    n_cases = 0
    for case, theta, *options in _llama3_cases(seed):
        expected = _llama3_reference(theta, *options)
        got = run(fn, (theta.clone(), *options), case,
                  forbidden=(rotary.rotary_frequencies,))
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for mistake, hint in _LLAMA3_MISTAKES.items():
                wrong = _llama3_reference(theta, *options, mistake=mistake)
                if (torch.allclose(got.detach().double() / theta,
                                   wrong / theta, rtol=0, atol=1e-6)
                        and not torch.allclose(wrong / theta, expected / theta,
                                               rtol=0, atol=1e-6)):
                    raise CheckFailed(f"case '{case}': {hint}")
            got = got.detach().double() / theta
        compare(got, expected / theta, case,
                "frequency ratio theta'_i / theta_i",
                atol=1e-6)
        n_cases += 1
    passed("your Llama 3.1 frequencies", n_cases)


def _window_cases(seed):
    """(case, query positions, key positions, window) for the sliding-window
    checks: a decoding step, a chunk of new queries, a window wider than the
    sequence, and keys left after older ones were evicted."""
    cases = [("one new token at position 9, window 4", [9], range(10), 4),
             ("a chunk of 4 new tokens, window 3", range(6, 10), range(10), 3),
             ("window 100 wider than the sequence", range(3, 7), range(7), 100),
             ("keys 5..10 left in the cache, window 5", [10], range(5, 11), 5)]
    if seed:
        lengths = integers(seed, 3, 2, 12, 110)
        windows = integers(seed, 3, 1, 8, 111)
        cases = [(f"random case {n}: {m} tokens, window {w}",
                  range(m - 1 - n, m), range(m), w)
                 for n, (m, w) in enumerate(zip(lengths, windows)) if m > n]
    for case, queries, keys, window in cases:
        yield case, torch.tensor(list(queries)), torch.tensor(list(keys)), window


def _window_by_loops(queries, keys, window, inclusive=False):
    reach = window + 1 if inclusive else window    # keys t - reach < s <= t
    return torch.tensor([[t - reach < s <= t for s in keys.tolist()]
                         for t in queries.tolist()])


@self_check
def check_sliding_window_mask(fn, seed=0):
    """Check fn(query_positions (L,), key_positions (S,), window) -> bool (L, S):
    True where the query at position t may attend to the key at position s,
    that is t - window < s <= t (the token itself and the window - 1 before it).
    """
    n_cases = 0
    for case, queries, keys, window in _window_cases(seed):
        expected = _window_by_loops(queries, keys, window)
        got = run(fn, (queries, keys, window), case,
                  forbidden=(decoding.decoding_mask,))
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            raise CheckFailed(f"case '{case}': your mask has dtype {got.dtype}; "
                              "use torch.bool (True = may attend)")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            hints = [(~expected, "your mask is inverted: True must mean "
                                 "'may attend'"),
                     (_window_by_loops(queries, keys, window, inclusive=True),
                      "your window lets a query see window + 1 keys; with "
                      "window W it sees itself and the W - 1 keys before it"),
                     (torch.ones(len(queries), len(keys), dtype=torch.bool).tril(),
                      "your mask is aligned top-left by index; compare "
                      "positions instead (new queries come after the cache)")]
            for wrong, hint in hints:
                if torch.equal(got, wrong) and not torch.equal(wrong, expected):
                    raise CheckFailed(f"case '{case}': {hint}")
        compare(got.float() if isinstance(got, torch.Tensor) else got,
                expected.float(), case, "mask")
        n_cases += 1
    passed("your sliding-window mask", n_cases)


def _cache_cases(seed):
    """(case, held keys, new keys, window) for check_cache_append."""
    shapes = [("empty cache, a prompt of 5, no window", 0, 5, None),
              ("4 held, 1 new, window 3", 4, 1, 3),
              ("2 held, 3 new, window 4", 2, 3, 4),
              ("6 held, 1 new, window 10", 6, 1, 10)]
    if seed:
        held = integers(seed, 3, 0, 8, 120)
        new = integers(seed, 3, 1, 5, 121)
        windows = integers(seed, 3, 1, 7, 122)
        shapes = [(f"random case {n}", h, t, w)
                  for n, (h, t, w) in enumerate(zip(held, new, windows))]
    for number, (case, held, new, window) in enumerate(shapes):
        keys = random((2, 3, held + new, 4), seed, 130 + number)
        yield case, keys[:, :, :held], keys[:, :, held:], window


@self_check
def check_cache_append(fn, seed=0):
    """Check fn(held (batch, kv_heads, n, d), new (batch, kv_heads, t, d),
    window) -> (attend_to, kept): attend_to is held followed by new along the
    token axis; kept is attend_to's last `window` tokens (all when window is
    None)."""
    n_cases = 0
    for case, held, new, window in _cache_cases(seed):
        tokens = [held[:, :, i] for i in range(held.shape[2])]
        tokens += [new[:, :, i] for i in range(new.shape[2])]
        expected_all = torch.stack(tokens, dim=2)      # token by token
        start = 0 if window is None else max(0, len(tokens) - window)
        expected_kept = torch.stack(tokens[start:], dim=2)
        got = run(fn, (held.clone(), new.clone(), window), case)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise CheckFailed(f"case '{case}': return two tensors, "
                              "(attend_to, kept)")
        attend_to, kept = got
        if (isinstance(attend_to, torch.Tensor)
                and attend_to.shape == expected_kept.shape
                and expected_kept.shape != expected_all.shape):
            raise CheckFailed(f"case '{case}': attend_to holds only the last "
                              "window tokens; the new queries must see every "
                              "held key and the new ones before anything is "
                              "dropped")
        if (isinstance(kept, torch.Tensor) and kept.shape == expected_kept.shape
                and window is not None and window < len(tokens)
                and torch.equal(kept, expected_all[:, :, :window])):
            raise CheckFailed(f"case '{case}': you kept the first window "
                              "tokens; a sliding window keeps the last ones")
        compare(attend_to, expected_all, case, "attend_to")
        compare(kept, expected_kept, case, "kept")
        n_cases += 1
    passed("your cache update", n_cases)


# chapter 11: generation with a cache, wired by hand --------------------------

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
_POSITIONS_HINT = ("the RoPE positions restart at 0 at every step (or chunk): "
                   "the new tokens continue the text, so their positions are "
                   "cache.seen, cache.seen + 1, ... (read before the update)")
_REFEED_HINT = ("the prompt's last token is read again after the prefill, so "
                "its key and value are appended twice: after the prefill, "
                "read only the newly generated token")


def _generation_mask(mode, n_new, n_all, positions, cache):
    """Bool (L, S) by one of the ways a learner may build it."""
    ones = torch.ones(n_new, n_all, dtype=torch.bool)
    if mode == "bottom-right":
        return ones.tril(n_all - n_new)
    if mode == "positions":
        return decoding.decoding_mask(positions, cache.key_positions)
    if mode == "top-left" or (mode == "top-left-prefill" and n_new > 1):
        return ones.tril()
    return ones                     # "none", or one token without a mask


def _layer_by_hand(block, x, positions, cache, mask_mode):
    """One pre-norm block on new tokens x (batch, L, d) at positions (L,)."""
    layer, h = block.attention, block.attention_norm(x)
    q = layer.q_proj(h).unflatten(-1, (layer.num_heads, -1)).transpose(1, 2)
    k = layer.k_proj(h).unflatten(-1, (layer.num_kv_heads, -1)).transpose(1, 2)
    v = layer.v_proj(h).unflatten(-1, (layer.num_kv_heads, -1)).transpose(1, 2)
    q = rotary.apply_rotary(q, positions, block.base)       # (batch, H, L, d_h)
    k, v = cache.update(rotary.apply_rotary(k, positions, block.base), v)
    group = layer.num_heads // layer.num_kv_heads
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = _generation_mask(mask_mode, q.shape[2], k.shape[2], positions, cache)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
        ~mask, -math.inf)                                   # (batch, H, L, S)
    heads = torch.softmax(scores, -1) @ v
    x = x + layer.out_proj(heads.transpose(1, 2).flatten(2))
    h = block.mlp_norm(x)
    return x + block.down_proj(
        torch.nn.functional.silu(block.gate_proj(h)) * block.up_proj(h))


@torch.no_grad()
def _generate_by_hand(model, ids, max_new_tokens, chunk, positions="absolute",
                      mask="bottom-right", refeed=False):
    """Cached greedy decoding, right (the defaults) or with one of the usual
    slips: positions "restart" at 0 on every call, a mask aligned "top-left"
    (always, or "top-left-prefill": only on chunks of several tokens) or
    "none", the prompt's last token read again after the prefill (refeed)."""
    caches = [decoding.KVCache() for _ in model.blocks]

    def read(new):                            # (batch, L) -> last logits
        start = 0 if positions == "restart" else caches[0].seen
        where = torch.arange(start, start + new.shape[1])
        x = model.embed(new)
        for block, cache in zip(model.blocks, caches):
            x = _layer_by_hand(block, x, where, cache, mask)
        return model.lm_head(model.norm(x[:, -1]))          # (batch, vocab)

    step = chunk or ids.shape[1]
    for start in range(0, ids.shape[1], step):
        logits = read(ids[:, start:start + step])
    tokens = ids
    for number in range(max_new_tokens):
        if refeed:                     # read the last token, generated or not
            logits = read(tokens[:, -1:])
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        if not refeed and number < max_new_tokens - 1:
            logits = read(tokens[:, -1:])
    return tokens


_GENERATION_SLIPS = [
    (dict(positions="restart"), [_POSITIONS_HINT]),
    (dict(positions="restart", mask="positions"), [_POSITIONS_HINT]),
    (dict(mask="top-left-prefill"), [_MASK_HINTS["top-left"]]),
    (dict(mask="top-left"), [_MASK_HINTS["top-left"]]),
    (dict(mask="none"), [_MASK_HINTS["none"]]),
    (dict(positions="restart", mask="top-left-prefill"),
     [_POSITIONS_HINT, _MASK_HINTS["top-left"]]),
    (dict(positions="restart", mask="top-left"),
     [_POSITIONS_HINT, _MASK_HINTS["top-left"]]),
    (dict(refeed=True), [_REFEED_HINT]),
]


def _generation_cases(seed):
    """(case, model, ids (batch, P), max_new_tokens, chunk): small random
    float64 TinyDecoders (multi-head, grouped-query, multi-query)."""
    shapes = [("a prompt of 6 tokens, 8 new, 4 heads sharing 2 KV heads",
               1, 6, 8, None, 2),
              ("a one-token prompt, 10 new, multi-head", 1, 1, 10, None, 4),
              ("a prompt of 9 tokens in chunks of 4, 6 new, multi-query",
               1, 9, 6, 4, 1),
              ("2 prompts of 7 tokens in chunks of 3, 5 new", 2, 7, 5, 3, 2)]
    if seed:
        lengths = integers(seed, 4, 5, 13, 160)
        new = integers(seed, 4, 3, 11, 161)
        chunks = integers(seed, 4, 2, 5, 162)
        shapes = [(f"random case {n}: {1 + n % 2} prompt(s) of {p} tokens"
                   + (f" in chunks of {c}" if n % 2 else "") + f", {t} new",
                   1 + n % 2, p, t, c if n % 2 else None, (4, 2, 1, 2)[n])
                  for n, (p, t, c) in enumerate(zip(lengths, new, chunks))]
    for number, (case, batch, prompt, new, chunk, kv_heads) in enumerate(
            shapes):
        with torch.random.fork_rng(devices=[]):  # the caller's seed stays
            torch.manual_seed(1234 + 1000 * seed + 170 + number)
            model = decoding.TinyDecoder(29, 32, 4, kv_heads, 2).double()
        with torch.no_grad():    # attention, and so positions, decide tokens
            model.embed.weight.mul_(0.2)
            for block in model.blocks:
                for projection, scale in ((block.attention.q_proj, 2.5),
                                          (block.attention.k_proj, 2.5),
                                          (block.attention.v_proj, 2.0)):
                    projection.weight.mul_(scale)
        ids = torch.randint(0, 29, (batch, prompt),
                            generator=generator(seed, 180 + number))
        yield case, model.eval(), ids, new, chunk


def _without_shortcuts(model):
    """A copy of model whose forward passes (the model's and its blocks') and
    generate raise _Delegated: the answer must wire the blocks' parts."""
    copy = copy_module.deepcopy(model)
    shortcuts = [(copy, "forward", "model(...)"),
                 (copy, "generate", "model.generate"),
                 (copy, "forward_with_weights", "model.forward_with_weights")]
    for block in copy.blocks:
        shortcuts += [(block, "forward", "block(...)"),
                      (block, "attend", "block.attend"),
                      (block, "_attend", "block._attend"),
                      (block, "forward_with_weights",
                       "block.forward_with_weights")]
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
        return (f"your function fills {len(appended)} KVCache for {layers} "
                "layers: every layer keeps its own keys and values, so one "
                "KVCache per block")
    if appended and max(appended.values()) > text:
        return (f"a cache received {max(appended.values())} tokens for a "
                f"text of {text}: each token's key and value are appended "
                "once (one cache.update per layer and step)")
    for options, hints in _GENERATION_SLIPS:
        wrong = _generate_by_hand(model, ids, new, chunk, **options)
        if torch.equal(got, wrong) and not torch.equal(wrong, expected):
            return "; and ".join(hints)
    if sum(read) > text:
        return (f"your function reads {sum(read)} token positions for a "
                f"text of {text}: with the cache each token goes through the "
                "model once")
    return None


@self_check
def check_generate_cached(fn, seed=0):
    """Check fn(model, ids (batch, P), max_new_tokens, chunk=None) -> greedy
    tokens (batch, P + max_new_tokens), computed from model's embedding,
    blocks (their norms, projections and feed-forward parts), final norm and
    output layer with one KVCache per layer: the prompt in chunks of `chunk`
    tokens (at once when None), then one new token per step. The tokens must
    equal model.generate(ids, max_new_tokens, use_cache=False)."""
    n_cases = 0
    for case, model, ids, new, chunk in _generation_cases(seed):
        expected = model.generate(ids, new, use_cache=False)
        learners = _without_shortcuts(model)
        appended, read = {}, []
        learners.embed.register_forward_hook(
            lambda module, args, output: read.append(args[0].shape[-1]))
        with _counting_appends(appended), torch.no_grad():
            got = run(fn, (learners, ids.clone(), new), case,
                      kwargs={"chunk": chunk})
        if (isinstance(got, torch.Tensor) and got.dim() == 2
                and got.shape[1] == new < expected.shape[1]):
            raise CheckFailed(f"case '{case}': you returned the {new} new "
                              "tokens only; return the prompt followed by "
                              "them, (batch, P + max_new_tokens)")
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            got = got.detach().cpu()
            if not torch.equal(got, expected):
                hint = _generation_hint(model, ids, new, chunk, got,
                                        expected, appended, read)
                row, column = (got != expected).nonzero()[0].tolist()
                raise CheckFailed(
                    f"case '{case}': " + (hint or (
                        f"row {row}, token {column} is {got[row, column]}, "
                        f"generation without a cache gives "
                        f"{expected[row, column]}")))
            if chunk and max(read, default=0) > chunk:
                raise CheckFailed(
                    f"case '{case}': your function reads {max(read)} tokens "
                    f"at once; read the prompt in chunks of at most "
                    f"chunk={chunk} tokens")
            if sum(read) > ids.shape[1] + new:
                raise CheckFailed(
                    f"case '{case}': your function reads {sum(read)} token "
                    f"positions for a text of {ids.shape[1] + new}: with the "
                    "cache each token goes through the model once")
        compare(got.to(torch.int64) if isinstance(got, torch.Tensor) else got,
                expected, case, "tokens", atol=0)
        n_cases += 1
    passed("your cached generation", n_cases)


def _score_rows(seed):
    """(case, scores (rows, n), block size) for check_online_softmax_update:
    each row is streamed to the update block by block."""
    normal = random((3, 12), seed, 140)
    cases = [("3 rows of 12 scores, blocks of 4", normal, 4),
             ("huge scores (around 1000)", normal + 1000, 5),
             ("very negative scores (around -1000)", normal - 1000, 3),
             ("each block's maximum above the last", torch.arange(
                 12.0).repeat(2, 1) + random((2, 12), seed, 141) * 0.1, 4),
             ("one block", normal[:, :7], 7)]
    masked = random((2, 9), seed, 142)
    masked[0, :3] = -float("inf")
    cases.append(("the first block of row 0 fully masked (-inf)", masked, 3))
    between = random((2, 9), seed, 143)
    between[1, 3:6] = -float("inf")
    cases.append(("row 1's middle block fully masked, between finite ones",
                  between, 3))
    if seed:
        sizes = integers(seed, 3, 1, 6, 144)
        cases += [(f"random case {n}, blocks of {b}",
                   random((2, 3 * b + n), seed, 145 + n) * 10, b)
                  for n, b in enumerate(sizes)]
    return cases


def _streamed(update, scores, block_size):
    """The state (m, l) after update() has seen every block of `scores`."""
    running_max = torch.full(scores.shape[:-1], -float("inf"),
                             dtype=scores.dtype)
    running_sum = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start:start + block_size]
        running_max, running_sum = update(running_max, running_sum, block)
    return running_max, running_sum


def _update_without_rescale(running_max, running_sum, block):
    new_max = torch.maximum(running_max, block.amax(dim=-1))
    return new_max, running_sum + torch.exp(block - new_max[..., None]).sum(-1)


@self_check
def check_online_softmax_update(fn, seed=0):
    """Check fn(running_max (rows,), running_sum (rows,), block (rows, b)) ->
    (new_max, new_sum): after the blocks of a row have been passed in order,
    starting from (-inf, 0), running_max is the row's maximum m and
    running_sum is sum_j exp(s_j - m). A block whose scores are all -inf
    (a masked row) must leave that row's state as it was."""
    n_cases = 0
    for case, scores, block_size in _score_rows(seed):
        def learners(running_max, running_sum, block):
            got = run(fn, (running_max.clone(), running_sum.clone(),
                           block.clone()), case)
            if not (isinstance(got, tuple) and len(got) == 2):
                raise CheckFailed(f"case '{case}': return two tensors, "
                                  "(new_max, new_sum)")
            return got
        got_max, got_sum = _streamed(learners, scores, block_size)
        expected_max = scores.amax(dim=-1)       # from the whole row at once
        wide = scores.double()
        expected_sum = torch.exp(wide - wide.amax(-1, keepdim=True)).sum(-1)
        _, without_rescale = _streamed(_update_without_rescale, scores,
                                       block_size)
        hints = [(without_rescale, "the old running sum must be multiplied "
                  "by exp(m_old - m_new) when the maximum grows"),
                 (torch.exp(wide).sum(-1), "your running sum is sum_j "
                  "exp(s_j); keep it relative to the running maximum, "
                  "sum_j exp(s_j - m)")]
        for wrong_sum, hint in hints:
            if (isinstance(got_sum, torch.Tensor)
                    and got_sum.shape == wrong_sum.shape
                    and torch.allclose(got_sum.double(), wrong_sum.double())
                    and not torch.allclose(wrong_sum.double(), expected_sum)):
                raise CheckFailed(f"case '{case}': {hint}")

        def explain(index):
            if torch.isneginf(scores[index[0]]).any():
                return ("a block with every score -inf gives m_new = -inf, and "
                        "exp(m_old - m_new) = exp(-inf + inf) is NaN; leave the "
                        "state as it is when a block's maximum is -inf")
            if scores[index[0]].max() > 80:
                return ("exp of a large score overflows; subtract the running "
                        "maximum before exponentiating")
            return ("is the rescaling factor upside down? On the first "
                    "block m_old = -inf: exp(m_old - m_new) is 0, but "
                    "exp(m_new - m_old) is inf, and 0 * inf is NaN")
        compare(got_max, expected_max, case, "running maximum",
                explain_nan=explain)
        compare(got_sum, expected_sum, case, "running sum",
                explain_nan=explain)
        n_cases += 1
    passed("your online-softmax update", n_cases)


def _causal_tiles_by_mask(n_queries, n_keys, query_block, key_block):
    """Every (query block, key block) with an allowed entry, from the mask."""
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool).tril()
    return {(q, k)
            for q in range(math.ceil(n_queries / query_block))
            for k in range(math.ceil(n_keys / key_block))
            if allowed[q * query_block:(q + 1) * query_block,
                       k * key_block:(k + 1) * key_block].any()}


def _tile_cases(seed):
    shapes = [(8, 8, 4, 4), (10, 10, 4, 4), (12, 12, 4, 2), (12, 12, 2, 4),
              (7, 12, 3, 5), (12, 7, 5, 2), (5, 5, 8, 8), (1, 1, 1, 1)]
    if seed:
        sizes = integers(seed, 16, 1, 20, 150)
        shapes = [(sizes[i], sizes[i + 1], 1 + sizes[i + 2] % 6,
                   1 + sizes[i + 3] % 6) for i in range(0, 16, 4)]
    return shapes


@self_check
def check_causal_tiles(fn, seed=0):
    """Check fn(n_queries, n_keys, query_block, key_block) -> the (query
    block, key block) index pairs that causal attention (query i sees keys
    j <= i) must compute, when queries come in blocks of query_block and keys
    in blocks of key_block: every tile with at least one allowed entry, and
    none of the tiles entirely above the diagonal. Any iterable of pairs, in
    any order."""
    n_cases = 0
    for n_queries, n_keys, query_block, key_block in _tile_cases(seed):
        case = (f"{n_queries} queries in blocks of {query_block}, {n_keys} "
                f"keys in blocks of {key_block}")
        got = run(fn, (n_queries, n_keys, query_block, key_block), case,
                  forbidden=(tiled.tile_schedule,))
        try:
            got = {tuple(int(index) for index in pair) for pair in got}
        except (TypeError, ValueError):
            raise CheckFailed(f"case '{case}': return pairs of block "
                              "indices, such as [(0, 0), (1, 0), (1, 1)]"
                              ) from None
        expected = _causal_tiles_by_mask(n_queries, n_keys, query_block,
                                         key_block)
        every_tile = {(q, k) for q in range(math.ceil(n_queries / query_block))
                      for k in range(math.ceil(n_keys / key_block))}
        by_index = {(q, k) for q, k in every_tile if k <= q}
        if got == every_tile != expected:
            raise CheckFailed(f"case '{case}': you kept all {len(got)} tiles; "
                              "leave out those entirely above the diagonal")
        if got == by_index != expected:
            raise CheckFailed(f"case '{case}': comparing block indices works "
                              "only when both blocks have the same size; "
                              "compare positions: a tile is needed when its "
                              "first key is not after its last query")
        missing, extra = sorted(expected - got), sorted(got - expected)
        if missing:
            raise CheckFailed(f"case '{case}': tile {missing[0]} holds an "
                              "allowed entry (a key not after its query) but "
                              "is missing")
        if extra:
            raise CheckFailed(f"case '{case}': tile {extra[0]} lies entirely "
                              "above the diagonal (every key after every "
                              "query) and should be skipped")
        n_cases += 1
    passed("your causal tile list", n_cases)


# Chapter 12, exercise 5: FlashAttention-2 as a torch.autograd.Function ------

_FlashCase = collections.namedtuple(
    "_FlashCase", "name batch n_queries n_keys dim value_dim query_block "
    "key_block is_causal dtype magnitude")


def _flash_cases(seed):
    """Lengths that are not multiples of the blocks, blocks of different
    sizes either way round, causal or not, float64 and float32, huge scores."""
    case, f64 = _FlashCase, torch.float64
    if seed:
        sizes = integers(seed, 24, 1, 41, 160)
        return [case(f"random case {n}", (2,), sizes[n], sizes[n + 6],
                     4 * (1 + sizes[n + 12] % 2), 4, 1 + sizes[n + 18] % 12,
                     1 + sizes[n + 12] % 11, bool(sizes[n] % 2), f64, 1)
                for n in range(6)]
    return [
        case("no mask, no batch", (), 20, 13, 8, 6, 8, 5, False, f64, 1),
        case("causal, key blocks smaller", (2,), 30, 30, 8, 8, 8, 4, True,
             f64, 1),
        case("causal, key blocks larger", (2, 2), 29, 29, 4, 4, 4, 7, True,
             f64, 1),
        case("causal, fewer keys than queries", (2,), 23, 11, 8, 5, 5, 3,
             True, f64, 1),
        case("causal, scores around 1e3", (2,), 25, 25, 8, 8, 6, 5, True, f64,
             30),
        case("no mask, float32", (2,), 40, 36, 4, 4, 8, 6, False,
             torch.float32, 1),
        case("one tile holds everything", (1,), 6, 6, 4, 4, 16, 16, True, f64,
             1),
    ]


def _flash_inputs(case, seed, number):
    """Query, key and value (requiring gradients) and the output's gradient."""
    shapes = [(*case.batch, case.n_queries, case.dim),
              (*case.batch, case.n_keys, case.dim),
              (*case.batch, case.n_keys, case.value_dim),
              (*case.batch, case.n_queries, case.value_dim)]
    q, k, v, grad_output = (
        random(shape, seed, 170 + 4 * number + i).to(case.dtype)
        for i, shape in enumerate(shapes))
    q, k = q * case.magnitude, k * case.magnitude
    return [t.requires_grad_() for t in (q, k, v)], grad_output


def _flash_tiles(case, by_index=False):
    """(rows, cols, mask or None) of each tile computed: mask (B_r, B_c) is
    True where a key comes after its query; the tiles entirely above the
    diagonal are skipped (by_index: those with key block c > query block r)."""
    for r, q0 in enumerate(range(0, case.n_queries, case.query_block)):
        rows = slice(q0, min(q0 + case.query_block, case.n_queries))
        for c, k0 in enumerate(range(0, case.n_keys, case.key_block)):
            cols = slice(k0, min(k0 + case.key_block, case.n_keys))
            if case.is_causal and (c > r if by_index else k0 >= rows.stop):
                continue
            mask = None
            if case.is_causal:
                mask = (torch.arange(cols.start, cols.stop)[None, :]
                        > torch.arange(rows.start, rows.stop)[:, None])
            yield rows, cols, mask


def _flash_forward(q, k, v, case, mistake=None):
    """float64 FlashAttention-2 forward -> (output,), or that of a typical
    mistake: "no rescale", "accumulator not rescaled", "normalised in the
    loop", "block index"."""
    q, k, v = q.detach().double(), k.detach().double(), v.detach().double()
    scale = q.shape[-1] ** -0.5
    output = v.new_zeros(*q.shape[:-1], v.shape[-1])
    tiles = _flash_tiles(case, by_index=mistake == "block index")
    for rows, row_tiles in itertools.groupby(tiles, key=lambda t: t[0]):
        m = q.new_full((*q.shape[:-2], rows.stop - rows.start), -math.inf)
        l, a = torch.zeros_like(m), 0
        for _, cols, mask in row_tiles:
            s = q[..., rows, :] @ k[..., cols, :].transpose(-2, -1) * scale
            if mask is not None:
                s = s.masked_fill(mask, -math.inf)
            new_m = torch.maximum(m, s.amax(dim=-1))
            rescale = torch.exp(m - new_m)
            p = torch.exp(s - new_m[..., None])
            l = l * (1 if mistake == "no rescale" else rescale) + p.sum(-1)
            if mistake not in ("no rescale", "accumulator not rescaled"):
                a = a * rescale[..., None]
            a = a + p @ v[..., cols, :]
            if mistake == "normalised in the loop":
                a = a / l[..., None]
            m = new_m
        output[..., rows, :] = a if mistake == "normalised in the loop" \
            else a / l[..., None]
    return (output,)


def _flash_backward(q, k, v, grad_output, statistics, case, mistake=None):
    """float64 FlashAttention-2 backward -> (dQ, dK, dV) from the log-sum-exp,
    or that of a typical mistake: "tile delta" (D from one tile's weights),
    "no scale" (dQ, dK without 1/sqrt(d)), "no mask"."""
    q, k, v = q.detach().double(), k.detach().double(), v.detach().double()
    output, logsumexp = statistics["output"], statistics["logsumexp"]
    grad_output, scale = grad_output.double(), q.shape[-1] ** -0.5
    delta = (grad_output * output).sum(-1)                   # D: (..., L)
    grads = [torch.zeros_like(t) for t in (q, k, v)]
    for rows, cols, mask in _flash_tiles(case):
        s = q[..., rows, :] @ k[..., cols, :].transpose(-2, -1) * scale
        if mask is not None and mistake != "no mask":
            s = s.masked_fill(mask, -math.inf)
        p = torch.exp(s - logsumexp[..., rows, None])
        d_out = grad_output[..., rows, :]
        grads[2][..., cols, :] += p.transpose(-2, -1) @ d_out
        dp = d_out @ v[..., cols, :].transpose(-2, -1)
        d = (p * dp).sum(-1) if mistake == "tile delta" else delta[..., rows]
        ds = p * (dp - d[..., None]) * (1 if mistake == "no scale" else scale)
        grads[0][..., rows, :] += ds @ k[..., cols, :]
        grads[1][..., cols, :] += ds.transpose(-2, -1) @ q[..., rows, :]
    return grads


def _flash_expected(q, k, v, grad_output, case):
    """PyTorch's answers in float64: the output, its gradients dQ, dK, dV,
    and the log-sum-exp and maximum of each query's scaled, masked scores."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    output = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=case.is_causal)
    grads = torch.autograd.grad(output, (q, k, v), grad_output.double())
    scores = q.detach() @ k.detach().transpose(-2, -1) * q.shape[-1] ** -0.5
    if case.is_causal:
        above = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(above, -math.inf)
    return {"output": output.detach(), "grads": grads,
            "logsumexp": torch.logsumexp(scores, dim=-1),
            "row_max": scores.amax(dim=-1)}


_FLASH_ANSWERS = (torch.nn.functional.scaled_dot_product_attention,
                  tiled.flash_attention, tiled.naive_attention)

_FORWARD_MISTAKES = (
    ("accumulator not rescaled", "when the running maximum grows, the "
     "unnormalised output A must be multiplied by exp(m_old - m_new), as "
     "the running sum is"),
    ("no rescale", "when the running maximum grows, the running sum and the "
     "unnormalised output must both be multiplied by exp(m_old - m_new)"),
    ("normalised in the loop", "you divide the output by the running sum "
     "inside the loop, and the next tile rescales it as if it were "
     "unnormalised; keep A unnormalised and divide by the sum once, after "
     "the last key block"),
    ("block index", "you skip tiles by block index (key block c > query "
     "block r), which drops allowed keys when the key blocks are smaller; "
     "compare positions: skip a tile when its first key comes after its "
     "last query"),
)

_BACKWARD_MISTAKES = (
    ("tile delta", "D_i sums over the query's whole row of weights, not one "
     "tile's: compute D_i = dO_i . O_i once, before the loop"),
    ("no scale", "the scores are Q K^T / sqrt(d), so dQ = dS K / sqrt(d) and "
     "dK = dS^T Q / sqrt(d)"),
    ("no mask", "recompute each tile's weights with the forward pass's "
     "causal mask: a key after its query has weight 0"),
)


# (index in (dQ, dK, dV), name, what to look at), in the order to compare
_GRADIENT_HINTS = (
    (2, "dV", "dV = Phi^T dO: recompute Phi = exp(S - lse) from the "
     "saved log-sum-exp lse, masked as in the forward pass"),
    (0, "dQ", "dV is right, so the weights are; dS = Phi o (dPhi - D) with "
     "D_i = dO_i . O_i, and dQ = dS K / sqrt(d)"),
    (1, "dK", "dK = dS^T Q / sqrt(d), summed over every query block"),
)


def _is_autograd_function(fn):
    return isinstance(fn, type) and issubclass(fn, torch.autograd.Function)


def _all_close(got, expected, atol):
    return all(isinstance(g, torch.Tensor) and g.shape == e.shape
               and torch.allclose(g.detach().double(), e, atol=atol)
               for g, e in zip(got, expected))


def _mistake_hint(got, mistakes, compute, correct, atol):
    """The hint of the first mistake whose results `got` reproduce, where
    they differ from the correct ones; None for a right answer."""
    if _all_close(got, correct, atol):
        return None
    for mistake, hint in mistakes:
        wrong = compute(mistake)
        if not _all_close(wrong, correct, atol) and _all_close(got, wrong,
                                                                atol):
            return hint
    return None


def _check_flash_memory(largest, tensors, case, where):
    """No tensor made larger than the inputs, the output and one tile."""
    numel, shape, operation = largest
    tile = (math.prod(case.batch) * min(case.query_block, case.n_queries)
            * min(case.key_block, case.n_keys))
    if numel > max(tile, *(t.numel() for t in tensors)):
        raise CheckFailed(
            f"case '{case.name}': your {where} pass made a tensor of shape "
            f"{shape} ({operation}), larger than the inputs, the output and a "
            f"tile of {case.query_block} x {case.key_block}; FlashAttention "
            "never holds the (L, S) matrix, nor a row or column of tiles: "
            "compute one tile at a time, its causal mask from its positions")


def _check_flash_saved(output, inputs, expected, case, atol):
    """Saved through ctx.save_for_backward: Q, K, V, O and the log-sum-exp."""
    node = output.grad_fn
    for name, value in vars(node).items():
        held = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(t, torch.Tensor) and t.numel() > 1 for t in held):
            raise CheckFailed(f"case '{case.name}': you keep tensors in "
                              f"ctx.{name}; save Q, K, V, O and the "
                              "log-sum-exp with ctx.save_for_backward, and "
                              "nothing else")
    saved, lse = node.saved_tensors, expected["logsumexp"]
    if sum(t.numel() for t in saved) > sum(
            t.numel() for t in (*inputs, output, lse)):
        raise CheckFailed(
            f"case '{case.name}': you saved tensors of shapes "
            f"{[tuple(t.shape) for t in saved]}; FlashAttention saves only Q, "
            f"K, V, O and the log-sum-exp {tuple(lse.shape)}, and the "
            "backward pass recomputes the weights tile by tile")
    candidates = [t.detach().double() for t in saved if t.shape == lse.shape]
    if not candidates:
        raise CheckFailed(f"case '{case.name}': save the log-sum-exp of each "
                          f"query's scores, shape {tuple(lse.shape)}, with "
                          "ctx.save_for_backward")
    if any(torch.allclose(t, lse, atol=atol) for t in candidates):
        return
    if any(torch.allclose(t, expected["row_max"], atol=atol)
           for t in candidates):
        raise CheckFailed(f"case '{case.name}': you saved the running maximum "
                          "m; save the log-sum-exp m + log l, from which the "
                          "backward pass gets each weight as exp(s - m - log l)")
    compare(candidates[0], lse, case.name, "saved log-sum-exp (m + log l of "
            "the scaled, masked scores)", atol=atol)


def _one_key_block_hint(fn, inputs, case, expected, atol):
    """Why an output is wrong, if all keys in one block make it right."""
    with torch.no_grad():
        output = run(fn.apply, (*inputs, case.is_causal, case.query_block,
                                case.n_keys), case.name,
                     forbidden=_FLASH_ANSWERS, learner=fn)
    if not _all_close((output,), (expected["output"],), atol):
        return None
    return (f"with all keys in one block your output is right, with blocks "
            f"of {case.key_block} it is not: when a key block raises a row's "
            "running maximum, the running sum and the unnormalised output "
            "kept so far must both be multiplied by exp(m_old - m_new), and "
            "the output divided by the sum once, after the last block")


def _flash_forward_case(fn, case, number, seed):
    """Run and check one case's forward pass; return what its backward needs."""
    (q, k, v), grad_output = _flash_inputs(case, seed, number)
    expected = _flash_expected(q, k, v, grad_output, case)
    output, largest = run(
        measure.largest_tensor, (fn.apply if _is_autograd_function(fn) else fn,
                               q, k, v, case.is_causal, case.query_block,
                               case.key_block),
        case.name, forbidden=_FLASH_ANSWERS, learner=fn)
    if not _is_autograd_function(fn):
        raise CheckFailed("pass your class itself, a subclass of "
                          "torch.autograd.Function: the check calls its "
                          "apply(query, key, value, is_causal, query_block, "
                          "key_block)")
    if isinstance(output, (tuple, list)):
        raise CheckFailed(f"case '{case.name}': forward returns the output "
                          "only; keep the log-sum-exp for the backward pass "
                          "with ctx.save_for_backward")
    atol = 1e-5 if case.dtype == torch.float32 else 1e-9
    hint = _mistake_hint(
        (output,), _FORWARD_MISTAKES,
        lambda mistake: _flash_forward(q, k, v, case, mistake),
        (expected["output"],), atol)
    if (hint is None and case.n_keys > case.key_block
            and isinstance(output, torch.Tensor)
            and output.shape == expected["output"].shape
            and not _all_close((output,), (expected["output"],), atol)):
        hint = _one_key_block_hint(fn, (q, k, v), case, expected, atol)
    if hint:
        raise CheckFailed(f"case '{case.name}': {hint}")
    compare(output, expected["output"], case.name, "output", atol=atol,
            explain_nan=lambda index: (
                 "exp of a score around 1e3 overflows; subtract the running "
                 "maximum before exponentiating" if case.magnitude > 1
                 else None))
    if output.dtype != q.dtype:
        raise CheckFailed(f"case '{case.name}': your output is {output.dtype} "
                          f"for {q.dtype} inputs; keep the inputs' dtype")
    if output.grad_fn is None:
        raise CheckFailed(f"case '{case.name}': the output has no grad_fn; "
                          "return it from forward as a tensor")
    _check_flash_saved(output, (q, k, v), expected, case, atol)
    _check_flash_memory(largest, (q, k, v, output), case, "forward")
    return (q, k, v), output, grad_output, expected


def _flash_backward_case(fn, case, inputs, output, grad_output, expected):
    """Run and check one case's backward pass."""
    try:
        grads, largest = run(
            measure.largest_tensor,
            (torch.autograd.grad, output, inputs, grad_output), case.name,
            forbidden=_FLASH_ANSWERS, learner=fn)
    except CheckFailed as failure:
        if "incorrect number of gradients" not in str(failure):
            raise
        raise CheckFailed(f"{failure}: backward returns one gradient per "
                          "argument of forward, dQ, dK, dV and then None for "
                          "is_causal, query_block and key_block") from None
    atol = 1e-5 if case.dtype == torch.float32 else 1e-9
    hint = _mistake_hint(
        grads, _BACKWARD_MISTAKES,
        lambda mistake: _flash_backward(*inputs, grad_output, expected, case,
                                        mistake),
        expected["grads"], atol)
    if hint:
        raise CheckFailed(f"case '{case.name}': {hint}")
    for index, name, why in _GRADIENT_HINTS:
        compare(grads[index], expected["grads"][index], case.name,
                f"{name} ({why})", atol=atol)
    _check_flash_memory(largest, (*inputs, output), case, "backward")


def _causal_work(case, by_index=False):
    """The fraction of the score entries that causal tiles cover."""
    covered = sum((rows.stop - rows.start) * (cols.stop - cols.start)
                  for rows, cols, _ in _flash_tiles(case, by_index))
    return covered / (case.n_queries * case.n_keys)


def _check_flash_skips(fn):
    """Causal attention multiplies only the tiles with an allowed entry:
    measured by the matrix products' multiply-adds, causal against not."""
    case = _FlashCase("causal, 48 tokens, blocks of 6 queries and 12 keys",
                      (1,), 48, 48, 8, 8, 6, 12, True, torch.float64, 1)
    (q, k, v), _ = _flash_inputs(case, 0, 99)
    work = {}
    for is_causal in (False, True):
        with torch.no_grad():
            _, work[is_causal] = measure.count_multiply_adds(
                run, fn.apply, (q, k, v, is_causal, 6, 12), case.name,
                forbidden=_FLASH_ANSWERS, learner=fn)
    if not work[False]:
        return                    # no matrix products to count: not measured
    ratio, needed = work[True] / work[False], _causal_work(case)
    by_index = _causal_work(case, by_index=True)
    if abs(ratio - by_index) < 0.02:
        raise CheckFailed(
            f"case '{case.name}': your causal pass computes {ratio:.0%} of "
            "the unmasked pass's products, as when tiles are skipped by block "
            f"index (c > r); skipping by position leaves {needed:.0%}: skip a "
            "tile when its first key comes after its last query")
    if ratio > needed + 0.02:
        raise CheckFailed(
            f"case '{case.name}': your causal pass computes {ratio:.0%} of "
            f"the unmasked pass's products, but the tiles with an allowed "
            f"entry hold only {needed:.0%} of the scores: skip the tiles "
            "entirely above the diagonal")


@self_check
def check_flash_autograd(fn, seed=0):
    """Check fn, a torch.autograd.Function: fn.apply(query (..., L, d), key
    (..., S, d), value (..., S, d_v), is_causal, query_block, key_block) ->
    output (..., L, d_v), attention with scale 1/sqrt(d) and PyTorch's
    (top-left) causal mask, in tiles of query_block queries by key_block
    keys; it saves only Q, K, V, O and the log-sum-exp (..., L), and its
    backward gives dQ, dK, dV. Compared with PyTorch's attention and its
    gradients; no tensor larger than the inputs, the output or a tile."""
    cases = _flash_cases(seed)
    runs = [(case, *_flash_forward_case(fn, case, number, seed))
            for number, case in enumerate(cases)]
    _check_flash_skips(fn)
    for case, inputs, output, grad_output, expected in runs:
        try:
            _flash_backward_case(fn, case, inputs, output, grad_output,
                                 expected)
        except NotAnswered:
            raise CheckFailed(f"your forward pass agrees with PyTorch on all "
                              f"{len(cases)} cases; backward still raises "
                              "NotImplementedError: write it next") from None
    passed("your FlashAttention, forward and backward", len(cases))


def _word_id_cases(seed):
    """Word ids as the tokenizer gives them: None for [CLS] and [SEP], and
    words of 1 to 4 pieces; a first case without any word, one of one word."""
    rng = generator(seed, 13)
    cases = [("[CLS] [SEP] only", [None, None]),
             ("one word of three pieces", [None, 0, 0, 0, None])]
    for number in range(5):
        n_words = int(torch.randint(2, 7, (1,), generator=rng))
        pieces = torch.randint(1, 5, (n_words,), generator=rng).tolist()
        word_ids = [None] + [word for word, count in enumerate(pieces)
                             for _ in range(count)] + [None]
        cases.append((f"random sentence {number} ({n_words} words)", word_ids))
    return cases


def _previous_word_by_loops(word_ids):
    n = len(word_ids)
    targets = torch.zeros(n, n, dtype=torch.bool)
    for i, word in enumerate(word_ids):
        for j, other in enumerate(word_ids):
            if word is not None and other is not None and other == word - 1:
                targets[i, j] = True
    return targets


@self_check
def check_previous_word_targets(fn, seed=0):
    """Check fn(word_ids) -> bool (n, n): True where key j is a piece of the
    word just before query i's word. word_ids: one entry per token, the index
    of its word, or None for [CLS] and [SEP] (which have no targets and are
    never targets)."""
    cases = _word_id_cases(seed)
    for case, word_ids in cases:
        got = run(fn, (list(word_ids),), case)
        expected = _previous_word_by_loops(word_ids)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            compare(got, expected.double(), case, "targets")
        got = got.detach().cpu().bool()
        n = len(word_ids)
        previous_token = torch.zeros(n, n, dtype=torch.bool)
        previous_token[torch.arange(1, n), torch.arange(n - 1)] = True
        if torch.equal(got, previous_token) and not torch.equal(got, expected):
            raise CheckFailed(f"case '{case}': you marked the previous token; "
                              "mark every piece of the previous word, from "
                              "every piece of the current word")
        wrong = (got != expected).nonzero()
        if len(wrong):
            i, j = wrong[0].tolist()
            should = "should be" if expected[i, j] else "should not be"
            raise CheckFailed(
                f"case '{case}' (word_ids {word_ids}): key {j} (word "
                f"{word_ids[j]}) {should} a target of query {i} (word "
                f"{word_ids[i]}); None marks [CLS] and [SEP], never targets")
    passed("your previous-word targets", len(cases))


def _heads_by_hand(attention, x, zeroed_head=None):
    """MultiHeadAttention's output computed head by head, one head's output
    replaced by zeros."""
    outputs = []
    for head in range(attention.num_heads):
        rows = slice(head * attention.head_dim, (head + 1) * attention.head_dim)
        q, k, v = (torch.nn.functional.linear(x, p.weight[rows],
                                              None if p.bias is None
                                              else p.bias[rows])
                   for p in (attention.q_proj, attention.k_proj,
                             attention.v_proj))
        weights = torch.softmax(q @ k.transpose(-2, -1)
                                / math.sqrt(attention.head_dim), dim=-1)
        output = weights @ v
        outputs.append(torch.zeros_like(output) if head == zeroed_head
                       else output)
    return attention.out_proj(torch.cat(outputs, dim=-1))


@self_check
def check_ablate_head(fn, seed=0):
    """Check fn(attention, head) -> a copy of the MultiHeadAttention
    `attention` in which head `head` contributes nothing (its output is zero
    before out_proj) and every other head is unchanged; `attention` itself must
    stay as it was."""
    cases = [("8 wide, 2 heads, head 0", 8, 2, 0, True),
             ("12 wide, 3 heads, head 2", 12, 3, 2, True),
             ("16 wide, 4 heads, head 1, no bias", 16, 4, 1, False)]
    for number, (case, width, n_heads, head, bias) in enumerate(cases):
        torch.manual_seed(1234 + 1000 * seed + number)
        attention = multihead.MultiHeadAttention(width, n_heads, bias=bias)
        if bias:
            with torch.no_grad():  # non-zero biases, so forgetting one shows
                for projection in (attention.v_proj, attention.out_proj):
                    projection.bias.normal_()
        x = random((2, 5, width), seed, number)
        before = {k: v.clone() for k, v in attention.state_dict().items()}
        with torch.no_grad():
            expected = _heads_by_hand(attention, x, zeroed_head=head)
        ablated = run(fn, (attention, head), case)
        after = attention.state_dict()
        if any(not torch.equal(before[k], after[k]) for k in before):
            raise CheckFailed(f"case '{case}': you changed the original "
                              "layer's weights; change a copy "
                              "(copy.deepcopy(attention))")
        if not isinstance(ablated, torch.nn.Module):
            raise CheckFailed(f"case '{case}': return the ablated copy of "
                              f"the layer, not a {type(ablated).__name__}")
        with torch.no_grad():
            got = run(ablated, (x, x, x), case)
        got = got[0] if isinstance(got, tuple) else got
        if bias and isinstance(got, torch.Tensor):
            v_bias_left = attention.v_proj.bias[head * (width // n_heads):
                                                (head + 1) * (width // n_heads)]
            leaked = attention.out_proj.weight[
                :, head * (width // n_heads):(head + 1) * (width // n_heads)]
            with torch.no_grad():
                if torch.allclose(got, expected + v_bias_left @ leaked.T,
                                  atol=1e-5):
                    raise CheckFailed(
                        f"case '{case}': the head still outputs its value "
                        "bias (the weights sum to 1, so sum_j a_ij b_v = "
                        "b_v); zero the bias too, or zero the head's "
                        "columns of out_proj instead")
        compare(got, expected, case, "ablated layer's output")
    passed("your head ablation", len(cases))


def _converter_permute(weight, num_heads):
    """llama.cpp's convert_hf_to_gguf reordering of W_Q / W_K rows: half-split -> interleaved
    (within each head, row i of the first half and row i of the second half become rows
    2i and 2i + 1)."""
    rows, columns = weight.shape
    return (weight.reshape(num_heads, 2, rows // num_heads // 2, columns)
            .transpose(1, 2).reshape(rows, columns))


def _half_split_cases(seed):
    """(name, half-split weight, num_heads): the original rows the answer must recover."""
    shapes = [("1 head of 8", 1, 8, 5), ("3 heads of 8", 3, 8, 6),
              ("9 heads of 64, as SmolLM2's W_Q", 9, 64, 7), ("2 heads of 2", 2, 2, 3)]
    return [(name, random((heads * head_dim, columns), seed, number), heads)
            for number, (name, heads, head_dim, columns) in enumerate(shapes)]


@self_check
def check_half_split_rows(fn, seed=0):
    """Check fn(weight (num_heads * head_dim, in), num_heads) -> the same rows in the
    half-split order: the inverse of the GGUF converter's reordering of W_Q and W_K."""
    from ..pretrained import smollm2

    cases = _half_split_cases(seed)
    for case, original, heads in cases:
        gguf_rows = _converter_permute(original, heads)
        got = run(fn, (gguf_rows, heads), case,
                  forbidden=(smollm2.interleaved_to_half_split,))
        if isinstance(got, torch.Tensor) and got.shape == original.shape:
            if torch.equal(got, _converter_permute(gguf_rows, heads)) and not torch.equal(
                    got, original):
                raise CheckFailed(f"case '{case}': you applied the converter's reordering "
                                  "again; undo it: rows 2i and 2i + 1 of each head go back "
                                  "to rows i and i + head_dim / 2")
            whole = gguf_rows.reshape(1, -1, 2, gguf_rows.shape[1]).transpose(1, 2)
            if heads > 1 and torch.equal(got, whole.reshape(gguf_rows.shape)):
                raise CheckFailed(f"case '{case}': you reordered the rows of all heads "
                                  "together; each head's rows are reordered on their own "
                                  "(reshape to (num_heads, head_dim // 2, 2, in) first)")
        compare(got, original, case, "rows", atol=0)
    passed("your reordering of W_Q and W_K rows", len(cases))


def _induction_target_cases(seed):
    """(name, ids (L,)): token sequences with repeats, so that targets exist."""
    rng = generator(seed)
    return [("12 tokens from 4", torch.randint(0, 4, (12,), generator=rng)),
            ("30 tokens from 6", torch.randint(0, 6, (30,), generator=rng)),
            ("9 tokens repeated once", torch.randperm(9, generator=rng).repeat(2))]


def _targets_by_loops(ids, shift):
    """Bool (L, L): key s with ids[s - shift] == ids[t], shift <= s <= t."""
    length = len(ids)
    targets = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for s in range(shift, t + 1):
            targets[t, s] = bool(ids[s - shift] == ids[t])
    return targets


@self_check
def check_induction_targets(fn, seed=0):
    """Check fn(ids (L,)) -> bool (L, L), True where key s follows an earlier occurrence of
    query t's token: ids[s - 1] == ids[t], 1 <= s <= t (an induction head's targets)."""
    cases = _induction_target_cases(seed)
    for case, ids in cases:
        expected = _targets_by_loops(ids, shift=1)
        got = run(fn, (ids.clone(),), case)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if got.dtype != torch.bool:
                raise CheckFailed(f"case '{case}': return a bool matrix, got {got.dtype}")
            if torch.equal(got, _targets_by_loops(ids, shift=0) & ~torch.eye(
                    len(ids), dtype=torch.bool)):
                raise CheckFailed(f"case '{case}': you marked the earlier occurrence of the "
                                  "token itself (a duplicate-token head's target); an "
                                  "induction head looks at the key after it, s with "
                                  "ids[s - 1] == ids[t]")
            if (got & ~torch.ones_like(got).tril()).any():
                raise CheckFailed(f"case '{case}': a key after its query is marked; a decoder "
                                  "query t sees only keys s <= t")
        compare(got.to(torch.int64) if isinstance(got, torch.Tensor) else got,
                expected.to(torch.int64), case, "targets", atol=0)
    passed("your induction targets", len(cases))
