"""The capstone projects (projects.md) and their starting notebooks (projects/): each project
has its brief, deliverables, notebook and a rubric whose points add up; each notebook is on the
page, starts with the chapters' setup cell, imports only the package's public names, holds no
solution of any exercise of the course, leaves the student a stub, fits 80 columns, and runs
from a fresh kernel in under 20 seconds, printing what it stored (the nbval rule, applied here:
make test's nbval run covers chapters/ and templates/ only)."""

import ast
import importlib
import re
import time

import nbformat
import pytest
from nbclient import NotebookClient

from helpers.solution_text import hidden_test_lines, solution_fragments
from tools import ROOT

PAGE = (ROOT / "projects.md").read_text()
NOTEBOOKS = sorted((ROOT / "projects").glob("*.ipynb"))
TEMPLATE = nbformat.read(ROOT / "templates" / "chapter.ipynb", as_version=4)
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
REPOSITORY = "https://github.com/attention-course/attention-course"
SECONDS = 20
MACHINE_TRACES = re.compile(r"/work/|/home/|/root/|/tmp/|site-packages|\bat 0x[0-9a-f]+")


def projects():
    """{anchor: the project's section of the page}."""
    parts = re.split(r"^\((project-[\w-]+)\)=\n", PAGE, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def rubric(section):
    """[(criterion, points, full, partial, none)] and the stated total."""
    rows = [
        tuple(cell.strip() for cell in row)
        for row in re.findall(r"^\| (.+?) \| (\d+) \|(.*?)\|(.*?)\|(.*?)\|$", section, re.M)
    ]
    total = [int(points) for name, points, *_ in rows if name == "total"]
    return [row for row in rows if row[0] != "total"], total


def code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


@pytest.fixture(params=NOTEBOOKS, ids=lambda path: path.stem)
def notebook(request):
    return nbformat.read(request.param, as_version=4)


def test_there_are_three_or_four_projects_each_with_a_notebook_of_its_own():
    found = projects()
    stated = {"Three": 3, "Four": 4}[re.search(r"^(\w+) projects for", PAGE, re.M)[1]]
    assert len(found) == stated
    linked = []
    for anchor, section in found.items():
        assert re.match(r"## Project \d+: ", section), anchor
        for part in ("**Brief.**", "**Deliverables.**", "| criterion | points |"):
            assert part in section, (anchor, part)
        notebooks = set(re.findall(rf"{REPOSITORY}/blob/main/(projects/[\w]+\.ipynb)", section))
        colab = set(
            re.findall(
                r"colab\.research\.google\.com/github/attention-course/"
                r"attention-course/blob/main/(projects/[\w]+\.ipynb)",
                section,
            )
        )
        assert len(notebooks) == 1 and colab == notebooks, anchor
        linked += notebooks
    assert sorted(linked) == [f"projects/{path.name}" for path in NOTEBOOKS]


@pytest.mark.parametrize("anchor", list(projects()))
def test_each_rubric_gives_full_partial_and_no_credit_and_adds_up(anchor):
    rows, total = rubric(projects()[anchor])
    assert len(rows) >= 4 and total == [20]
    assert sum(int(points) for _, points, *_ in rows) == total[0]
    for criterion, points, full, partial, none in rows:
        assert full.strip(), criterion
        partial_points = re.match(r"(\d+): \S", partial)
        assert partial_points and 0 < int(partial_points[1]) < int(points), criterion
        assert re.match(r"0: \S", none), criterion


def test_each_notebook_links_to_its_project_on_the_website(notebook):
    site = "https://attention-course.github.io/attention-course/projects.html#"
    anchors = re.findall(rf"{re.escape(site)}([\w-]+)", notebook.cells[0].source)
    assert len(anchors) == 1 and anchors[0] in projects()


def test_each_notebook_sets_up_as_the_chapters_do(notebook):
    """The chapters' setup cell (Colab clones the course and installs the package), hidden
    and empty, then a require(...) cell."""
    cells = code_cells(notebook)
    assert cells[0].source == code_cells(TEMPLATE)[0].source
    assert cells[0].outputs == [] and "remove-cell" in cells[0].metadata.get("tags", [])
    assert "from attention_course.runtime import require" in cells[1].source


def imported_names(source):
    """(module, name) for each name a cell imports from attention_course."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attention_"):
            yield from ((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (
                (alias.name, None)
                for alias in node.names
                if alias.name.startswith("attention_course")
            )


def private_attributes(source):
    """The names a cell reads as obj._name (dunders aside): private parts of anything."""
    return [
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]


def test_each_notebook_imports_only_the_packages_public_names(notebook):
    found = 0
    for cell in code_cells(notebook):
        assert not private_attributes(cell.source), cell.source[:60]
        for module, name in imported_names(cell.source):
            found += 1
            assert not any(part.startswith("_") for part in module.split(".")), module
            if name is None:
                continue
            assert not name.startswith("_"), (module, name)
            imported = importlib.import_module(module)
            assert hasattr(imported, name), (module, name)
            public = getattr(imported, "__all__", None)
            assert public is None or name in public, (module, name, "not in __all__")
    assert found >= 2


def test_no_notebook_holds_a_solution_of_an_exercise():
    """The distinctive lines of every chapter's solutions and hidden tests appear in no
    starting notebook: the projects go to students in every edition."""
    texts = {path.name: path.read_text() for path in NOTEBOOKS}
    sources = {
        name: "\n".join(c.source for c in nbformat.reads(text, as_version=4).cells)
        for name, text in texts.items()
    }
    for chapter in CHAPTERS:
        instructor = nbformat.read(chapter, as_version=4)
        secret = solution_fragments(instructor) | set(hidden_test_lines(instructor))
        for name, source in sources.items():
            leaked = [line for line in secret if line.strip() and line in source]
            assert not leaked, f"{name} holds {chapter.name}'s solution lines {leaked[:3]}"


def test_each_notebook_leaves_the_student_a_stub_and_says_so(notebook):
    stubs = [c for c in code_cells(notebook) if "raise NotImplementedError()" in c.source]
    assert stubs and all("# YOUR CODE HERE" in c.source for c in stubs)
    printed = "".join(o.get("text", "") for c in code_cells(notebook) for o in c.outputs)
    assert "not written yet" in printed


def test_each_notebook_fits_80_columns_and_stores_clean_outputs(notebook):
    counts = [cell.execution_count for cell in code_cells(notebook)]
    assert counts == list(range(1, len(counts) + 1)), "run every cell once, top to bottom"
    for cell in code_cells(notebook):
        assert all(len(line) <= 80 for line in cell.source.splitlines()), cell.source[:60]
        for output in cell.outputs:
            assert output.output_type != "error", cell.source[:60]
            assert not (output.output_type == "stream" and output.name == "stderr")
            text = output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
            assert all(len(line) <= 80 for line in text.splitlines()), text[:60]
            assert "Warning" not in text and not MACHINE_TRACES.search(text), text[:60]


def printed(cell):
    """What a code cell prints, as nbval compares it: its standard output joined (a kernel
    may split it into several outputs) and its text results."""
    stream = "".join(o.text for o in cell.outputs if o.output_type == "stream")
    results = [o.data.get("text/plain") for o in cell.outputs if o.output_type == "execute_result"]
    return stream, results


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_each_notebook_runs_quickly_from_a_fresh_kernel_and_prints_what_it_stored(path):
    """Every cell's printed text as stored (cells tagged nbval-ignore-output aside), and the
    cells' own time, kernel start excluded, under SECONDS."""
    stored = nbformat.read(path, as_version=4)
    fresh = nbformat.read(path, as_version=4)
    client = NotebookClient(
        fresh,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    with client.setup_kernel():
        start = time.perf_counter()
        for index, cell in enumerate(fresh.cells):
            client.execute_cell(cell, index)
        seconds = time.perf_counter() - start
    print(f"{path.name}: {seconds:.1f} s")
    for before, after in zip(code_cells(stored), code_cells(fresh)):
        if "nbval-ignore-output" not in before.metadata.get("tags", []):
            assert printed(after) == printed(before), before.source[:60]
    assert seconds < SECONDS, f"{path.name} took {seconds:.1f} s"
