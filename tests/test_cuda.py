"""Everything on a CUDA device, when one is present: results stay on the GPU and agree with the
same computation on the CPU and with PyTorch's own CUDA kernels. Without a GPU (as on CI) the
whole module is skipped, and says so."""

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F

from attention_course import (
    SIMILARITIES,
    AdditiveAttention,
    GroupedQueryAttention,
    KernelRegression,
    MultiHeadAttention,
    TinyDecoder,
    apply_rotary,
    attention_entropy,
    causal_mask,
    flash_attention,
    masked_softmax,
    nadaraya_watson,
    plot_attention,
    plot_regression,
    scaled_dot_product_attention,
    sinusoidal_positional_encoding,
    valid_lens_mask,
)

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the CUDA tests did not run", allow_module_level=True)

CUDA = torch.device("cuda")


def normal(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def on_gpu(*tensors):
    return all(t.device.type == "cuda" for t in tensors)


# the package's two attention functions: (output, weights or log-sum-exp)
ATTENTIONS = {
    "scaled_dot_product_attention": scaled_dot_product_attention,
    "flash_attention": lambda *qkv, is_causal: flash_attention(
        *qkv, is_causal=is_causal, block_size=64
    ),
}


@pytest.mark.parametrize("attention", ATTENTIONS.values(), ids=ATTENTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_on_cuda_agrees_with_pytorch_and_the_cpu(attention, dtype, causal):
    q, k, v = (normal(2, 4, 300, 64, seed=s) for s in range(3))
    reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    gpu = [t.to(CUDA, dtype) for t in (q, k, v)]
    ours, extra = attention(*gpu, is_causal=causal)
    theirs = F.scaled_dot_product_attention(*gpu, is_causal=causal)
    assert on_gpu(ours, extra) and ours.dtype == dtype
    ours_error = (ours.double().cpu() - reference).abs().max().item()
    theirs_error = (theirs.double().cpu() - reference).abs().max().item()
    assert ours_error <= 1.5 * theirs_error + torch.finfo(dtype).eps


def test_masks_and_masked_softmax_on_cuda():
    scores = normal(3, 5, 9).to(CUDA)
    valid_lens = torch.tensor([9, 4, 0], device=CUDA)
    weights = masked_softmax(scores, valid_lens)
    assert on_gpu(weights, valid_lens_mask(valid_lens, 5, 9), causal_mask(5, 9, device=CUDA))
    torch.testing.assert_close(weights.cpu(), masked_softmax(scores.cpu(), valid_lens.cpu()))
    assert torch.equal(weights[2], torch.zeros_like(weights[2]))
    mask = torch.rand(5, 9, generator=torch.Generator().manual_seed(0)) > 0.5
    mask[2] = False  # one fully masked row
    q, k, v = normal(5, 8, seed=1), normal(9, 8, seed=2), normal(9, 3, seed=3)
    output, _ = scaled_dot_product_attention(
        q.to(CUDA), k.to(CUDA), v.to(CUDA), attn_mask=mask.to(CUDA)
    )
    assert on_gpu(output) and torch.isfinite(output).all() and not output[2].any()


def test_modules_built_from_cuda_modules_stay_on_cuda():
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(32, 4, batch_first=True).to(CUDA).eval()
    ours = MultiHeadAttention.from_torch(theirs)
    assert on_gpu(*ours.parameters())
    x = normal(2, 10, 32).to(CUDA)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, x, x)[0], theirs(x, x, x)[0], atol=1e-5, rtol=1e-5)
    gqa = GroupedQueryAttention.from_multihead(ours, 2)
    assert on_gpu(*gqa.parameters()) and on_gpu(*gqa(x, is_causal=True))


def test_additive_attention_and_scoring_on_cuda():
    torch.manual_seed(0)
    layer = AdditiveAttention(6, 5, 8).to(CUDA)
    queries, keys, values = normal(2, 3, 6).to(CUDA), normal(2, 7, 5).to(CUDA), normal(2, 7, 4)
    output = layer(queries, keys, values.to(CUDA), torch.tensor([7, 3], device=CUDA))
    assert on_gpu(output, layer.attention_weights)
    for name, function in SIMILARITIES.items():
        q, k = normal(4, 8, seed=1), normal(6, 8, seed=2)
        torch.testing.assert_close(
            function(q.to(CUDA), k.to(CUDA)).cpu(), function(q, k), atol=1e-5, rtol=1e-5, msg=name
        )
    assert on_gpu(attention_entropy(torch.softmax(normal(3, 4), -1).to(CUDA)))


@pytest.mark.parametrize("per_key", [False, True])
def test_kernel_regression_trains_on_cuda(per_key):
    keys, values = (normal(40).abs() * 5).to(CUDA), normal(40, seed=1).to(CUDA)
    model = KernelRegression(keys, values, bandwidth=0.5, per_key=per_key)
    assert on_gpu(model.log_bandwidth, model.keys)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = ((model(keys, leave_one_out=True) - values) ** 2).mean()
    loss.backward()
    optimiser.step()
    assert torch.isfinite(model.log_bandwidth).all()
    predictions, _ = nadaraya_watson(keys[:5], keys, values, model.bandwidth.detach())
    assert on_gpu(predictions)


def test_positions_and_plots_with_cuda_tensors():
    encoding = sinusoidal_positional_encoding(64, 16, device=CUDA, dtype=torch.bfloat16)
    assert on_gpu(encoding) and encoding.dtype == torch.bfloat16
    torch.testing.assert_close(
        encoding.cpu(), sinusoidal_positional_encoding(64, 16, dtype=torch.bfloat16)
    )
    x = torch.linspace(0, 1, 10, device=CUDA)
    plt.close(plot_regression(x, x, x, {"a": 2 * x}, truth=x).figure)
    plt.close(plot_attention(torch.softmax(normal(3, 4), -1).to(CUDA)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rotary_on_cuda_agrees_with_the_cpu(dtype):
    x = normal(2, 4, 100, 64)
    positions = torch.arange(4000, 4100)
    on_cpu = apply_rotary(x.double(), positions)
    got = apply_rotary(x.to(CUDA, dtype), positions.to(CUDA))
    assert on_gpu(got) and got.dtype == dtype
    tolerance = 8 * torch.finfo(dtype).eps * x.abs().max()
    assert (got.double().cpu() - on_cpu).abs().max() < tolerance


def test_tiny_decoder_and_its_cache_on_cuda_agree_with_the_cpu():
    torch.manual_seed(0)
    model = TinyDecoder(40, 32, 4, 2, 2, window=6).double().eval()
    prompt = torch.randint(0, 40, (2, 5))
    on_cpu = model.generate(prompt, 10)
    model = model.to(CUDA)
    caches = model.new_caches()
    with torch.no_grad():
        logits = model(prompt.to(CUDA), caches)
    assert on_gpu(logits, caches[0].keys, caches[0].values)
    assert torch.equal(model.generate(prompt.to(CUDA), 10).cpu(), on_cpu)


# chapter 18: the Triton kernel, compiled (the CPU runs it through the interpreter)
@pytest.mark.parametrize(
    "dtype, tolerance",
    [(torch.float32, 1e-5), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)],
    ids=str,
)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("length", [256, 300])
def test_triton_flash_attention_compiled_agrees_with_sdpa(dtype, tolerance, causal, length):
    pytest.importorskip("triton")
    from attention_course import triton_flash_attention

    inputs = [normal(2, 4, length, 64, seed=s).to(CUDA, dtype).requires_grad_() for s in range(3)]
    grad = normal(2, 4, length, 64, seed=3).to(CUDA, dtype)
    output, logsumexp = triton_flash_attention(*inputs, is_causal=causal)
    assert on_gpu(output, logsumexp) and output.dtype == dtype
    doubles = [t.detach().double().requires_grad_() for t in inputs]
    expected = F.scaled_dot_product_attention(*doubles, is_causal=causal)
    assert torch.allclose(output.double(), expected, atol=tolerance)
    ours = torch.autograd.grad(output, inputs, grad)
    theirs = torch.autograd.grad(expected, doubles, grad.double())
    for got, want in zip(ours, theirs):
        assert got.dtype == dtype and on_gpu(got)
        assert torch.allclose(got.double(), want, atol=10 * tolerance, rtol=10 * tolerance)
