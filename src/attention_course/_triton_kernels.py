"""The Triton kernels of chapter 18, for arguments already checked: FlashAttention-2's forward
pass, the row sums D = rowsum(dO * O) that its backward pass needs, and its two backward
kernels (dK and dV by key tile, dQ by query tile).

This module imports Triton, so only `triton_flash` imports it, and only when a kernel is
first needed: the package works without Triton. Each kernel is written once, as a plain Python
function, and wrapped twice: compiled for a GPU (triton.jit's JITFunction) and interpreted
(Triton's interpreter runs each program instance on the CPU in NumPy, one after another, what
triton.jit gives under TRITON_INTERPRET=1). `launcher(name, device)` picks: CUDA tensors run
compiled, CPU tensors interpreted. Triton wraps its own library (tl.sum, tl.zeros, ...) one way
or the other when it is first imported, as TRITON_INTERPRET says then; `interpreted` lets the
interpreter call the compiled-mode library too, and where Triton was imported to interpret,
every tensor runs interpreted.

Every tensor is contiguous, (batch * heads, n, dim), so that row i of head h starts at
(h * n + i) * dim. Head sizes are padded to powers of two (D_BLOCK, DV_BLOCK >= 16: tl.arange
and a GPU's tl.dot need them) with masked loads. Scores that a query may not see are NEG, a
large finite negative, not -inf: exp(NEG - m) is exactly 0 without an inf - inf (NaN) anywhere.
Offsets are computed in int64 (the head's number is cast), so that tensors of more than 2**31
elements are addressed right.
"""

import contextlib

import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction, _patch_lang
from triton.runtime.jit import JITFunction

LIBRARY_INTERPRETED = isinstance(tl.zeros, InterpretedFunction)  # TRITON_INTERPRET=1 at import
NEG = tl.constexpr(-1.0e30)  # "minus infinity" for masked scores: finite, NEG - NEG = 0


def forward_kernel(
    Q, K, V, O, LSE,                      # (BH, n_q, d), (BH, n_k, d), (BH, n_k, d_v), ...
    n_queries, n_keys, scale,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr,
    D_BLOCK: tl.constexpr, DV_BLOCK: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    IS_CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: one block of BLOCK_Q queries of one (batch, head), against every key
    tile it needs; writes O (BLOCK_Q, d_v) and the log-sum-exp (BLOCK_Q,). Chapter 18."""
    # which block of queries, of which (batch, head)
    q_tile, head = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = q_tile * BLOCK_Q + tl.arange(0, BLOCK_Q)  # query positions (BLOCK_Q,)
    dims, vdims = tl.arange(0, D_BLOCK), tl.arange(0, DV_BLOCK)
    row_ok = rows < n_queries
    # the query tile, from HBM into on-chip memory, once: (BLOCK_Q, D_BLOCK)
    q_ptrs = Q + (head * n_queries + rows[:, None]) * HEAD_DIM + dims[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None] & (dims[None, :] < HEAD_DIM), other=0.0)
    # running max m, running sum l, unnormalised output A
    m = tl.full([BLOCK_Q], NEG, tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, DV_BLOCK], tl.float32)
    # causal: the key tiles up to the block's last query; the rest are skipped
    end = n_keys
    if IS_CAUSAL:
        end = tl.minimum(n_keys, (q_tile + 1) * BLOCK_Q)
    for start in range(0, end, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)  # key positions (BLOCK_K,)
        col_ok = cols < n_keys
        k_ptrs = K + (head * n_keys + cols[:, None]) * HEAD_DIM + dims[None, :]
        k = tl.load(k_ptrs, mask=col_ok[:, None] & (dims[None, :] < HEAD_DIM), other=0.0)
        # the tile's scores S = Q K^T * scale: (BLOCK_Q, BLOCK_K)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        # keys past the end, and (causal) after their query, from global positions
        allowed = col_ok[None, :]
        if IS_CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        s = tl.where(allowed, s, NEG)
        # the online softmax: new max, rescale what was summed, this tile's weights
        new_m = tl.maximum(m, tl.max(s, 1))
        rescale = tl.exp(m - new_m)
        p = tl.exp(s - new_m[:, None])
        l = l * rescale + tl.sum(p, 1)
        v_ptrs = V + (head * n_keys + cols[:, None]) * VALUE_DIM + vdims[None, :]
        v = tl.load(v_ptrs, mask=col_ok[:, None] & (vdims[None, :] < VALUE_DIM), other=0.0)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = new_m
    # O = A / l and logsumexp = m + log l, back to HBM once
    o_ptrs = O + (head * n_queries + rows[:, None]) * VALUE_DIM + vdims[None, :]
    out_ok = row_ok[:, None] & (vdims[None, :] < VALUE_DIM)
    tl.store(o_ptrs, (acc / l[:, None]).to(O.dtype.element_ty), mask=out_ok)
    tl.store(LSE + head * n_queries + rows, m + tl.log(l), mask=row_ok)


def row_dot_kernel(
    A, B, OUT, n_rows, DIM: tl.constexpr, D_BLOCK: tl.constexpr, BLOCK: tl.constexpr
):  # fmt: skip
    """One program: OUT[i] = sum_j A[i, j] * B[i, j] for BLOCK rows; with A = dO and B = O,
    FlashAttention-2's D (the chapters' zeta). Chapter 18."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    dims = tl.arange(0, D_BLOCK)
    ok = (rows[:, None] < n_rows) & (dims[None, :] < DIM)
    offsets = rows[:, None] * DIM + dims[None, :]
    a = tl.load(A + offsets, mask=ok, other=0.0).to(tl.float32)
    b = tl.load(B + offsets, mask=ok, other=0.0).to(tl.float32)
    tl.store(OUT + rows, tl.sum(a * b, 1), mask=rows < n_rows)


def key_grads_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV,
    n_queries, n_keys, scale,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr,
    D_BLOCK: tl.constexpr, DV_BLOCK: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    IS_CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: dK and dV of one tile of BLOCK_K keys of one (batch, head), summed over
    every query tile that sees them, each tile's weights recomputed from the log-sum-exp.
    Chapter 18."""
    k_tile, head = tl.program_id(0), tl.program_id(1).to(tl.int64)
    cols = k_tile * BLOCK_K + tl.arange(0, BLOCK_K)  # key positions (BLOCK_K,)
    dims, vdims = tl.arange(0, D_BLOCK), tl.arange(0, DV_BLOCK)
    col_ok = cols < n_keys
    # the key and value tiles stay on chip while the query tiles stream past
    k_ptrs = K + (head * n_keys + cols[:, None]) * HEAD_DIM + dims[None, :]
    k = tl.load(k_ptrs, mask=col_ok[:, None] & (dims[None, :] < HEAD_DIM), other=0.0)
    v_ptrs = V + (head * n_keys + cols[:, None]) * VALUE_DIM + vdims[None, :]
    v = tl.load(v_ptrs, mask=col_ok[:, None] & (vdims[None, :] < VALUE_DIM), other=0.0)
    dk = tl.zeros([BLOCK_K, D_BLOCK], tl.float32)
    dv = tl.zeros([BLOCK_K, DV_BLOCK], tl.float32)
    # causal: the first query tile whose last query sees this tile's first key
    start = 0
    if IS_CAUSAL:
        start = (k_tile * BLOCK_K // BLOCK_Q) * BLOCK_Q
    for first in range(start, n_queries, BLOCK_Q):
        rows = first + tl.arange(0, BLOCK_Q)  # query positions (BLOCK_Q,)
        row_ok = rows < n_queries
        q_ptrs = Q + (head * n_queries + rows[:, None]) * HEAD_DIM + dims[None, :]
        q = tl.load(q_ptrs, mask=row_ok[:, None] & (dims[None, :] < HEAD_DIM), other=0.0)
        do_ptrs = DO + (head * n_queries + rows[:, None]) * VALUE_DIM + vdims[None, :]
        do = tl.load(do_ptrs, mask=row_ok[:, None] & (vdims[None, :] < VALUE_DIM), other=0.0)
        lse = tl.load(LSE + head * n_queries + rows, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + head * n_queries + rows, mask=row_ok, other=0.0)
        # the weights P = exp(S - lse), recomputed, 0 where a query may not look
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        allowed = row_ok[:, None] & col_ok[None, :]
        if IS_CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)  # (BLOCK_Q, BLOCK_K)
        # dV += P^T dO
        dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=PRECISION)
        # dS = P * (dO V^T - D) * scale, then dK += dS^T Q
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None]) * scale
        dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PRECISION)
    out_k = col_ok[:, None] & (dims[None, :] < HEAD_DIM)
    tl.store(DK + (head * n_keys + cols[:, None]) * HEAD_DIM + dims[None, :],
             dk.to(DK.dtype.element_ty), mask=out_k)  # fmt: skip
    out_v = col_ok[:, None] & (vdims[None, :] < VALUE_DIM)
    tl.store(DV + (head * n_keys + cols[:, None]) * VALUE_DIM + vdims[None, :],
             dv.to(DV.dtype.element_ty), mask=out_v)  # fmt: skip


def query_grads_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    n_queries, n_keys, scale,
    HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr,
    D_BLOCK: tl.constexpr, DV_BLOCK: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
    IS_CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: dQ of one tile of BLOCK_Q queries of one (batch, head), summed over the
    key tiles it sees (the forward pass's tiles). Chapter 18."""
    q_tile, head = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = q_tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    dims, vdims = tl.arange(0, D_BLOCK), tl.arange(0, DV_BLOCK)
    row_ok = rows < n_queries
    q_ptrs = Q + (head * n_queries + rows[:, None]) * HEAD_DIM + dims[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None] & (dims[None, :] < HEAD_DIM), other=0.0)
    do_ptrs = DO + (head * n_queries + rows[:, None]) * VALUE_DIM + vdims[None, :]
    do = tl.load(do_ptrs, mask=row_ok[:, None] & (vdims[None, :] < VALUE_DIM), other=0.0)
    lse = tl.load(LSE + head * n_queries + rows, mask=row_ok, other=0.0)
    delta = tl.load(DELTA + head * n_queries + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_Q, D_BLOCK], tl.float32)
    end = n_keys
    if IS_CAUSAL:
        end = tl.minimum(n_keys, (q_tile + 1) * BLOCK_Q)
    for start in range(0, end, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        col_ok = cols < n_keys
        k_ptrs = K + (head * n_keys + cols[:, None]) * HEAD_DIM + dims[None, :]
        k = tl.load(k_ptrs, mask=col_ok[:, None] & (dims[None, :] < HEAD_DIM), other=0.0)
        v_ptrs = V + (head * n_keys + cols[:, None]) * VALUE_DIM + vdims[None, :]
        v = tl.load(v_ptrs, mask=col_ok[:, None] & (vdims[None, :] < VALUE_DIM), other=0.0)
        # P recomputed from the log-sum-exp, as in the key-tile kernel
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        allowed = row_ok[:, None] & col_ok[None, :]
        if IS_CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        p = tl.where(allowed, tl.exp(s - lse[:, None]), 0.0)
        # dS = P * (dO V^T - D) * scale, then dQ += dS K
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None]) * scale
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    dq_ptrs = DQ + (head * n_queries + rows[:, None]) * HEAD_DIM + dims[None, :]
    tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=row_ok[:, None] & (dims[None, :] < HEAD_DIM))


_KERNELS = (forward_kernel, row_dot_kernel, key_grads_kernel, query_grads_kernel)
COMPILED = {fn.__name__: JITFunction(fn) for fn in _KERNELS}
INTERPRETED = {fn.__name__: InterpretedFunction(fn) for fn in _KERNELS}


def runs_compiled(device):
    """Whether tensors on `device` run compiled (CUDA, unless Triton interprets everything)."""
    return device.type == "cuda" and not LIBRARY_INTERPRETED


def _interpreted_call(self, *args, **kwargs):
    """A library function (a JITFunction) called inside an interpreted kernel, interpreted;
    Triton's language patched for the call and restored after it (Triton's own interpreted
    calls leave it patched), so that the process can still compile kernels afterwards."""
    scope = _patch_lang(self.fn)
    try:
        return InterpretedFunction(self.fn).rewrite()(*args, **kwargs)
    finally:
        if scope is not None:  # Triton before 3.7 patched for good and returned nothing
            scope.restore()


@contextlib.contextmanager
def interpreted():
    """While the interpreter runs a kernel, Triton's compiled-mode library functions (tl.sum,
    tl.max, tl.zeros, ... are JITFunctions, which refuse to be called outside a compiled
    kernel) run through the interpreter as the kernel does."""
    if LIBRARY_INTERPRETED:
        yield
        return
    original = JITFunction.__call__
    JITFunction.__call__ = _interpreted_call
    try:
        yield
    finally:
        JITFunction.__call__ = original


def launch(name, grid, device, *args, **meta):
    """Run kernel `name` on `grid`: compiled for CUDA tensors, interpreted otherwise."""
    if runs_compiled(device):
        return COMPILED[name][grid](*args, **meta)
    with interpreted():
        return INTERPRETED[name][grid](*args, **meta)


def cdiv(a, b):
    """ceil(a / b) for positive integers: the number of tiles."""
    return triton.cdiv(a, b)


def padded(size):
    """A head size padded to a power of two of at least 16 (tl.arange's and tl.dot's)."""
    return max(16, triton.next_power_of_2(size))
