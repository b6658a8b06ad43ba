"""One real GPU run of chapter 18's timing cell, for the website: data/triton_gpu_run.json.

    python -m tools.data.triton_gpu_run      # on a machine with a CUDA GPU, Triton and PyTorch

The website is built on a CPU, where chapter 18's timing cell cannot time the compiled kernel.
This program runs the chapter's code cells in order in one namespace, as a Jupyter kernel would
(each cell's source is registered in `linecache` as IPython does, since `triton.jit` reads a
kernel's source), so the timing cell times `triton_flash_attention`, SDPA's FlashAttention
backend and chapter 12's `flash_attention` at batch 4, 16 heads, n = 4096, d = 64, float16,
causal, with `triton.testing.do_bench`, after asserting that the first two agree. It stores
those milliseconds with the GPU's name, the date and the library versions; on a CPU the
chapter prints them, saying where they were measured.
"""

import datetime
import hashlib
import json
import os
import sys

from tools import ROOT
from tools.data import run_cells

CHAPTER = ROOT / "chapters" / "18_flashattention_in_triton.ipynb"
OUTPUT = ROOT / "data" / "triton_gpu_run.json"
SHAPE = dict(batch=4, heads=16, length=4096, head_dim=64, dtype="float16", is_causal=True)


def code_sources(path):
    """The sources of the code cells of the notebook at `path`, in order."""
    cells = json.loads(path.read_text())["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def main():
    import matplotlib

    matplotlib.use("Agg")
    import torch
    import triton

    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU here: this program records a GPU run")
    os.environ.setdefault("COURSE_DATA_DIR", str(ROOT / "data"))
    namespace = run_cells(code_sources(CHAPTER), "chapter_18")
    timings = namespace["timings"]  # name: (forward s, forward + backward s)
    versions = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
    }
    write_record(timings, torch.cuda.get_device_name(), versions, datetime.date.today())


def write_record(timings, gpu, versions, date, computed_by="tools/data/triton_gpu_run.py"):
    """data/triton_gpu_run.json from the timing cell's `timings`; prints it and its SHA-256."""
    record = {
        "gpu": gpu,
        "date": date.isoformat(),
        "versions": versions,
        "shape": SHAPE,
        "milliseconds": {
            name: {"forward": round(1e3 * forward, 3), "forward_backward": round(1e3 * both, 3)}
            for name, (forward, both) in timings.items()
        },
        "computed_by": computed_by,
    }
    text = json.dumps(record, indent=1) + "\n"
    OUTPUT.write_text(text)
    print(text, "SHA-256", hashlib.sha256(text.encode()).hexdigest())


if __name__ == "__main__":
    main()
