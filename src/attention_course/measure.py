"""Measuring time and memory: the one timer and the memory probes that every
chapter, `make bench` and the exercise checks use.

- `best_seconds`: the least processor time of a few calls, in one thread;
- `largest_tensor`, `count_multiply_adds`: what PyTorch's operations create and
  compute, seen through a dispatch mode (fused kernels included);
- `peak_extra_bytes`, `peak_extra_memory`: peak resident memory of calls made in
  a fresh process (Linux), where nothing earlier can hide an allocation.
"""

import concurrent.futures
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ._shapes import require_int, type_name


@contextlib.contextmanager
def one_thread():
    """Within the block, PyTorch computes in one thread; the thread count
    comes back after. Chapter 7."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def best_seconds(function, *args, repeats=3, **kwargs):
    """The least processor time of `repeats` calls of function(*args,
    **kwargs), in seconds, PyTorch in one thread.

    Processor time is what the call itself costs: another program on the
    machine delays it but does not add to it; one thread, so that it counts
    one core's work. The least of a few is the best estimate of that cost.
    Chapter 7."""
    if not callable(function):
        raise TypeError(f"function must be callable, got {type_name(function)}")
    require_int("repeats", repeats, 1)
    best = float("inf")
    with one_thread():
        for _ in range(repeats):
            start = time.process_time()
            function(*args, **kwargs)
            best = min(best, time.process_time() - start)
    return best


class _SeesEveryOperation(TorchDispatchMode):
    """A dispatch mode that sees the operations a composite one is made of.

    Under torch.no_grad, PyTorch splits an operation such as `linear`,
    `matmul` or `einsum` into its parts (`addmm`, `bmm`, ...) before a mode
    sees it; under torch.inference_mode it does not, and the mode would see
    `linear` whole. Splitting it here, as PyTorch's own FlopCounterMode does,
    makes the mode see the same parts either way."""

    def __torch_dispatch__(self, operation, types, args=(), kwargs=None):
        with self:  # the parts come back to this mode
            parts = operation.decompose(*args, **(kwargs or {}))
        if parts is not NotImplemented:
            return parts
        result = operation(*args, **(kwargs or {}))
        self.seen(operation, args, result)
        return result


class _LargestTensor(_SeesEveryOperation):
    """Remembers the largest tensor any PyTorch operation returns."""

    def __init__(self):
        super().__init__()
        self.numel, self.shape, self.operation = 0, None, None

    def seen(self, operation, args, result):
        for tensor in tree_flatten(result)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.numel() > self.numel:
                self.numel, self.shape = tensor.numel(), tuple(tensor.shape)
                self.operation = str(operation).removesuffix(".default")


def largest_tensor(function, *args, **kwargs):
    """The largest tensor that any PyTorch operation creates in a call.

    Runs function(*args, **kwargs) and returns (its result, (numel, shape,
    operation)): the number of elements and shape of the largest tensor an
    operation returned, output included, and the operation's name. PyTorch
    reports every operation to a dispatch mode, fused kernels included.
    Chapter 12."""
    if not callable(function):
        raise TypeError(f"function must be callable, got {type_name(function)}")
    with _LargestTensor() as largest:
        result = function(*args, **kwargs)
    return result, (largest.numel, largest.shape, largest.operation)


class _MultiplyAdds(_SeesEveryOperation):
    """Counts the multiply-adds of the matrix products PyTorch runs."""

    # operation -> the index of its left factor (addmm's first is the bias)
    PRODUCTS = {
        torch.ops.aten.mm: 0,
        torch.ops.aten.bmm: 0,
        torch.ops.aten.addmm: 1,
        torch.ops.aten.baddbmm: 1,
    }

    def __init__(self):
        super().__init__()
        self.count = 0

    def seen(self, operation, args, result):
        first = self.PRODUCTS.get(operation.overloadpacket)
        if first is not None:  # (..., n, k) @ (..., k, m)
            self.count += result.numel() * args[first].shape[-1]


def count_multiply_adds(function, *args, **kwargs):
    """Runs function(*args, **kwargs) -> (its result, the multiply-adds of
    the matrix products it ran: mm, bmm, addmm, baddbmm). Chapter 7."""
    if not callable(function):
        raise TypeError(f"function must be callable, got {type_name(function)}")
    with _MultiplyAdds() as counter:
        result = function(*args, **kwargs)
    return result, counter.count


def resident_bytes(peak=False):
    """This process's resident memory (Linux): now, or its peak. Chapter 12."""
    field = "VmHWM" if peak else "VmRSS"
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field))
    return int(line.split()[1]) * 1024


def reset_peak_resident_bytes():
    """Restart this process's peak resident memory from now (Linux).
    Chapter 12."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # Linux: the peak (VmHWM) restarts from now


# The program run in a fresh process: it imports `module:function`, calls it
# with the given arguments to get (warm_up, call) pairs, and prints the peak
# extra resident bytes of each call after its warm-up.
_FRESH_PROCESS = """
import importlib, json, sys
import torch
from attention_course.measure import resident_bytes, reset_peak_resident_bytes
module, name = sys.argv[1].split(":")
cases = getattr(importlib.import_module(module), name)(*json.loads(sys.argv[2]))
torch.set_num_threads(1)
with torch.no_grad():
    for warm_up, call in cases:
        warm_up()              # one-off allocations of this size: not measured
        before = resident_bytes()
        reset_peak_resident_bytes()
        result = call()
        print(resident_bytes(peak=True) - before, flush=True)
        del result
"""


def peak_extra_bytes(target, *arguments):
    """Peak extra resident bytes of calls, each measured in a new process.

    target: "module:function", importable from the current folder; called
    there with `arguments` (numbers, strings, lists: JSON), it returns a list
    of (warm_up, call) pairs of functions without arguments. For each pair
    the new process runs warm_up(), then call(), in one thread, and the
    result is the peak resident memory during call() (Linux's VmHWM) minus
    the memory before it: the output and everything the call allocates,
    PyTorch's tensors included. The C allocator there gives every block of
    64 KiB or more back to the system when it is freed, so a large freed
    block cannot be reused unseen; smaller blocks may come from memory freed
    earlier and go uncounted, and the peak may fall below the memory of the
    call's output (a reading wobbles by a few hundred KiB from run to run).
    On a machine short of memory the system may evict pages of the
    process's libraries during a call, and the reading falls by their size:
    it can then read less than the output, or nothing.
    Returns a list of ints, one per pair. Chapter 12."""
    if not isinstance(target, str):
        raise TypeError(f"target must be a string 'module:function', got {type_name(target)}")
    if target.count(":") != 1:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, target, json.dumps(arguments)],
        capture_output=True,
        text=True,
        env=environment,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the measurement failed:\n{result.stderr}")
    return [int(line) for line in result.stdout.split()]


IMPLEMENTATIONS = ("naive", "tiled", "sdpa")


def _attention_cases(implementation, head_dim, cases):
    """(warm_up, call) pairs for peak_extra_memory: one per (length,
    block_size) in `cases`, on seeded float32 (1, 1, length, head_dim)
    inputs; the warm-up is the same call on other inputs of the same size."""
    from .tiled import flash_attention, naive_attention

    def run(q, k, v, block_size):
        if implementation == "naive":
            return naive_attention(q, k, v)
        if implementation == "tiled":
            return flash_attention(q, k, v, block_size=block_size)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    generator = torch.Generator().manual_seed(0)
    pairs = []
    for length, block_size in cases:
        shape = (3, 1, 1, length, head_dim)
        inputs = []  # the warm-up makes the measured call's inputs

        def warm_up(shape=shape, block_size=block_size, inputs=inputs):
            run(*torch.randn(shape), block_size)
            inputs[:] = torch.randn(shape, generator=generator)

        pairs.append((warm_up, lambda b=block_size, inputs=inputs: run(*inputs, b)))
    return pairs


def peak_extra_memory(implementation, lengths, head_dim=64, block_size=128, repeats=1):
    """Peak extra resident bytes of attention calls, measured in a new process.

    implementation: "naive" (tiled.naive_attention), "tiled"
    (flash_attention) or "sdpa" (torch.nn.functional.
    scaled_dot_product_attention). lengths: the sequence lengths L, one call
    each on float32 (1, 1, L, head_dim) inputs, each after a warm-up call of
    the same size. block_size: the tiled version's, one for all lengths or a
    list with one per length. Returns a list of ints, one per length, as
    peak_extra_bytes measures them: an approximation that can err either way
    by a few hundred KiB. Memory the allocator frees or trims during a call
    offsets what it allocates later, so a reading can fall below what the
    call truly allocated, even below its output's L * head_dim * 4 bytes (a
    tiled call at L = 2,048 once read 0.30 MiB for a 0.50 MiB output).
    repeats: how many new processes measure every case, all at once; each
    length's result is then the median of their readings, which a single
    disturbed process (a burst of paging on a busy machine) does not move.
    Chapter 12."""
    if not isinstance(implementation, str):
        raise TypeError(
            f"implementation must be one of {IMPLEMENTATIONS}, got {type_name(implementation)}"
        )
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be a list of sequence lengths, got {type_name(lengths)}")
    lengths = list(lengths)
    for length in lengths:
        require_int("lengths", length, 1, message=f"lengths must each be at least 1, got {length}")
    require_int("head_dim", head_dim, 1)
    block_sizes = (
        list(block_size) if isinstance(block_size, (list, tuple)) else [block_size] * len(lengths)
    )
    if len(block_sizes) != len(lengths):
        raise ValueError(
            f"{len(block_sizes)} block sizes for {len(lengths)} "
            "lengths: give one block size, or one per length"
        )
    for size in block_sizes:
        require_int("block_size", size, 1, message=f"block_size must be at least 1, got {size!r}")
    require_int("repeats", repeats, 1)
    cases = [[int(length), int(size)] for length, size in zip(lengths, block_sizes)]
    arguments = ("attention_course.measure:_attention_cases", implementation, head_dim, cases)
    if repeats == 1:
        return peak_extra_bytes(*arguments)
    # the same cases in `repeats` new processes at once, then each case's median
    with concurrent.futures.ThreadPoolExecutor(repeats) as pool:
        readings = list(pool.map(lambda _: peak_extra_bytes(*arguments), range(repeats)))
    return [int(statistics.median(case)) for case in zip(*readings)]
