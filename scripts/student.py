"""Make the student edition: the website without solutions, and the notebooks to hand out.

    python scripts/student.py [OUTPUT_DIR]      # default: _build/student

Writes the website in OUTPUT_DIR/_build/html and the notebooks in OUTPUT_DIR/notebooks. The
notebooks are the learner edition's (no solutions, plain Markdown for Colab and Jupyter) without
its links to the public website's solutions; the website's download button serves them, and it
has no Colab button (Colab would open the public repository's notebooks). The website is built
from the same cells in MyST
(`exercises.student_cells`): each coding answer's `# BEGIN SOLUTION` ... `# END SOLUTION`
block becomes `# YOUR CODE HERE` / `raise NotImplementedError()`, the public check cells stay,
every written part gets an answer cell, and everything else inside a solution is removed.
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
import learner  # noqa: E402

ROOT = book.ROOT
BOOK_FILES = ["intro.md", "glossary.md", "licences.md", "bibliography.md", "references.bib"]
INSTRUCTOR_PAGES = ["instructors"]  # left out of the student edition
BOOK_FOLDERS = ["_ext", "_static", "_templates"]
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
    """A copy of the book whose chapters are the student notebooks."""
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
    config["title"] += " (student edition)"
    config["launch_buttons"]["colab_url"] = ""
    config["sphinx"]["config"]["course_root"] = str(ROOT)  # its scripts and package
    config["exclude_patterns"] = ["_build", "_ext", "_templates", "notebooks",
                                 "**.ipynb_checkpoints"]
    (source / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    for path in learner.CHAPTERS:
        nbformat.write(student_notebook(path), source / "chapters" / path.name)
    write_handouts(source / "notebooks")


def write_handouts(folder):
    """The notebooks students get: the learner edition without links to solutions."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in learner.CHAPTERS:
        nbformat.write(learner.learner_notebook(path, student=True), folder / path.name)


def main(output=ROOT / "_build" / "student", pdfs=("learner",)):
    """The student edition in `output`; `pdfs`: the PDF editions to print (the learner one)."""
    output = pathlib.Path(output).resolve()
    shutil.rmtree(output, ignore_errors=True)
    learner.main(["--check"])
    write_source_tree(output / "source")
    write_handouts(output / "notebooks")
    html = book.build(output / "source", output, pdfs)
    print(f"student notebooks: {output / 'notebooks'}\nstudent website: {html}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
