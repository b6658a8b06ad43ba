"""Every public function and module in float64, float32, bfloat16 and float16: results keep the
inputs' dtype and device, and half precision is no less accurate than PyTorch's own layers on
the same inputs (both measured against a float64 reference). The "meta" device, which holds no
data, shows that nothing is created on the CPU behind the caller's back."""

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F

from attention_course import (
    SIMILARITIES,
    AdditiveAttention,
    DeepSeekSparseAttention,
    GroupedQueryAttention,
    KernelRegression,
    LightningIndexer,
    MultiHeadAttention,
    apply_rotary,
    attention_entropy,
    causal_mask,
    decoding_mask,
    flash_attention,
    kernel_scores,
    masked_softmax,
    nadaraya_watson,
    plot_attention,
    plot_attention_schematic,
    plot_regression,
    scaled_dot_product_attention,
    sink_attention,
    sink_softmax,
    sinusoidal_positional_encoding,
    soft_nearest_neighbours,
    top_k_mask,
)

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
HALF = [torch.bfloat16, torch.float16]
# Largest relative error allowed in a dtype where PyTorch has no equivalent layer to compare
# with: a few units of the dtype's rounding, for computations of a few hundred terms.
TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 5e-2, torch.float16: 5e-3}


def normal(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def error(got, reference):
    return (got.double() - reference.double()).abs().max().item()


def no_worse_than_pytorch(ours, theirs, reference, dtype):
    """Half precision: our error at most 1.5 times PyTorch's (plus a rounding step of the dtype);
    float32/64: both tiny."""
    if dtype in HALF:
        slack = torch.finfo(dtype).eps * reference.abs().max().item()
        assert error(ours, reference) <= 1.5 * error(theirs, reference) + slack, (
            f"{dtype}: ours {error(ours, reference):.2e}, PyTorch {error(theirs, reference):.2e}"
        )
    else:
        assert error(ours, reference) <= TOLERANCE[dtype] * (1 + reference.abs().max().item())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_sdpa_keeps_dtype_and_matches_pytorchs_accuracy(dtype, mask):
    q, k, v = normal(2, 3, 64, 32, seed=1), normal(2, 3, 80, 32, seed=2), normal(2, 3, 80, 16)
    allowed = normal(64, 80, seed=3) > -1.0
    masks = {
        "none": {},
        "causal": {"is_causal": True},
        "bool": {"attn_mask": allowed},
        "float": {"attn_mask": 0.5 * normal(64, 80, seed=4)},
    }
    reference = F.scaled_dot_product_attention(q, k, v, **masks[mask])
    low = [t.to(dtype) for t in (q, k, v)]
    options = {
        key: (value.to(dtype) if value.is_floating_point() else value)
        for key, value in masks[mask].items()
        if isinstance(value, torch.Tensor)
    }
    options.update({key: value for key, value in masks[mask].items() if key == "is_causal"})
    ours, weights = scaled_dot_product_attention(*low, **options)
    assert ours.dtype == weights.dtype == dtype
    no_worse_than_pytorch(ours, F.scaled_dot_product_attention(*low, **options), reference, dtype)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flash_attention_keeps_dtype_and_matches_pytorchs_accuracy(dtype, causal):
    q, k, v = (normal(2, 3, 150, 32, seed=s) for s in range(3))
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    low = [t.to(dtype) for t in (q, k, v)]
    ours, logsumexp = flash_attention(*low, is_causal=causal, block_size=64)
    theirs = F.scaled_dot_product_attention(*low, is_causal=causal)
    assert ours.dtype == dtype
    assert logsumexp.dtype == (torch.float32 if dtype in HALF else dtype)
    no_worse_than_pytorch(ours, theirs, reference, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_softmax_in_every_dtype(dtype):
    scores = 4 * normal(3, 5, 40)
    valid_lens = torch.tensor([40, 17, 0])
    allowed = torch.arange(40) < valid_lens[:, None, None]
    reference = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    ours = masked_softmax(scores.to(dtype), valid_lens)
    theirs = torch.softmax(scores.to(dtype).masked_fill(~allowed, float("-inf")), -1)
    assert ours.dtype == dtype and torch.equal(ours[2], torch.zeros_like(ours[2]))
    no_worse_than_pytorch(ours[:2], theirs[:2], reference[:2], dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_multihead_from_torch_in_every_dtype(dtype):
    torch.manual_seed(0)
    reference_layer = torch.nn.MultiheadAttention(32, 4, batch_first=True).double().eval()
    x = normal(2, 10, 32)
    reference, _ = reference_layer(x, x, x)
    theirs_layer = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    theirs_layer.load_state_dict(reference_layer.state_dict())
    theirs_layer = theirs_layer.to(dtype)
    ours_layer = MultiHeadAttention.from_torch(theirs_layer)
    assert {p.dtype for p in ours_layer.parameters()} == {dtype}
    low = x.to(dtype)
    with torch.no_grad():
        ours, weights = ours_layer(low, low, low)
        theirs, _ = theirs_layer(low, low, low, need_weights=False)
    assert ours.dtype == weights.dtype == dtype
    no_worse_than_pytorch(ours, theirs, reference, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_grouped_query_attention_in_every_dtype(dtype):
    torch.manual_seed(0)
    layer = GroupedQueryAttention(32, 8, 2).double()
    x = normal(2, 12, 32)
    with torch.no_grad():
        reference, _ = layer(x, is_causal=True)
        low_layer, low = GroupedQueryAttention(32, 8, 2).to(dtype), x.to(dtype)
        low_layer.load_state_dict({k: v.to(dtype) for k, v in layer.state_dict().items()})
        ours, weights = low_layer(low, is_causal=True)
        q = low_layer.q_proj(low).reshape(2, 12, 8, 4).transpose(1, 2)
        k, v = low_layer.project_kv(low)
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        theirs = low_layer.out_proj(heads.transpose(1, 2).reshape(2, 12, 32))
    assert ours.dtype == weights.dtype == dtype
    assert {p.dtype for p in low_layer.parameters()} == {dtype}
    no_worse_than_pytorch(ours, theirs, reference, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_additive_attention_in_every_dtype(dtype):
    torch.manual_seed(0)
    layer = AdditiveAttention(6, 5, 8).double()
    queries, keys, values = normal(2, 3, 6), normal(2, 7, 5, seed=1), normal(2, 7, 4, seed=2)
    valid_lens = torch.tensor([7, 3])
    reference = layer(queries, keys, values, valid_lens)
    low_layer = AdditiveAttention(6, 5, 8).to(dtype)
    low_layer.load_state_dict({k: v.to(dtype) for k, v in layer.state_dict().items()})
    with torch.no_grad():
        ours = low_layer(queries.to(dtype), keys.to(dtype), values.to(dtype), valid_lens)
    assert ours.dtype == low_layer.attention_weights.dtype == dtype
    assert error(ours, reference) <= TOLERANCE[dtype] * (1 + reference.abs().max().item())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pooling_and_scoring_in_every_dtype(dtype):
    keys, values, queries = normal(30).abs() * 5, normal(30, seed=1), normal(7, seed=2).abs() * 5
    predictions, weights = nadaraya_watson(queries.to(dtype), keys.to(dtype), values.to(dtype), 0.7)
    reference, _ = nadaraya_watson(queries, keys, values, 0.7)
    assert (
        predictions.dtype
        == weights.dtype
        == kernel_scores(queries.to(dtype), keys.to(dtype)).dtype
        == dtype
    )
    assert error(predictions, reference) <= TOLERANCE[dtype] * (1 + reference.abs().max().item())
    model = KernelRegression(keys.to(dtype), values.to(dtype), bandwidth=0.7, per_key=True)
    assert model.log_bandwidth.dtype == dtype and model(queries.to(dtype)).dtype == dtype
    q, k, v = normal(4, 8), normal(6, 8, seed=1), normal(6, 3, seed=2)
    for name, function in SIMILARITIES.items():
        got = function(q.to(dtype), k.to(dtype))
        assert got.dtype == dtype, name
        assert error(got, function(q, k)) <= TOLERANCE[dtype] * (1 + function(q, k).abs().max())
    output, weights = soft_nearest_neighbours(q.to(dtype), k.to(dtype), v.to(dtype), "cosine")
    assert output.dtype == weights.dtype == dtype
    entropy = attention_entropy(torch.softmax(q, -1).to(dtype))
    assert entropy.dtype == dtype
    assert error(entropy, attention_entropy(torch.softmax(q, -1))) <= TOLERANCE[dtype] * 10


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_positional_encoding_takes_a_dtype_and_device(dtype):
    encoding = sinusoidal_positional_encoding(50, 16, dtype=dtype, device="cpu")
    reference = sinusoidal_positional_encoding(50, 16, dtype=torch.float64)
    assert encoding.dtype == dtype and encoding.device.type == "cpu"
    assert error(encoding, reference) <= torch.finfo(dtype).eps
    assert sinusoidal_positional_encoding(4, 2).dtype == torch.get_default_dtype()


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_plots_accept_half_precision_and_tensors_with_grad(dtype):
    x = torch.linspace(0, 1, 10, dtype=dtype)
    curve = (2 * x).requires_grad_(True) if dtype.is_floating_point else x
    ax = plot_regression(x, x, x, {"a": curve}, truth=x)
    plt.close(ax.figure)
    weights = torch.softmax(torch.randn(3, 4), -1).to(dtype)
    plt.close(plot_attention(weights.requires_grad_(True)))
    plt.close(plot_attention_schematic(torch.tensor([0.25, 0.75], dtype=dtype)).figure)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sparse_attention_in_every_dtype(dtype):
    """DeepSeek Sparse Attention: output and weights keep the dtype; the indexer's scores are
    float32 for half inputs (rounded to 8 bits they would tie), the dtype otherwise; queries
    that select what float64 selects get float64's output to the dtype's tolerance."""
    torch.manual_seed(0)
    sizes = dict(
        embed_dim=32, num_heads=4, kv_rank=8, q_rank=12, top_k=5, index_heads=4, index_head_dim=8
    )
    layer = DeepSeekSparseAttention(**sizes).double()
    x = normal(2, 12, 32)
    low_layer = DeepSeekSparseAttention(**sizes).to(dtype)
    low_layer.load_state_dict({k: v.to(dtype) for k, v in layer.state_dict().items()})
    with torch.no_grad():
        reference, _, reference_selected = layer(x)
        reference_scores = layer.index_scores(x)
        output, weights, selected = low_layer(x.to(dtype))
        scores = low_layer.index_scores(x.to(dtype))
    assert output.dtype == weights.dtype == dtype and selected.dtype == torch.bool
    assert scores.dtype == (torch.float32 if dtype in HALF else dtype)
    finite = reference_scores.isfinite()
    assert torch.equal(scores.isfinite(), finite)
    scale = 1 + reference_scores[finite].abs().max().item()
    assert error(scores[finite], reference_scores[finite]) <= TOLERANCE[dtype] * scale
    same = (selected == reference_selected).all(-1)  # (batch, L)
    assert same.double().mean() >= 0.75
    assert error(output[same], reference[same]) <= TOLERANCE[dtype] * (
        1 + reference.abs().max().item()
    )
    assert top_k_mask(scores, 3).sum(-1).max() == 3


def sinks_as_one_more_key(query, key, value, sinks, mask):
    """PyTorch's SDPA computing attention with learned sinks: one more key, of zeros, whose
    float-mask entry is the head's sink (its score), and a value of zeros."""
    (batch, heads, n_q, _), kv_heads = query.shape, key.shape[1]
    bias = torch.zeros(heads, n_q, key.shape[2], dtype=query.dtype)
    if mask is not None:
        bias = bias.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else bias + mask
    bias = torch.cat([bias, sinks[:, None, None].expand(heads, n_q, 1)], dim=-1)

    def one_more(t):
        return torch.cat([t, t.new_zeros(batch, kv_heads, 1, t.shape[-1])], dim=2)

    return F.scaled_dot_product_attention(
        query, one_more(key), one_more(value), attn_mask=bias, enable_gqa=True
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask", ["none", "causal", "window", "float"])
def test_sink_attention_keeps_dtype_and_matches_pytorchs_accuracy(dtype, mask):
    q, k, v = normal(2, 8, 64, 32, seed=1), normal(2, 2, 64, 32, seed=2), normal(2, 2, 64, 16)
    sinks = normal(8, seed=5)
    positions = torch.arange(64)
    masks = {
        "none": None,
        "causal": causal_mask(64),
        "window": decoding_mask(positions, positions, window=16),
        "float": 0.5 * normal(64, 64, seed=4),
    }
    reference = sinks_as_one_more_key(q, k, v, sinks, masks[mask])
    low = [t.to(dtype) for t in (q, k, v, sinks)]
    low_mask = masks[mask].to(dtype) if mask == "float" else masks[mask]
    options = {"is_causal": True} if mask == "causal" else {"attn_mask": low_mask}
    ours, weights = sink_attention(*low, **options)
    assert ours.dtype == weights.dtype == dtype
    no_worse_than_pytorch(ours, sinks_as_one_more_key(*low, low_mask), reference, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sink_softmax_in_every_dtype(dtype):
    scores, sinks = 4 * normal(3, 4, 5, 40), normal(4, seed=1)
    scores[0, 1, 2] = float("-inf")  # a fully masked row

    def with_a_column(scores, sinks):  # as transformers' gpt-oss
        column = sinks[:, None, None].expand(*scores.shape[:-1], 1)
        return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]

    reference = with_a_column(scores, sinks)
    ours = sink_softmax(scores.to(dtype), sinks.to(dtype))
    assert ours.dtype == dtype and torch.equal(ours[0, 1, 2], torch.zeros_like(ours[0, 1, 2]))
    no_worse_than_pytorch(ours, with_a_column(scores.to(dtype), sinks.to(dtype)), reference, dtype)


# ----------------------------------------------------------------------------------------- meta


def test_modules_built_from_modules_stay_on_the_source_device():
    source = torch.nn.MultiheadAttention(
        16, 4, batch_first=True, device="meta", dtype=torch.bfloat16
    )
    copy = MultiHeadAttention.from_torch(source)
    assert {(p.device.type, p.dtype) for p in copy.parameters()} == {("meta", torch.bfloat16)}
    gqa = GroupedQueryAttention.from_multihead(copy, 2)
    assert {(p.device.type, p.dtype) for p in gqa.parameters()} == {("meta", torch.bfloat16)}


def test_nothing_is_created_on_the_cpu_behind_the_callers_back():
    q, k, v = (torch.empty(2, 3, 5, 8, device="meta") for _ in range(3))
    output, weights = scaled_dot_product_attention(q, k, v)
    assert output.device.type == weights.device.type == "meta"
    assert causal_mask(4, 6, device="meta").device.type == "meta"
    # (KernelRegression checks its keys' values, which meta tensors do not have: see test_cuda.)
    assert sinusoidal_positional_encoding(8, 4, device="meta").device.type == "meta"
    layer = MultiHeadAttention(8, 2).to("meta")
    x = torch.empty(1, 5, 8, device="meta")
    assert all(t.device.type == "meta" for t in layer(x, x, x))
    assert apply_rotary(q).device.type == "meta"
    assert all(
        t.device.type == "meta" for t in flash_attention(q, k, v, is_causal=True, block_size=2)
    )
    assert apply_rotary(q, torch.arange(5, device="meta")).device.type == "meta"


def test_sparse_attention_creates_nothing_on_the_cpu():
    indexer = LightningIndexer(16, 6, 2, head_dim=8, rope_dim=4).to("meta")
    x, q_latent = torch.empty(2, 5, 16, device="meta"), torch.empty(2, 5, 6, device="meta")
    assert indexer(x, q_latent).device.type == "meta"
    assert top_k_mask(torch.empty(2, 5, 5, device="meta"), 2).device.type == "meta"
    with torch.device("meta"):
        layer = DeepSeekSparseAttention(
            16, 2, kv_rank=4, q_rank=6, top_k=2, index_heads=2, index_head_dim=8
        )
    assert layer.index_scores(x).device.type == "meta"
    # (the attention itself asks whether a row is fully masked, which meta tensors cannot say)
    shapes = {
        "q_a_proj.weight": (6, 16),
        "q_a_layernorm.weight": (6,),
        "q_b_proj.weight": (2 * 6, 6),
        "kv_a_proj_with_mqa.weight": (4 + 2, 16),
        "kv_a_layernorm.weight": (4,),
        "kv_b_proj.weight": (2 * 7, 4),
        "o_proj.weight": (16, 2 * 3),
        "indexer.wq_b.weight": (2 * 8, 6),
        "indexer.wk.weight": (8, 16),
        "indexer.k_norm.weight": (8,),
        "indexer.k_norm.bias": (8,),
        "indexer.weights_proj.weight": (2, 16),
    }
    state = {
        name: torch.empty(shape, device="meta", dtype=torch.bfloat16)
        for name, shape in shapes.items()
    }
    copy = DeepSeekSparseAttention.from_deepseek(state, num_heads=2, top_k=2)
    assert {(p.device.type, p.dtype) for p in copy.parameters()} == {("meta", torch.bfloat16)}


def test_sinks_create_nothing_on_the_cpu():
    q, k, v = (
        torch.empty(2, 4, 5, 8, device="meta"),
        torch.empty(2, 2, 5, 8, device="meta"),
        torch.empty(2, 2, 5, 3, device="meta"),
    )
    sinks = torch.empty(4, device="meta")
    window = decoding_mask(torch.arange(5, device="meta"), torch.arange(5, device="meta"), 2)
    for options in ({"is_causal": True}, {"attn_mask": window}):
        assert all(t.device.type == "meta" for t in sink_attention(q, k, v, sinks, **options))
    assert sink_softmax(torch.empty(2, 4, 5, 5, device="meta"), sinks).device.type == "meta"
