"""Colab, simulated: each notebook alone in an empty folder, in a Python where the course package
is not installed, with the setup cell forced on and pointed at a local clone of this checkout.

The stand-in for Colab is a fresh virtual environment that sees the pinned libraries (torch,
numpy, matplotlib, ipykernel: Colab has its own) through a .pth file, but not the course package,
which in .venv is an editable install that only a site directory's own .pth files activate.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def local_clone(tmp_path_factory):
    """A git repository holding this working tree as it is now (committed or not)."""
    clone = tmp_path_factory.mktemp("remote") / "attention-course"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # e.g. the package's data/, a link to the top-level data/
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)
    git("init", "--quiet", "--initial-branch=main", cwd=clone)
    git("add", "-A", cwd=clone)
    git("-c", "user.name=test", "-c", "user.email=test@localhost", "commit", "--quiet",
        "-m", "snapshot", cwd=clone)
    return clone


@pytest.fixture(scope="module")
def colab_python(tmp_path_factory):
    """A fresh venv that sees .venv's libraries but not the course package."""
    env_dir = tmp_path_factory.mktemp("colab-env")
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    own_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              check=True, capture_output=True, text=True).stdout.strip()
    pathlib.Path(own_site, "preinstalled.pth").write_text(sysconfig.get_path("purelib") + "\n")
    probe = subprocess.run([str(python), "-c", "import torch, ipykernel; import attention_course"],
                           capture_output=True, text=True)
    assert "No module named 'attention_course'" in probe.stderr, probe.stderr
    return python, pathlib.Path(own_site)


@pytest.fixture(scope="module")
def kernel_name(colab_python, tmp_path_factory, monkeypatch_module):
    """A Jupyter kernel running in the Colab stand-in."""
    python, _ = colab_python
    jupyter_path = tmp_path_factory.mktemp("jupyter")
    spec = jupyter_path / "kernels" / "colab-sim"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab stand-in", "language": "python"}))
    monkeypatch_module.setenv("JUPYTER_PATH", str(jupyter_path))
    return "colab-sim"


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.name)
def test_notebook_runs_alone_with_the_setup_cell(chapter, tmp_path, local_clone, colab_python,
                                                 kernel_name, monkeypatch):
    python, own_site = colab_python
    shutil.copy(chapter, tmp_path / chapter.name)
    monkeypatch.setenv("COURSE_FORCE_SETUP", "1")
    monkeypatch.setenv("COURSE_REPO_URL", local_clone.as_uri())
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    notebook = nbformat.read(tmp_path / chapter.name, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name=kernel_name,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert (tmp_path / "attention-course" / "data" / "mcycle.csv").is_file()
    installed = {path.name.split("-")[0].lower() for path in own_site.glob("*.dist-info")}
    assert "attention_course" in installed
    assert (own_site / "attention_course" / "data" / "mcycle.csv").is_file(), "data not shipped"
    assert not installed & {"torch", "numpy", "matplotlib"}, "setup replaced a library Colab has"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["attention-course", chapter.name])
