"""scaled_dot_product_attention against PyTorch's and a brute-force loop; AdditiveAttention
against a loop over query-key pairs."""

import math

import pytest
import torch
import torch.nn.functional as F

from attention_course import AdditiveAttention, scaled_dot_product_attention


def random_qkv(seed, batch=(2, 3), L=4, S=5, E=8, Ev=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)  # noqa: E731
    return make(*batch, L, E), make(*batch, S, E), make(*batch, S, Ev)


def brute_force_attention(q, k, v, allowed, scale):
    """One query at a time, with Python sums; allowed is a (L, S) list of lists of bools."""
    L, S = q.shape[0], k.shape[0]
    out = torch.zeros(L, v.shape[1], dtype=torch.float64)
    for i in range(L):
        keys = [j for j in range(S) if allowed[i][j]]
        if not keys:
            continue
        scores = [
            scale * sum(q[i, e].item() * k[j, e].item() for e in range(q.shape[1])) for j in keys
        ]
        top = max(scores)
        exps = [math.exp(s - top) for s in scores]
        for weight, j in zip(exps, keys):
            out[i] += weight / sum(exps) * v[j]
    return out


@pytest.mark.parametrize("seed", range(3))
def test_no_mask_matches_pytorch(seed):
    q, k, v = random_qkv(seed)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4, dtype=torch.float64))


@pytest.mark.parametrize("L, S", [(4, 4), (3, 6), (6, 3)])
def test_causal_matches_pytorch_and_loops(L, S):
    q, k, v = random_qkv(L * 10 + S, L=L, S=S)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    allowed = [[j <= i for j in range(S)] for i in range(L)]
    torch.testing.assert_close(
        out[1, 2], brute_force_attention(q[1, 2], k[1, 2], v[1, 2], allowed, 1 / math.sqrt(8))
    )


@pytest.mark.parametrize("seed", range(4))
def test_bool_and_float_masks_match_pytorch(seed):
    q, k, v = random_qkv(seed)
    g = torch.Generator().manual_seed(100 + seed)
    bool_mask = torch.rand(2, 1, 4, 5, generator=g) > 0.4  # broadcast over the second axis
    bool_mask[..., 0] = True  # every row keeps a key
    out, _ = scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask))
    float_mask = torch.randn(4, 5, generator=g, dtype=torch.float64)
    float_mask[0, 1:] = float("-inf")
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask))
    assert torch.all(weights[..., 0, 1:] == 0)
    allowed = bool_mask[1, 0].tolist()
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)[0][1, 0],
        brute_force_attention(q[1, 0], k[1, 0], v[1, 0], allowed, 1 / math.sqrt(8)),
    )


def test_custom_scale_matches_pytorch():
    q, k, v = random_qkv(7)
    for scale in (0.05, 1.0, 3.0):
        out, _ = scaled_dot_product_attention(q, k, v, scale=scale)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=scale))


def test_fully_masked_rows_are_zero_where_pytorch_gives_nan_or_zero():
    q, k, v = random_qkv(8)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[2] = False
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(weights[..., 2, :], torch.zeros(2, 3, 5, dtype=torch.float64))
    assert torch.equal(out[..., 2, :], torch.zeros(2, 3, 6, dtype=torch.float64))
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    finite = torch.isfinite(reference)
    torch.testing.assert_close(out[finite], reference[finite])
    additive = torch.zeros(4, 5, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    out_additive, _ = scaled_dot_product_attention(q, k, v, attn_mask=additive)
    torch.testing.assert_close(out_additive, out)


def test_gradients_match_pytorch_and_stay_finite_with_a_fully_masked_row():
    q, k, v = random_qkv(9)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1, 3:] = False
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    grad_out = torch.randn(2, 3, 4, 6, dtype=torch.float64)
    (scaled_dot_product_attention(*ours, attn_mask=mask)[0] * grad_out).sum().backward()
    (F.scaled_dot_product_attention(*theirs, attn_mask=mask) * grad_out).sum().backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)
    mask[2] = False
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    (scaled_dot_product_attention(*leaves, attn_mask=mask)[0] * grad_out).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in leaves)
    torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, attn_mask=mask)[0],
        tuple(t.clone().requires_grad_() for t in (q[0, 0], k[0, 0], v[0, 0])),
    )


def test_float16_matches_pytorch():
    q, k, v = random_qkv(10, dtype=torch.float16)
    mask = torch.ones(4, 5, dtype=torch.bool).tril()
    out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)
    torch.testing.assert_close(out.double(), expected, atol=1e-2, rtol=1e-2)


def test_two_dimensional_inputs_without_batch():
    q, k, v = random_qkv(11, batch=())
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (4, 6) and weights.shape == (4, 5)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda q, k, v: scaled_dot_product_attention(q[..., :3], k, v),
            r"query \(2, 3, 4, 3\) and key \(2, 3, 5, 8\) must share the feature size",
        ),
        (
            lambda q, k, v: scaled_dot_product_attention(q, k, v[..., :2, :]),
            r"key \(2, 3, 5, 8\) and value \(2, 3, 2, 6\) must have the same number of keys",
        ),
        (
            lambda q, k, v: scaled_dot_product_attention(q[0, 0, 0], k, v),
            r"query must have .* dimensions, got shape \(8,\)",
        ),
        (
            lambda q, k, v: scaled_dot_product_attention(q[:1].expand(4, 3, 4, 8), k, v),
            r"batch dimensions .* do not broadcast",
        ),
        (
            lambda q, k, v: scaled_dot_product_attention(
                q, k, v, attn_mask=torch.ones(4, 4, dtype=torch.bool)
            ),
            r"attn_mask \(4, 4\) does not broadcast to the scores "
            r"\(\.\.\., L, S\) = \(2, 3, 4, 5\)",
        ),
        (
            lambda q, k, v: scaled_dot_product_attention(
                q, k, v, attn_mask=torch.ones(4, 5, dtype=torch.long)
            ),
            r"attn_mask \(4, 5\) must be bool or floating point, got torch.int64",
        ),
        (
            lambda q, k, v: scaled_dot_product_attention(
                q, k, v, attn_mask=torch.ones(4, 5, dtype=torch.bool), is_causal=True
            ),
            r"either attn_mask or is_causal",
        ),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call(*random_qkv(12))


def test_additive_attention_matches_a_loop_over_pairs():
    torch.manual_seed(0)
    layer = AdditiveAttention(query_size=20, key_size=2, num_hiddens=8).double()
    queries = torch.randn(2, 3, 20, dtype=torch.float64)
    keys = torch.randn(2, 10, 2, dtype=torch.float64)
    values = torch.randn(2, 10, 4, dtype=torch.float64)
    valid_lens = torch.tensor([2, 6])
    out = layer(queries, keys, values, valid_lens)
    W_q, W_k, w_v = layer.W_q.weight, layer.W_k.weight, layer.w_v.weight[0]
    for b in range(2):
        for i in range(3):
            n = int(valid_lens[b])
            scores = torch.stack(
                [w_v @ torch.tanh(W_q @ queries[b, i] + W_k @ keys[b, j]) for j in range(n)]
            )
            weights = torch.softmax(scores, dim=0)
            torch.testing.assert_close(out[b, i], weights @ values[b, :n])
            torch.testing.assert_close(layer.attention_weights[b, i, :n], weights)
            assert torch.all(layer.attention_weights[b, i, n:] == 0)


@pytest.mark.parametrize(
    "shapes, message",
    [
        (((2, 3, 19), (2, 10, 2), (2, 10, 4)), r"must end in query_size=20 and key_size=2"),
        (((2, 3, 20), (3, 10, 2), (3, 10, 4)), r"disagree on the batch size"),
        (
            ((2, 3, 20), (2, 10, 2), (2, 9, 4)),
            r"keys \(2, 10, 2\) and values \(2, 9, 4\) must agree on \(batch, n_k\)",
        ),
        (((3, 20), (2, 10, 2), (2, 10, 4)), r"queries must have 3 dimensions, got shape \(3, 20\)"),
    ],
)
def test_additive_attention_bad_input(shapes, message):
    layer = AdditiveAttention(20, 2, 8)
    with pytest.raises(ValueError, match=message):
        layer(*(torch.randn(*shape) for shape in shapes))


def test_attention_entropy_matches_the_definition():
    from attention_course import attention_entropy

    weights = torch.tensor(
        [[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]], dtype=torch.float64
    )
    expected = [math.log(4), 0.0, math.log(2)]
    torch.testing.assert_close(
        attention_entropy(weights), torch.tensor(expected, dtype=torch.float64)
    )
    row = torch.softmax(torch.randn(7, dtype=torch.float64), dim=0)
    assert attention_entropy(row).item() == pytest.approx(
        -sum(p * math.log(p) for p in row.tolist())
    )
    with pytest.raises(TypeError, match="weights must be a torch.Tensor, got list"):
        attention_entropy([0.5, 0.5])


@pytest.mark.parametrize("mask", ["causal", "bool with an empty row", "float with -inf"])
def test_gradcheck_of_the_in_place_masked_paths(mask):
    """The masked paths overwrite their own scores in place; autograd must still be exact."""
    generator = torch.Generator().manual_seed(5)
    q, k, v = (
        torch.randn(2, 4, 3, generator=generator, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )
    allowed = torch.rand(4, 4, generator=generator) > 0.4
    allowed[1] = False
    bias = torch.randn(4, 4, generator=generator, dtype=torch.float64)
    bias[2, :2] = float("-inf")
    options = {
        "causal": {"is_causal": True},
        "bool with an empty row": {"attn_mask": allowed},
        "float with -inf": {"attn_mask": bias},
    }[mask]
    assert torch.autograd.gradcheck(
        lambda *qkv: scaled_dot_product_attention(*qkv, **options)[0], (q, k, v)
    )


def test_broadcast_shape_follows_pytorchs_rule():
    from attention_course._shapes import broadcast_shape

    generator = torch.Generator().manual_seed(0)
    for _ in range(500):
        shapes = [
            tuple(
                torch.randint(
                    1,
                    4,
                    (int(torch.randint(0, 4, (1,), generator=generator)),),
                    generator=generator,
                ).tolist()
            )
            for _ in range(3)
        ]
        try:
            expected = tuple(torch.broadcast_shapes(*shapes))
        except RuntimeError:
            expected = None
        assert broadcast_shape(*shapes) == expected, shapes


def test_a_head_size_of_zero_integer_and_mixed_dtypes_raise():
    q, k, v = random_qkv(12)
    with pytest.raises(
        ValueError, match=r"query \(2, 3, 4, 0\) and key \(2, 3, 5, 0\) have no features"
    ):
        scaled_dot_product_attention(q[..., :0], k[..., :0], v)
    with pytest.raises(ValueError, match=r"query \(2, 3, 4, 8\) must hold floating-point"):
        scaled_dot_product_attention(q.long(), k, v)
    with pytest.raises(
        ValueError, match=r"query \(2, 3, 4, 8\) torch.float32, key \(2, 3, 5, 8\) torch.float64"
    ):
        scaled_dot_product_attention(q.float(), k.double(), v.float())
    with pytest.raises(TypeError, match=r"scale must be a number, got '1'"):
        scaled_dot_product_attention(q, k, v, scale="1")
