"""Turn chapters into graded assignments for nbgrader and for Otter-Grader.

    python -m tools.graders nbgrader [NN ...] [--out DIR]   # default DIR: _build/nbgrader
    python -m tools.graders otter    [NN ...] [--out DIR] [--colab]   # default: _build/otter

nbgrader: DIR is an nbgrader course directory: DIR/nbgrader_config.py and one assignment per
chapter, DIR/source/<stem>/<stem>.ipynb. Then, in DIR: `nbgrader generate_assignment <stem>`.

Otter: DIR/<stem>/<stem>.ipynb in Otter Assign's format. Then
`otter assign DIR/<stem>/<stem>.ipynb DIR/<stem>/dist` writes the student notebook and the
autograder zip.

NN selects chapters by number (default: every chapter); --colab makes the Otter notebooks for
students who work in Google Colab. The README has the whole workflow. Markdown cells are written
as plain Markdown (tools/learner.py), as JupyterLab and Colab render it, without links to the
website's solutions, and each exercise introduction says how that tool checks an answer.
"""

import argparse
import pathlib

import nbformat
import yaml

from tools import CHAPTERS, ROOT, exercises, learner

NBGRADER_CONFIG = '''\
# nbgrader configuration of the attention course (written by `make nbgrader`).
import nbformat
from nbgrader.preprocessors import ClearHiddenTests

c = get_config()  # noqa: F821


class ClearHiddenTestsAndTheirErrors(ClearHiddenTests):
    """Feedback keeps no hidden test: neither its code nor the traceback that would quote it."""

    def preprocess_cell(self, cell, resources, cell_index):
        hidden = cell.cell_type == "code" and self.begin_test_delimeter in cell.source
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if hidden and any(output.output_type == "error" for output in cell.outputs):
            cell.outputs = [nbformat.v4.new_output(
                "stream", name="stdout",
                text="Hidden tests failed; their code and messages are not shown.\\n")]
        return cell, resources


# Each written answer's rubric is a mark scheme in the locked cell under it (not a task cell,
# which would carry points of its own): released without it, put back by autograde for the
# formgrader (the cell is locked), and removed again from the students' feedback.
c.ClearMarkScheme.enforce_metadata = False
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    ClearHiddenTestsAndTheirErrors,
    "nbgrader.preprocessors.ClearMarkScheme",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
# A chapter runs its whole lecture before the exercises: give each cell time.
c.ExecutePreprocessor.timeout = 600
'''


def chapters(numbers):
    """The chapter notebooks whose two-digit numbers are in `numbers` (all if empty)."""
    chosen = [path for path in CHAPTERS if not numbers or path.name[:2] in numbers]
    unknown = set(numbers) - {path.name[:2] for path in CHAPTERS}
    if unknown:
        raise SystemExit(f"no chapter numbered {', '.join(sorted(unknown))}")
    return chosen


def repository_url():
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def _notebook_like(source, cells):
    notebook = nbformat.v4.new_notebook(metadata=source.metadata)
    notebook.cells = cells
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number:03d}"
    return notebook


def write_nbgrader(paths, out):
    """An nbgrader course directory with one source assignment per chapter."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "nbgrader_config.py").write_text(NBGRADER_CONFIG)
    for path in paths:
        source = nbformat.read(path, as_version=4)
        cells = learner.plain_markdown(
            exercises.nbgrader_cells(source), path, link_solutions=False, edition="nbgrader"
        )
        notebook = _notebook_like(source, cells)
        folder = out / "source" / path.stem
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, folder / path.name)
        print(f"nbgrader source: {folder / path.name}")


def otter_config(stem, colab=False, extras=()):
    """Otter Assign's ASSIGNMENT CONFIG for one chapter (YAML). For Colab, Otter needs the tests
    as files (students upload the tests/ folder beside the notebook) and has no export cell.
    `extras`: the package's optional dependency groups the chapter needs (pyproject.toml)."""
    package = "attention-course" + (f"[{','.join(extras)}]" if extras else "")
    config = {
        "name": stem,
        "requirements": ["torch", f"{package} @ git+{repository_url()}"],
        "init_cell": True,
        "check_all_cell": True,
        "export_cell": {"pdf": False, "instructions": "Submit the zip file this cell writes."},
        "tests": {"files": False, "ok_format": False},
        "generate": {"pdf": False},
    }
    if colab:
        config.update(runs_on="colab", export_cell=False, tests={"files": True, "ok_format": False})
    return yaml.safe_dump(config, sort_keys=False)


def extras_needed(notebook):
    """The optional dependency groups a chapter imports: "pretrained" (chapter 13's model)."""
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    return ["pretrained"] if "attention_course.pretrained" in code else []


def write_otter(paths, out, colab=False):
    """One Otter Assign master notebook per chapter."""
    for path in paths:
        source = nbformat.read(path, as_version=4)
        config = otter_config(path.stem, colab, extras_needed(source))
        cells = learner.plain_markdown(
            exercises.otter_cells(source, config), path, link_solutions=False, edition="otter"
        )
        notebook = _notebook_like(source, cells)
        folder = out / path.stem
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, folder / path.name)
        print(f"Otter master notebook: {folder / path.name}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", choices=["nbgrader", "otter"])
    parser.add_argument("chapters", nargs="*", help="two-digit chapter numbers")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--colab", action="store_true", help="Otter: for students on Colab")
    args = parser.parse_args(argv)
    out = (args.out or ROOT / "_build" / args.tool).resolve()
    if args.tool == "nbgrader":
        write_nbgrader(chapters(args.chapters), out)
    else:
        write_otter(chapters(args.chapters), out, args.colab)


if __name__ == "__main__":
    main()
