"""The checks of chapter 11's exercises (the sliding-window mask and cache, cached generation
wired by hand) accept correct answers written independently and name the usual mistakes."""

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

import attention_course
from attention_course import KVCache, apply_rotary, checks
from attention_course.checks import CheckFailed
from helpers.rotary_reference import rotation_matrix


def window_mask_by_comparison(queries, keys, window):
    offsets = queries[:, None] - keys[None, :]  # t - s, (L, S)
    return (offsets >= 0) & (offsets < window)


def append_by_cat(held, new, window):
    everything = torch.cat([held, new], dim=2)
    return everything, everything if window is None else everything[:, :, -window:]


def generate_with_own_lists(
    model, ids, max_new_tokens, chunk=None, restart=False, mask="bottom-right", refeed=False
):
    """Cached greedy decoding written without the package's cache, RoPE or
    attention: per layer, lists of keys and values rotated by explicit
    matrices, a mask from a comparison of positions, a softmax by hand. The
    keywords make it one of the usual wrong answers instead."""
    keys, values = [[] for _ in model.blocks], [[] for _ in model.blocks]
    seen = [0]

    def heads(projection, h, count):  # (batch, L, n d) -> (b, n, L, d)
        batch, length, _ = h.shape
        return projection(h).reshape(batch, length, count, -1).transpose(1, 2)

    def attend(block, layer_keys, layer_values, h, where):
        attention = block.attention
        turn = torch.stack(
            [rotation_matrix(int(p), attention.head_dim, block.base) for p in where]
        )  # (L, d, d)
        q = torch.einsum("lij,bhlj->bhli", turn, heads(attention.q_proj, h, attention.num_heads))
        k = torch.einsum("lij,bhlj->bhli", turn, heads(attention.k_proj, h, attention.num_kv_heads))
        v = heads(attention.v_proj, h, attention.num_kv_heads)
        layer_keys.append(k)
        layer_values.append(v)
        group = attention.num_heads // attention.num_kv_heads
        all_keys = torch.cat(layer_keys, 2).repeat_interleave(group, 1)
        all_values = torch.cat(layer_values, 2).repeat_interleave(group, 1)
        n_new, n_all = len(where), all_keys.shape[2]
        if mask == "bottom-right":  # key s <= the query's place n_all - L + i
            allowed = torch.arange(n_all)[None, :] <= torch.arange(n_all - n_new, n_all)[:, None]
        else:  # "top-left" on chunks, none for one
            allowed = torch.ones(n_new, n_all, dtype=torch.bool)
            if n_new > 1:
                allowed = allowed.tril()
        scores = q @ all_keys.transpose(-2, -1) / attention.head_dim**0.5
        weights = torch.softmax(scores.masked_fill(~allowed, -torch.inf), -1)
        return attention.out_proj((weights @ all_values).transpose(1, 2).flatten(2))

    def read(new):  # (batch, L) -> logits
        start = 0 if restart else seen[0]
        where = range(start, start + new.shape[1])
        seen[0] += new.shape[1]
        x = model.embed(new)
        for block, layer_keys, layer_values in zip(model.blocks, keys, values):
            x = x + attend(block, layer_keys, layer_values, block.attention_norm(x), where)
            h = block.mlp_norm(x)
            x = x + block.down_proj(torch.nn.functional.silu(block.gate_proj(h)) * block.up_proj(h))
        return model.lm_head(model.norm(x))[:, -1]

    step = chunk or ids.shape[1]
    for start in range(0, ids.shape[1], step):
        logits = read(ids[:, start : start + step])
    tokens = ids
    for _ in range(max_new_tokens):
        if refeed:
            logits = read(tokens[:, -1:])
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], 1)
        if not refeed:
            logits = read(tokens[:, -1:])
    return tokens


def generate_with_kv_cache(model, ids, max_new_tokens, chunk=None, twice=False, slip=None):
    """As a learner would write it: KVCache, apply_rotary and PyTorch's SDPA
    with a bottom-right mask; with twice=True every update is done twice.
    slip: one usual mistake, "default base" (apply_rotary without block.base),
    "is_causal" (SDPA's is_causal=True instead of the mask), "repeat" (GQA by
    .repeat), "rotated again" (the keys cache.update returns rotated once
    more) or "no scale" (attention by hand without 1/sqrt(d_h))."""
    caches = [KVCache() for _ in model.blocks]

    def attend(block, h, positions, cache):
        attention = block.attention
        base = {} if slip == "default base" else {"base": block.base}
        q = attention.q_proj(h).unflatten(-1, (attention.num_heads, -1))
        q = apply_rotary(q.transpose(1, 2), positions, **base)
        k, v = attention.project_kv(h)
        k = apply_rotary(k, positions, **base)
        all_keys, all_values = cache.update(k, v)
        if twice:
            cache.update(k, v)
        if slip == "rotated again":
            all_keys = apply_rotary(all_keys, torch.arange(all_keys.shape[2]), block.base)
        n_new, n_all = len(positions), all_keys.shape[2]
        mask = torch.ones(n_new, n_all, dtype=torch.bool).tril(n_all - n_new)
        group = attention.num_heads // attention.num_kv_heads
        if slip == "is_causal":
            out = torch.nn.functional.scaled_dot_product_attention(
                q, all_keys, all_values, is_causal=True, enable_gqa=True
            )
        elif slip == "repeat":
            out = torch.nn.functional.scaled_dot_product_attention(
                q, all_keys.repeat(1, group, 1, 1), all_values.repeat(1, group, 1, 1), mask
            )
        elif slip == "no scale":
            scores = q @ all_keys.repeat_interleave(group, 1).transpose(-2, -1)
            weights = torch.softmax(scores.masked_fill(~mask, -torch.inf), -1)
            out = weights @ all_values.repeat_interleave(group, 1)
        else:
            out = torch.nn.functional.scaled_dot_product_attention(
                q, all_keys, all_values, attn_mask=mask, enable_gqa=True
            )
        return attention.out_proj(out.transpose(1, 2).flatten(2))

    def read(new):
        positions = torch.arange(caches[0].seen, caches[0].seen + new.shape[1])
        x = model.embed(new)
        for block, cache in zip(model.blocks, caches):
            x = x + attend(block, block.attention_norm(x), positions, cache)
            h = block.mlp_norm(x)
            x = x + block.down_proj(torch.nn.functional.silu(block.gate_proj(h)) * block.up_proj(h))
        return model.lm_head(model.norm(x[:, -1]))

    step = chunk or ids.shape[1]
    for start in range(0, ids.shape[1], step):
        logits = read(ids[:, start : start + step])
    for number in range(max_new_tokens):
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
        if number < max_new_tokens - 1:
            logits = read(ids[:, -1:])
    return ids


INDEPENDENT_ANSWERS = [
    ("check_sliding_window_mask", window_mask_by_comparison),
    ("check_cache_append", append_by_cat),
    ("check_generate_cached", generate_with_own_lists),
    ("check_generate_cached", generate_with_kv_cache),
]


@pytest.mark.parametrize("seed", (0, *HIDDEN_SEEDS))
@pytest.mark.parametrize(
    "check, answer", INDEPENDENT_ANSWERS, ids=[name for name, _ in INDEPENDENT_ANSWERS]
)
def test_checks_pass_independent_answers(check, answer, seed, capsys):
    getattr(checks, check)(answer, seed=seed)
    assert capsys.readouterr().out.startswith("Correct")


def test_decoding_checks_explain_the_usual_mistakes():
    with pytest.raises(CheckFailed, match="inverted"):
        checks.check_sliding_window_mask(lambda q, k, w: ~window_mask_by_comparison(q, k, w))
    with pytest.raises(CheckFailed, match="window \\+ 1 keys"):
        checks.check_sliding_window_mask(lambda q, k, w: window_mask_by_comparison(q, k, w + 1))
    with pytest.raises(CheckFailed, match="aligned top-left"):
        checks.check_sliding_window_mask(
            lambda q, k, w: torch.ones(len(q), len(k), dtype=torch.bool).tril()
        )
    with pytest.raises(CheckFailed, match="calls `decoding_mask`"):
        checks.check_sliding_window_mask(attention_course.decoding_mask)
    with pytest.raises(CheckFailed, match="kept the first window tokens"):
        checks.check_cache_append(
            lambda h, n, w: (torch.cat([h, n], 2), torch.cat([h, n], 2)[:, :, :w])
        )
    with pytest.raises(CheckFailed, match="attend_to holds only the last"):
        checks.check_cache_append(lambda h, n, w: (append_by_cat(h, n, w)[1],) * 2)
    with pytest.raises(CheckFailed, match="return two tensors"):
        checks.check_cache_append(lambda h, n, w: torch.cat([h, n], 2))


def test_generation_check_explains_the_usual_mistakes():
    def wrong(**slip):
        return lambda m, i, n, chunk=None: generate_with_own_lists(m, i, n, chunk, **slip)

    with pytest.raises(CheckFailed, match="positions restart at 0"):
        checks.check_generate_cached(wrong(restart=True))
    with pytest.raises(CheckFailed, match="chunks of [34].*aligned top-left"):
        checks.check_generate_cached(wrong(mask="top-left"))
    with pytest.raises(CheckFailed, match="received 26 tokens for a text of 14"):
        checks.check_generate_cached(
            lambda m, i, n, chunk=None: generate_with_kv_cache(m, i, n, chunk, twice=True)
        )
    with pytest.raises(CheckFailed, match="last token is read again"):
        checks.check_generate_cached(wrong(refeed=True))

    def without_cache(model, ids, max_new_tokens, chunk=None):
        for _ in range(max_new_tokens):  # the whole text every step
            ids = generate_with_own_lists(model, ids, 1)
        return ids

    with pytest.raises(CheckFailed, match="reads 84 token positions for a text of 14"):
        checks.check_generate_cached(without_cache)

    def unchunked(model, ids, max_new_tokens, chunk=None):
        return generate_with_own_lists(model, ids, max_new_tokens)

    with pytest.raises(CheckFailed, match="chunks of at most chunk=4"):
        checks.check_generate_cached(unchunked)
    with pytest.raises(CheckFailed, match="calls `model.generate`"):
        checks.check_generate_cached(lambda m, i, n, chunk=None: m.generate(i, n, use_cache=False))
    with pytest.raises(CheckFailed, match="calls `block\\(...\\)`"):
        checks.check_generate_cached(
            lambda m, i, n, chunk=None: m.blocks[0](m.embed(i), torch.arange(i.shape[1]))
        )
    with pytest.raises(CheckFailed, match="takes chunk=..."):
        checks.check_generate_cached(lambda m, i, n: generate_with_own_lists(m, i, n))


@pytest.mark.parametrize(
    "slip, message",
    [
        ("default base", "default base 10000, not the block's: pass base=block.base"),
        ("is_causal", "aligned top-left \\(is_causal=True"),
        ("repeat", "repeat_interleave\\(group, dim=1\\)"),
        ("rotated again", "cached keys are rotated a second time"),
        ("no scale", "not divided by sqrt\\(d_h\\)"),
    ],
)
def test_generation_check_names_the_cause_of_each_slip(slip, message):
    def wrong(model, ids, max_new_tokens, chunk=None):
        return generate_with_kv_cache(model, ids, max_new_tokens, chunk, slip=slip)

    for seed in (0, *HIDDEN_SEEDS):
        with pytest.raises(CheckFailed, match=message):
            checks.check_generate_cached(wrong, seed=seed)


def test_window_checks_name_a_window_without_the_token_and_the_wrong_axis():
    def without_itself(queries, keys, window):
        offsets = queries[:, None] - keys[None, :]
        return (offsets > 0) & (offsets < window)

    def shifted(queries, keys, window):
        offsets = queries[:, None] - keys[None, :]
        return (offsets > 0) & (offsets <= window)

    def last_axis(held, new, window):
        everything = torch.cat([held, new], dim=2)
        return everything, everything if window is None else everything[..., -window:]

    with pytest.raises(CheckFailed, match="may not see itself"):
        checks.check_sliding_window_mask(without_itself)
    with pytest.raises(CheckFailed, match="shifted by one"):
        checks.check_sliding_window_mask(shifted)
    with pytest.raises(CheckFailed, match="the tokens are on axis 2"):
        checks.check_cache_append(last_axis)
