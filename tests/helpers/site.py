"""What the tests of the built website and of its PDFs share: the chapters, the book's
configuration, and how a chapter's page and text are found."""

import re

import nbformat
import yaml

from tools import ROOT, exercises

CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
RAW_MYST = re.compile(
    r":::\{|```\{|\{(?:cite|ref|numref|doc|eq|term|index)(?::\w+)?\}`"
    r"|^:(?:label|class|name):",
    re.M,
)


def page_name(chapter):
    return f"chapters/{chapter.stem}"


def chapter_title(chapter):
    """The notebook's first heading, as the page's h1 should show it."""
    notebook = nbformat.read(chapter, as_version=4)
    first = next(cell for cell in notebook.cells if cell.cell_type == "markdown")
    return first.source.splitlines()[0].lstrip("# ").strip()


def lecture_and_prompt_cells(notebook):
    """What a reader reads: everything but the solutions and the hidden setup cells
    (computed with tools/exercises.py's reading of the chapter)."""
    for item in exercises.parse(notebook):
        cell = item.prompt if isinstance(item, exercises.Exercise) else item
        if "remove-cell" not in cell.metadata.get("tags", []):
            yield cell
