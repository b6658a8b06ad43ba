"""SmolLM2 streamed past its declared context with StreamingLLM's cache, precomputed for chapter 14.

    python -m tools.data.streaming_past_context          # writes the text and the losses
    python -m tools.data.streaming_past_context --check  # recomputes the first chunks, compares

Chapter 14 streams 512 tokens through caches of several kinds; StreamingLLM's point is a stream
longer than the model's declared context (8,192 tokens for SmolLM2-135M-Instruct), which takes
minutes, too long for the chapter. This script reads about 10,500 tokens of the Python Language
Reference (four sections of CPython 3.11's pydoc topics, written to
data/python_reference_sections.txt) chunk by chunk through SmolLM2 with four caches: a window
alone; a window and 4 sinks with positions renumbered inside the cache (StreamingLLM); the same
with the text's own positions; and the full cache. It stores each chunk's mean next-token loss
in data/streaming_past_context.json. Float32 on one thread.
"""

import argparse
import datetime
import hashlib
import json
import platform
import sys
import time

import torch
import torch.nn.functional as F

from tools import ROOT

TEXT = ROOT / "data" / "python_reference_sections.txt"
OUTPUT = ROOT / "data" / "streaming_past_context.json"
SECTIONS = ("assignment", "import", "comparisons", "customization")
WINDOW, SINKS, CHUNK = 256, 4, 128
VARIANTS = {  # name: model.windowed's settings; every windowed cache holds 256 tokens
    "window": dict(window=WINDOW),
    "window + 4 sinks, renumbered": dict(window=WINDOW - SINKS, sinks=SINKS, renumber=True),
    "window + 4 sinks, text positions": dict(window=WINDOW - SINKS, sinks=SINKS),
    "full": dict(window=None),
}
CHECKED_CHUNKS = 3  # what --check and tests/test_streaming.py recompute


def reference_text():
    """The four sections of CPython 3.11's pydoc topics, one after another."""
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError("the text is CPython 3.11's pydoc topics: run with Python 3.11")
    from pydoc_data.topics import topics

    return "\n".join(topics[name] for name in SECTIONS)


def load():
    """(model, token ids (1, n)) of the stored text, on one thread."""
    from attention_course.pretrained import load_smollm2

    torch.set_num_threads(1)
    model, tokenizer = load_smollm2()
    ids = torch.tensor([tokenizer.encode(TEXT.read_text()).ids])
    return model, ids


def chunk_losses(model, ids, settings, chunks=None):
    """Mean next-token loss of each chunk of CHUNK tokens (the first `chunks`, or all), the
    text read chunk by chunk through caches with these settings (model.windowed's)."""
    length, losses = ids.shape[1], []
    with torch.inference_mode(), model.windowed(**settings):
        caches = model.new_caches()
        for start in range(0, length - 1, CHUNK)[:chunks]:
            piece = ids[:, start : min(start + CHUNK, length - 1)]
            logits = model(piece, caches)[0]
            targets = ids[0, start + 1 : start + 1 + piece.shape[1]]
            losses.append(round(F.cross_entropy(logits, targets).item(), 6))
    return losses


def compute(model, ids):
    record = {
        "text": TEXT.name,
        "sections": list(SECTIONS),
        "tokens": ids.shape[1],
        "declared_context": model.config.context_length,
        "window": WINDOW,
        "sinks": SINKS,
        "chunk": CHUNK,
        "variants": {name: settings for name, settings in VARIANTS.items()},
        "chunk_losses": {},
        "seconds": {},
    }
    for name, settings in VARIANTS.items():
        start = time.perf_counter()
        record["chunk_losses"][name] = chunk_losses(model, ids, settings)
        record["seconds"][name] = round(time.perf_counter() - start)
        print(f"{name}: {record['seconds'][name]} s", flush=True)
    record["computed_by"] = (
        f"tools/data/streaming_past_context.py on {datetime.date.today().isoformat()}: "
        f"torch {torch.__version__}, Python {platform.python_version()}, float32, one thread"
    )
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="recompute the first chunks and compare"
    )
    args = parser.parse_args(argv)
    if args.check:
        model, ids = load()
        stored = json.loads(OUTPUT.read_text())["chunk_losses"]
        for name, settings in VARIANTS.items():
            losses = chunk_losses(model, ids, settings, CHECKED_CHUNKS)
            worst = max(abs(a - b) for a, b in zip(losses, stored[name]))
            print(f"{name}: largest difference {worst:.1e}")
        return 0
    TEXT.write_text(reference_text())
    model, ids = load()
    OUTPUT.write_text(json.dumps(compute(model, ids), indent=1) + "\n")
    for path in (TEXT, OUTPUT):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"wrote {path.relative_to(ROOT)}, SHA-256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
