"""The learner edition: each chapter as Colab and Jupyter show it, without its solutions.

    python -m tools.learner            # (make notebooks) writes notebooks/NN_*.ipynb
    python -m tools.learner --check    # fails if notebooks/ is not what chapters/ gives

The chapters in chapters/ are written in MyST for the website and hold the solutions. Colab,
JupyterLab and VS Code render plain Markdown, so from each chapter this writes
notebooks/<same name>.ipynb, which the website's Colab and download buttons open:

- the cells without solutions (`exercises.learner_cells`): answers are stubs, check cells stay,
  every written part has an answer cell, nothing of a solution is left;
- MyST turned into Markdown: an exercise becomes a heading "Exercise N.k" with a link to its
  solution on the website; the exercise introduction's {check-cells} block gets the notebook's
  sentence on how to check an answer (exercises.HOW_TO_CHECK; the graders' copies get their
  own); a note becomes a quotation, a dropdown a <details> block; {cite} becomes (Author, Year)
  linked to the website's references; {ref}, {numref} and {doc} become
  links to the website's pages; a figure's caption (cell metadata) becomes text under it;
- a note under the title says what this edition is and links to the website.

The files are committed (Colab opens notebooks from the repository); a test keeps them current.
"""

import argparse
import codecs
import functools
import pathlib
import re

import latexcodec  # noqa: F401  (registers the "ulatex" codec)
import nbformat
import pybtex.database
import yaml
from docutils.nodes import make_id

from tools import CHAPTERS, ROOT, exercises

OUTPUT = ROOT / "notebooks"

DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{([A-Za-z][\w-]*)\}[ \t]*(.*)$")
OPTION = re.compile(r"^:([\w-]+):[ \t]*(.*)$")
ROLE = re.compile(r"\{([a-z]+(?::[a-z]+)?)\}`([^`]+)`")
TARGET = re.compile(r"^\(([\w-]+)\)=[ \t]*$", re.M)
LOCAL_LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)#\s]+?)\.(?:md|ipynb)(#[^)\s]*)?\)")
ADMONITIONS = {
    "note",
    "tip",
    "hint",
    "important",
    "warning",
    "caution",
    "attention",
    "danger",
    "error",
    "seealso",
    "admonition",
}


class MystError(ValueError):
    """A MyST construct that the learner edition does not know how to write as Markdown."""


@functools.cache
def book_config():
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def website():
    """The published website's address, from _config.yml (html.baseurl)."""
    return book_config()["html"]["baseurl"].rstrip("/") + "/"


def page_url(page, anchor=""):
    """The website's address of a page such as "chapters/05_masking" or "bibliography"."""
    return f"{website()}{page}.html" + (f"#{anchor}" if anchor else "")


# --------------------------------------------------------------------------------- citations


def _plain(latex):
    """BibTeX text without braces or LaTeX accents: {\\L}ukasz -> Łukasz."""
    return codecs.decode(latex, "ulatex").replace("{", "").replace("}", "")


def _last_name(person):
    return _plain(" ".join(person.prelast_names + person.last_names or person.first_names))


@functools.cache
def bibliography():
    return pybtex.database.parse_file(str(ROOT / "references.bib")).entries


def citation_text(key):
    """Author and year as the website writes them: "Shazeer, 2019", "Bahdanau et al., 2015",
    "Nadaraya and Watson, 1964"."""
    if key not in bibliography():
        raise MystError(f"{{cite}}: no entry {key!r} in references.bib")
    entry = bibliography()[key]
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_name(person) for person in people]
    if len(names) >= 3 or "others" in names:
        authors = f"{names[0]} et al."
    else:
        authors = " and ".join(names)
    return f"{authors}, {entry.fields.get('year', 'n.d.')}"


def cite(keys):
    """{cite}`a,b` -> ([A, 2015](...#cite-a); [B, 2016](...#cite-b))."""
    links = [
        f"[{citation_text(key.strip())}]"
        f"({page_url('bibliography', make_id('cite-' + key.strip()))})"
        for key in keys.split(",")
    ]
    return "(" + "; ".join(links) + ")"


# ---------------------------------------------------------------------------- cross-references


def _figure_cells(notebook):
    return [
        cell
        for cell in notebook.cells
        if cell.cell_type == "code"
        and cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
        and any("image/png" in output.get("data", {}) for output in cell.outputs)
    ]


@functools.cache
def labels():
    """{label: (page, text of a {numref})} for the targets of every chapter."""
    found = {}
    for path in CHAPTERS:
        page, number = f"chapters/{path.stem}", int(path.name[:2])
        notebook = nbformat.read(path, as_version=4)
        for k, cell in enumerate(_figure_cells(notebook), start=1):
            found[cell.metadata["mystnb"]["figure"].get("name", f"fig-{k}")] = (
                page,
                f"Fig. {number}.{k}",
            )
        markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
        for label in TARGET.findall(markdown) + re.findall(r":label:\s*(\S+)", markdown):
            found.setdefault(label, (page, None))
    return found


def reference(role, text):
    """{ref}`label`, {ref}`words <label>`, {numref}`label`, {doc}`path` -> a website link."""
    match = re.fullmatch(r"(.*?)\s*<([^>]+)>", text, re.S)
    words, target = (match[1], match[2]) if match else (None, text)
    if role == "doc":
        page = str(pathlib.PurePosixPath("chapters", target).as_posix())
        page = re.sub(r"^chapters/\.\./", "", page).removesuffix(".md").removesuffix(".ipynb")
        return f"[{words or page.split('/')[-1]}]({page_url(page)})"
    if target not in labels():
        raise MystError(f"{{{role}}}: no label {target!r} in the chapters")
    page, numbered = labels()[target]
    return f"[{words or numbered or target}]({page_url(page, target)})"


def convert_roles(text):
    def replace(match):
        role, content = match[1], match[2]
        if role.startswith("cite"):
            return cite(content)
        if role in ("ref", "numref", "doc"):
            return reference(role, content)
        if role in ("term", "index"):
            return re.sub(r"\s*<[^>]+>$", "", content)
        raise MystError(f"no Markdown form for the {{{role}}} role")

    text = ROLE.sub(replace, text)
    text = LOCAL_LINK.sub(lambda m: f"]({page_url(_page_of(m[1]), (m[2] or '#')[1:])})", text)
    return TARGET.sub(lambda m: f'<a id="{m[1]}"></a>', text)


def _page_of(relative):
    """A link written from chapters/ (05_masking, ../intro) -> its page name."""
    parts = pathlib.PurePosixPath("chapters", relative).parts
    resolved = []
    for part in parts:
        resolved = resolved[:-1] if part == ".." else resolved + [part]
    return "/".join(resolved)


# -------------------------------------------------------------------------------- directives


def _split_directives(source):
    """The text as a list of str (plain Markdown) and (name, argument, options, body) tuples."""
    lines, items, i = source.split("\n"), [], 0
    while i < len(lines):
        opening = DIRECTIVE.match(lines[i])
        if not opening:
            items.append(lines[i])
            i += 1
            continue
        fence, name, argument = opening.groups()
        options, i = {}, i + 1
        while i < len(lines) and OPTION.match(lines[i]):
            key, value = OPTION.match(lines[i]).groups()
            options[key] = value
            i += 1
        body = []
        while i < len(lines) and not re.fullmatch(
            re.escape(fence[0]) + f"{{{len(fence)},}}", lines[i].strip()
        ):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise MystError(f"the {{{name}}} block opened with {fence} is never closed")
        items.append((name, argument, options, "\n".join(body).strip("\n")))
        i += 1
    return items


def _quote(text):
    return "\n".join(f"> {line}".rstrip() for line in text.split("\n"))


def admonition(name, title, options, body):
    """A note as a quotation with a bold title; a dropdown as a <details> block."""
    title = title or name.capitalize()
    if "dropdown" in options.get("class", "").split():
        html_title = re.sub(r"`([^`]+)`", r"<code>\1</code>", title)  # no Markdown in HTML
        return (
            f"<details>\n<summary><b>{html_title}</b> (click to open)</summary>\n\n"
            f"{body}\n\n</details>"
        )
    return _quote(f"**{title}**\n\n{body}")


def convert_markdown(source, chapter):
    """A markdown cell's MyST as plain Markdown; `chapter` counts exercises as it goes."""
    out = []
    for item in _split_directives(source):
        if isinstance(item, str):
            out.append(item)
            continue
        name, argument, options, body = item
        body = convert_markdown(body, chapter)
        if name == "exercise":
            out.append(chapter.exercise(argument, options, body))
        elif name == exercises.CHECK_CELLS:
            out.append(chapter.check_cells(body))
        elif name in ADMONITIONS:
            out.append(admonition(name, argument, options, body))
        else:
            raise MystError(f"no Markdown form for the {{{name}}} directive")
    return convert_roles("\n".join(out))


class Chapter:
    """What the conversion of one chapter needs to know: its number and page, how many
    exercises it has written so far (they are numbered as on the website), and its edition
    (a key of exercises.HOW_TO_CHECK: "notebook", "nbgrader" or "otter")."""

    def __init__(self, path, link_solutions=True, edition="notebook"):
        self.number, self.page, self.exercises = int(path.name[:2]), f"chapters/{path.stem}", 0
        self.link_solutions = link_solutions  # not in the classroom edition nor an assignment
        if edition not in exercises.HOW_TO_CHECK or "website" in edition:
            raise ValueError(f"edition: no notebook edition {edition!r}")
        self.edition = edition

    def check_cells(self, body):
        """The exercise introduction's own words, then how this edition checks an answer."""
        return f"{body} {exercises.HOW_TO_CHECK[self.edition]}".strip()

    def exercise(self, title, options, body):
        self.exercises += 1
        heading = f"### Exercise {self.number}.{self.exercises}: {title}\n\n{body}"
        if not self.link_solutions:
            return heading
        solution = page_url(self.page, re.sub(r"^ex-", "sol-", options.get("label", "")))
        return (
            f"{heading}\n\n*Solution: [on the website]({solution}), folded under the "
            "exercise; try first.*"
        )

    def note(self):
        run = (
            "Run the cells from the top: in Colab the first one installs the course's "
            "helper package. Each exercise has a cell for your answer; a coding exercise "
            "is followed by a check cell that says whether your code is right."
        )
        if not self.link_solutions:
            return nbformat.v4.new_markdown_cell(
                f"> **Classroom edition.** This notebook is chapter {self.number} of the course "
                f"*{book_config()['title']}*, without the solutions. {run}"
            )
        return nbformat.v4.new_markdown_cell(
            f"> **Learner edition.** This notebook is chapter {self.number} of the course "
            f"[{book_config()['title']}]({website()}), without the solutions. The same chapter, "
            f"with its figures and folded solutions, is [on the website]({page_url(self.page)}). "
            + run
        )


def plain_markdown(cells, path, link_solutions=True, edition="notebook"):
    """The cells with every markdown cell's MyST written as plain Markdown (in place)."""
    chapter = Chapter(path, link_solutions, edition)
    for cell in cells:
        if cell.cell_type == "markdown":
            cell.source = convert_markdown(cell.source, chapter)
    return cells


def caption_cell(chapter, number, cell):
    caption = convert_markdown(cell.metadata["mystnb"]["figure"]["caption"], chapter)
    return nbformat.v4.new_markdown_cell(f"*Figure {chapter.number}.{number}. {caption}*")


def learner_notebook(path, link_solutions=True):
    """The learner edition of one chapter notebook; without `link_solutions`, the classroom
    edition's, which does not point to the website's solutions."""
    source = nbformat.read(path, as_version=4)
    notebook = nbformat.v4.new_notebook(metadata=source.metadata)
    chapter = Chapter(path, link_solutions=link_solutions)
    figures = {id(c): k for k, c in enumerate(_figure_cells(source), 1)}
    for index, cell in enumerate(exercises.learner_cells(source)):
        if cell.cell_type == "markdown":
            cell = nbformat.from_dict(dict(cell))
            cell.source = convert_markdown(cell.source, chapter)
        notebook.cells.append(cell)
        if index == 0:
            notebook.cells.append(chapter.note())
        if id(cell) in figures:
            notebook.cells.append(caption_cell(chapter, figures[id(cell)], cell))
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number:03d}"
    return notebook


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="only report the learner notebooks that are out of date",
    )
    args = parser.parse_args(argv)
    stale = []
    OUTPUT.mkdir(exist_ok=True)
    for path in CHAPTERS:
        target = OUTPUT / path.name
        text = nbformat.writes(learner_notebook(path)) + "\n"
        if not target.is_file() or target.read_text() != text:
            stale.append(target.name)
            if not args.check:
                target.write_text(text)
    known = {path.name for path in CHAPTERS}
    extra = sorted(p.name for p in OUTPUT.glob("*.ipynb") if p.name not in known)
    if args.check and (stale or extra):
        raise SystemExit(
            f"notebooks/ is out of date ({', '.join(stale + extra)}): run `make notebooks`"
        )
    for name in extra:
        (OUTPUT / name).unlink()
    print(
        f"learner edition: {len(CHAPTERS)} notebooks in {OUTPUT.relative_to(ROOT)}/, "
        f"{len(stale)} rewritten"
    )


if __name__ == "__main__":
    main()
