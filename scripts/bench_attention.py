"""Benchmarks of the package's attention against PyTorch (run by `make bench`; not a test).

    python scripts/bench_attention.py

1. Time of the masked and causal paths of `scaled_dot_product_attention` and `masked_softmax`,
   relative to the plain PyTorch sequence scores -> masked_fill -> softmax -> matmul.
2. Peak extra memory of each path, in units of one full (B, H, L, S) float32 tensor, each case
   measured in a fresh process (its peak resident memory minus that before the call).
3. bfloat16 and float16 accuracy: largest error against a float64 reference, the package's and
   PyTorch's scaled_dot_product_attention on the same inputs.
4. Tiled attention (`flash_attention`, blocks of 128) at L = 4096 and 8192, one head of size 64,
   float32, one thread: its time (median of 3) and peak extra memory relative to the naive three lines and to
   PyTorch's fused kernel (memory measured in fresh processes by `peak_extra_memory`).
5. Greedy decoding of 128 tokens with SmolLM2-135M-Instruct (chapter 14), float32, one thread:
   the course's `TinyDecoder.generate` with its KV cache against `transformers`' own `generate`
   with its cache, same weights (the same GGUF file), same prompt, runs alternated, best of 3.
"""

import math
import statistics
import subprocess
import sys
import time

import torch

from attention_course import (causal_mask, flash_attention, masked_softmax,
                              scaled_dot_product_attention)
from attention_course.tiled import naive_attention, peak_extra_memory

SHAPE = dict(batch=2, heads=8, length=1024, head_dim=64)


def inputs(batch, heads, length, head_dim, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, head_dim, generator=generator).to(dtype)
            for _ in range(3)]


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


def median_seconds(function, arguments, repeats=7):
    function(*arguments)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(*arguments)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_in_fresh_process(case):
    """Run one case in a new Python; return its extra peak memory in full-size tensors."""
    code = f"""
import torch, sys
sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
import bench_attention as b
from attention_course import tiled
q, k, v = b.inputs(**b.SHAPE)
with torch.no_grad():
    b.CASES[{case!r}](q[:, :, :8], k, v)          # warm up allocators on a small call
    before = tiled.resident_bytes()
    tiled.reset_peak_resident_bytes()
    b.CASES[{case!r}](q, k, v)
    print(tiled.resident_bytes(peak=True) - before)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    full = SHAPE["batch"] * SHAPE["heads"] * SHAPE["length"] ** 2 * 4
    return int(result.stdout.strip()) / full


def half_precision_errors(length=4096, head_dim=64):
    """Largest output error against float64, package and PyTorch, per half dtype and path."""
    rows = []
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = inputs(1, 1, length, head_dim, dtype=dtype, seed=1)
        for causal in (False, True):
            reference = torch.nn.functional.scaled_dot_product_attention(
                q.double(), k.double(), v.double(), is_causal=causal)
            ours, _ = scaled_dot_product_attention(q, k, v, is_causal=causal)
            theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            rows.append((str(dtype).replace("torch.", ""), causal,
                         (ours.double() - reference).abs().max().item(),
                         (theirs.double() - reference).abs().max().item()))
    return rows


TILED = {"naive": naive_attention, "tiled": flash_attention,
         "sdpa": torch.nn.functional.scaled_dot_product_attention}


def tiled_against_others(lengths=(4096, 8192)):
    """{(implementation, L): (best-of-3 seconds, peak extra bytes)}."""
    memory = {name: dict(zip(lengths, peak_extra_memory(name, lengths)))
              for name in TILED}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = {}
    with torch.no_grad():
        for length in lengths:
            q, k, v = inputs(1, 1, length, 64)
            for name, function in TILED.items():
                seconds = median_seconds(function, (q, k, v), repeats=3)
                rows[name, length] = seconds, memory[name][length]
    torch.set_num_threads(threads)
    return rows


def decoding_against_transformers(new_tokens=128, repeats=3):
    """(course tokens/s, transformers tokens/s, how many leading new tokens the two share):
    greedy, one thread, best of `repeats`. (In float32 the two sum in different orders; over
    128 tokens a near-tie may fall either way, after which the texts differ.)"""
    from transformers import AutoModelForCausalLM

    from attention_course.pretrained import gguf_path, load_smollm2

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = gguf_path()
    theirs = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                  dtype=torch.float32).eval()
    ours, tokenizer = load_smollm2()
    prompt = torch.tensor([tokenizer.encode("The capital of France is").ids])
    runs = {"course": lambda: ours.generate(prompt, new_tokens),
            "transformers": lambda: theirs.generate(
                prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                do_sample=False, pad_token_id=0)}
    texts = [run()[0, prompt.shape[1]:] for run in runs.values()]  # and warm up
    shared = int((texts[0] != texts[1]).int().cumsum(0).eq(0).sum())
    best = {name: math.inf for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    torch.set_num_threads(threads)
    return new_tokens / best["course"], new_tokens / best["transformers"], shared


def main():
    torch.manual_seed(0)
    q, k, v = inputs(**SHAPE)
    print(f"shape (B, H, L, d) = {tuple(SHAPE.values())}, float32, {torch.get_num_threads()} "
          "threads")
    print(f"{'case':<36}{'ms':>8}{'vs plain':>10}{'peak (full tensors)':>22}")
    with torch.no_grad():
        times = {name: median_seconds(case, (q, k, v)) for name, case in CASES.items()}
    plain = {"unmasked": times["plain PyTorch, unmasked"],
             "causal": times["plain PyTorch, causal"],
             "padded": times["plain PyTorch, padded (valid_lens)"]}
    for name, seconds in times.items():
        kind = next(key for key in plain if key in name)
        peak = peak_in_fresh_process(name)
        print(f"{name:<36}{1000 * seconds:>8.1f}{seconds / plain[kind]:>9.2f}x{peak:>22.2f}")
    print("\nhalf precision, L = 4096, d = 64: largest error against float64")
    print(f"{'dtype':<10}{'causal':>8}{'package':>12}{'PyTorch':>12}")
    for dtype, causal, ours, theirs in half_precision_errors():
        print(f"{dtype:<10}{str(causal):>8}{ours:>12.2e}{theirs:>12.2e}")
    rows = tiled_against_others()
    print("\ntiled attention (blocks of 128), one head, d = 64, float32, one thread")
    for length in sorted({length for _, length in rows}):
        seconds, memory = rows["tiled", length]
        print(f"L = {length}: {1000 * seconds:.0f} ms, {memory / 2**20:.1f} MiB extra; "
              + "; ".join(
                  f"vs {name}: time x{seconds / rows[name, length][0]:.2f}, "
                  f"memory x{memory / rows[name, length][1]:.3f}"
                  for name in ("naive", "sdpa")))
    ours, theirs, shared = decoding_against_transformers()
    print("\nSmolLM2-135M-Instruct, greedy decoding of 128 tokens with a KV cache, float32, "
          "one thread")
    print(f"course TinyDecoder.generate: {ours:.1f} tokens/s; transformers generate: "
          f"{theirs:.1f} tokens/s; ratio {ours / theirs:.2f} (the first {shared} tokens "
          "identical)")


if __name__ == "__main__":
    main()
