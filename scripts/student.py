"""Make the student edition: notebooks whose solutions are stubs, and a website without solutions.

    python scripts/student.py [OUTPUT_DIR]      # default: _build/student

Writes OUTPUT_DIR/notebooks/*.ipynb (to hand out, or to import into nbgrader) and the website in
OUTPUT_DIR/_build/html. In the instructor notebooks a coding exercise's answer sits between
nbgrader's markers `### BEGIN SOLUTION` and `### END SOLUTION`; here, as in nbgrader's release
step, each such block becomes `# YOUR CODE HERE` / `raise NotImplementedError()`. Everything else
inside a gated solution (`solution-start` ... `solution-end`) is removed, except the cells tagged
`check`, which stay so that students can check their answers.
"""

import pathlib
import re
import shutil
import sys

import nbformat
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import book  # noqa: E402  (the one build command)

ROOT = book.ROOT
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SOLUTION_BLOCK = re.compile(rf"^([ \t]*){re.escape(BEGIN)}\n.*?^[ \t]*{re.escape(END)}[ \t]*$",
                            re.M | re.S)
SOLUTION_END = re.compile(r"^```\{solution-end\}\n```\n?", re.M)
BOOK_FILES = ["_toc.yml", "intro.md", "bibliography.md", "references.bib"]
NOTICE = ("\n```{note}\nThis is the **student edition**: solutions are not included. Coding "
          "exercises have a stub for your answer and a cell that checks it.\n```\n")


def stub_solutions(source):
    """Replace each BEGIN/END SOLUTION block by an indented 'raise NotImplementedError()' stub."""
    return SOLUTION_BLOCK.sub(
        lambda m: f"{m[1]}# YOUR CODE HERE\n{m[1]}raise NotImplementedError()", source)


def _is_markdown_with(cell, text):
    return cell.cell_type == "markdown" and text in cell.source


def student_cells(cells):
    """The cells of a student notebook, given an instructor notebook's cells."""
    kept, inside_solution = [], False
    for cell in cells:
        if _is_markdown_with(cell, "{solution-start}"):
            inside_solution = True
            continue
        if _is_markdown_with(cell, "{solution-end}"):
            inside_solution = False
            rest = SOLUTION_END.sub("", cell.source).strip()
            if rest:
                cell.source = rest
                kept.append(cell)
            continue
        if _is_markdown_with(cell, "{solution}"):
            continue  # an ungated solution: the whole cell is the answer
        if inside_solution:
            is_answer = cell.cell_type == "code" and BEGIN in cell.source
            is_check = "check" in cell.metadata.get("tags", [])
            if not (is_answer or is_check):
                continue
            cell.source = stub_solutions(cell.source)
            cell.outputs, cell.execution_count = [], None
        kept.append(cell)
    return kept


def student_notebook(path):
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = student_cells(notebook.cells)
    return notebook


def write_source_tree(source):
    """A copy of the book whose notebooks are the student notebooks."""
    (source / "chapters").mkdir(parents=True, exist_ok=True)
    for name in BOOK_FILES:
        shutil.copy(ROOT / name, source / name)
    intro = (source / "intro.md").read_text()
    title, _, body = intro.partition("\n")
    (source / "intro.md").write_text(f"{title}\n{NOTICE}{body}")
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
