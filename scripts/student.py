"""Make the student edition: notebooks whose solutions are stubs, and a website without solutions.

    python scripts/student.py [OUTPUT_DIR]      # default: _build/student

Writes OUTPUT_DIR/notebooks/*.ipynb (to hand out) and the website in OUTPUT_DIR/_build/html.
The cells come from `exercises.student_cells`: each coding answer's `# BEGIN SOLUTION` ...
`# END SOLUTION` block becomes `# YOUR CODE HERE` / `raise NotImplementedError()` (as nbgrader's
release step does), the public check cells stay, every written part gets an answer cell, and
everything else inside a gated solution is removed.
"""

import pathlib
import re
import shutil
import sys

import nbformat
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import book  # noqa: E402  (the one build command)
import exercises  # noqa: E402

ROOT = book.ROOT
BOOK_FILES = ["_toc.yml", "intro.md", "bibliography.md", "references.bib"]
NOTICE = ("\n```{note}\nThis is the **student edition**: solutions are not included. Coding "
          "exercises have a stub for your answer and a cell that checks it; written exercises "
          "have a cell for your answer.\n```\n")
INSTRUCTOR_ONLY = re.compile(r"<!-- instructor-only -->.*?<!-- /instructor-only -->\n?", re.S)


def student_notebook(path):
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = exercises.student_cells(notebook)
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number:03d}"
    return notebook


def write_source_tree(source):
    """A copy of the book whose notebooks are the student notebooks."""
    (source / "chapters").mkdir(parents=True, exist_ok=True)
    for name in BOOK_FILES:
        shutil.copy(ROOT / name, source / name)
    intro = (source / "intro.md").read_text()
    title, _, body = intro.partition("\n")
    (source / "intro.md").write_text(f"{title}\n{NOTICE}{INSTRUCTOR_ONLY.sub('', body)}")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["title"] += " (student edition)"
    config["exclude_patterns"] = ["_build", "**.ipynb_checkpoints"]
    (source / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    notebooks = []
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        nbformat.write(student_notebook(path), source / "chapters" / path.name)
        notebooks.append(source / "chapters" / path.name)
    return notebooks


def main(output=ROOT / "_build" / "student"):
    output = pathlib.Path(output).resolve()
    shutil.rmtree(output, ignore_errors=True)
    notebooks = write_source_tree(output / "source")
    (output / "notebooks").mkdir(parents=True)
    for path in notebooks:
        shutil.copy(path, output / "notebooks" / path.name)
    html = book.build(output / "source", output)
    print(f"student notebooks: {output / 'notebooks'}\nstudent website: {html}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
