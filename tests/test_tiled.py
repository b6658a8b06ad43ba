"""flash_attention and tile_schedule against independent references: PyTorch's
scaled_dot_product_attention and logsumexp, a float64 brute force over every query and key in
plain Python, and the causal mask entry by entry."""

import math

import pytest
import torch
import torch.nn.functional as F

from attention_course.tiled import flash_attention, tile_schedule


def random(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def qkv(batch, length, n_keys, dim=16, value_dim=8, seed=0, **options):
    return (
        random(*batch, length, dim, seed=seed, **options),
        random(*batch, n_keys, dim, seed=seed + 1, **options),
        random(*batch, n_keys, value_dim, seed=seed + 2, **options),
    )


def full_scores(query, key, is_causal, scale=None):
    """The whole (..., L, S) matrix of scaled, masked scores."""
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if is_causal:
        above = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
        scores = scores.masked_fill(above, -math.inf)
    return scores


LENGTHS = [(1, 1), (5, 5), (64, 64), (100, 100), (130, 257), (257, 130)]


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("length, n_keys", LENGTHS)
@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_equals_pytorch_sdpa(length, n_keys, is_causal, dtype, atol):
    query, key, value = qkv((2, 3), length, n_keys, dtype=dtype)
    expected = F.scaled_dot_product_attention(query, key, value, is_causal=is_causal)
    output, logsumexp = flash_attention(query, key, value, is_causal=is_causal, block_size=32)
    assert output.dtype == dtype and logsumexp.dtype == dtype
    torch.testing.assert_close(output, expected, atol=atol, rtol=0)
    torch.testing.assert_close(
        logsumexp,
        torch.logsumexp(full_scores(query, key, is_causal), dim=-1),
        atol=atol,
        rtol=0,
    )


@pytest.mark.parametrize("block_size", [1, 3, 16, 17, 128, 1000])
@pytest.mark.parametrize("is_causal", [False, True])
def test_equals_a_brute_force_loop(block_size, is_causal):
    """Every output entry from its definition, in plain Python floats."""
    query, key, value = qkv((), 9, 7, dim=3, value_dim=2, seed=4)
    output, logsumexp = flash_attention(query, key, value, is_causal, block_size=block_size)
    for i in range(9):
        allowed = [j for j in range(7) if not is_causal or j <= i]
        scores = {
            j: sum(query[i, e] * key[j, e] for e in range(3)).item() / math.sqrt(3) for j in allowed
        }
        total = sum(math.exp(s) for s in scores.values())
        assert logsumexp[i].item() == pytest.approx(math.log(total), abs=1e-12)
        for e in range(2):
            entry = sum(math.exp(s) / total * value[j, e].item() for j, s in scores.items())
            assert output[i, e].item() == pytest.approx(entry, abs=1e-12)


def test_scale_and_broadcast_batches():
    query = random(2, 4, 50, 8)
    key, value = random(1, 4, 70, 8, seed=1), random(1, 1, 70, 6, seed=2)
    output, _ = flash_attention(query, key, value, scale=0.3, block_size=16)
    expected = F.scaled_dot_product_attention(
        query, key.expand(2, 4, 70, 8), value.expand(2, 4, 70, 6), scale=0.3
    )
    torch.testing.assert_close(output, expected, atol=1e-12, rtol=0)


def test_huge_scores_do_not_overflow():
    """Scores near +-1e4 overflow exp in float32 without the running max."""
    query, key, value = qkv((1,), 40, 90, dtype=torch.float32, seed=5)
    query = query * 300
    output, logsumexp = flash_attention(query, key, value, block_size=16)
    assert torch.isfinite(output).all() and torch.isfinite(logsumexp).all()
    expected = F.scaled_dot_product_attention(query.double(), key.double(), value.double())
    torch.testing.assert_close(output.double(), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype, atol", [(torch.bfloat16, 2e-2), (torch.float16, 2e-3)])
def test_half_precision_is_close_to_float64(dtype, atol):
    """Computed in float32, the output rounded once: within the dtype's
    rounding of float64 attention; the log-sum-exp kept in float32."""
    query, key, value = qkv((2,), 70, 70, dtype=dtype, seed=6)
    output, logsumexp = flash_attention(query, key, value, block_size=32)
    assert output.dtype == dtype and logsumexp.dtype == torch.float32
    wide = [tensor.double() for tensor in (query, key, value)]
    expected = F.scaled_dot_product_attention(*wide)
    torch.testing.assert_close(output.double(), expected, atol=atol, rtol=0)
    lse = torch.logsumexp(full_scores(*wide[:2], False), dim=-1)
    torch.testing.assert_close(logsumexp.double(), lse, atol=1e-5, rtol=0)


def test_gradients_flow_through_the_tiles():
    query, key, value = qkv((1,), 6, 5, dim=4, value_dim=3, seed=7)
    for tensor in (query, key, value):
        tensor.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: flash_attention(q, k, v, True, block_size=2)[0],
        (query, key, value),
    )


# the tile schedule ------------------------------------------------------------


@pytest.mark.parametrize(
    "length, n_keys, block_size",
    [(8, 8, 4), (10, 10, 4), (7, 12, 3), (12, 7, 5), (5, 5, 8), (1, 1, 1)],
)
@pytest.mark.parametrize("is_causal", [False, True])
def test_tiles_are_exactly_those_with_an_allowed_entry(length, n_keys, block_size, is_causal):
    allowed = torch.ones(length, n_keys, dtype=torch.bool)
    if is_causal:
        allowed = allowed.tril()
    expected = {}
    for q0 in range(0, length, block_size):
        for k0 in range(0, n_keys, block_size):
            tile = allowed[q0 : q0 + block_size, k0 : k0 + block_size]
            if tile.any():
                expected[(q0, k0)] = not tile.all()
    got = {
        (q.start, k.start): needs_mask
        for q, k, needs_mask in tile_schedule(length, n_keys, block_size, is_causal)
    }
    assert got == expected


def test_causal_schedule_skips_the_upper_triangle():
    """n blocks per side: n (n + 1) / 2 tiles of n^2, n of them masked."""
    tiles = list(tile_schedule(1024, 1024, 128, is_causal=True))
    assert len(tiles) == 8 * 9 // 2
    assert sum(needs_mask for _, _, needs_mask in tiles) == 8
    assert len(list(tile_schedule(1024, 1024, 128))) == 64


def test_keeping_the_masked_tiles_changes_the_work_not_the_output():
    """skip_masked_tiles=False computes every tile: all n^2 of them, those
    above the diagonal masked entirely; the output stays PyTorch's."""
    kept = list(tile_schedule(1024, 1024, 128, is_causal=True, skip_masked_tiles=False))
    assert len(kept) == 64
    assert sum(needs_mask for _, _, needs_mask in kept) == 8 + 28
    query, key, value = qkv((2,), 70, 70)
    expected = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    for skip in (True, False):
        output, _ = flash_attention(
            query, key, value, is_causal=True, block_size=16, skip_masked_tiles=skip
        )
        assert (output - expected).abs().max() < 1e-12


# bad input --------------------------------------------------------------------


@pytest.mark.parametrize(
    "block_size, error",
    [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError), ("8", TypeError)],
)
def test_bad_block_sizes_raise(block_size, error):
    query, key, value = qkv((), 4, 4)
    with pytest.raises(error, match="block_size"):
        flash_attention(query, key, value, block_size=block_size)
    with pytest.raises(error, match="block_size"):
        tile_schedule(4, 4, block_size)


def test_bad_shapes_raise_naming_them():
    query, key, value = qkv((2,), 4, 5)
    with pytest.raises(ValueError, match=r"query \(2, 4, 16\) and key"):
        flash_attention(query, key[..., :3], value)
    with pytest.raises(ValueError, match=r"key \(2, 5, 16\) and value"):
        flash_attention(query, key, value[:, :2])
    with pytest.raises(ValueError, match="do not broadcast"):
        flash_attention(query, random(3, 5, 16), random(3, 5, 8))
    with pytest.raises(ValueError, match="must have"):
        flash_attention(query[0, 0], key, value)
    with pytest.raises(ValueError, match=r"key \(2, 0, 16\) has no keys"):
        flash_attention(query, key[:, :0], value[:, :0])
    with pytest.raises(ValueError, match="must share a dtype"):
        flash_attention(query.float(), key, value)


def test_a_head_size_of_zero_and_integer_inputs_raise():
    query, key, value = qkv((2,), 4, 5)
    with pytest.raises(ValueError, match=r"query \(2, 4, 0\) and key \(2, 5, 0\) have no features"):
        flash_attention(query[..., :0], key[..., :0], value)
    with pytest.raises(ValueError, match=r"query \(2, 4, 16\) must hold floating-point"):
        flash_attention(query.long(), key, value)
