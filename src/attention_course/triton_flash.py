"""FlashAttention as a Triton kernel (chapter 18): `triton_flash_attention`, differentiable
through FlashAttention-2's own backward kernels, compiled for CUDA tensors and run through
Triton's interpreter for CPU tensors; and `hbm_bytes`, the main-memory traffic of plain and
tiled attention that the chapter counts.

The kernels themselves are in `_triton_kernels`, imported on first use, so that the package
works without Triton (`pip install triton==3.9.0` brings it; on a GPU, PyTorch's CUDA builds
bring their own). Chapter 12's `flash_attention` is the same algorithm in PyTorch."""

import importlib
import math

import torch

from ._shapes import check_qkv, check_scale, require_floating_dtype, require_int, shape_of
from .runtime import release

INSTALL = "pip install triton==3.9.0"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256  # a query tile and a key tile of this width fit a GPU's on-chip memory


def _kernels():
    """The kernel module, or an ImportError that says how to install Triton."""
    try:
        return importlib.import_module(f"{__package__}._triton_kernels")
    except ImportError as error:
        raise ImportError(
            f"triton_flash_attention needs Triton, which is not installed: {INSTALL} "
            "(a CPU runs its kernels through Triton's interpreter)"
        ) from error


def _check_interpreter():
    """Triton's interpreter before 3.9 reads a kernel's integer arguments with int() of a
    one-element array, which NumPy 2.4 refuses (2.3 warned): every kernel then fails inside the
    interpreter (seen with Triton 3.6.0 and NumPy 2.5.2; 3.9's interpreter squeezes the array
    first). Say so at the door instead."""
    import numpy
    import triton

    if release(numpy.__version__) >= (2, 4) and release(triton.__version__) < (3, 9):
        raise RuntimeError(
            f"Triton {triton.__version__}'s interpreter, which runs the kernels on a CPU, "
            f"fails with NumPy {numpy.__version__}: pip install triton==3.9.0, or "
            "pip install 'numpy<2.4' (or run on a CUDA GPU)"
        )


def _check_block(name, block):
    require_int(name, block, 16)
    if block & (block - 1):
        raise ValueError(
            f"{name} must be a power of two (tl.arange's rule) of at least 16 (a GPU's tl.dot "
            f"needs 16 along the summed dimension for 16-bit inputs), got {block}"
        )


def tile_sizes(dtype, head_dim, value_dim):
    """The tile size B_r = B_c the kernels take by default for heads of these sizes: 64 while a
    head's row takes at most 128 bytes (float16 and bfloat16 up to d = 64), 32 up to 256 bytes,
    else 16, so that every kernel's shared memory fits a T4's 64 KiB (tests/test_triton_flash.py
    compiles them for its sm_75 on the CPU and reads what they need). Chapter 18."""
    require_floating_dtype("dtype", dtype)
    require_int("head_dim", head_dim, 1)
    require_int("value_dim", value_dim, 1)
    return _tile_size(dtype, head_dim, value_dim)


def _tile_size(dtype, head_dim, value_dim):
    row_bytes = torch.empty((), dtype=dtype).element_size() * max(head_dim, value_dim)
    return 64 if row_bytes <= 128 else 32 if row_bytes <= 256 else 16


def _check_inputs(query, key, value, block_queries, block_keys):
    check_qkv(query, key, value)
    if query.dtype not in DTYPES:
        raise ValueError(
            f"query {shape_of(query)} is {query.dtype}; the Triton kernel computes float32, "
            "float16 or bfloat16 (for float64, use flash_attention)"
        )
    if not query.device == key.device == value.device:
        raise ValueError(
            f"query, key and value must be on one device, got {query.device}, "
            f"{key.device} and {value.device}"
        )
    if query.device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"query is on {query.device}: Triton's kernels run on CUDA GPUs, and on the CPU "
            "through its interpreter"
        )
    if key.shape[-2] == 0:
        raise ValueError(
            f"key {shape_of(key)} has no keys (S = 0): every query needs at least one key"
        )
    for name, tensor in (("query", query), ("value", value)):
        if tensor.shape[-1] > MAX_HEAD_DIM:
            raise ValueError(
                f"{name} {shape_of(tensor)}: head sizes above {MAX_HEAD_DIM} do not fit a "
                "tile in a GPU's on-chip memory"
            )
    for name, block in (("block_queries", block_queries), ("block_keys", block_keys)):
        if block is not None:
            _check_block(name, block)


def triton_flash_attention(
    query, key, value, is_causal=False, scale=None, *, block_queries=None, block_keys=None
):
    """softmax(Q K^T * scale) V by FlashAttention-2's Triton kernel -> (output, logsumexp).

    query (..., L, E), key (..., S, E), value (..., S, Ev), batch dimensions that broadcast;
    is_causal: top-left causal mask, as in PyTorch; scale: default 1 / sqrt(E). Returns the
    output (..., L, Ev) in the inputs' dtype and the float32 log-sum-exp (..., L) of each
    query's scaled, masked scores, as flash_attention does. Differentiable: the backward pass
    runs FlashAttention-2's kernels (dK, dV by key tile; dQ by query tile), recomputing the
    weights from the log-sum-exp. CUDA tensors run the compiled kernels (float16 and bfloat16
    natively, float32 with tl.dot's "ieee" precision, not TF32); CPU tensors run the same
    kernels through Triton's interpreter, float16 and bfloat16 computed in float32 there (the
    interpreter's tl.dot has no bfloat16: it holds bfloat16 blocks as 16-bit integers).
    block_queries, block_keys: the tile sizes B_r, B_c, powers of two >= 16; by default
    tile_sizes(...), which fit a T4's shared memory. Needs Triton (ImportError saying how to
    install it). Chapter 18.
    """
    _check_inputs(query, key, value, block_queries, block_keys)
    scale = check_scale(scale, query)
    kernels = _kernels()
    if query.device.type == "cpu":
        _check_interpreter()
    default = _tile_size(query.dtype, query.shape[-1], value.shape[-1])
    blocks = (block_queries or default, block_keys or default)
    # broadcast the batch dimensions, then flatten them: (batch * heads, n, dim)
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    q, k, v = (t.expand(*batch, *t.shape[-2:]) for t in (query, key, value))
    output, logsumexp = _TritonFlash.apply(q, k, v, is_causal, float(scale), blocks, kernels)
    return output, logsumexp.view(*batch, query.shape[-2])


def _flat(tensor, dtype):
    """(..., n, dim) -> contiguous (batch * heads, n, dim) in `dtype`."""
    return tensor.reshape(-1, *tensor.shape[-2:]).to(dtype).contiguous()


class _TritonFlash(torch.autograd.Function):
    """Forward and backward kernels, saving Q, K, V, O and the log-sum-exp only."""

    @staticmethod
    def forward(ctx, query, key, value, is_causal, scale, blocks, kernels):
        # the interpreter's tl.dot has no bfloat16: it computes in float32
        dtype = query.dtype if kernels.runs_compiled(query.device) else torch.float32
        q, k, v = (_flat(t, dtype) for t in (query, key, value))
        output, logsumexp = _forward(q, k, v, is_causal, scale, blocks, kernels)
        ctx.save_for_backward(q, k, v, output, logsumexp)
        ctx.setup = (is_causal, scale, blocks, kernels, query.dtype)
        ctx.shapes = (query.shape, key.shape, value.shape)
        ctx.mark_non_differentiable(logsumexp)
        batch = query.shape[:-2]
        return output.view(*batch, *output.shape[-2:]).to(query.dtype), logsumexp

    @staticmethod
    def backward(ctx, grad_output, _grad_logsumexp):
        q, k, v, output, logsumexp = ctx.saved_tensors
        is_causal, scale, blocks, kernels, dtype = ctx.setup
        grad_output = _flat(grad_output, q.dtype)
        grads = _backward(
            q, k, v, output, logsumexp, grad_output, is_causal, scale, blocks, kernels
        )
        dq, dk, dv = (g.view(shape).to(dtype) for g, shape in zip(grads, ctx.shapes))
        return dq, dk, dv, None, None, None, None


def _meta(q, v, is_causal, blocks, kernels):
    """The kernels' compile-time sizes and flags."""
    return dict(
        HEAD_DIM=q.shape[-1],
        VALUE_DIM=v.shape[-1],
        D_BLOCK=kernels.padded(q.shape[-1]),
        DV_BLOCK=kernels.padded(v.shape[-1]),
        BLOCK_Q=blocks[0],
        BLOCK_K=blocks[1],
        IS_CAUSAL=bool(is_causal),
        # float32: exact products, not TF32; 16-bit inputs: the setting does not apply
        PRECISION="ieee" if q.dtype == torch.float32 else None,
    )


def _forward(q, k, v, is_causal, scale, blocks, kernels):
    """(BH, L, E), (BH, S, E), (BH, S, Ev) -> output (BH, L, Ev), logsumexp (BH, L)."""
    heads, n_queries, _ = q.shape
    output = v.new_empty(heads, n_queries, v.shape[-1])
    logsumexp = torch.empty(heads, n_queries, dtype=torch.float32, device=q.device)
    grid = (kernels.cdiv(max(n_queries, 1), blocks[0]), heads)
    kernels.launch(
        "forward_kernel", grid, q.device, q, k, v, output, logsumexp, n_queries, k.shape[1],
        scale, **_meta(q, v, is_causal, blocks, kernels),
    )  # fmt: skip
    return output, logsumexp


def _backward(q, k, v, output, logsumexp, grad_output, is_causal, scale, blocks, kernels):
    """FlashAttention-2's backward pass -> (dQ, dK, dV), each like its input."""
    heads, n_queries, _ = q.shape
    n_keys = k.shape[1]
    meta = _meta(q, v, is_causal, blocks, kernels)
    # D_i = dO_i . o_i, one number per query (float32)
    delta = torch.empty(heads, n_queries, dtype=torch.float32, device=q.device)
    rows = heads * n_queries
    kernels.launch(
        "row_dot_kernel", (kernels.cdiv(max(rows, 1), 64),), q.device, grad_output, output,
        delta, rows, DIM=v.shape[-1], D_BLOCK=meta["DV_BLOCK"], BLOCK=64,
    )  # fmt: skip
    # dK, dV: one program per key tile; dQ: one program per query tile
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    key_tiles, query_tiles = (
        kernels.cdiv(n_keys, blocks[1]),
        kernels.cdiv(max(n_queries, 1), blocks[0]),
    )
    kernels.launch(
        "key_grads_kernel", (key_tiles, heads), q.device, q, k, v, grad_output, logsumexp,
        delta, dk, dv, n_queries, n_keys, scale, **meta,
    )  # fmt: skip
    kernels.launch(
        "query_grads_kernel", (query_tiles, heads), q.device, q, k, v, grad_output, logsumexp,
        delta, dq, n_queries, n_keys, scale, **meta,
    )  # fmt: skip
    return dq, dk, dv


def hbm_bytes(n, head_dim, block_queries, bytes_per_element=2, is_causal=False):
    """The bytes one head's forward attention reads from and writes to a GPU's main memory
    (HBM), for n queries and n keys of size head_dim -> {"naive": ..., "tiled": ...}.

    naive: Q and K read, the (n, n) scores written, read back by the softmax, the weights
    written, read back with V, the output written (Dao et al. 2022's standard attention).
    tiled: each query block reads its Q once and every key tile it needs (K and V) once, and
    writes its output and float32 log-sum-exp; with is_causal only the tiles on or below the
    diagonal (blocks of block_queries keys, n a multiple of block_queries). Chapter 18."""
    require_int("n", n, 1)
    require_int("head_dim", head_dim, 1)
    require_int("block_queries", block_queries, 1)
    require_int("bytes_per_element", bytes_per_element, 1)
    if is_causal and n % block_queries:
        raise ValueError(
            f"with is_causal, n ({n}) must be a multiple of block_queries ({block_queries})"
        )
    element, vectors = bytes_per_element, n * head_dim  # one n x d matrix: n d numbers
    # naive: Q, K, V read and O written; S written and read back; P written and read back
    naive = element * (4 * vectors + 4 * n * n)
    # tiled: Q read and O written once; K and V once per query block (causal: query block r
    # reads the r + 1 key blocks on or below the diagonal); the float32 log-sum-exp written
    blocks = math.ceil(n / block_queries)
    if is_causal:
        key_rows_read = block_queries * blocks * (blocks + 1) // 2
    else:
        key_rows_read = blocks * n
    tiled = element * (2 * vectors + 2 * key_rows_read * head_dim) + 4 * n
    return {"naive": naive, "tiled": tiled}
