"""measure: the one timer and the memory probes, against what a formula predicts:
the sizes of the tensors an attention call makes, the multiply-adds of a matrix
product, the bytes of two (L, L) float32 matrices, and a sleeping call's processor time."""

import time

import pytest
import torch
import torch.nn.functional as F

from attention_course import measure
from attention_course.measure import (
    best_seconds,
    count_multiply_adds,
    largest_tensor,
    one_thread,
    peak_extra_memory,
)
from attention_course.tiled import flash_attention, naive_attention


def random(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def qkv(batch, length, n_keys, dim=16, value_dim=16):
    return (
        random(*batch, length, dim, seed=1),
        random(*batch, n_keys, dim, seed=2),
        random(*batch, n_keys, value_dim, seed=3),
    )


def test_no_tensor_as_large_as_the_score_matrix():
    query, key, value = qkv((1, 2), 512, 600, dim=32, value_dim=32)
    _, (numel, shape, _) = largest_tensor(flash_attention, query, key, value, block_size=64)
    assert numel == 2 * 512 * 32, shape  # the output itself
    _, (numel, shape, operation) = largest_tensor(naive_attention, query, key, value)
    assert numel == 2 * 512 * 600 and "bmm" in operation


def test_largest_tensor_sees_fused_kernels():
    query = random(1, 1, 300, 16)
    _, (numel, _, operation) = largest_tensor(F.scaled_dot_product_attention, query, query, query)
    assert numel == 300 * 16 and "scaled_dot_product" in operation


def test_the_peak_is_reset_between_lengths():
    """Measured large first, the small case must not inherit its peak."""
    large, small = peak_extra_memory("naive", [2048, 1024])
    assert large > 30 * 2**20
    # two (1024, 1024) float32 matrices, 8 MiB: far below the large peak,
    # and far enough above the reading's wobble (a few hundred KiB)
    assert 0.9 * 2 * 1024 * 1024 * 4 < small < 1.2 * 2 * 1024 * 1024 * 4


def test_measured_memory_matches_the_formulas():
    """Naive holds two float32 (L, L) matrices; tiled about the output."""
    length = 2048
    naive = peak_extra_memory("naive", [length])[0]
    tiled = peak_extra_memory("tiled", [length])[0]
    score_matrices = 2 * length * length * 4
    assert 0.95 * score_matrices < naive < 1.1 * score_matrices
    assert tiled < score_matrices / 20


def test_repeated_measurements_give_each_case_its_median(monkeypatch):
    """With repeats, every process's readings are taken, and each case's median is returned:
    one process's outlier (here 1,000 and 5) moves nothing."""
    readings = iter([[1, 10, 7], [3, 30, 5], [2, 1000, 6]])
    calls = []

    def fake(target, implementation, head_dim, cases):
        calls.append((target, implementation, head_dim, cases))
        return next(readings)

    monkeypatch.setattr(measure, "peak_extra_bytes", fake)
    assert peak_extra_memory("tiled", [64, 128, 256], head_dim=8, repeats=3) == [2, 30, 6]
    assert len(calls) == 3 and calls[0] == calls[1] == calls[2]
    assert calls[0][1:] == ("tiled", 8, [[64, 128], [128, 128], [256, 128]])


def test_multiply_adds_of_matrix_products_follow_the_formula():
    """(n, k) @ (k, m) is n k m multiply-adds; addmm's bias adds none; a batch
    of b products b times as many; elementwise work none."""
    a, b = random(5, 7), random(7, 3)
    _, count = count_multiply_adds(lambda: a @ b)
    assert count == 5 * 7 * 3
    _, count = count_multiply_adds(torch.addmm, random(5, 3), a, b)
    assert count == 5 * 7 * 3
    _, count = count_multiply_adds(torch.bmm, random(4, 5, 7), random(4, 7, 3))
    assert count == 4 * 5 * 7 * 3
    _, count = count_multiply_adds(lambda: (a * 2).exp().sum())
    assert count == 0


def test_best_seconds_counts_processor_time_not_sleep():
    """Sleeping costs no processor time."""
    assert best_seconds(time.sleep, 0.05) < 0.02


def test_one_thread_restores_the_thread_count():
    threads = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == threads


def test_bad_measurements_raise():
    with pytest.raises(ValueError, match="implementation must be one of"):
        peak_extra_memory("flash", [128])
    with pytest.raises(ValueError, match="lengths must each be at least 1, got 0"):
        peak_extra_memory("tiled", [0])
    with pytest.raises(TypeError, match="function must be callable"):
        best_seconds(3)
    with pytest.raises(ValueError, match="repeats"):
        best_seconds(print, repeats=0)
    with pytest.raises(ValueError, match="repeats"):
        peak_extra_memory("tiled", [128], repeats=0)


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode, torch.enable_grad])
def test_the_probes_see_the_same_operations_in_every_grad_mode(mode):
    """Under inference_mode PyTorch hands `linear`, `matmul` and `einsum` to a dispatch mode
    whole; the probes split them, so that a layer counts as its matrix products (before, a
    linear layer counted 0 there)."""
    layer = torch.nn.Linear(8, 4, dtype=torch.float64)
    x = random(2, 3, 8, seed=1)
    a, b = random(5, 3, 4, seed=2), random(5, 4, 6, seed=3)
    with mode():
        assert count_multiply_adds(layer, x)[1] == 2 * 3 * 8 * 4
        assert count_multiply_adds(torch.einsum, "bij,bjk->bik", a, b)[1] == 5 * 3 * 4 * 6
        assert count_multiply_adds(torch.matmul, a, b)[1] == 5 * 3 * 4 * 6
        # an outer product per batch: the output is the largest tensor
        tall, wide = random(5, 6, 2, seed=4), random(5, 2, 6, seed=5)
        result, (numel, shape, _) = largest_tensor(torch.matmul, tall, wide)
    assert torch.equal(result, tall @ wide) and (numel, shape) == (5 * 6 * 6, (5, 6, 6))
