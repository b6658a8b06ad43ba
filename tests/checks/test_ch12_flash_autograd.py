"""The check of chapter 12's exercise 5 (FlashAttention-2 as an autograd Function) passes an
independent answer and names the usual mistakes."""

import math

import pytest
import torch
from learner_answers import HIDDEN_SEEDS

import attention_course
from attention_course import checks
from attention_course.checks import CheckFailed


def flash_by_key_blocks(mistake=None):
    """An autograd Function for the FlashAttention check, written another way:
    the key blocks outside and the query blocks inside (as the first
    FlashAttention), a normalised running output, a running log-sum-exp
    merged with logaddexp; the backward sums over key blocks outside. With
    `mistake`, one typical error of a learner."""

    def blocks(n, size):
        return [range(start, min(start + size, n)) for start in range(0, n, size)]

    def masked_scores(q, k, rows, cols, is_causal, backward=False):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if is_causal and not (backward and mistake == "no mask in backward"):
            later = torch.tensor(cols)[None, :] > torch.tensor(rows)[:, None]
            if mistake == "tile-local mask":  # the tile's own indices
                later = torch.ones(len(rows), len(cols), dtype=torch.bool).triu(1)
            scores = scores.masked_fill(later, -math.inf)
        return scores

    def needed(rows, cols, is_causal, query_block, key_block):
        if not is_causal or mistake == "no skip":
            return True
        if mistake == "block index":
            return cols.start // key_block <= rows.start // query_block
        if mistake == "first query":
            return cols[0] <= rows[0]
        return cols[0] <= rows[-1]

    class Flash(torch.autograd.Function):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            shape = query.shape[:-1]
            lse = query.new_full(shape, -math.inf)  # (..., L)
            out = query.new_zeros(*shape, value.shape[-1])
            for cols in blocks(key.shape[-2], key_block):
                k, v = key[..., cols, :], value[..., cols, :]
                for rows in blocks(query.shape[-2], query_block):
                    if not needed(rows, cols, is_causal, query_block, key_block):
                        continue
                    scores = masked_scores(query[..., rows, :], k, rows, cols, is_causal)
                    tile_lse = torch.logsumexp(scores, dim=-1)
                    new_lse = torch.logaddexp(lse[..., rows], tile_lse)
                    keep = torch.exp(lse[..., rows] - new_lse)
                    if mistake == "accumulator not rescaled":
                        keep = torch.ones_like(keep)
                    weights = torch.exp(scores - new_lse[..., None])
                    out[..., rows, :] = out[..., rows, :] * keep[..., None] + weights @ v
                    lse[..., rows] = new_lse
            saved = (query, key, value, out, lse)
            if mistake and mistake.startswith("saves the weights"):
                weights = torch.softmax(
                    masked_scores(
                        query, key, range(query.shape[-2]), range(key.shape[-2]), is_causal
                    ),
                    dim=-1,
                )
                if mistake.endswith("in ctx"):
                    ctx.weights = weights
                elif mistake.endswith("in a ctx dict"):
                    ctx.tiles = {"all": weights}
                else:
                    saved = (*saved, weights)
            ctx.save_for_backward(*saved)
            ctx.options = is_causal, query_block, key_block
            return out

        @staticmethod
        def backward(ctx, grad_out):
            query, key, value, out, lse = ctx.saved_tensors
            is_causal, query_block, key_block = ctx.options
            scale = 1 / math.sqrt(query.shape[-1])
            delta = torch.einsum("...ld,...ld->...l", grad_out, out)
            dq = torch.zeros_like(query)
            dk, dv = torch.zeros_like(key), torch.zeros_like(value)
            for cols in blocks(key.shape[-2], key_block):
                k, v = key[..., cols, :], value[..., cols, :]
                for rows in blocks(query.shape[-2], query_block):
                    if not needed(rows, cols, is_causal, query_block, key_block):
                        continue
                    q, g = query[..., rows, :], grad_out[..., rows, :]
                    scores = masked_scores(q, k, rows, cols, is_causal, backward=True)
                    p = torch.exp(scores - lse[..., rows, None])
                    if mistake == "tile softmax":
                        p = torch.softmax(scores, dim=-1)
                    dp = g @ v.transpose(-2, -1)
                    row_delta = (p * dp).sum(-1) if mistake == "tile delta" else delta[..., rows]
                    ds = p * (dp - row_delta[..., None])
                    if mistake == "dV assigned":
                        dv[..., cols, :] = p.transpose(-2, -1) @ g
                        dk[..., cols, :] = ds.transpose(-2, -1) @ q * scale
                    else:
                        dv[..., cols, :] += p.transpose(-2, -1) @ g
                        dk_scale = 1 if mistake == "dK unscaled" else scale
                        dk[..., cols, :] += ds.transpose(-2, -1) @ q * dk_scale
                    dq_scale = 1 if mistake == "dQ unscaled" else scale
                    if mistake == "dQ assigned":
                        dq[..., rows, :] = ds @ k * scale
                    else:
                        dq[..., rows, :] += ds @ k * dq_scale
            return dq, dk, dv, None, None, None

    return Flash


def flash_by_full_matrices():
    """Right answers, computed from whole (L, S) matrices: not FlashAttention."""

    class Naive(torch.autograd.Function):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
            if is_causal:
                scores = scores.masked_fill(
                    torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), -math.inf
                )
            lse = torch.logsumexp(scores, dim=-1)
            out = torch.exp(scores - lse[..., None]) @ value
            ctx.save_for_backward(query, key, value, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad_out):
            raise AssertionError("not reached")

    return Naive


def test_flash_check_passes_an_independent_answer(capsys):
    for seed in (0, *HIDDEN_SEEDS):
        checks.check_flash_autograd(flash_by_key_blocks(), seed=seed)
    assert capsys.readouterr().out.count("Correct") == 1 + len(HIDDEN_SEEDS)


@pytest.mark.parametrize(
    "mistake, message",
    [
        ("accumulator not rescaled", r"multiplied by exp\(m_old - m_new\)"),
        ("block index", "compare positions"),
        ("no skip", r"hold only 6\d% of the scores"),
        ("saves the weights in ctx", "you keep tensors in ctx.weights"),
        ("saves the weights in a ctx dict", "you keep tensors in ctx.tiles"),
        ("tile-local mask", "build the mask from global positions"),
        ("first query", "only when its first key comes after the block's last query"),
        ("tile softmax", r"exp\(S - lse\), with the saved log-sum-exp"),
        ("dV assigned", "dK and dV are sums over every query block"),
        ("dQ assigned", "dQ is a sum over every key block"),
        ("saves the weights", r"you saved tensors of shapes .*\(20, 13\)\]"),
        ("tile delta", "not one tile's"),
        ("no mask in backward", "forward pass's causal mask"),
        ("dK unscaled", r"dK = dS\^T Q / sqrt\(d\)"),
        ("dQ unscaled", r"dQ = dS K / sqrt\(d\)"),
    ],
)
def test_flash_check_explains_the_usual_mistakes(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_flash_autograd(flash_by_key_blocks(mistake))


def test_flash_check_refuses_whole_matrices_and_pytorchs_answers():
    with pytest.raises(
        CheckFailed,
        match=r"forward pass made a tensor of shape "
        r"\(20, 13\)",
    ):
        checks.check_flash_autograd(flash_by_full_matrices())

    class CallsPyTorch(flash_by_key_blocks()):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            return torch.nn.functional.scaled_dot_product_attention(
                query, key, value, is_causal=is_causal
            )

    with pytest.raises(CheckFailed, match="calls `scaled_dot_product_attention`"):
        checks.check_flash_autograd(CallsPyTorch)

    class CallsThePackage(flash_by_key_blocks()):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            return attention_course.flash_attention(query, key, value, is_causal)[0]

    with pytest.raises(CheckFailed, match="calls `flash_attention`"):
        checks.check_flash_autograd(CallsThePackage)


def flash_forward_by_query_blocks(mistake):
    """A forward pass in FlashAttention-2's order (query blocks outside) with
    one of three slips, in combining the tiles or saving log l without m; the
    check stops before backward."""

    class Slipped(flash_by_key_blocks()):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            out = torch.empty(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
            log_l = torch.empty(query.shape[:-1], dtype=query.dtype)
            for r0 in range(0, query.shape[-2], query_block):
                q = query[..., r0 : r0 + query_block, :] / math.sqrt(query.shape[-1])
                m = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
                total, acc = torch.zeros_like(m), 0.0
                for c0 in range(0, key.shape[-2], key_block):
                    s = q @ key[..., c0 : c0 + key_block, :].transpose(-2, -1)
                    if is_causal:
                        i = torch.arange(r0, r0 + s.shape[-2])[:, None]
                        s = s.masked_fill(torch.arange(c0, c0 + s.shape[-1]) > i, -math.inf)
                    new_m = torch.maximum(m, s.amax(-1))
                    factor = torch.exp(m - new_m)
                    p = torch.exp(s - new_m[..., None])
                    total = total * factor + p.sum(-1)
                    acc = acc * factor[..., None] + p @ value[..., c0 : c0 + key_block, :]
                    if mistake == "normalised in the loop":
                        acc = acc / total[..., None]
                    m = new_m
                out[..., r0 : r0 + query_block, :] = (
                    acc if mistake == "normalised in the loop" else acc / total[..., None]
                )
                log_l[..., r0 : r0 + query_block] = total.log()
            if mistake == "saves log l":
                ctx.save_for_backward(query, key, value, out, log_l)
            return out

    return Slipped


def test_flash_check_names_a_normalisation_inside_the_loop():
    with pytest.raises(CheckFailed, match="divide by the sum once"):
        checks.check_flash_autograd(flash_forward_by_query_blocks("normalised in the loop"))


def test_flash_check_names_log_l_saved_without_the_maximum():
    with pytest.raises(CheckFailed, match="you saved log l.*without the running maximum m"):
        checks.check_flash_autograd(flash_forward_by_query_blocks("saves log l"))


def test_flash_check_blames_the_causal_tiles_not_the_rescaling():
    """A skip that drops needed tiles, written another way than the check's
    own mistakes (a tile is skipped when its last key comes after the
    block's first query): right with one key block, right without the mask."""

    class SkipsByLastKey(flash_forward_by_query_blocks(None)):
        @staticmethod
        def forward(ctx, query, key, value, is_causal, query_block, key_block):
            out = torch.empty(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
            lse = torch.empty(query.shape[:-1], dtype=query.dtype)
            for r0 in range(0, query.shape[-2], query_block):
                rows = torch.arange(r0, min(r0 + query_block, query.shape[-2]))
                q = query[..., rows, :] / math.sqrt(query.shape[-1])
                m = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
                total, acc = torch.zeros_like(m), 0.0
                for c0 in range(0, key.shape[-2], key_block):
                    cols = torch.arange(c0, min(c0 + key_block, key.shape[-2]))
                    if is_causal and c0 > 0 and cols[-1] > rows[0]:
                        continue
                    s = q @ key[..., cols, :].transpose(-2, -1)
                    if is_causal:
                        s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
                    new_m = torch.maximum(m, s.amax(-1))
                    factor = torch.exp(m - new_m)
                    p = torch.exp(s - new_m[..., None])
                    total = total * factor + p.sum(-1)
                    acc = acc * factor[..., None] + p @ value[..., cols, :]
                    m = new_m
                out[..., rows, :] = acc / total[..., None]
                lse[..., rows] = m + total.log()
            ctx.save_for_backward(query, key, value, out, lse)
            return out

    with pytest.raises(CheckFailed, match="the causal tiles are wrong") as failure:
        checks.check_flash_autograd(SkipsByLastKey)
    assert "exp(m_old - m_new)" not in str(failure.value)


def test_flash_check_asks_for_the_saved_log_sum_exp():
    """A right forward pass that saves nothing."""
    with pytest.raises(CheckFailed, match="save the log-sum-exp"):
        checks.check_flash_autograd(flash_forward_by_query_blocks(None))


def test_flash_check_counts_the_gradients():
    class ThreeGradients(flash_by_key_blocks()):
        @staticmethod
        def backward(ctx, grad_out):
            return flash_by_key_blocks().backward(ctx, grad_out)[:3]

    with pytest.raises(CheckFailed, match="and then None for is_causal"):
        checks.check_flash_autograd(ThreeGradients)
