"""Benchmarks of the package's attention against PyTorch (run by `make bench`; not a test).

    python -m tools.bench_attention      # from the repository root

Every time is `attention_course.measure.best_seconds`' (processor time, PyTorch in one thread,
the least of a few calls) and every memory `measure.peak_extra_bytes`' (the peak resident memory
of a call minus that before it, in a fresh process, after a warm-up call of the same size):

1. Time of the masked and causal paths of `scaled_dot_product_attention` and `masked_softmax`,
   relative to the plain PyTorch sequence scores -> masked_fill -> softmax -> matmul, and their
   peak extra memory beside it, in units of one full (B, H, L, S) float32 tensor.
2. bfloat16 and float16 accuracy: largest error against a float64 reference, the package's and
   PyTorch's scaled_dot_product_attention on the same inputs.
3. Tiled attention (`flash_attention`, blocks of 128) at L = 4096 and 8192, one head of size 64,
   float32: its time and peak extra memory relative to the naive three lines and to PyTorch's
   fused kernel (`measure.peak_extra_memory`).
4. Greedy decoding of 128 tokens with SmolLM2-135M-Instruct (chapter 14), float32: the course's
   `TinyDecoder.generate` with its KV cache against `transformers`' own `generate` with its
   cache, same weights (the same GGUF file), same prompt, runs alternated, best of 3.
5. Chapter 18's Triton kernel (`triton_flash_attention`). On a CPU, through Triton's interpreter:
   the time per program instance of the forward and the backward pass (n = 256, d = 64, float32,
   the default tiles). On a GPU, compiled: forward and forward + backward against PyTorch's
   `scaled_dot_product_attention` with its FlashAttention backend, side by side as ratios, at
   the issue's goal shape (batch 4, 16 heads, n = 4096, d = 64, float16, causal; goal: within
   1.5x forward and 2x backward), timed by `triton.testing.do_bench` (GPU time, median).
6. Chapter 19's serving engine: the six chat requests of `data/serving_reference.json` (up to
   24 new tokens each) decoded by SmolLM2 one request at a time (`TinyDecoder.generate`)
   against all at once by continuous batching (`generate_continuous`), float32, one thread,
   runs alternated, best of 3: tokens per second and their ratio, both against the bound that
   reading the weights once per step at this machine's read bandwidth sets.
7. Chapter 16's linear forms, one head of d = 64, float32, one thread, least of 3 rounds that
   take every call in turn: at n = 2048 each recurrence (`chunk_size=1`) against its chunks of
   64, and from 4,096 to 16,384 tokens the slopes of log(time) against log(n) of the chunked
   forms and of PyTorch's fused causal kernel (their counted work grows with slopes 1 and 2).
8. Chapter 12's causal tiles, n = 2048, one head of d = 64, blocks of 128, float32, one thread,
   least of 5 calls: the causal tiled call that skips the tiles above the diagonal against the
   one that computes them masked, that against no mask, and PyTorch's fused kernel causal
   against no mask, as ratios (the counted work: 136 of 256 tiles, 256, 256).
"""

import math

import torch

from attention_course import (
    causal_mask,
    flash_attention,
    masked_softmax,
    scaled_dot_product_attention,
)
from attention_course.measure import best_seconds, peak_extra_bytes, peak_extra_memory
from attention_course.tiled import naive_attention

SHAPE = dict(batch=2, heads=8, length=1024, head_dim=64)


def inputs(batch, heads, length, head_dim, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, heads, length, head_dim, generator=generator).to(dtype) for _ in range(3)
    ]


def plain_causal(q, k, v):
    """The plain PyTorch sequence the package is compared with."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores.masked_fill_(~causal_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def plain_unmasked(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def lengths_of(q):
    """valid_lens (batch,) for the padded-batch cases: 3/4 of the keys valid."""
    return torch.full((q.shape[0],), q.shape[-2] * 3 // 4)


def plain_padded(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = torch.arange(k.shape[-2]) >= lengths_of(q)[:, None, None, None]
    scores.masked_fill_(blocked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def package_padded(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return masked_softmax(scores, lengths_of(q)) @ v


CASES = {
    "plain PyTorch, unmasked": plain_unmasked,
    "package, unmasked": lambda q, k, v: scaled_dot_product_attention(q, k, v),
    "plain PyTorch, causal": plain_causal,
    "package, causal": lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True),
    "plain PyTorch, padded (valid_lens)": plain_padded,
    "package, padded (masked_softmax)": package_padded,
}


def memory_cases(names):
    """(warm_up, call) pairs for `measure.peak_extra_bytes`, one per case of CASES named: the
    case on SHAPE's inputs, after a warm-up on other inputs of the same size. The inputs are
    made here, before the measurement: only what the case allocates is counted."""
    warm, measured = inputs(**SHAPE, seed=1), inputs(**SHAPE)
    return [
        (lambda case=CASES[name]: case(*warm), lambda case=CASES[name]: case(*measured))
        for name in names
    ]


def peaks_in_full_tensors(names):
    """{case: its peak extra memory in units of one full (B, H, L, S) float32 tensor}."""
    full = SHAPE["batch"] * SHAPE["heads"] * SHAPE["length"] ** 2 * 4
    peaks = peak_extra_bytes("tools.bench_attention:memory_cases", list(names))
    return {name: peak / full for name, peak in zip(names, peaks)}


def half_precision_errors(length=4096, head_dim=64):
    """Largest output error against float64, package and PyTorch, per half dtype and path."""
    rows = []
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = inputs(1, 1, length, head_dim, dtype=dtype, seed=1)
        for causal in (False, True):
            reference = torch.nn.functional.scaled_dot_product_attention(
                q.double(), k.double(), v.double(), is_causal=causal
            )
            ours, _ = scaled_dot_product_attention(q, k, v, is_causal=causal)
            theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            rows.append(
                (
                    str(dtype).replace("torch.", ""),
                    causal,
                    (ours.double() - reference).abs().max().item(),
                    (theirs.double() - reference).abs().max().item(),
                )
            )
    return rows


TILED = {
    "naive": naive_attention,
    "tiled": flash_attention,
    "sdpa": torch.nn.functional.scaled_dot_product_attention,
}


def tiled_against_others(lengths=(4096, 8192)):
    """{(implementation, L): (best-of-3 seconds, peak extra bytes)}."""
    memory = {name: dict(zip(lengths, peak_extra_memory(name, lengths))) for name in TILED}
    rows = {}
    with torch.no_grad():
        for length in lengths:
            q, k, v = inputs(1, 1, length, 64)
            for name, function in TILED.items():
                seconds = best_seconds(function, q, k, v, repeats=3)
                rows[name, length] = seconds, memory[name][length]
    return rows


def decoding_against_transformers(new_tokens=128, repeats=3):
    """(course tokens/s, transformers tokens/s, how many leading new tokens the two share):
    greedy, one thread, best of `repeats`. (In float32 the two sum in different orders; over
    128 tokens a near-tie may fall either way, after which the texts differ.)"""
    from transformers import AutoModelForCausalLM

    from attention_course.pretrained import gguf_path, load_smollm2

    path = gguf_path()
    theirs = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    ours, tokenizer = load_smollm2()
    prompt = torch.tensor([tokenizer.encode("The capital of France is").ids])
    runs = {
        "course": lambda: ours.generate(prompt, new_tokens),
        "transformers": lambda: theirs.generate(
            prompt,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        ),
    }
    texts = [run()[0, prompt.shape[1] :] for run in runs.values()]  # and warm up
    shared = int((texts[0] != texts[1]).int().cumsum(0).eq(0).sum())
    best = {name: math.inf for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            best[name] = min(best[name], best_seconds(run, repeats=1))
    return new_tokens / best["course"], new_tokens / best["transformers"], shared


def triton_kernel():
    """Chapter 18's kernel: seconds per program instance interpreted, or GPU ratios to SDPA."""
    from attention_course import triton_flash_attention
    from attention_course.triton_flash import tile_sizes

    if not torch.cuda.is_available():
        q, k, v = (t.requires_grad_() for t in inputs(1, 2, 256, 64))
        # 2 heads x the tiles triton_flash_attention picks: the forward's programs; the
        # backward's are as many for dK, dV, as many for dQ, and 512 rows / 64 for the row sums
        programs = 2 * (256 // tile_sizes(torch.float32, 64, 64))
        forward = best_seconds(lambda: triton_flash_attention(q, k, v, is_causal=True))
        output, _ = triton_flash_attention(q, k, v, is_causal=True)
        backward = best_seconds(
            lambda: torch.autograd.grad(
                output, (q, k, v), torch.ones_like(output), retain_graph=True
            )  # fmt: skip
        )
        return {"interpreted": (forward / programs, backward / (2 * programs + 2 * 256 // 64))}
    import triton.testing
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (t.cuda().requires_grad_() for t in inputs(4, 16, 4096, 64, torch.float16))

    def sdpa(*qkv):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(*qkv, is_causal=True)

    def ours(*qkv):
        return triton_flash_attention(*qkv, is_causal=True)[0]

    times = {}
    for name, attention in (("triton", ours), ("sdpa", sdpa)):
        out = attention(q, k, v)
        grad = torch.ones_like(out)
        forward = triton.testing.do_bench(lambda: attention(q, k, v))
        backward = triton.testing.do_bench(
            lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
        )
        times[name] = (forward, backward)
    return {"gpu": (torch.cuda.get_device_name(), times)}


def serving_throughput(repeats=3):
    """Chapter 19: (tokens/s one request at a time, tokens/s continuously batched, bound
    tokens/s of one request): SmolLM2, the six reference requests, one thread."""
    from attention_course import generate_continuous
    from attention_course.data import load_serving_reference
    from attention_course.pretrained import load_smollm2

    model, _ = load_smollm2()
    reference = load_serving_reference()
    prompts = [torch.tensor(request["ids"]) for request in reference["requests"]]
    count, stop = reference["max_new_tokens"], reference["stop_id"]
    runs = {
        "alone": lambda: [model.generate(p[None], count, stop_id=stop) for p in prompts],
        "batched": lambda: generate_continuous(model, prompts, count, stop_id=stop),
    }
    tokens = sum(len(request["generate"]) for request in reference["requests"])
    best = {name: math.inf for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            best[name] = min(best[name], best_seconds(run, repeats=1))
    weights = torch.ones(64 * 2**20)  # 256 MiB, more than the caches: one read's bandwidth
    bandwidth = 4 * weights.numel() / best_seconds(weights.sum, repeats=5)
    bound = bandwidth / (4 * sum(p.numel() for p in model.parameters()))
    return tokens / best["alone"], tokens / best["batched"], bound


def linear_forms(rounds=3):
    """Chapter 16: ({name: seconds at n = 2048}, {name: slope of time from 4,096 to 16,384})."""
    from attention_course import delta_rule, linear_attention

    def calls(n):
        generator = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(1, 1, n, 64, generator=generator) for _ in range(3))
        k = torch.nn.functional.normalize(k, dim=-1)
        beta, g = torch.full((1, 1, n), 0.5), torch.full((1, 1, n), -0.01)
        return {
            "linear, recurrent": lambda: linear_attention(q, k, v, chunk_size=1),
            "linear, chunks of 64": lambda: linear_attention(q, k, v, chunk_size=64),
            "gated delta, recurrent": lambda: delta_rule(q, k, v, beta, g, chunk_size=1),
            "gated delta, chunks of 64": lambda: delta_rule(q, k, v, beta, g, chunk_size=64),
            "softmax, PyTorch kernel": lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True
            ),
        }

    def least(lengths, names):
        made = {n: calls(n) for n in lengths}
        best = {(name, n): math.inf for name in names for n in lengths}
        with torch.no_grad():
            for _ in range(rounds):
                for n in lengths:
                    for name in names:
                        seconds = best_seconds(made[n][name], repeats=1)
                        best[name, n] = min(best[name, n], seconds)
        return best

    short = least([2048], [name for name in calls(8) if "PyTorch" not in name])
    long_lengths = [4096, 8192, 16_384]
    fast = ["linear, chunks of 64", "gated delta, chunks of 64", "softmax, PyTorch kernel"]
    long = least(long_lengths, fast)
    log_n = torch.tensor(long_lengths, dtype=torch.float64).log()
    design = torch.stack([log_n, torch.ones(3, dtype=torch.float64)], 1)
    slopes = {}
    for name in fast:
        log_t = torch.tensor([long[name, n] for n in long_lengths], dtype=torch.float64).log()
        slopes[name] = torch.linalg.lstsq(design, log_t[:, None]).solution[0].item()
    return {name: short[name, n] for name, n in short}, slopes


def causal_tiles():
    """Chapter 12: {comparison: how many times faster the first call ran than the second}."""
    q, k, v = inputs(1, 1, 2048, 64, seed=4)
    calls = {
        "tiled, skipping": lambda: flash_attention(q, k, v, is_causal=True),
        "tiled, all tiles masked": lambda: flash_attention(
            q, k, v, is_causal=True, skip_masked_tiles=False
        ),
        "tiled, no mask": lambda: flash_attention(q, k, v),
        "PyTorch, causal": lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True
        ),
        "PyTorch, no mask": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v),
    }
    with torch.no_grad():
        seconds = {name: best_seconds(call, repeats=5) for name, call in calls.items()}
    pairs = [
        ("tiled, skipping", "tiled, all tiles masked"),
        ("tiled, all tiles masked", "tiled, no mask"),
        ("PyTorch, causal", "PyTorch, no mask"),
    ]
    return {f"{fast} against {slow}": seconds[slow] / seconds[fast] for fast, slow in pairs}


def main():
    torch.manual_seed(0)
    q, k, v = inputs(**SHAPE)
    print(
        f"shape (B, H, L, d) = {tuple(SHAPE.values())}, float32, one thread (processor "
        "time, least of 5 calls; memory in a fresh process)"
    )
    print(f"{'case':<36}{'ms':>8}{'vs plain':>10}{'peak (full tensors)':>22}{'vs plain':>10}")
    with torch.no_grad():
        times = {name: best_seconds(case, q, k, v, repeats=5) for name, case in CASES.items()}
    peaks = peaks_in_full_tensors(list(CASES))
    plain = {
        kind: next(name for name in CASES if name.startswith(f"plain PyTorch, {kind}"))
        for kind in ("unmasked", "causal", "padded")
    }
    for name, seconds in times.items():
        base = plain[next(kind for kind in plain if kind in name)]
        print(
            f"{name:<36}{1000 * seconds:>8.1f}{seconds / times[base]:>9.2f}x"
            f"{peaks[name]:>22.2f}{peaks[name] / peaks[base]:>9.2f}x"
        )
    print("\nhalf precision, L = 4096, d = 64: largest error against float64")
    print(f"{'dtype':<10}{'causal':>8}{'package':>12}{'PyTorch':>12}")
    for dtype, causal, ours, theirs in half_precision_errors():
        print(f"{dtype:<10}{str(causal):>8}{ours:>12.2e}{theirs:>12.2e}")
    rows = tiled_against_others()
    print("\ntiled attention (blocks of 128), one head, d = 64, float32, one thread")
    for length in sorted({length for _, length in rows}):
        seconds, memory = rows["tiled", length]
        print(
            f"L = {length}: {1000 * seconds:.0f} ms, {memory / 2**20:.1f} MiB extra; "
            + "; ".join(
                f"vs {name}: time x{seconds / rows[name, length][0]:.2f}, "
                f"memory x{memory / rows[name, length][1]:.3f}"
                for name in ("naive", "sdpa")
            )
        )
    ours, theirs, shared = decoding_against_transformers()
    print(
        "\nSmolLM2-135M-Instruct, greedy decoding of 128 tokens with a KV cache, float32, "
        "one thread"
    )
    print(
        f"course TinyDecoder.generate: {ours:.1f} tokens/s; transformers generate: "
        f"{theirs:.1f} tokens/s; ratio {ours / theirs:.2f} (the first {shared} tokens "
        "identical)"
    )
    alone, batched, bound = serving_throughput()
    print(
        "\nchapter 19, SmolLM2 serving six chat requests, float32, one thread: one at a time "
        f"{alone:.1f} tokens/s ({alone / bound:.0%} of one request's read-bandwidth bound, "
        f"{bound:.0f} tokens/s); continuous batching {batched:.1f} tokens/s; ratio "
        f"{batched / alone:.2f}"
    )
    at_2048, slopes = linear_forms()
    print("\nchapter 16's linear forms, one head, d = 64, float32, one thread, least of 3 rounds")
    for kind in ("linear", "gated delta"):
        recurrent, chunked = at_2048[f"{kind}, recurrent"], at_2048[f"{kind}, chunks of 64"]
        print(
            f"{kind}, n = 2048: recurrence {1000 * recurrent:.1f} ms, chunks of 64 "
            f"{1000 * chunked:.1f} ms, ratio {recurrent / chunked:.1f}"
        )
    print(
        "slopes of time, 4,096 to 16,384 tokens (counted work: 1 linear, 2 softmax): "
        + "; ".join(f"{name} {value:.2f}" for name, value in slopes.items())
    )
    print("\nchapter 12's causal tiles, n = 2048, d = 64, blocks of 128, float32, one thread")
    for comparison, ratio in causal_tiles().items():
        print(f"{comparison}: {ratio:.2f} times as fast")
    kernel = triton_kernel()
    if "interpreted" in kernel:
        forward, backward = kernel["interpreted"]
        print(
            "\nchapter 18's Triton kernel through the interpreter (no GPU), n = 256, d = 64, "
            f"float32, default tiles: {1000 * forward:.1f} ms per forward program instance, "
            f"{1000 * backward:.1f} ms per backward one"
        )
    else:
        name, times = kernel["gpu"]
        (f_ours, b_ours), (f_sdpa, b_sdpa) = times["triton"], times["sdpa"]
        print(
            f"\nchapter 18's Triton kernel on {name}, batch 4, 16 heads, n = 4096, d = 64, "
            f"float16, causal: forward {f_ours:.2f} ms = {f_ours / f_sdpa:.2f}x SDPA's flash "
            f"backend (goal 1.5x); backward {b_ours:.2f} ms = {b_ours / b_sdpa:.2f}x (goal 2x)"
        )


if __name__ == "__main__":
    main()
