"""Make the classroom edition: the website without solutions, and the notebooks to hand out, for
an instructor who hosts the course for a class (the public website shows every solution).

    python -m tools.classroom [OUTPUT_DIR]      # default: _build/classroom

Writes the website in OUTPUT_DIR/_build/html and the notebooks in OUTPUT_DIR/notebooks. The
notebooks are the learner edition's (no solutions, plain Markdown for Colab and Jupyter) without
its links to the public website's solutions; the website's download button serves them, and it
has no Colab button (Colab would open the public repository's notebooks). The website is built
from the same cells in MyST (`exercises.learner_cells`): each coding answer's
`# BEGIN SOLUTION` ... `# END SOLUTION` block becomes `# YOUR CODE HERE` /
`raise NotImplementedError()`, the public check cells stay, every written part gets an answer
cell, and everything else inside a solution is removed.
"""

import pathlib
import re
import shutil
import sys

import nbformat
import yaml

from tools import ROOT, book, exercises, learner

BOOK_FILES = [
    "intro.md",
    "notation.md",
    "accessibility.md",
    "glossary.md",
    "licences.md",
    "bibliography.md",
    "references.bib",
    "projects.md",
    "changes.md",
    "CHANGELOG.md",  # changes.md shows it
    "errata.md",
]
INSTRUCTOR_PAGES = ["instructors"]  # left out of the classroom edition
BOOK_FOLDERS = ["_ext", "_static", "_templates"]
NOTICE = (
    "\n```{note}\nThis is the **classroom edition**: solutions are not included. Coding "
    "exercises have a stub for your answer and a cell that checks it; written exercises "
    "have a cell for your answer.\n```\n"
)
INSTRUCTOR_ONLY = re.compile(r"<!-- instructor-only -->.*?<!-- /instructor-only -->\n?", re.S)


def chapter_without_solutions(path):
    """A chapter notebook, still in MyST, with the learner edition's cells."""
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = exercises.learner_cells(notebook)
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number:03d}"
    return notebook


def write_source_tree(source):
    """A copy of the book whose chapters have no solutions."""
    (source / "chapters").mkdir(parents=True, exist_ok=True)
    for name in BOOK_FILES:
        shutil.copy(ROOT / name, source / name)
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    for part in toc["parts"]:
        part["chapters"] = [c for c in part["chapters"] if c["file"] not in INSTRUCTOR_PAGES]
    (source / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
    for name in BOOK_FOLDERS:
        shutil.copytree(ROOT / name, source / name)
    intro = (source / "intro.md").read_text()
    title, _, body = intro.partition("\n")
    (source / "intro.md").write_text(f"{title}\n{NOTICE}{INSTRUCTOR_ONLY.sub('', body)}")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["title"] += " (classroom edition)"
    config["launch_buttons"]["colab_url"] = ""
    config["sphinx"]["config"]["course_root"] = str(ROOT)  # its notebooks and package
    config["sphinx"]["config"]["course_edition"] = "classroom website"  # no solutions
    config["exclude_patterns"] = [
        "_build",
        "_ext",
        "_templates",
        "notebooks",
        "**.ipynb_checkpoints",
    ]
    (source / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    for path in learner.CHAPTERS:
        nbformat.write(chapter_without_solutions(path), source / "chapters" / path.name)
    write_handouts(source / "notebooks")


def write_handouts(folder):
    """The notebooks a class gets: the learner edition without links to solutions."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in learner.CHAPTERS:
        nbformat.write(learner.learner_notebook(path, link_solutions=False), folder / path.name)


def main(output=ROOT / "_build" / "classroom", pdfs=("learner",)):
    """The classroom edition in `output`; `pdfs`: the PDF editions to print (the learner one)."""
    output = pathlib.Path(output).resolve()
    shutil.rmtree(output, ignore_errors=True)
    learner.main(["--check"])
    write_source_tree(output / "source")
    write_handouts(output / "notebooks")
    html = book.build(output / "source", output, pdfs)
    print(f"classroom notebooks: {output / 'notebooks'}\nclassroom website: {html}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
