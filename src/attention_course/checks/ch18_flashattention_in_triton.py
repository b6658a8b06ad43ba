"""Checks of chapter 18's exercises: the main-memory traffic of plain and tiled attention,
counted load by load; the learner's Triton forward kernel and dK/dV kernel, launched on the
checks' cases (through Triton's interpreter on a CPU, compiled on a GPU) and compared with
float64 references; each names the classic slips it recognises by reproducing them."""

import collections
import inspect
import math

import torch

from .core import CheckFailed, NotAnswered, compare, integers, passed, random, self_check

# ------------------------------------------------------------------ exercise 1: HBM traffic


def _counted_traffic(n, head_dim, block, element, mistake=None):
    """(naive, tiled) bytes, counted one matrix or one tile at a time; or those of a slip:
    "reads only" (nothing written counted), "K and V once" (every key tile read once for all
    query blocks), "elements" (numbers, not bytes), "no log-sum-exp", "floor" (n // block query
    tiles: the last, shorter one reads no K and V)."""
    per = 1 if mistake == "elements" else element
    naive = 0
    # S = Q K^T; P = softmax(S); O = P V: what each reads and writes
    steps = [(2 * n * head_dim, n * n), (n * n, n * n), (n * n + n * head_dim, n * head_dim)]
    for reads, writes in steps:
        naive += per * (reads + (0 if mistake == "reads only" else writes))
    tiled = 0
    for q0 in range(0, n, block):
        rows = min(block, n - q0)
        tiled += per * rows * head_dim  # the query tile
        if mistake == "floor" and rows < block:
            pass  # the slip: a shorter last tile counted as no tile
        elif mistake != "K and V once" or q0 == 0:
            tiled += per * 2 * n * head_dim  # every key tile and its value tile
        if mistake != "reads only":
            lse = 0 if mistake == "no log-sum-exp" else (1 if mistake == "elements" else 4)
            tiled += per * rows * head_dim + lse * rows  # the output and its log-sum-exp
    return naive, tiled


_TRAFFIC_MISTAKES = (
    ("reads only", "count what is written to HBM too: S and P are written, then read back"),
    (
        "K and V once",
        "each query block reads every key tile again (a program cannot keep all of K and V "
        "on chip): the tiled kernel reads K and V once per query block",
    ),
    ("elements", "multiply the number of elements by bytes_per_element"),
    (
        "floor",
        "the last query tile may be shorter than the block, and it still reads all of K and V: "
        "count ceil(n / block) query tiles",
    ),
    (
        "no log-sum-exp",
        "the tiled kernel also writes each query's log-sum-exp, one float32 (4 bytes) per "
        "query, whatever the inputs' dtype",
    ),
)


@self_check
def check_hbm_traffic(hbm_traffic, seed=0):
    """Check `hbm_traffic(n, head_dim, block, bytes_per_element)` -> (naive bytes, tiled
    bytes) of one head's forward attention without a mask, against a count of every load and
    store. Chapter 18, exercise 1."""
    cases = [(1024, 64, 128, 2), (4096, 128, 64, 2), (100, 16, 32, 4), (64, 64, 64, 2)]
    if seed:
        sizes = integers(seed, 8, 1, 65, 180)
        cases = [(16 * sizes[i], 8 * sizes[i + 4], 16 * (1 + sizes[i] % 8), 2) for i in range(4)]
    for n, head_dim, block, element in cases:
        case = f"n={n}, head_dim={head_dim}, block={block}, {element} bytes"
        try:
            got = hbm_traffic(n, head_dim, block, element)
        except NotImplementedError:
            raise NotAnswered(f"`{getattr(hbm_traffic, '__name__', 'hbm_traffic')}`") from None
        except Exception as error:
            raise CheckFailed(f"case '{case}': your function raised {error!r}") from None
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise CheckFailed(f"case '{case}': return a pair (naive bytes, tiled bytes)")
        expected = _counted_traffic(n, head_dim, block, element)
        for name, mine, right, index in zip(("naive", "tiled"), got, expected, (0, 1)):
            if mine == right:
                continue
            hint = next(
                (h for m, h in _TRAFFIC_MISTAKES
                 if _counted_traffic(n, head_dim, block, element, m)[index] == mine),
                None,
            )  # fmt: skip
            raise CheckFailed(
                f"case '{case}': your {name} count is {mine} bytes, expected {right}"
                + (f": {hint}" if hint else "")
            )
    passed("plain and tiled attention's HBM bytes", len(cases))


# -------------------------------------------------------- exercises 2 and 3: Triton kernels

_KernelCase = collections.namedtuple(
    "_KernelCase", "name heads n_queries n_keys dim block_q block_k is_causal magnitude"
)


def _kernel_cases(seed):
    """Lengths off the tiles, query and key tiles of different sizes, causal or not, one
    query tile against many keys, scores around a thousand."""
    case = _KernelCase
    if seed:
        sizes = integers(seed, 12, 1, 61, 190)
        return [
            case(f"random case {i}", 2, 4 + sizes[i], 4 + sizes[i + 4], 16 * (1 + sizes[i + 8] % 2),
                 16 * (1 + sizes[i] % 2), 16 * (1 + sizes[i + 4] % 2), bool(sizes[i + 8] % 2), 1)
            for i in range(4)
        ]  # fmt: skip
    return [
        case("no mask, lengths off the tiles", 2, 37, 45, 16, 16, 16, False, 1),
        case("causal, key tiles smaller", 2, 40, 40, 16, 32, 16, True, 1),
        case("causal, key tiles larger", 1, 50, 50, 32, 16, 32, True, 1),
        case("one query tile, many keys", 1, 9, 120, 16, 16, 32, False, 1),
        case("causal, scores around 1e2", 1, 33, 33, 16, 16, 16, True, 8),
        case("causal, more queries than keys", 2, 40, 20, 16, 16, 16, True, 1),
    ]


def _inputs(case, seed, number, device):
    """Query, key, value and the output's gradient, float32 on `device`."""
    shapes = [
        (case.heads, case.n_queries, case.dim),
        (case.heads, case.n_keys, case.dim),
        (case.heads, case.n_keys, case.dim),
        (case.heads, case.n_queries, case.dim),
    ]
    q, k, v, grad = (random(s, seed, 200 + 4 * number + i) for i, s in enumerate(shapes))
    q, k = q * case.magnitude, k * case.magnitude
    return [t.to(device).contiguous() for t in (q, k, v, grad)]


def _tiles(case, mistake=None):
    """(rows, cols, blocked) of the tiles a causal or plain pass computes; blocked (B_r, B_c)
    is True where a key comes after its query (from global positions), or the slip "tile-local
    mask" (the tile's own triu(1)); None without a mask. With the slip "end unmasked" the last
    key tile keeps its whole width (its keys past the end, zeros, are not masked)."""
    for q0 in range(0, case.n_queries, case.block_q):
        rows = slice(q0, min(q0 + case.block_q, case.n_queries))
        for k0 in range(0, case.n_keys, case.block_k):
            if case.is_causal and k0 >= rows.stop:
                break
            end = k0 + case.block_k if mistake == "end unmasked" else case.n_keys
            cols = slice(k0, min(k0 + case.block_k, end))
            blocked = None
            if case.is_causal and mistake == "tile-local mask":
                size = (rows.stop - q0, cols.stop - k0)
                blocked = torch.ones(size, dtype=torch.bool).triu(1)
            elif case.is_causal:
                i, j = torch.arange(rows.start, rows.stop), torch.arange(cols.start, cols.stop)
                blocked = j[None, :] > i[:, None]
            yield rows, cols, blocked


def _forward(q, k, v, case, mistake=None):
    """float64 (output, logsumexp) tile by tile, or those of a slip: "no rescale" (neither l
    nor A rescaled), "A not rescaled", "normalised in the loop", "log l" (the log-sum-exp
    without the max), "tile-local mask"."""
    q, k, v = (t.detach().double().cpu() for t in (q, k, v))
    if mistake == "end unmasked":  # the zeros a masked load gives past the last key
        padding = -case.n_keys % case.block_k
        k, v = (torch.nn.functional.pad(t, (0, 0, 0, padding)) for t in (k, v))
    scale = case.dim**-0.5
    output = torch.zeros_like(q)
    logsumexp = q.new_zeros(q.shape[:-1])
    state = {}
    for rows, cols, blocked in _tiles(case, mistake):
        m, l, a = state.get(rows.start, (None, None, None))
        s = q[:, rows] @ k[:, cols].transpose(-2, -1) * scale
        if blocked is not None:
            s = s.masked_fill(blocked, -math.inf)
        p_max = s.amax(-1)
        if m is None:  # the first key tile of these queries
            new_m = p_max
            p = torch.exp(s - new_m[..., None])
            l, a = p.sum(-1), p @ v[:, cols]
        else:
            new_m = torch.maximum(m, p_max)
            rescale = torch.exp(m - new_m)
            p = torch.exp(s - new_m[..., None])
            l = l * (1 if mistake == "no rescale" else rescale) + p.sum(-1)
            kept = 1 if mistake in ("no rescale", "A not rescaled") else rescale[..., None]
            a = a * kept + p @ v[:, cols]
        if mistake == "normalised in the loop":
            a = a / l[..., None]
        state[rows.start] = (new_m, l, a)
    for start, (m, l, a) in state.items():
        rows = slice(start, start + a.shape[-2])
        output[:, rows] = a if mistake == "normalised in the loop" else a / l[..., None]
        logsumexp[:, rows] = torch.log(l) if mistake == "log l" else m + torch.log(l)
    return output, logsumexp


_FORWARD_MISTAKES = (
    (
        "tile-local mask",
        "your causal mask comes from the row and column numbers inside the tile (its own "
        "triu); build it from global positions: key cols[None, :] <= query rows[:, None]",
    ),
    (
        "no rescale",
        "when the running max grows, multiply both the running sum l and the accumulator A "
        "by exp(m_old - m_new)",
    ),
    (
        "A not rescaled",
        "the running sum is rescaled but the accumulator is not: A = A * rescale[:, None] + "
        "Phi V before adding this tile",
    ),
    (
        "normalised in the loop",
        "you divide by the running sum inside the loop; keep A unnormalised and divide once, "
        "after the last key tile",
    ),
    (
        "end unmasked",
        "the last key tile runs past n_keys and the masked loads give zeros there, whose scores "
        "0 still get weight: mask cols < n_keys in the scores too, causal or not",
    ),
    (
        "log l",
        "the log-sum-exp is m + log(l): log(l) alone is the log of the sum taken after the "
        "max was subtracted",
    ),
)


def _device_for(kernel, name):
    """Where the learner's kernel runs: interpreted on the CPU, or compiled on the GPU; a stub
    is not yet answered."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    function = getattr(kernel, "fn", kernel)
    if "raise NotImplementedError" in inspect.getsource(function):
        raise NotAnswered(f"`{getattr(function, '__name__', name)}`")
    if isinstance(kernel, InterpretedFunction):
        return torch.device("cpu")
    if not isinstance(kernel, JITFunction):
        raise CheckFailed(
            f"{name} must be a Triton kernel: put @triton.jit on the line above its def"
        )
    if not torch.cuda.is_available():
        raise CheckFailed(
            "your kernel was compiled for a GPU (triton.jit without TRITON_INTERPRET=1) and "
            "no GPU is here: set os.environ['TRITON_INTERPRET'] = '1' before importing triton, "
            "as the chapter's first cell does, and run the kernel's cell again"
        )
    return torch.device("cuda")


def _launch(kernel, grid, args, case):
    """Run the learner's kernel; an error becomes a CheckFailed naming the case."""
    from .._triton_kernels import interpreted

    try:
        if args[0].device.type == "cuda":
            kernel[grid](*args)
        else:  # the interpreter, whichever way Triton was imported (_triton_kernels)
            with interpreted():
                kernel[grid](*args)
    except Exception as error:
        raise CheckFailed(
            f"case '{case.name}': your kernel raised {type(error).__name__}: "
            f"{str(error).splitlines()[-1] if str(error) else ''}"
        ) from None


def _constexprs(case):
    return (case.dim, case.block_q, case.block_k, case.is_causal)


def _tf32_hint(got, expected, device):
    """On a GPU, float32 tl.dot defaults to TF32 (10-bit mantissas): errors near 1e-3."""
    error = (got.double().cpu() - expected).abs().max().item()
    if device.type == "cuda" and 1e-5 < error < 3e-2:
        return (
            f" (errors up to {error:.1e}: on Ampere and later GPUs tl.dot rounds float32 inputs to "
            "TF32 unless "
            "you pass input_precision='ieee')"
        )
    return ""


def _slip(got, compute, correct, mistakes, atol):
    """The hint of the first slip whose result `got` reproduces."""
    for mistake, hint in mistakes:
        wrong = compute(mistake)
        if not torch.allclose(wrong, correct, atol=atol) and torch.allclose(
            got.double().cpu(), wrong, atol=atol
        ):
            return hint
    return None


def _compare(results, compute, mistakes, case, device):
    """Each (got, right, what) in turn: a CheckFailed at the first that is off, naming the
    slip whose results compute(slip)[i] reproduce, or TF32 on a GPU."""
    for index, (got, right, what) in enumerate(results):
        if torch.allclose(got.double().cpu(), right, atol=1e-4):
            continue
        hint = _slip(got, lambda m: compute(m)[index], right, mistakes, 1e-4)
        try:
            compare(got, right, case.name, what, atol=1e-4)
        except CheckFailed as failure:
            extra = f"; {hint}" if hint else _tf32_hint(got, right, device)
            raise CheckFailed(f"{failure}{extra}") from None


@self_check
def check_forward_kernel(forward_kernel, seed=0):
    """Check a Triton kernel forward_kernel(Q, K, V, O, LSE, n_queries, n_keys, scale,
    HEAD_DIM, BLOCK_Q, BLOCK_K, IS_CAUSAL) launched on grid (query tiles, heads) over
    contiguous float32 (heads, n, HEAD_DIM) tensors: O and the log-sum-exp LSE (heads, n_q)
    against float64 references. Chapter 18, exercise 2."""
    device = _device_for(forward_kernel, "forward_kernel")
    cases = _kernel_cases(seed)
    for number, case in enumerate(cases):
        q, k, v, _ = _inputs(case, seed, number, device)
        output = torch.full_like(q, math.nan)
        logsumexp = torch.full(q.shape[:-1], math.nan, device=device)
        grid = (math.ceil(case.n_queries / case.block_q), case.heads)
        args = (q, k, v, output, logsumexp, case.n_queries, case.n_keys, case.dim**-0.5)
        _launch(forward_kernel, grid, (*args, *_constexprs(case)), case)
        right_out, right_lse = _forward(q, k, v, case)
        results = [(output, right_out, "output O"), (logsumexp, right_lse, "log-sum-exp LSE")]
        _compare(results, lambda m: _forward(q, k, v, case, m), _FORWARD_MISTAKES, case, device)
    passed("the Triton forward kernel's output and log-sum-exp", len(cases))


def _key_grads(q, k, v, grad, case, mistake=None):
    """float64 (dK, dV) tile by tile from the log-sum-exp, or those of a slip: "no scale"
    (dK without the scale), "no D" (dS = P dP, without subtracting D), "tile softmax" (each
    tile's weights normalised on their own), "tile-local mask", "assigned" (= instead of +=,
    the last query tile's share only), "start by index" (key tile c's loop from query c B_r)."""
    q, k, v, grad = (t.detach().double().cpu() for t in (q, k, v, grad))
    output, logsumexp = _forward(q, k, v, case)
    delta = (grad * output).sum(-1)  # D: (heads, n_q)
    scale = case.dim**-0.5
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for rows, cols, blocked in _tiles(case, mistake):
        first = cols.start // case.block_k * case.block_q
        if mistake == "start by index" and case.is_causal and rows.start < first:
            continue
        s = q[:, rows] @ k[:, cols].transpose(-2, -1) * scale
        if blocked is not None:
            s = s.masked_fill(blocked, -math.inf)
        p = torch.exp(s - logsumexp[:, rows, None])
        if mistake == "tile softmax":
            p = torch.softmax(s, dim=-1)
        dp = grad[:, rows] @ v[:, cols].transpose(-2, -1)
        ds = p * (dp - (0 if mistake == "no D" else delta[:, rows, None]))
        ds = ds * (1 if mistake == "no scale" else scale)
        shares = (ds.transpose(-2, -1) @ q[:, rows], p.transpose(-2, -1) @ grad[:, rows])
        for total, share in zip((dk, dv), shares):
            if mistake == "assigned":
                total[:, cols] = share
            else:
                total[:, cols] += share
    return dk, dv, logsumexp, delta


_BACKWARD_MISTAKES = (
    ("tile-local mask", _FORWARD_MISTAKES[0][1]),
    ("no scale", "the scores are Q K^T * scale, so dS carries the scale: dK = (dS * scale)^T Q"),
    ("no D", "dS = P * (dP - D[:, None]) with D_i = dO_i . o_i, loaded from DELTA"),
    (
        "tile softmax",
        "the weights are P = exp(S - LSE[:, None]) with the saved log-sum-exp of each query's "
        "whole row, not a softmax over the tile",
    ),
    ("assigned", "dK and dV sum over every query tile: accumulate with +=, store once at the end"),
    (
        "start by index",
        "with causal attention, start the loop at the first query tile whose last query sees the "
        "key tile's first key, from positions: (k_tile * BLOCK_K // BLOCK_Q) * BLOCK_Q, not "
        "k_tile * BLOCK_Q (the tiles differ in size)",
    ),
)


@self_check
def check_key_grads_kernel(key_grads_kernel, seed=0):
    """Check a Triton kernel key_grads_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, n_queries,
    n_keys, scale, HEAD_DIM, BLOCK_Q, BLOCK_K, IS_CAUSAL) launched on grid (key tiles, heads):
    dK and dV against PyTorch's gradients in float64. Chapter 18, exercise 3."""
    device = _device_for(key_grads_kernel, "key_grads_kernel")
    cases = _kernel_cases(seed)
    for number, case in enumerate(cases):
        q, k, v, grad = _inputs(case, seed, number, device)
        right_dk, right_dv, logsumexp, delta = _key_grads(q, k, v, grad, case)
        dk, dv = torch.full_like(k, math.nan), torch.full_like(v, math.nan)
        grid = (math.ceil(case.n_keys / case.block_k), case.heads)
        stats = (logsumexp.float().to(device), delta.float().to(device))
        args = (q, k, v, grad, *stats, dk, dv, case.n_queries, case.n_keys, case.dim**-0.5)
        _launch(key_grads_kernel, grid, (*args, *_constexprs(case)), case)
        # PyTorch's own gradients: the reference of the reference
        leaves = [t.detach().double().cpu().requires_grad_() for t in (q, k, v)]
        sdpa = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=case.is_causal)
        _, want_dk, want_dv = torch.autograd.grad(sdpa, leaves, grad.double().cpu())
        assert torch.allclose(want_dk, right_dk) and torch.allclose(want_dv, right_dv)
        # dV first: it needs only the weights; (dV, dK) of each slip, in that order
        results = [(dv, right_dv, "dV"), (dk, right_dk, "dK")]
        slips = lambda m: _key_grads(q, k, v, grad, case, m)[1::-1]  # noqa: E731
        _compare(results, slips, _BACKWARD_MISTAKES, case, device)
    passed("the Triton dK, dV kernel's gradients", len(cases))
