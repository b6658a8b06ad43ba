"""Check of chapter 12's exercise 5: FlashAttention-2 as a torch.autograd.Function, forward and
backward, against PyTorch's attention and its gradients. It also measures the largest tensor
each pass makes, what the forward pass saves, and the multiply-adds that the causal tiles skip
(measure.largest_tensor, measure.count_multiply_adds)."""

import collections
import itertools
import math

import torch

from .. import measure, tiled
from .core import CheckFailed, NotAnswered, compare, integers, passed, random, run, self_check
from .core import all_close as allclose

_FlashCase = collections.namedtuple(
    "_FlashCase",
    "name batch n_queries n_keys dim value_dim query_block key_block is_causal dtype magnitude",
)


def _flash_cases(seed):
    """Lengths that are not multiples of the blocks, blocks of different
    sizes either way round, causal or not, float64 and float32, huge scores."""
    case, f64 = _FlashCase, torch.float64
    if seed:
        sizes = integers(seed, 24, 1, 41, 160)
        return [
            case(
                f"random case {n}",
                (2,),
                sizes[n],
                sizes[n + 6],
                4 * (1 + sizes[n + 12] % 2),
                4,
                1 + sizes[n + 18] % 12,
                1 + sizes[n + 12] % 11,
                bool(sizes[n] % 2),
                f64,
                1,
            )
            for n in range(6)
        ]
    return [
        case("no mask, no batch", (), 20, 13, 8, 6, 8, 5, False, f64, 1),
        case("causal, key blocks smaller", (2,), 30, 30, 8, 8, 8, 4, True, f64, 1),
        case("causal, key blocks larger", (2, 2), 29, 29, 4, 4, 4, 7, True, f64, 1),
        case("causal, fewer keys than queries", (2,), 23, 11, 8, 5, 5, 3, True, f64, 1),
        case("causal, scores around 1e3", (2,), 25, 25, 8, 8, 6, 5, True, f64, 30),
        case("no mask, float32", (2,), 40, 36, 4, 4, 8, 6, False, torch.float32, 1),
        case("one tile holds everything", (1,), 6, 6, 4, 4, 16, 16, True, f64, 1),
    ]


def _flash_inputs(case, seed, number):
    """Query, key and value (requiring gradients) and the output's gradient."""
    shapes = [
        (*case.batch, case.n_queries, case.dim),
        (*case.batch, case.n_keys, case.dim),
        (*case.batch, case.n_keys, case.value_dim),
        (*case.batch, case.n_queries, case.value_dim),
    ]
    q, k, v, grad_output = (
        random(shape, seed, 170 + 4 * number + i).to(case.dtype) for i, shape in enumerate(shapes)
    )
    q, k = q * case.magnitude, k * case.magnitude
    return [t.requires_grad_() for t in (q, k, v)], grad_output


def _flash_tiles(case, mistake=None):
    """(rows, cols, mask or None) of each tile computed: mask (B_r, B_c) is
    True where a key comes after its query; the tiles entirely above the
    diagonal are skipped. Or those of a mistake: "block index" (skip key
    block c > query block r), "first query" (skip a tile whose first key
    comes after the block's first query), "tile-local mask" (the mask
    triu(1) of the tile's own row and column indices)."""
    for r, q0 in enumerate(range(0, case.n_queries, case.query_block)):
        rows = slice(q0, min(q0 + case.query_block, case.n_queries))
        for c, k0 in enumerate(range(0, case.n_keys, case.key_block)):
            cols = slice(k0, min(k0 + case.key_block, case.n_keys))
            skip = {"block index": c > r, "first query": k0 > q0}.get(mistake, k0 >= rows.stop)
            if case.is_causal and skip:
                continue
            mask = None
            if case.is_causal and mistake == "tile-local mask":
                mask = torch.ones(rows.stop - q0, cols.stop - k0, dtype=torch.bool).triu(1)
            elif case.is_causal:
                mask = (
                    torch.arange(cols.start, cols.stop)[None, :]
                    > torch.arange(rows.start, rows.stop)[:, None]
                )
            yield rows, cols, mask


def _flash_forward(q, k, v, case, mistake=None):
    """float64 FlashAttention-2 forward -> (output,), or that of a typical
    mistake: "no rescale", "accumulator not rescaled", "normalised in the
    loop", or one of _flash_tiles' mistakes."""
    q, k, v = q.detach().double(), k.detach().double(), v.detach().double()
    scale = q.shape[-1] ** -0.5
    output = v.new_zeros(*q.shape[:-1], v.shape[-1])
    tiles = _flash_tiles(case, mistake)
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
        output[..., rows, :] = a if mistake == "normalised in the loop" else a / l[..., None]
    return (output,)


def _flash_backward(q, k, v, grad_output, statistics, case, mistake=None):
    """float64 FlashAttention-2 backward -> (dQ, dK, dV) from the log-sum-exp,
    or that of a typical mistake: "tile delta" (D from one tile's weights),
    "no scale" (dQ, dK without 1/sqrt(d)), "no mask", "tile softmax" (each
    tile's weights normalised on their own), "dK dV assigned" or "dQ
    assigned" (= instead of +=: the last tile's share only)."""
    q, k, v = q.detach().double(), k.detach().double(), v.detach().double()
    output, logsumexp = statistics["output"], statistics["logsumexp"]
    grad_output, scale = grad_output.double(), q.shape[-1] ** -0.5
    delta = (grad_output * output).sum(-1)  # D: (..., L)
    grads = [torch.zeros_like(t) for t in (q, k, v)]
    for rows, cols, mask in _flash_tiles(case):
        s = q[..., rows, :] @ k[..., cols, :].transpose(-2, -1) * scale
        if mask is not None and mistake != "no mask":
            s = s.masked_fill(mask, -math.inf)
        p = torch.exp(s - logsumexp[..., rows, None])
        if mistake == "tile softmax":
            p = torch.softmax(s, dim=-1)
        d_out = grad_output[..., rows, :]
        dp = d_out @ v[..., cols, :].transpose(-2, -1)
        d = (p * dp).sum(-1) if mistake == "tile delta" else delta[..., rows]
        ds = p * (dp - d[..., None]) * (1 if mistake == "no scale" else scale)
        shares = (ds @ k[..., cols, :], ds.transpose(-2, -1) @ q[..., rows, :])
        shares += (p.transpose(-2, -1) @ d_out,)  # this tile's dQ, dK, dV
        assigned = (mistake == "dQ assigned",) + (mistake == "dK dV assigned",) * 2
        for grad, where, share, replace in zip(grads, (rows, cols, cols), shares, assigned):
            if replace:  # the earlier tiles' shares are lost
                grad[..., where, :] = share
            else:
                grad[..., where, :] += share
    return grads


def _flash_expected(q, k, v, grad_output, case):
    """PyTorch's answers in float64: the output, its gradients dQ, dK, dV,
    and the log-sum-exp and maximum of each query's scaled, masked scores."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    output = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=case.is_causal)
    grads = torch.autograd.grad(output, (q, k, v), grad_output.double())
    scores = q.detach() @ k.detach().transpose(-2, -1) * q.shape[-1] ** -0.5
    if case.is_causal:
        above = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(above, -math.inf)
    return {
        "output": output.detach(),
        "grads": grads,
        "logsumexp": torch.logsumexp(scores, dim=-1),
        "row_max": scores.amax(dim=-1),
    }


_FLASH_ANSWERS = (
    torch.nn.functional.scaled_dot_product_attention,
    tiled.flash_attention,
    tiled.naive_attention,
)

_FORWARD_MISTAKES = (
    (
        "accumulator not rescaled",
        "when the running maximum grows, the "
        "unnormalised output A must be multiplied by exp(m_old - m_new), as "
        "the running sum is",
    ),
    (
        "no rescale",
        "when the running maximum grows, the running sum and the "
        "unnormalised output must both be multiplied by exp(m_old - m_new)",
    ),
    (
        "normalised in the loop",
        "you divide the output by the running sum "
        "inside the loop, and the next tile rescales it as if it were "
        "unnormalised; keep A unnormalised and divide by the sum once, after "
        "the last key block",
    ),
    (
        "block index",
        "you skip tiles by block index (key block c > query "
        "block r), which drops allowed keys when the key blocks are smaller; "
        "compare positions: skip a tile when its first key comes after its "
        "last query",
    ),
    (
        "first query",
        "you skip a tile when its first key comes after the block's first "
        "query, but the block's later queries may see that key: skip a tile "
        "only when its first key comes after the block's last query",
    ),
    (
        "tile-local mask",
        "your causal mask is the tile's own triu(1), from the row and column "
        "indices inside the tile: build the mask from global positions, key "
        "position k0 + j > query position q0 + i",
    ),
)

_BACKWARD_MISTAKES = (
    (
        "tile delta",
        "zeta_i (FlashAttention-2's D_i) sums over the query's whole row of "
        "weights, not one tile's: compute zeta_i = dO_i . o_i once, before "
        "the loop",
    ),
    (
        "no scale",
        "the scores are Q K^T / sqrt(d), so dQ = dS K / sqrt(d) and dK = dS^T Q / sqrt(d)",
    ),
    (
        "no mask",
        "recompute each tile's weights with the forward pass's "
        "causal mask: a key after its query has weight 0",
    ),
    (
        "tile softmax",
        "you normalise each tile's weights by a softmax over the tile; the "
        "weights are Phi = exp(S - lse), with the saved log-sum-exp of the "
        "query's whole row",
    ),
    (
        "dK dV assigned",
        "dK and dV are sums over every query block: add each tile's share with +=, not =",
    ),
    ("dQ assigned", "dQ is a sum over every key block: add each tile's share with +=, not ="),
)


# (index in (dQ, dK, dV), name, what to look at), in the order to compare
_GRADIENT_HINTS = (
    (
        2,
        "dV",
        "dV = Phi^T dO: recompute Phi = exp(S - lse) from the "
        "saved log-sum-exp lse, masked as in the forward pass",
    ),
    (
        0,
        "dQ",
        "dV is right, so the weights are; dS = Phi o (dPhi - zeta) with "
        "zeta_i = dO_i . o_i, and dQ = dS K / sqrt(d)",
    ),
    (1, "dK", "dK = dS^T Q / sqrt(d), summed over every query block"),
)


def _is_autograd_function(fn):
    return isinstance(fn, type) and issubclass(fn, torch.autograd.Function)


def _mistake_hint(got, mistakes, compute, correct, atol):
    """The hint of the first mistake whose results `got` reproduce, where
    they differ from the correct ones; None for a right answer."""
    if allclose(got, correct, atol):
        return None
    for mistake, hint in mistakes:
        wrong = compute(mistake)
        if not allclose(wrong, correct, atol) and allclose(got, wrong, atol):
            return hint
    return None


def _gradient_mistake_hint(got, mistakes, compute, correct, atol):
    """The hint of the first mistake that reproduces one of the gradients
    `got` (dQ, dK, dV) where it makes that gradient wrong: a slip in one
    gradient's loop leaves the others right."""
    if allclose(got, correct, atol):
        return None
    for mistake, hint in mistakes:
        for one, wrong, right in zip(got, compute(mistake), correct):
            if not allclose((wrong,), (right,), atol) and allclose((one,), (wrong,), atol):
                return hint
    return None


def _check_flash_memory(largest, tensors, case, where):
    """No tensor made larger than the inputs, the output and one tile."""
    numel, shape, operation = largest
    tile = (
        math.prod(case.batch)
        * min(case.query_block, case.n_queries)
        * min(case.key_block, case.n_keys)
    )
    if numel > max(tile, *(t.numel() for t in tensors)):
        raise CheckFailed(
            f"case '{case.name}': your {where} pass made a tensor of shape "
            f"{shape} ({operation}), larger than the inputs, the output and a "
            f"tile of {case.query_block} x {case.key_block}; FlashAttention "
            "never holds the (L, S) matrix, nor a row or column of tiles: "
            "compute one tile at a time, its causal mask from its positions"
        )


def _check_flash_saved(output, inputs, expected, case, atol):
    """Saved through ctx.save_for_backward: Q, K, V, O and the log-sum-exp."""
    node = output.grad_fn
    for name, value in vars(node).items():
        held = value if isinstance(value, (list, tuple)) else [value]
        if isinstance(value, dict):
            held = list(value.values())
        if any(isinstance(t, torch.Tensor) and t.numel() > 1 for t in held):
            raise CheckFailed(
                f"case '{case.name}': you keep tensors in "
                f"ctx.{name}; save Q, K, V, O and the "
                "log-sum-exp with ctx.save_for_backward, and "
                "nothing else"
            )
    saved, lse = node.saved_tensors, expected["logsumexp"]
    if sum(t.numel() for t in saved) > sum(t.numel() for t in (*inputs, output, lse)):
        raise CheckFailed(
            f"case '{case.name}': you saved tensors of shapes "
            f"{[tuple(t.shape) for t in saved]}; FlashAttention saves only Q, "
            f"K, V, O and the log-sum-exp {tuple(lse.shape)}, and the "
            "backward pass recomputes the weights tile by tile"
        )
    candidates = [t.detach().double() for t in saved if t.shape == lse.shape]
    if not candidates:
        raise CheckFailed(
            f"case '{case.name}': save the log-sum-exp of each "
            f"query's scores, shape {tuple(lse.shape)}, with "
            "ctx.save_for_backward"
        )
    if any(torch.allclose(t, lse, atol=atol) for t in candidates):
        return
    if any(torch.allclose(t, expected["row_max"], atol=atol) for t in candidates):
        raise CheckFailed(
            f"case '{case.name}': you saved the running maximum "
            "m; save the log-sum-exp m + log l, from which the "
            "backward pass gets each weight as exp(s - m - log l)"
        )
    log_sum = lse - expected["row_max"]  # log l, the sum taken after m
    if any(torch.allclose(t, log_sum, atol=atol) for t in candidates):
        raise CheckFailed(
            f"case '{case.name}': you saved log l, the log of the "
            "running sum, without the running maximum m; save the "
            "log-sum-exp m + log l"
        )
    compare(
        candidates[0],
        lse,
        case.name,
        "saved log-sum-exp (m + log l of the scaled, masked scores)",
        atol=atol,
    )


def _one_key_block_hint(fn, inputs, case, expected, atol):
    """Why an output is wrong, if all keys in one block make it right: the
    causal tiles (their skipping or mask) if the same blocks without the mask
    are right, else the rescaling."""
    with torch.no_grad():
        output = run(
            fn.apply,
            (*inputs, case.is_causal, case.query_block, case.n_keys),
            case.name,
            forbidden=_FLASH_ANSWERS,
            learner=fn,
        )
        if not allclose((output,), (expected["output"],), atol):
            return None
        if case.is_causal:
            unmasked = run(
                fn.apply,
                (*inputs, False, case.query_block, case.key_block),
                case.name,
                forbidden=_FLASH_ANSWERS,
                learner=fn,
            )
            q, k, v = (t.detach().double() for t in inputs)
            reference = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            if allclose((unmasked,), (reference,), atol):
                return (
                    f"without the causal mask your blocks of {case.key_block} "
                    "keys give the right output, with it they do not: the "
                    "causal tiles are wrong. Skip a tile only when its first "
                    "key comes after the block's last query, and build each "
                    "tile's mask from global positions"
                )
    return (
        f"with all keys in one block your output is right, with blocks "
        f"of {case.key_block} it is not: when a key block raises a row's "
        "running maximum, the running sum and the unnormalised output "
        "kept so far must both be multiplied by exp(m_old - m_new), and "
        "the output divided by the sum once, after the last block"
    )


def _flash_forward_case(fn, case, number, seed):
    """Run and check one case's forward pass; return what its backward needs."""
    (q, k, v), grad_output = _flash_inputs(case, seed, number)
    expected = _flash_expected(q, k, v, grad_output, case)
    output, largest = run(
        measure.largest_tensor,
        (
            fn.apply if _is_autograd_function(fn) else fn,
            q,
            k,
            v,
            case.is_causal,
            case.query_block,
            case.key_block,
        ),
        case.name,
        forbidden=_FLASH_ANSWERS,
        learner=fn,
    )
    if not _is_autograd_function(fn):
        raise CheckFailed(
            "pass your class itself, a subclass of "
            "torch.autograd.Function: the check calls its "
            "apply(query, key, value, is_causal, query_block, "
            "key_block)"
        )
    if isinstance(output, (tuple, list)):
        raise CheckFailed(
            f"case '{case.name}': forward returns the output "
            "only; keep the log-sum-exp for the backward pass "
            "with ctx.save_for_backward"
        )
    atol = 1e-5 if case.dtype == torch.float32 else 1e-9
    hint = _mistake_hint(
        (output,),
        _FORWARD_MISTAKES,
        lambda mistake: _flash_forward(q, k, v, case, mistake),
        (expected["output"],),
        atol,
    )
    if (
        hint is None
        and case.n_keys > case.key_block
        and isinstance(output, torch.Tensor)
        and output.shape == expected["output"].shape
        and not allclose((output,), (expected["output"],), atol)
    ):
        hint = _one_key_block_hint(fn, (q, k, v), case, expected, atol)
    if hint:
        raise CheckFailed(f"case '{case.name}': {hint}")
    compare(
        output,
        expected["output"],
        case.name,
        "output",
        atol=atol,
        explain_nan=lambda index: (
            "exp of a score around 1e3 overflows; subtract the running "
            "maximum before exponentiating"
            if case.magnitude > 1
            else None
        ),
    )
    if output.dtype != q.dtype:
        raise CheckFailed(
            f"case '{case.name}': your output is {output.dtype} "
            f"for {q.dtype} inputs; keep the inputs' dtype"
        )
    if output.grad_fn is None:
        raise CheckFailed(
            f"case '{case.name}': the output has no grad_fn; return it from forward as a tensor"
        )
    _check_flash_saved(output, (q, k, v), expected, case, atol)
    _check_flash_memory(largest, (q, k, v, output), case, "forward")
    return (q, k, v), output, grad_output, expected


def _flash_backward_case(fn, case, inputs, output, grad_output, expected):
    """Run and check one case's backward pass."""
    try:
        grads, largest = run(
            measure.largest_tensor,
            (torch.autograd.grad, output, inputs, grad_output),
            case.name,
            forbidden=_FLASH_ANSWERS,
            learner=fn,
        )
    except CheckFailed as failure:
        if "incorrect number of gradients" not in str(failure):
            raise
        raise CheckFailed(
            f"{failure}: backward returns one gradient per "
            "argument of forward, dQ, dK, dV and then None for "
            "is_causal, query_block and key_block"
        ) from None
    atol = 1e-5 if case.dtype == torch.float32 else 1e-9
    hint = _gradient_mistake_hint(
        grads,
        _BACKWARD_MISTAKES,
        lambda mistake: _flash_backward(*inputs, grad_output, expected, case, mistake),
        expected["grads"],
        atol,
    )
    if hint:
        raise CheckFailed(f"case '{case.name}': {hint}")
    for index, name, why in _GRADIENT_HINTS:
        compare(grads[index], expected["grads"][index], case.name, f"{name} ({why})", atol=atol)
    _check_flash_memory(largest, (*inputs, output), case, "backward")


def _causal_work(case, by_index=False):
    """The fraction of the score entries that causal tiles cover."""
    covered = sum(
        (rows.stop - rows.start) * (cols.stop - cols.start)
        for rows, cols, _ in _flash_tiles(case, "block index" if by_index else None)
    )
    return covered / (case.n_queries * case.n_keys)


def _check_flash_skips(fn):
    """Causal attention multiplies only the tiles with an allowed entry:
    measured by the matrix products' multiply-adds, causal against not."""
    case = _FlashCase(
        "causal, 48 tokens, blocks of 6 queries and 12 keys",
        (1,),
        48,
        48,
        8,
        8,
        6,
        12,
        True,
        torch.float64,
        1,
    )
    (q, k, v), _ = _flash_inputs(case, 0, 99)
    work = {}
    for is_causal in (False, True):
        with torch.no_grad():
            _, work[is_causal] = measure.count_multiply_adds(
                run,
                fn.apply,
                (q, k, v, is_causal, 6, 12),
                case.name,
                forbidden=_FLASH_ANSWERS,
                learner=fn,
            )
    if not work[False]:
        return  # no matrix products to count: not measured
    ratio, needed = work[True] / work[False], _causal_work(case)
    by_index = _causal_work(case, by_index=True)
    if abs(ratio - by_index) < 0.02:
        raise CheckFailed(
            f"case '{case.name}': your causal pass computes {ratio:.0%} of "
            "the unmasked pass's products, as when tiles are skipped by block "
            f"index (c > r); skipping by position leaves {needed:.0%}: skip a "
            "tile when its first key comes after its last query"
        )
    if ratio > needed + 0.02:
        raise CheckFailed(
            f"case '{case.name}': your causal pass computes {ratio:.0%} of "
            f"the unmasked pass's products, but the tiles with an allowed "
            f"entry hold only {needed:.0%} of the scores: skip the tiles "
            "entirely above the diagonal"
        )


@self_check
def check_flash_autograd(fn, seed=0):
    """Check fn, a torch.autograd.Function: fn.apply(query (..., L, d), key
    (..., S, d), value (..., S, d_v), is_causal, query_block, key_block) ->
    output (..., L, d_v), attention with scale 1/sqrt(d) and PyTorch's
    (top-left) causal mask, in tiles of query_block queries by key_block
    keys; it saves only Q, K, V, O and the log-sum-exp (..., L), and its
    backward gives dQ, dK, dV. Compared with PyTorch's attention and its
    gradients; no tensor larger than the inputs, the output or a tile. Chapter 12, exercise 5."""
    cases = _flash_cases(seed)
    runs = [
        (case, *_flash_forward_case(fn, case, number, seed)) for number, case in enumerate(cases)
    ]
    _check_flash_skips(fn)
    for case, inputs, output, grad_output, expected in runs:
        try:
            _flash_backward_case(fn, case, inputs, output, grad_output, expected)
        except NotAnswered:
            raise CheckFailed(
                f"your forward pass agrees with PyTorch on all "
                f"{len(cases)} cases; backward still raises "
                "NotImplementedError: write it next"
            ) from None
    passed("your FlashAttention, forward and backward", len(cases))
