"""Data for the course: the real data sets in `data/` and seeded synthetic data.

Notable: every file is checked against its recorded SHA-256 before it is read (its source
and licence: data/README.md); the synthetic regression problem (chapter 1) draws from its own
generator, so the global random state is untouched. Chapter 1 loads `mcycle`; each loader
names the chapter that reads its file.
"""

import csv
import hashlib
import json
import os
import pathlib
from typing import NamedTuple

import torch

from ._shapes import (
    require_float,
    require_int,
    require_number,
    require_positive,
    require_tensor,
    shape_of,
)

MCYCLE_SHA256 = "93d06e3d834a5c21056b40f16fcd03c4384acff5020e273453d5cd62d730f0c8"
ZEN_SHA256 = "e250f274f33b9b621a04264025d50e5fb9b1f989f444d13bb373882e734e996f"
MINILM_REFERENCE_SHA256 = "20a5ebb4eeb5df73ab8a467cc7888ac714ac3b9f15dfa29ed258406bb72896c7"
SMOLLM2_REFERENCE_SHA256 = "07c16fa1c38c7ec2a3026d05876bef184a2d32f1823126f0592a21d3eb7cd711"
EXECUTION_MODEL_SHA256 = "607922e2f0b29a54ba29f506445adcfcb26d74506d169b8a5db28fe8752d293b"
DEEPSEEK_REFERENCE_SHA256 = "fc44c6a8b8bcf081d99c4d3f2bac80c47ef38af09fccf3c5d13ed0c869e273b3"
SEQ2SEQ_LONG_TRAINING_SHA256 = "5550b0e25453f7930c2e73d11a73084dbb097929cf8757a1257988a71bf0d91f"
REFERENCE_SECTIONS_SHA256 = "d6c05790ec308ea325327e7508f2d52619fe6838924a3b217540fa80474d1fa1"
STREAMING_PAST_CONTEXT_SHA256 = "085573d680e0640761a22b571ee1500dd8cf29c5f67ff38a93a792ab84d7dde5"
SERVING_REFERENCE_SHA256 = "341909eb2d9b3219f67c28d8b1af27701eba16abc32f38084d21ce7ae32d5bf4"
TRITON_GPU_RUN_SHA256 = "24823441f824b6186aa21a57696ecda74d312d65e3a6ce6f0815890a5d9f43e2"


def data_dir():
    """The folder holding the course's data files.

    `COURSE_DATA_DIR` wins when set; otherwise the package's own `data/`, which is the
    checkout's top-level `data/` (a link to it in a checkout, a copy in an installed wheel).
    Chapter 1.
    """
    if os.environ.get("COURSE_DATA_DIR"):
        return pathlib.Path(os.environ["COURSE_DATA_DIR"])
    return pathlib.Path(__file__).resolve().parent / "data"


def _verified_bytes(path, sha256):
    """Read a file and raise ValueError if its SHA-256 is not the recorded one."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: set COURSE_DATA_DIR to the course's data/ folder"
        )
    content = path.read_bytes()
    digest = hashlib.sha256(content).hexdigest()
    if digest != sha256:
        raise ValueError(f"{path} has SHA-256 {digest}, expected {sha256}: the file was changed")
    return content


def load_mcycle(path=None):
    """The motorcycle-crash data (MASS::mcycle): returns (times, accel), two float32 tensors (133,).

    `times` is the time after impact in milliseconds, `accel` the head acceleration in g.
    The file's checksum is verified first (see data/README.md for its source and licence).
    Chapter 1.
    """
    path = pathlib.Path(path) if path else data_dir() / "mcycle.csv"
    rows = list(csv.DictReader(_verified_bytes(path, MCYCLE_SHA256).decode().splitlines()))
    times = torch.tensor([float(row["times"]) for row in rows])
    accel = torch.tensor([float(row["accel"]) for row in rows])
    return times, accel


def load_minilm_reference(path=None):
    """Sentence-transformers' own all-MiniLM-L6-v2 embeddings of three
    sentences (chapter 13's reference): returns (sentences, a float32 tensor
    (3, 384)). Checksum-verified; scripts/minilm_reference.py wrote it. Chapter 13."""
    path = pathlib.Path(path) if path else data_dir() / "minilm_reference.json"
    record = json.loads(_verified_bytes(path, MINILM_REFERENCE_SHA256))
    return record["sentences"], torch.tensor(record["embeddings"])


def load_smollm2_reference(path=None):
    """What transformers computes with SmolLM2-135M-Instruct (chapter 14's
    reference): a list of dicts, one per prompt, with its "text", token "ids",
    the ten largest last-position logits ("top_ids", "top_logits") and 24
    greedy tokens ("greedy"). Checksum-verified; scripts/smollm2_reference.py
    wrote it. Chapter 14."""
    path = pathlib.Path(path) if path else data_dir() / "smollm2_reference.json"
    return json.loads(_verified_bytes(path, SMOLLM2_REFERENCE_SHA256))["prompts"]


def load_deepseek_reference(path=None):
    """What transformers' DeepseekV3Attention computes on a small random
    layer (chapter 15's reference): a dict with the layer's "config", its
    "weights" (a state dict of float64 tensors), an input "x", the causal
    "output", the outputs after "prefill" tokens then one token at a time
    through transformers' cache ("cached_output") and that cache's
    "cached_latents" and "cached_rope_keys" (tensors), the attention sizes of
    DeepseekV3Config's and DeepseekV2Config's defaults and the parameters of
    DeepseekV3Attention at the former. Checksum-verified;
    scripts/deepseek_reference.py wrote it. Chapter 15."""
    path = pathlib.Path(path) if path else data_dir() / "deepseek_v3_mla_reference.json"
    record = json.loads(_verified_bytes(path, DEEPSEEK_REFERENCE_SHA256))
    record["weights"] = {
        name: torch.tensor(value, dtype=torch.float64) for name, value in record["weights"].items()
    }
    for name in ("x", "output", "cached_output", "cached_latents", "cached_rope_keys"):
        record[name] = torch.tensor(record[name], dtype=torch.float64)
    return record


def load_seq2seq_long_training(path=None):
    """Chapter 6's encoder-decoders trained eight times longer: a dict with "steps", "seeds",
    "lengths" and, for "no attention" and "attention", the test accuracies "per_token" and
    "per_sequence" as [seed][length] lists. Checksum-verified;
    scripts/seq2seq_long_training.py wrote it from the chapter's own code. Chapter 6."""
    path = pathlib.Path(path) if path else data_dir() / "seq2seq_long_training.json"
    return json.loads(_verified_bytes(path, SEQ2SEQ_LONG_TRAINING_SHA256))


def load_execution_model(path=None):
    """ "Execution model", a section of the Python Language Reference (CPython
    3.11's pydoc topic "execmodel", PSF License), 9,527 characters: the long
    real text chapter 14 streams through a language model. Checksum-verified. Chapter 10."""
    path = pathlib.Path(path) if path else data_dir() / "execution_model.txt"
    return _verified_bytes(path, EXECUTION_MODEL_SHA256).decode()


def load_python_reference_sections(path=None):
    """Four sections of the Python Language Reference ("assignment", "import",
    "comparisons", "customization": CPython 3.11's pydoc topics, PSF License),
    about 10,500 SmolLM2 tokens: the stream chapter 14 reads past the model's
    declared context. Checksum-verified. Chapter 14."""
    path = pathlib.Path(path) if path else data_dir() / "python_reference_sections.txt"
    return _verified_bytes(path, REFERENCE_SECTIONS_SHA256).decode()


def load_streaming_past_context(path=None):
    """SmolLM2 reading python_reference_sections.txt chunk by chunk through four caches
    (a window; window and sinks, renumbered or not; the full cache): a dict with the
    settings and "chunk_losses", each variant's mean next-token loss per chunk.
    Checksum-verified; tools/data/streaming_past_context.py wrote it. Chapter 14."""
    path = pathlib.Path(path) if path else data_dir() / "streaming_past_context.json"
    return json.loads(_verified_bytes(path, STREAMING_PAST_CONTEXT_SHA256))


def load_serving_reference(path=None):
    """What transformers' continuous batching computes with SmolLM2-135M-Instruct
    (chapter 19's reference): a dict with "max_new_tokens", "stop_id" and
    "requests", one dict per chat request with its user "message", "text",
    token "ids" and greedy new tokens from "generate_batch" and from "generate"
    run alone. Checksum-verified; tools/data/serving_reference.py wrote it.
    Chapter 19."""
    path = pathlib.Path(path) if path else data_dir() / "serving_reference.json"
    return json.loads(_verified_bytes(path, SERVING_REFERENCE_SHA256))


def load_triton_gpu_run(path=None):
    """One run of chapter 18's timing cell on a CUDA GPU, for a page built on a CPU: a dict
    with the "gpu", the "date", the library "versions", the inputs' "shape" and, for each
    attention timed, the "milliseconds" of its "forward" and "forward_backward".
    Checksum-verified; tools/data/triton_gpu_run.py wrote it. Chapter 18."""
    path = pathlib.Path(path) if path else data_dir() / "triton_gpu_run.json"
    return json.loads(_verified_bytes(path, TRITON_GPU_RUN_SHA256))


def load_zen_of_python(path=None):
    """The Zen of Python by Tim Peters (CPython's `this` module), 856 characters:
    the short text chapter 11's decoder trains on. Checksum-verified. Chapter 11."""
    path = pathlib.Path(path) if path else data_dir() / "zen_of_python.txt"
    return _verified_bytes(path, ZEN_SHA256).decode()


def target_function(x):
    """The course's test function f(x) = 2 sin x + 0.4 sin 3x + 0.6 sin 6x + sqrt(x), for x >= 0.

    x: a float tensor of any shape; a negative x raises ValueError (sqrt x would be NaN).
    Chapter 1."""
    require_float("x", x)
    if (x < 0).any():
        raise ValueError(
            f"x {shape_of(x)} must be >= 0 (f takes sqrt x), got a minimum of {x.min().item()}"
        )
    return 2 * torch.sin(x) + 0.4 * torch.sin(3 * x) + 0.6 * torch.sin(6 * x) + torch.sqrt(x)


class RegressionData(NamedTuple):
    """Noisy training pairs and a clean test grid: x_train, y_train (n_train,); x_test,
    y_test (n_test,).
    Chapter 1."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def make_synthetic_regression(n_train=100, n_test=201, x_max=10.0, noise_std=0.5, seed=0):
    """Sample the test function's regression problem with its own random generator (the global
    random state is untouched).

    x_train: n_train sorted uniform draws on [0, x_max]; y_train = f(x_train) + N(0, noise_std^2)
    noise; x_test: n_test evenly spaced points on [0, x_max]; y_test = f(x_test) without noise.
    Chapter 1.
    """
    for name, size in (("n_train", n_train), ("n_test", n_test)):
        require_int(name, size, 1, message=f"{name} must be positive, got {size!r}")
    require_number("x_max", x_max)
    require_positive("x_max", x_max)
    require_number("noise_std", noise_std, 0)
    require_int("seed", seed)
    generator = torch.Generator().manual_seed(seed)
    x_train = torch.sort(torch.rand(n_train, generator=generator) * x_max).values
    noise = torch.randn(n_train, generator=generator) * noise_std
    x_test = torch.linspace(0, x_max, n_test)
    return RegressionData(
        x_train, target_function(x_train) + noise, x_test, target_function(x_test)
    )


def split_data(x, y, held_out_fraction=0.25, seed=0):
    """Randomly split paired data x (n,), y (n,) into (x_fit, y_fit, x_held, y_held).

    The held-out part has round(n * held_out_fraction) points; both parts keep x's order.
    Chapter 2.
    """
    require_tensor("x", x)
    require_tensor("y", y)
    if x.shape != y.shape or x.dim() != 1:
        raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)} must be 1-D of equal length")
    require_number("held_out_fraction", held_out_fraction)
    require_int("seed", seed)
    n_held = round(len(x) * held_out_fraction)
    if not 0 < n_held < len(x):
        raise ValueError(
            f"held_out_fraction {held_out_fraction} leaves no point on one side "
            f"of the split of {len(x)} points"
        )
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    held = torch.zeros(len(x), dtype=torch.bool)
    held[order[:n_held]] = True
    return x[~held], y[~held], x[held], y[held]
