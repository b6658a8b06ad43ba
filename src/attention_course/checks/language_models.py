"""Checks of Part IV (chapters 10-14): RoPE, KV caches and windows, online softmax and tiles, real
models' heads and weights."""

import math

import torch

from .. import decoding, multihead, rotary, tiled
from .core import (
    CheckFailed,
    _passed,
    _self_check,
    _run,
    _compare,
    _generator,
    _random,
    _integers,
)


def _rotate_reference(x, positions, pairs, sign=1.0, base=10000.0):
    """float64 RoPE of x (..., seq, d): pairs "half" (i, i + d/2), Llama's, or
    "adjacent" (2i, 2i + 1), the complex form's; sign -1 turns backwards."""
    x = x.double()
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
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
)


def _rotary_cases(seed):
    cases = [("head_dim 2, positions 0..3", 4, 2),
             ("head_dim 8, positions 0..5", 6, 8),
             ("head_dim 16, scattered positions below 5000", 7, 16)]
    if seed:
        cases = [(f"random case {n}", seq, 2 * half) for n, (seq, half) in
                 enumerate(zip(_integers(seed, 3, 1, 12, 90),
                               _integers(seed, 3, 1, 12, 91)))]
    for number, (case, seq, d) in enumerate(cases):
        positions = torch.arange(seq)
        if number == 2:
            positions = torch.tensor(_integers(seed, seq, 0, 5000, 92))
        yield case, _random((seq, d), seed, 93 + number), positions


@_self_check
def check_rotary(fn, seed=0):
    """Check fn(x (seq, head_dim), positions (seq,)) -> RoPE of x with base
    10000 and Llama's pairing of dimension i with i + head_dim/2."""
    n_cases = 0
    for case, x, where in _rotary_cases(seed):
        expected = _rotate_reference(x, where, "half")
        got = _run(fn, (x, where), case, forbidden=(rotary.apply_rotary,))
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            for options, hint in _ROTARY_MISTAKES:
                wrong = _rotate_reference(x, where, **options)
                close = torch.allclose(got.detach().double(), wrong, atol=1e-4)
                if close and not torch.allclose(wrong, expected, atol=1e-4):
                    raise CheckFailed(f"case '{case}': {hint}")
        _compare(got, expected, case, "rotated x", atol=1e-4)
        n_cases += 1
    _passed("your rotary embedding", n_cases)


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


@_self_check
def check_rotary_attention(fn, seed=0):
    """Check fn(x (seq, d_model), W_q, W_k, W_v (d_model, d)) -> causal
    self-attention output (seq, d) with RoPE on queries and keys only, scores
    scaled by 1 / sqrt(d)."""
    n_cases = 0
    for case, x, _ in _rotary_cases(seed):
        seq, d_model = x.shape
        d = d_model + 2                    # the head size differs from d_model
        w_q, w_k, w_v = (_random((d_model, d), seed, 100 + k) / d_model**0.5
                         for k in range(3))
        weights = (x, w_q, w_k, w_v)
        expected = _rotary_attention_reference(*weights, d**-0.5)
        got = _run(fn, weights, case, forbidden=(rotary.apply_rotary,))
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
        _compare(got, expected, case, "attention output", atol=1e-4)
        n_cases += 1
    _passed("your rotary self-attention", n_cases)


def _window_cases(seed):
    """(case, query positions, key positions, window) for the sliding-window
    checks: a decoding step, a chunk of new queries, a window wider than the
    sequence, and keys left after older ones were evicted."""
    cases = [("one new token at position 9, window 4", [9], range(10), 4),
             ("a chunk of 4 new tokens, window 3", range(6, 10), range(10), 3),
             ("window 100 wider than the sequence", range(3, 7), range(7), 100),
             ("keys 5..10 left in the cache, window 5", [10], range(5, 11), 5)]
    if seed:
        lengths = _integers(seed, 3, 2, 12, 110)
        windows = _integers(seed, 3, 1, 8, 111)
        cases = [(f"random case {n}: {m} tokens, window {w}",
                  range(m - 1 - n, m), range(m), w)
                 for n, (m, w) in enumerate(zip(lengths, windows)) if m > n]
    for case, queries, keys, window in cases:
        yield case, torch.tensor(list(queries)), torch.tensor(list(keys)), window


def _window_by_loops(queries, keys, window, inclusive=False):
    reach = window + 1 if inclusive else window    # keys t - reach < s <= t
    return torch.tensor([[t - reach < s <= t for s in keys.tolist()]
                         for t in queries.tolist()])


@_self_check
def check_sliding_window_mask(fn, seed=0):
    """Check fn(query_positions (L,), key_positions (S,), window) -> bool (L, S):
    True where the query at position t may attend to the key at position s,
    that is t - window < s <= t (the token itself and the window - 1 before it).
    """
    n_cases = 0
    for case, queries, keys, window in _window_cases(seed):
        expected = _window_by_loops(queries, keys, window)
        got = _run(fn, (queries, keys, window), case,
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
        _compare(got.float() if isinstance(got, torch.Tensor) else got,
                 expected.float(), case, "mask")
        n_cases += 1
    _passed("your sliding-window mask", n_cases)


def _cache_cases(seed):
    """(case, held keys, new keys, window) for check_cache_append."""
    shapes = [("empty cache, a prompt of 5, no window", 0, 5, None),
              ("4 held, 1 new, window 3", 4, 1, 3),
              ("2 held, 3 new, window 4", 2, 3, 4),
              ("6 held, 1 new, window 10", 6, 1, 10)]
    if seed:
        held = _integers(seed, 3, 0, 8, 120)
        new = _integers(seed, 3, 1, 5, 121)
        windows = _integers(seed, 3, 1, 7, 122)
        shapes = [(f"random case {n}", h, t, w)
                  for n, (h, t, w) in enumerate(zip(held, new, windows))]
    for number, (case, held, new, window) in enumerate(shapes):
        keys = _random((2, 3, held + new, 4), seed, 130 + number)
        yield case, keys[:, :, :held], keys[:, :, held:], window


@_self_check
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
        got = _run(fn, (held.clone(), new.clone(), window), case)
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
        _compare(attend_to, expected_all, case, "attend_to")
        _compare(kept, expected_kept, case, "kept")
        n_cases += 1
    _passed("your cache update", n_cases)


def _score_rows(seed):
    """(case, scores (rows, n), block size) for check_online_softmax_update:
    each row is streamed to the update block by block."""
    normal = _random((3, 12), seed, 140)
    cases = [("3 rows of 12 scores, blocks of 4", normal, 4),
             ("huge scores (around 1000)", normal + 1000, 5),
             ("very negative scores (around -1000)", normal - 1000, 3),
             ("each block's maximum above the last", torch.arange(
                 12.0).repeat(2, 1) + _random((2, 12), seed, 141) * 0.1, 4),
             ("one block", normal[:, :7], 7)]
    masked = _random((2, 9), seed, 142)
    masked[0, :3] = -float("inf")
    cases.append(("the first block of row 0 fully masked (-inf)", masked, 3))
    between = _random((2, 9), seed, 143)
    between[1, 3:6] = -float("inf")
    cases.append(("row 1's middle block fully masked, between finite ones",
                  between, 3))
    if seed:
        sizes = _integers(seed, 3, 1, 6, 144)
        cases += [(f"random case {n}, blocks of {b}",
                   _random((2, 3 * b + n), seed, 145 + n) * 10, b)
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


@_self_check
def check_online_softmax_update(fn, seed=0):
    """Check fn(running_max (rows,), running_sum (rows,), block (rows, b)) ->
    (new_max, new_sum): after the blocks of a row have been passed in order,
    starting from (-inf, 0), running_max is the row's maximum m and
    running_sum is sum_j exp(s_j - m). A block whose scores are all -inf
    (a masked row) must leave that row's state as it was."""
    n_cases = 0
    for case, scores, block_size in _score_rows(seed):
        def learners(running_max, running_sum, block):
            got = _run(fn, (running_max.clone(), running_sum.clone(),
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
        _compare(got_max, expected_max, case, "running maximum",
                 explain_nan=explain)
        _compare(got_sum, expected_sum, case, "running sum",
                 explain_nan=explain)
        n_cases += 1
    _passed("your online-softmax update", n_cases)


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
        sizes = _integers(seed, 16, 1, 20, 150)
        shapes = [(sizes[i], sizes[i + 1], 1 + sizes[i + 2] % 6,
                   1 + sizes[i + 3] % 6) for i in range(0, 16, 4)]
    return shapes


@_self_check
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
        got = _run(fn, (n_queries, n_keys, query_block, key_block), case,
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
    _passed("your causal tile list", n_cases)


def _word_id_cases(seed):
    """Word ids as the tokenizer gives them: None for [CLS] and [SEP], and
    words of 1 to 4 pieces; a first case without any word, one of one word."""
    generator = _generator(seed, 13)
    cases = [("[CLS] [SEP] only", [None, None]),
             ("one word of three pieces", [None, 0, 0, 0, None])]
    for number in range(5):
        n_words = int(torch.randint(2, 7, (1,), generator=generator))
        pieces = torch.randint(1, 5, (n_words,), generator=generator).tolist()
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


@_self_check
def check_previous_word_targets(fn, seed=0):
    """Check fn(word_ids) -> bool (n, n): True where key j is a piece of the
    word just before query i's word. word_ids: one entry per token, the index
    of its word, or None for [CLS] and [SEP] (which have no targets and are
    never targets)."""
    cases = _word_id_cases(seed)
    for case, word_ids in cases:
        got = _run(fn, (list(word_ids),), case)
        expected = _previous_word_by_loops(word_ids)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            _compare(got, expected.double(), case, "targets")
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
    _passed("your previous-word targets", len(cases))


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


@_self_check
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
        x = _random((2, 5, width), seed, number)
        before = {k: v.clone() for k, v in attention.state_dict().items()}
        with torch.no_grad():
            expected = _heads_by_hand(attention, x, zeroed_head=head)
        ablated = _run(fn, (attention, head), case)
        after = attention.state_dict()
        if any(not torch.equal(before[k], after[k]) for k in before):
            raise CheckFailed(f"case '{case}': you changed the original "
                              "layer's weights; change a copy "
                              "(copy.deepcopy(attention))")
        if not isinstance(ablated, torch.nn.Module):
            raise CheckFailed(f"case '{case}': return the ablated copy of "
                              f"the layer, not a {type(ablated).__name__}")
        with torch.no_grad():
            got = _run(ablated, (x, x, x), case)
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
        _compare(got, expected, case, "ablated layer's output")
    _passed("your head ablation", len(cases))


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
    return [(name, _random((heads * head_dim, columns), seed, number), heads)
            for number, (name, heads, head_dim, columns) in enumerate(shapes)]


@_self_check
def check_half_split_rows(fn, seed=0):
    """Check fn(weight (num_heads * head_dim, in), num_heads) -> the same rows in the
    half-split order: the inverse of the GGUF converter's reordering of W_Q and W_K."""
    from ..pretrained import smollm2

    cases = _half_split_cases(seed)
    for case, original, heads in cases:
        gguf_rows = _converter_permute(original, heads)
        got = _run(fn, (gguf_rows, heads), case,
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
        _compare(got, original, case, "rows", atol=0)
    _passed("your reordering of W_Q and W_K rows", len(cases))


def _induction_target_cases(seed):
    """(name, ids (L,)): token sequences with repeats, so that targets exist."""
    generator = _generator(seed)
    return [("12 tokens from 4", torch.randint(0, 4, (12,), generator=generator)),
            ("30 tokens from 6", torch.randint(0, 6, (30,), generator=generator)),
            ("9 tokens repeated once", torch.randperm(9, generator=generator).repeat(2))]


def _targets_by_loops(ids, shift):
    """Bool (L, L): key s with ids[s - shift] == ids[t], shift <= s <= t."""
    length = len(ids)
    targets = torch.zeros(length, length, dtype=torch.bool)
    for t in range(length):
        for s in range(shift, t + 1):
            targets[t, s] = bool(ids[s - shift] == ids[t])
    return targets


@_self_check
def check_induction_targets(fn, seed=0):
    """Check fn(ids (L,)) -> bool (L, L), True where key s follows an earlier occurrence of
    query t's token: ids[s - 1] == ids[t], 1 <= s <= t (an induction head's targets)."""
    cases = _induction_target_cases(seed)
    for case, ids in cases:
        expected = _targets_by_loops(ids, shift=1)
        got = _run(fn, (ids.clone(),), case)
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
        _compare(got.to(torch.int64) if isinstance(got, torch.Tensor) else got,
                 expected.to(torch.int64), case, "targets", atol=0)
    _passed("your induction targets", len(cases))
