"""masked_softmax and the masks against brute-force loops."""

import math

import pytest
import torch

from attention_course import causal_mask, masked_softmax, valid_lens_mask


def brute_force_masked_softmax(scores, valid_lens):
    """Python loops: softmax over the first valid_len keys of each row, zeros elsewhere."""
    batch, n_q, n_k = scores.shape
    out = torch.zeros_like(scores)
    for b in range(batch):
        for i in range(n_q):
            length = int(valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i])
            if length == 0:
                continue
            exps = [math.exp(scores[b, i, j].item()) for j in range(length)]
            for j in range(length):
                out[b, i, j] = exps[j] / sum(exps)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_masked_softmax_matches_loops(seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    per_sequence = torch.randint(0, 6, (3,), generator=g)
    per_query = torch.randint(0, 6, (3, 4), generator=g)
    for lengths in (per_sequence, per_query):
        torch.testing.assert_close(
            masked_softmax(scores, lengths), brute_force_masked_softmax(scores, lengths)
        )


def test_no_valid_lens_is_plain_softmax():
    scores = torch.randn(2, 3, 4)
    torch.testing.assert_close(masked_softmax(scores), torch.softmax(scores, dim=-1))


def test_zero_length_row_is_zeros_with_finite_gradient():
    scores = torch.randn(2, 2, 3, requires_grad=True)
    weights = masked_softmax(scores, torch.tensor([0, 2]))
    assert torch.equal(weights[0], torch.zeros(2, 3))
    (weights * torch.randn(2, 2, 3)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[0], torch.zeros(2, 3))
    assert torch.equal(scores.grad[1, :, 2], torch.zeros(2))  # masked keys get no gradient


def test_extra_head_dimension_broadcasts():
    scores = torch.randn(2, 4, 3, 5)  # (batch, heads, n_q, n_k)
    lengths = torch.tensor([2, 5])
    got = masked_softmax(scores, lengths)
    for head in range(4):
        torch.testing.assert_close(got[:, head], masked_softmax(scores[:, head], lengths))


def test_float16_masked_softmax_is_finite():
    scores = torch.randn(2, 3, 4).half()
    weights = masked_softmax(scores, torch.tensor([0, 3]))
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(
        weights[1].float(),
        brute_force_masked_softmax(scores.float(), torch.tensor([0, 3]))[1],
        atol=2e-3,
        rtol=0,
    )


@pytest.mark.parametrize("n_q, n_k", [(4, 4), (3, 5), (5, 3), (1, 1)])
def test_causal_mask_matches_definition_and_pytorch(n_q, n_k):
    mask = causal_mask(n_q, n_k)
    expected = torch.tensor([[j <= i for j in range(n_k)] for i in range(n_q)])
    assert mask.dtype == torch.bool and torch.equal(mask, expected)
    q, k, v = torch.randn(n_q, 6), torch.randn(n_k, 6), torch.randn(n_k, 2)
    torch.testing.assert_close(
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def test_valid_lens_mask_shapes():
    assert valid_lens_mask(torch.tensor([1, 3]), 4, 5).shape == (2, 1, 5)
    assert valid_lens_mask(torch.tensor([[1, 3], [0, 5]]), 2, 5).shape == (2, 2, 5)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: masked_softmax(torch.randn(3, 4), torch.tensor([1, 2, 3])),
            r"scores must be \(batch, \.\.\., n_queries, n_keys\), got shape \(3, 4\)",
        ),
        (
            lambda: masked_softmax(torch.randn(2, 3, 4), torch.tensor([1, 2, 3])),
            r"valid_lens \(3,\) and scores \(2, 3, 4\) disagree on the batch size",
        ),
        (
            lambda: masked_softmax(torch.randn(2, 3, 4), torch.tensor([1, 5])),
            r"valid_lens \[1, 5\] out of range: each must be in \[0, n_keys=4\]",
        ),
        (lambda: masked_softmax(torch.randn(2, 3, 4), torch.tensor([-1, 2])), r"out of range"),
        (
            lambda: masked_softmax(torch.randn(2, 3, 4), torch.ones(2, 2, dtype=torch.long)),
            r"valid_lens \(2, 2\) must be \(batch,\) or \(batch, n_queries=3\)",
        ),
        (
            lambda: masked_softmax(torch.randn(2, 3, 4), torch.ones(2, 3, 1, dtype=torch.long)),
            r"valid_lens must have 1 or 2 dimensions, got shape \(2, 3, 1\)",
        ),
        (lambda: masked_softmax(torch.randn(2, 3, 4), torch.tensor([1.5, 2.0])), r"whole numbers"),
        (lambda: causal_mask(0, 3), r"n_queries, n_keys >= 1, got \(0, 3\)"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: masked_softmax(torch.randn(2, 3, 4), [1, 2]),
            r"valid_lens must be a torch.Tensor, got list",
        ),
        (lambda: masked_softmax([[[1.0]]]), r"scores must be a torch.Tensor, got list"),
        (lambda: causal_mask(2.5), r"n_queries must be an integer, got 2.5"),
    ],
)
def test_wrong_types_raise_type_error(call, message):
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: masked_softmax(torch.randn(2, 3, 4), torch.tensor(2)),
            r"valid_lens must have 1 or 2 dimensions, got shape \(\)",
        ),
        (
            lambda: masked_softmax(torch.ones(2, 3, 4, dtype=torch.long)),
            r"scores \(2, 3, 4\) must hold floating-point numbers .*, got torch.int64",
        ),
        (
            lambda: masked_softmax(torch.randn(2, 3, 4), torch.tensor([True, False])),
            r"valid_lens \(2,\) must hold lengths",
        ),
    ],
)
def test_the_issues_bad_inputs_raise_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("valid_lens", [None, torch.tensor([4, 2])])
def test_a_row_of_all_minus_inf_scores_is_a_fully_masked_row(dtype, valid_lens):
    scores = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).to(dtype)
    scores[0, 1] = float("-inf")  # every key scored -inf
    scores[1, 2, :2] = float("-inf")  # the valid keys scored -inf
    scores.requires_grad_(True)
    weights = masked_softmax(scores, valid_lens)
    assert weights.dtype == dtype and torch.isfinite(weights).all()
    assert (weights[0, 1] == 0).all()
    if valid_lens is not None:
        assert (weights[1, 2] == 0).all()
    others = torch.ones(2, 3, dtype=torch.bool)
    others[0, 1] = others[1, 2] = False
    torch.testing.assert_close(weights.sum(-1)[others].float(), torch.ones(4))
    weights.sum().backward()
    assert torch.isfinite(scores.grad).all()


def test_minus_inf_scores_change_nothing_where_a_key_is_left():
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(3, 4, 6, generator=generator, dtype=torch.float64)
    scores[:, :, 1] = float("-inf")
    lens = torch.tensor([6, 3, 2])
    assert torch.equal(masked_softmax(scores), torch.softmax(scores, -1))
    assert torch.equal(masked_softmax(scores, lens), masked_softmax_reference(scores, lens))


def masked_softmax_reference(scores, lens):
    allowed = torch.arange(scores.shape[-1]) < lens[:, None, None]
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
