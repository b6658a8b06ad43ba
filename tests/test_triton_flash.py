"""Chapter 18's Triton kernel, run here through Triton's interpreter (no GPU on CI): outputs,
log-sum-exps and gradients against PyTorch's scaled_dot_product_attention and chapter 12's
flash_attention, on shapes that are not multiples of the tiles, causal and not, one query tile
against many keys; the half-precision and missing-Triton paths; and hbm_bytes against a loop
that counts every load and store of the tiled schedule. tests/test_cuda.py runs the kernel
compiled when a GPU is present."""

import importlib
import inspect
import json
import math
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import attention_course as ac
from attention_course import flash_attention, hbm_bytes, triton_flash_attention

triton = pytest.importorskip("triton")
tl = triton.language
from attention_course import _triton_kernels  # noqa: E402 (needs triton)

# (name, batch shape, L, S, E, Ev, is_causal, block_queries, block_keys)
SHAPES = [
    ("tile multiples", (1, 2), 64, 64, 16, 16, False, 16, 16),
    ("causal, lengths off the tiles", (2, 1), 77, 77, 32, 32, True, 32, 16),
    ("causal, key tiles larger", (1,), 50, 50, 16, 16, True, 16, 32),
    ("one query tile, many keys", (1, 1), 10, 300, 64, 64, False, 16, 64),
    ("causal, fewer keys than queries", (1,), 60, 25, 16, 24, True, 16, 16),
    ("causal, more keys than queries", (2,), 20, 70, 16, 16, True, 16, 16),
    ("head sizes off the powers of two", (), 33, 41, 24, 40, False, 16, 32),
    ("no batch, one query", (), 1, 37, 16, 16, True, 16, 16),
]
IDS = [shape[0] for shape in SHAPES]


def qkv(batch, n_q, n_k, dim, value_dim, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(*batch, n_q, dim), (*batch, n_k, dim), (*batch, n_k, value_dim)]
    return [torch.randn(*s, generator=generator, dtype=dtype) for s in shapes]


def reference_logsumexp(q, k, is_causal, scale):
    scores = (q.double() @ k.double().transpose(-2, -1)) * scale
    if is_causal:
        above = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(above, -math.inf)
    return torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_forward_equals_sdpa_and_flash_attention(shape):
    _, batch, n_q, n_k, dim, value_dim, is_causal, bq, bk = shape
    q, k, v = qkv(batch, n_q, n_k, dim, value_dim)
    output, logsumexp = triton_flash_attention(q, k, v, is_causal, block_queries=bq, block_keys=bk)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    tiled_output, tiled_lse = flash_attention(q, k, v, is_causal, block_size=16)
    assert output.shape == expected.shape and output.dtype == torch.float32
    assert torch.allclose(output, expected, atol=1e-5)
    assert torch.allclose(output, tiled_output, atol=1e-5)
    reference = reference_logsumexp(q, k, is_causal, dim**-0.5).float()
    assert logsumexp.shape == (*batch, n_q) and logsumexp.dtype == torch.float32
    assert torch.allclose(logsumexp, reference, atol=1e-5)
    assert torch.allclose(logsumexp, tiled_lse, atol=1e-5)


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_gradients_equal_sdpas(shape):
    _, batch, n_q, n_k, dim, value_dim, is_causal, bq, bk = shape
    inputs = [t.requires_grad_() for t in qkv(batch, n_q, n_k, dim, value_dim, seed=1)]
    grad_output = torch.randn(*batch, n_q, value_dim, generator=torch.Generator().manual_seed(2))
    output, _ = triton_flash_attention(*inputs, is_causal, block_queries=bq, block_keys=bk)
    ours = torch.autograd.grad(output, inputs, grad_output)
    doubles = [t.detach().double().requires_grad_() for t in inputs]
    expected = F.scaled_dot_product_attention(*doubles, is_causal=is_causal)
    theirs = torch.autograd.grad(expected, doubles, grad_output.double())
    for name, got, want in zip("QKV", ours, theirs):
        assert got.shape == want.shape and got.dtype == torch.float32, name
        assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5), name


def test_keys_after_every_query_get_no_gradient():
    q, k, v = (t.requires_grad_() for t in qkv((1,), 16, 48, 16, 16, seed=3))
    output, _ = triton_flash_attention(q, k, v, is_causal=True, block_queries=16, block_keys=16)
    _, dk, dv = torch.autograd.grad(output.sum(), (q, k, v))
    assert dk[:, 16:].abs().max() == 0 and dv[:, 16:].abs().max() == 0
    assert dv[:, :16].abs().min() > 0


def test_a_custom_scale_and_broadcast_batch_dimensions():
    q, _, _ = qkv((2, 3), 20, 20, 16, 16, seed=4)
    _, k, v = qkv((1, 3), 20, 30, 16, 8, seed=5)
    inputs = [t.requires_grad_() for t in (q, k, v)]
    output, logsumexp = triton_flash_attention(*inputs, scale=0.3, block_queries=16)
    expected = F.scaled_dot_product_attention(*inputs, scale=0.3)
    assert torch.allclose(output, expected, atol=1e-5)
    ours = torch.autograd.grad(output.sum(), inputs)
    theirs = torch.autograd.grad(expected.sum(), inputs)
    assert ours[1].shape == (1, 3, 30, 16)  # summed over the broadcast dimension
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ours, theirs))
    reference = reference_logsumexp(q, k.expand(2, 3, 30, 16), False, 0.3).float()
    assert torch.allclose(logsumexp, reference, atol=1e-5)


def test_huge_scores_stay_finite():
    q, k, v = qkv((1,), 40, 40, 16, 16, seed=6)
    output, logsumexp = triton_flash_attention(30 * q, 30 * k, v, is_causal=True, block_keys=16)
    expected = F.scaled_dot_product_attention(30 * q.double(), 30 * k.double(), v.double(),
                                              is_causal=True)  # fmt: skip
    assert torch.isfinite(logsumexp).all()
    assert torch.allclose(output.double(), expected, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_on_the_cpu_is_computed_in_float32(dtype):
    q, k, v = (t.to(dtype).requires_grad_() for t in qkv((1, 2), 30, 30, 16, 16, seed=7))
    output, logsumexp = triton_flash_attention(q, k, v, is_causal=True, block_queries=16)
    as_float = [t.detach().float() for t in (q, k, v)]
    expected, _ = triton_flash_attention(*as_float, is_causal=True, block_queries=16)
    assert output.dtype == dtype and logsumexp.dtype == torch.float32
    assert torch.equal(output, expected.to(dtype))  # float32, rounded once at the end
    grads = torch.autograd.grad(output.sum(), (q, k, v))
    assert all(g.dtype == dtype for g in grads)


def test_cpu_tensors_run_interpreted_and_the_library_is_restored_after():
    assert not _triton_kernels.runs_compiled(torch.device("cpu"))
    assert _triton_kernels.padded(24) == 32 and _triton_kernels.padded(8) == 16
    call = _triton_kernels.JITFunction.__call__
    q, k, v = qkv((1,), 20, 20, 16, 16)
    triton_flash_attention(q, k, v)
    assert _triton_kernels.JITFunction.__call__ is call


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(dtype=torch.float64), "use flash_attention"),
        (dict(block_queries=24), "power of two"),
        (dict(block_keys=8), ">= 16"),
        (dict(dim=300), "on-chip memory"),
        (dict(n_k=0), "no keys"),
    ],
    ids=["float64", "block not a power of two", "tile under 16", "head too wide", "no keys"],
)
def test_the_door_names_what_is_wrong(change, message):
    sizes = dict(n_q=5, n_k=7, dim=16, dtype=torch.float32)
    blocks = {name: change.pop(name) for name in ("block_queries", "block_keys") if name in change}
    sizes.update(change)
    q, k, v = qkv((1,), sizes["n_q"], sizes["n_k"], sizes["dim"], 16, dtype=sizes["dtype"])
    with pytest.raises((ValueError, TypeError), match=message):
        triton_flash_attention(q, k, v, **blocks)


def test_without_triton_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "attention_course._triton_kernels", None)
    q, k, v = qkv((1,), 4, 4, 16, 16)
    with pytest.raises(ImportError, match=r"pip install triton==3\.9\.0"):
        triton_flash_attention(q, k, v)
    monkeypatch.undo()
    assert importlib.import_module("attention_course._triton_kernels") is _triton_kernels


@pytest.mark.parametrize(
    "numpy_version, triton_version, refused",
    [
        ("2.5.2", "3.6.0", True),
        ("2.4.0", "3.8.1", True),
        ("2.3.5", "3.6.0", False),
        ("2.5.2", "3.9.0", False),
    ],
)
def test_an_interpreter_that_cannot_run_with_the_installed_numpy_is_named(
    monkeypatch, numpy_version, triton_version, refused
):
    """Triton 3.6.0's interpreter failed every kernel here with NumPy 2.5.2 (on a GPU machine's
    image, 2026-12-04: "only 0-dimensional arrays can be converted to Python scalars"); Colab's
    Triton 3.6.0 with its NumPy 2.1 runs them (tests/test_colab.py)."""
    import numpy
    import triton

    monkeypatch.setattr(numpy, "__version__", numpy_version)
    monkeypatch.setattr(triton, "__version__", triton_version)
    q, k, v = qkv((1,), 4, 4, 16, 16)
    if refused:
        with pytest.raises(
            RuntimeError, match=rf"NumPy {numpy_version}: pip install triton==3\.9\.0"
        ):
            triton_flash_attention(q, k, v)
    else:
        triton_flash_attention(q, k, v)


def test_numpy_refuses_int_of_a_one_element_array_and_the_interpreter_squeezes_it_first():
    """The two facts the check above rests on, read off the pinned NumPy (2.4.6) and Triton."""
    import numpy
    import triton.runtime.interpreter as interpreter

    with pytest.raises(TypeError, match="only 0-dimensional arrays"):
        int(numpy.array([3]))
    assert "int(self.handle.data.squeeze())" in inspect.getsource(interpreter)


def test_the_package_exports_the_kernel_at_the_top_level():
    assert ac.triton_flash_attention is triton_flash_attention and "triton_flash_attention" in (
        ac.__all__
    )


def counted_hbm_bytes(n, d, block, element, is_causal):
    """Every load and store of plain attention and of the tiled kernel, counted one matrix
    or one tile at a time (the kernel's loops, not hbm_bytes's formula)."""
    naive = 0
    for reads, writes in [(2 * n * d, n * n), (n * n, n * n), (n * n + n * d, n * d)]:
        naive += element * (reads + writes)  # S = QK^T; P = softmax(S); O = PV
    tiled = 0
    for q0 in range(0, n, block):
        rows = min(block, n - q0)
        tiled += element * rows * d  # the query tile, once
        for k0 in range(0, n, block):
            if is_causal and k0 > q0 + rows - 1:
                break
            cols = min(block, n - k0)
            tiled += element * 2 * cols * d  # a key tile and its value tile
        tiled += element * rows * d + 4 * rows  # the output and the float32 log-sum-exp
    return {"naive": naive, "tiled": tiled}


@pytest.mark.parametrize("n", [64, 1024, 4096, 100])
@pytest.mark.parametrize("is_causal", [False, True])
def test_hbm_bytes_counts_every_load_and_store(n, is_causal):
    if is_causal and n % 64:
        with pytest.raises(ValueError, match="multiple"):
            hbm_bytes(n, 64, 64, 2, is_causal)
        return
    assert hbm_bytes(n, 64, 64, 2, is_causal) == counted_hbm_bytes(n, 64, 64, 2, is_causal)
    assert hbm_bytes(n, 128, 32, 4, is_causal) == counted_hbm_bytes(n, 128, 32, 4, is_causal)


def test_both_grow_as_n_squared_and_their_ratio_tends_to_twice_the_block_over_d():
    small, large = hbm_bytes(1024, 64, 128), hbm_bytes(8192, 64, 128)
    assert large["naive"] / small["naive"] == pytest.approx(64, rel=0.1)
    assert large["tiled"] / small["tiled"] == pytest.approx(64, rel=0.1)
    # naive 4 n^2 bytes per element against tiled 2 (n / B) n d: a ratio of 2 B / d
    for block, dim in [(128, 64), (64, 128), (256, 64)]:
        far = hbm_bytes(2**16, dim, block)
        assert far["naive"] / far["tiled"] == pytest.approx(2 * block / dim, rel=0.02)


# ------------------------------------------------- compiled for a GPU, on this CPU (no GPU here)
# Triton compiles for a named GPU target without the GPU: what the interpreter accepts but a GPU
# compiler refuses (a Python global inside a kernel, too small a tl.dot, too much shared memory)
# is found here. The compiling runs in a fresh process (helpers/triton_compile.py), so that
# nothing the interpreter did earlier in this one (it patches Triton's language while it runs)
# can affect it. A T4 (Colab's free GPU, sm_75) gives a program at most 64 KiB of shared memory.
T4_SHARED = 64 * 1024


@pytest.fixture(scope="module")
def compiled():
    result = subprocess.run(
        [sys.executable, "-m", "helpers.triton_compile"],
        cwd=pathlib.Path(__file__).parent,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.splitlines()[-1])


def test_the_kernels_compile_for_a_t4_and_fit_its_shared_memory(compiled):
    assert len(compiled["kernels"]) == 5
    for name, shared in compiled["kernels"].items():
        assert 0 < shared <= T4_SHARED, (name, shared)


def test_a_gpu_refuses_a_16_bit_dot_under_16_wide_and_the_interpreter_does_not(compiled):
    assert compiled["dot 16"] == "compiled" and "K >= 16" in compiled["dot 8"]
    a = torch.randn(8, 8).half()
    product = torch.empty(8, 8)
    small = _triton_kernels.InterpretedFunction(compiled_helpers().small_product)
    with _triton_kernels.interpreted():
        small[(1,)](a, a, product, N=8)
    assert torch.allclose(product, a.float() @ a.float(), atol=1e-2)


def test_compiling_still_works_in_a_process_that_ran_the_interpreter():
    """The package's interpreted launches restore Triton's language after each library call,
    so that a GPU machine can run CPU tensors interpreted and CUDA tensors compiled in one
    process (tests/test_cuda.py runs after this file there)."""
    q, k, v = (t.requires_grad_() for t in qkv((1,), 20, 20, 16, 16, seed=8))
    output, _ = triton_flash_attention(q, k, v, is_causal=True)
    output.sum().backward()
    helpers = compiled_helpers()
    assert helpers.small_dot(16) == "compiled"


def compiled_helpers():
    from helpers import triton_compile

    return triton_compile
