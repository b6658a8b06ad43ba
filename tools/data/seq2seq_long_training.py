"""Chapter 6's models trained eight times longer, precomputed for the chapter.

    python -m tools.data.seq2seq_long_training            # writes data/seq2seq_long_training.json
    python -m tools.data.seq2seq_long_training --check    # recomputes and compares, writes nothing

The chapter trains each encoder-decoder for 120 steps; training both models for 960 steps on
three seeds takes about a minute of CPU time, too long for a chapter that runs in well under a
minute. This script runs the chapter's own code (its cells that define the toy task, the model,
`train`, the test set and `accuracy_by_length`), so the numbers are those of the chapter's
models, trained longer, on the chapter's test set. Float64 on one thread: the same numbers on
the same kind of processor, but not on every one (another rounds float64's last bits otherwise,
and 960 steps grow it: one moved accuracies by up to 0.27), so --check compares exactly only
where the file was written; tests/test_data.py checks what the chapter says of the numbers.
"""

import argparse
import ast
import json
import sys

import nbformat

from tools import ROOT
from tools.data import run_cells

CHAPTER = ROOT / "chapters" / "06_encoder_decoder_attention.ipynb"
OUTPUT = ROOT / "data" / "seq2seq_long_training.json"
STEPS, SEEDS = 960, (0, 1, 2)
NEEDED = {"make_batch", "Seq2Seq", "greedy_decode", "train", "accuracy_by_length"}


def defined_names(source):
    """Top-level functions and classes a code cell defines."""
    return {
        node.name
        for node in ast.parse(source).body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef))
    }


def chapter_namespace():
    """Run the chapter's imports and the cells that define NEEDED; return their globals."""
    notebook = nbformat.read(CHAPTER, as_version=4)
    cells = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    chosen = [next(source for source in cells if "import torch" in source)]  # the imports
    chosen += [source for source in cells if defined_names(source) & NEEDED]
    namespace = run_cells(chosen, "chapter_06")
    missing = NEEDED - set(namespace)
    if missing:
        raise RuntimeError(f"{CHAPTER.name} no longer defines {sorted(missing)}")
    return namespace


def compute():
    """{"steps", "seeds", "lengths", kind: {"per_token", "per_sequence": [seed][length]}}."""
    chapter = chapter_namespace()
    record = {
        "steps": STEPS,
        "seeds": list(SEEDS),
        "lengths": list(range(1, chapter["MAX_LEN"] + 1)),
    }
    for kind, attention in (("no attention", False), ("attention", True)):
        runs = {"per_token": [], "per_sequence": []}
        for seed in SEEDS:
            model, _ = chapter["train"](attention, seed, steps=STEPS)
            tokens, _ = chapter["greedy_decode"](
                model, chapter["test_sources"], chapter["test_lens"], chapter["MAX_LEN"] + 1
            )
            per_token, per_sequence = chapter["accuracy_by_length"](tokens)
            runs["per_token"].append([round(x, 4) for x in per_token.tolist()])
            runs["per_sequence"].append([round(x, 4) for x in per_sequence.tolist()])
        record[kind] = runs
    return record


def as_text(record):
    return json.dumps(record, indent=1) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="recompute and compare with the stored file"
    )
    args = parser.parse_args(argv)
    text = as_text(compute())
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT.name} differs from what the chapter's code computes")
            return 1
        print(f"{OUTPUT.name} is what the chapter's code computes")
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
