"""The checks of chapter 18's exercises pass independent answers (a traffic count by formula;
Triton kernels written another way: exp2 instead of exp, the tile loop over key offsets with
an explicit mask of lengths) and name each slip they know, on the visible and hidden seeds.
The kernels run through Triton's interpreter, whichever way Triton was imported."""

import pytest
import torch
from learner_answers import SEEDS

from attention_course import checks
from attention_course.checks import CheckFailed

triton = pytest.importorskip("triton")
tl = triton.language
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

MISTAKE = None  # read by the kernels below while they run (the interpreter reads globals)
LOG2E = 1.4426950408889634


def traffic(n, head_dim, block, element, mistake=None):
    vectors, blocks = n * head_dim, -(-n // block)
    naive = element * (4 * vectors + 4 * n * n)
    kv_reads = 1 if mistake == "K and V once" else blocks
    tiled = element * (2 * vectors + 2 * kv_reads * vectors) + 4 * n
    if mistake == "reads only":
        naive = element * (3 * vectors + 2 * n * n)
        tiled = element * (vectors + 2 * kv_reads * vectors)
    if mistake == "no log-sum-exp":
        tiled -= 4 * n
    if mistake == "elements":
        naive, tiled = naive // element, (tiled - 4 * n) // element + n
    if mistake == "floor":  # n // block query tiles read K and V
        tiled -= element * 2 * (blocks - n // block) * vectors
    return naive, tiled


@pytest.mark.parametrize("seed", SEEDS)
def test_traffic_check_passes_a_formula(seed, capsys):
    checks.check_hbm_traffic(traffic, seed=seed)
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, hint",
    [
        ("reads only", "written"),
        ("K and V once", "once per query block"),
        ("elements", "bytes_per_element"),
        ("no log-sum-exp", "log-sum-exp"),
        ("floor", "ceil"),
    ],
)
def test_traffic_check_names_the_slip(mistake, hint):
    with pytest.raises(CheckFailed, match=hint):
        checks.check_hbm_traffic(lambda *a: traffic(*a, mistake=mistake))


def test_a_stub_is_not_yet_answered(capsys):
    def stub(*args):
        raise NotImplementedError()

    checks.check_hbm_traffic(stub)
    assert "Not yet answered" in capsys.readouterr().out
    with pytest.raises(CheckFailed):
        checks.check_hbm_traffic(stub, strict=True)


def forward(Q, K, V, O, LSE, n_queries, n_keys, scale,
            HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
            IS_CAUSAL: tl.constexpr):  # fmt: skip
    """A forward kernel in base 2: scores times log2(e), exp2, the log-sum-exp back in base e."""
    block, head = tl.program_id(0), tl.program_id(1)
    i = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + head * n_queries * HEAD_DIM + i[:, None] * HEAD_DIM + d[None, :],
                mask=i[:, None] < n_queries, other=0.0)  # fmt: skip
    top = tl.zeros([BLOCK_Q], tl.float32) - 1.0e30
    total = tl.zeros([BLOCK_Q], tl.float32)
    out = tl.zeros([BLOCK_Q, HEAD_DIM], tl.float32)
    stop = n_keys
    if IS_CAUSAL:
        stop = tl.minimum(n_keys, block * BLOCK_Q + BLOCK_Q)
    for k0 in range(0, stop, BLOCK_K):
        j = k0 + tl.arange(0, BLOCK_K)
        base = head * n_keys * HEAD_DIM + j[:, None] * HEAD_DIM + d[None, :]
        k = tl.load(K + base, mask=j[:, None] < n_keys, other=0.0)
        v = tl.load(V + base, mask=j[:, None] < n_keys, other=0.0)
        x = tl.dot(q, tl.trans(k)) * (scale * LOG2E)
        keep = j[None, :] < n_keys
        if MISTAKE == "end unmasked":
            keep = j[None, :] >= 0
        if IS_CAUSAL:
            if MISTAKE == "tile-local mask":
                keep = keep & (tl.arange(0, BLOCK_K)[None, :] <= tl.arange(0, BLOCK_Q)[:, None])
            else:
                keep = keep & (j[None, :] <= i[:, None])
        x = tl.where(keep, x, -1.0e30)
        top_new = tl.maximum(top, tl.max(x, 1))
        shrink = tl.exp2(top - top_new)
        if MISTAKE == "no rescale":
            shrink = shrink * 0 + 1
        w = tl.exp2(x - top_new[:, None])
        total = total * shrink + tl.sum(w, 1)
        out = out * shrink[:, None] + tl.dot(w, v)
        top = top_new
    tl.store(O + head * n_queries * HEAD_DIM + i[:, None] * HEAD_DIM + d[None, :],
             out / total[:, None], mask=i[:, None] < n_queries)  # fmt: skip
    lse = (top + tl.log2(total)) / LOG2E
    if MISTAKE == "log l":
        lse = tl.log2(total) / LOG2E
    tl.store(LSE + head * n_queries + i, lse, mask=i < n_queries)


def key_grads(Q, K, V, DO, LSE, DELTA, DK, DV, n_queries, n_keys, scale,
              HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
              IS_CAUSAL: tl.constexpr):  # fmt: skip
    """dK, dV for one key tile; the causal start found by a loop condition, not a formula."""
    block, head = tl.program_id(0), tl.program_id(1)
    j = block * BLOCK_K + tl.arange(0, BLOCK_K)
    d = tl.arange(0, HEAD_DIM)
    base = head * n_keys * HEAD_DIM + j[:, None] * HEAD_DIM + d[None, :]
    k = tl.load(K + base, mask=j[:, None] < n_keys, other=0.0)
    v = tl.load(V + base, mask=j[:, None] < n_keys, other=0.0)
    dk = tl.zeros([BLOCK_K, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_K, HEAD_DIM], tl.float32)
    start = 0  # by the loop's condition below, or the slip of a start by tile index
    if IS_CAUSAL and MISTAKE == "start by index":
        start = block * BLOCK_Q
    for q0 in range(start, n_queries, BLOCK_Q):
        i = q0 + tl.arange(0, BLOCK_Q)
        rows = head * n_queries * HEAD_DIM + i[:, None] * HEAD_DIM + d[None, :]
        q = tl.load(Q + rows, mask=i[:, None] < n_queries, other=0.0)
        do = tl.load(DO + rows, mask=i[:, None] < n_queries, other=0.0)
        lse = tl.load(LSE + head * n_queries + i, mask=i < n_queries, other=0.0)
        delta = tl.load(DELTA + head * n_queries + i, mask=i < n_queries, other=0.0)
        keep = (i[:, None] < n_queries) & (j[None, :] < n_keys)
        if IS_CAUSAL:
            keep = keep & (j[None, :] <= i[:, None])
        x = tl.where(keep, tl.dot(q, tl.trans(k)) * scale - lse[:, None], -1.0e30)
        p = tl.exp(x)
        dv_share = tl.dot(tl.trans(p), do)
        dp = tl.dot(do, tl.trans(v))
        if MISTAKE == "no D":
            ds = p * dp
        else:
            ds = p * (dp - delta[:, None])
        if MISTAKE != "no scale":
            ds = ds * scale
        if MISTAKE == "assigned":
            dv = dv_share
            dk = tl.dot(tl.trans(ds), q)
        else:
            dv = dv + dv_share
            dk = dk + tl.dot(tl.trans(ds), q)
    tl.store(DK + base, dk, mask=j[:, None] < n_keys)
    tl.store(DV + base, dv, mask=j[:, None] < n_keys)


FORWARD, KEY_GRADS = InterpretedFunction(forward), InterpretedFunction(key_grads)


@pytest.fixture
def mistake():
    def set_mistake(value):
        global MISTAKE
        MISTAKE = value

    yield set_mistake
    set_mistake(None)


@pytest.mark.parametrize("seed", SEEDS)
def test_kernel_checks_pass_independent_kernels(seed, capsys):
    checks.check_forward_kernel(FORWARD, seed=seed)
    checks.check_key_grads_kernel(KEY_GRADS, seed=seed)
    assert capsys.readouterr().out.count("Correct") == 2


@pytest.mark.parametrize(
    "slip, hint",
    [("tile-local mask", "global positions"), ("no rescale", "exp\\(m_old - m_new\\)"),
     ("log l", "m \\+ log\\(l\\)"), ("end unmasked", "cols < n_keys")],
)  # fmt: skip
def test_forward_check_names_the_slip(slip, hint, mistake):
    mistake(slip)
    with pytest.raises(CheckFailed, match=hint):
        checks.check_forward_kernel(FORWARD)


@pytest.mark.parametrize(
    "slip, hint",
    [
        ("no D", "DELTA"),
        ("no scale", "carries the scale"),
        ("assigned", "\\+="),
        ("start by index", "from positions"),
    ],
)
def test_key_grads_check_names_the_slip(slip, hint, mistake):
    mistake(slip)
    with pytest.raises(CheckFailed, match=hint):
        checks.check_key_grads_kernel(KEY_GRADS)


def test_a_kernel_stub_is_not_yet_answered(capsys):
    def stub_kernel(Q, K, V, O, LSE, n_queries, n_keys, scale, HEAD_DIM: tl.constexpr,
                    BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                    IS_CAUSAL: tl.constexpr):  # fmt: skip
        raise NotImplementedError()

    checks.check_forward_kernel(InterpretedFunction(stub_kernel))
    assert "Not yet answered" in capsys.readouterr().out


def test_a_kernel_compiled_for_a_gpu_without_one_is_told_to_interpret():
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the compiled kernel runs")
    with pytest.raises(CheckFailed, match="TRITON_INTERPRET"):
        checks.check_forward_kernel(triton.runtime.jit.JITFunction(forward))
