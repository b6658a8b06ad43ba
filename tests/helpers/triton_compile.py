"""Compile chapter 18's kernels for a T4 (sm_75) and a small 16-bit tl.dot for an A100 (sm_80),
on the CPU, without a GPU; print what each needs as JSON (tests/test_triton_flash.py runs this
in a fresh process: `python -m helpers.triton_compile` from tests/)."""

import json

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

from attention_course import _triton_kernels
from attention_course.triton_flash import tile_sizes

POINTERS = {
    "forward_kernel": ["Q", "K", "V", "O", "LSE"],
    "key_grads_kernel": ["Q", "K", "V", "DO", "LSE", "DELTA", "DK", "DV"],
    "query_grads_kernel": ["Q", "K", "V", "DO", "LSE", "DELTA", "DQ"],
}
TRITON_TYPE = {torch.float16: "*fp16", torch.float32: "*fp32"}
# the cases: each kernel once, and the key-tile kernel (the largest) at the heavier sizes
CASES = [
    ("forward_kernel", torch.float16, 64),
    ("query_grads_kernel", torch.float16, 64),
    ("key_grads_kernel", torch.float16, 64),
    ("key_grads_kernel", torch.float16, 128),
    ("key_grads_kernel", torch.float32, 128),
]


def compile_for(kernel, signature, constants, capability):
    source = ASTSource(fn=kernel, signature=signature, constexprs=constants)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32))


def package_kernel(name, dtype, head_dim, capability=75):
    """One of the package's kernels with the tiles triton_flash_attention picks -> bytes of
    shared memory it needs."""
    block = tile_sizes(dtype, head_dim, head_dim)
    signature = {
        p: "*fp32" if p in ("LSE", "DELTA") else TRITON_TYPE[dtype] for p in POINTERS[name]
    }
    signature.update(n_queries="i32", n_keys="i32", scale="fp32")
    constants = dict(
        HEAD_DIM=head_dim, VALUE_DIM=head_dim, D_BLOCK=head_dim, DV_BLOCK=head_dim,
        BLOCK_Q=block, BLOCK_K=block, IS_CAUSAL=True,
        PRECISION="ieee" if dtype == torch.float32 else None,
    )  # fmt: skip
    signature.update(dict.fromkeys(constants, "constexpr"))
    kernel = _triton_kernels.COMPILED[name]
    return compile_for(kernel, signature, constants, capability).metadata.shared


def small_product(A, B, C, N: tl.constexpr):
    """C = A B for (N, N) blocks in one program."""
    i = tl.arange(0, N)
    offsets = i[:, None] * N + i[None, :]
    tl.store(C + offsets, tl.dot(tl.load(A + offsets), tl.load(B + offsets)))


def small_dot(size):
    """'compiled', or the compiler's last line, for a float16 product of size x size blocks."""
    signature = {"A": "*fp16", "B": "*fp16", "C": "*fp32", "N": "constexpr"}
    try:
        compile_for(JITFunction(small_product), signature, {"N": size}, 80)
    except Exception as error:
        return str(error).strip().splitlines()[-1]
    return "compiled"


def main():
    kernels = {f"{n} {str(d)[6:]} d={h}": package_kernel(n, d, h) for n, d, h in CASES}
    print(json.dumps({"kernels": kernels, "dot 16": small_dot(16), "dot 8": small_dot(8)}))


if __name__ == "__main__":
    main()
