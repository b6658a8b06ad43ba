"""Tables the website computes from the chapter notebooks at build time (a local Sphinx
extension), so that no number about the chapters is ever typed by hand:

    ```{course-reading-times}
    :model:
    ```                         a reading time per chapter, from its words, displayed equations
                                and code lines (with :model:, then a paragraph stating the model)
    ```{course-exercises}
    ```                         per chapter, each exercise's kind, points and difficulty
    ```{course-syllabus}
    Week 1: 1, 2
    Week 2: 3, 4, 5 | 3.1, 3.4, 4.2, 5.1
    Week 9: 17 | 17.1 | project 5 h
    ```                         a syllabus: the chapters of each period (after "|", the
                                exercises set, if not all; after a second "|", the hours of a
                                project), their reading time, exercises and the hours of work
                                they add up to
    ```{course-colab-setup}
    ```                         per chapter, how long its setup took in the Colab test and what
                                it installed (colab/setup-times.json), and Colab's versions

Reading time = the words of the chapter's prose at WORDS_PER_MINUTE, plus MINUTES_PER_EQUATION
for each displayed equation (a `$$...$$` or `\\begin{...}...\\end{...}` block, whose LaTeX is not
counted as words), plus the lines of its code at LINES_PER_MINUTE, without its exercises'
solutions and its hidden setup cells. It is the time to study the chapter, running its code, not
to skim it. An exercise's time is a range by difficulty, EXERCISE_MINUTES (the instructors' page
states both).

The rates are calibrated on one reader's estimates, not measured on many readers. The first
model (prose at 125 words a minute, code at 20 lines a minute, equations counted as words) gave
35, 50, 60, 50 and 65 minutes for chapters 1, 5, 12, 14 and 16; a learner who read those
chapters in full for a review of the website estimated 45-60, 60-75, 90-120, 60-90 and 90-120
minutes. Prose that defines symbols and states results is studied, not read at the 200-250 words
a minute of ordinary text: at 80 words a minute, with 2 minutes for each displayed equation
(reading it, matching its symbols to the text) and code at 20 lines a minute (a line and its
printed output), all five chapters fall inside that reader's ranges (57, 70, 90, 72 and 97
minutes, November 2026), where the first model's fell below every one. The tables round to the
nearest 5 minutes.
"""

import json
import math
import pathlib
import re

import nbformat
from docutils import nodes
from docutils.parsers.rst import Directive, directives
from sphinx import addnodes

from tools import (  # the one reader of exercises (tools/book.py puts tools on the path)
    CHAPTERS,
    colab_runtime,
    exercises,
    slides,
)

WORDS_PER_MINUTE, MINUTES_PER_EQUATION, LINES_PER_MINUTE = 80, 2, 20
# A displayed equation: $$...$$ (MyST's dollarmath) or a top-level LaTeX environment (amsmath)
DISPLAY = re.compile(r"\$\$.*?\$\$|\\begin\{([\w*]+)\}.*?\\end\{\1\}", re.S)
EXERCISE_MINUTES = {1: (15, 30), 2: (30, 60), 3: (60, 120)}  # by stars: (least, most)
STARS = re.compile(r"\((★+)\)")
INLINE = re.compile(r"(\$[^$]+\$|`[^`]+`)")


def chapter_paths(srcdir):
    return sorted(pathlib.Path(srcdir, "chapters").glob("[0-9][0-9]_*.ipynb"))


def lecture_cells(notebook):
    """The cells a reader reads: not inside a solution, not a hidden setup cell."""
    inside = False
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and "{solution-start}" in cell.source:
            inside = True
        elif cell.cell_type == "markdown" and "{solution-end}" in cell.source:
            inside = False
        elif not inside and "remove-cell" not in cell.metadata.get("tags", []):
            yield cell


def reading_minutes(notebook):
    """(words, displayed equations, code lines, minutes) of a chapter notebook."""
    cells = list(lecture_cells(notebook))
    markdown = [c.source for c in cells if c.cell_type == "markdown"]
    equations = sum(len(DISPLAY.findall(source)) for source in markdown)
    words = sum(len(DISPLAY.sub(" ", source).split()) for source in markdown)
    lines = sum(
        len([line for line in c.source.splitlines() if line.strip()])
        for c in cells
        if c.cell_type == "code"
    )
    minutes = words / WORDS_PER_MINUTE + equations * MINUTES_PER_EQUATION + lines / LINES_PER_MINUTE
    return words, equations, lines, minutes


def model_sentence():
    """The reading-time model in words, from the constants above."""
    return (
        f"The reading time counts a chapter's prose at {WORDS_PER_MINUTE} words a minute, "
        f"{MINUTES_PER_EQUATION} minutes for each displayed equation and its code at "
        f"{LINES_PER_MINUTE} lines a minute, without the exercises' solutions and the hidden "
        "setup cells."
    )


def title_of(notebook):
    return notebook.cells[0].source.splitlines()[0].lstrip("# ").strip()


def exercise_rows(path, notebook):
    """Each exercise's number, title, stars, kind and points, from its grading record."""
    rows = []
    for number, exercise in enumerate(exercises.exercises(notebook), start=1):
        title = re.search(r":::\{exercise\}\s*(.*)", exercise.prompt.source)[1]
        record = exercise.record
        rows.append(
            {
                "number": f"{int(path.name[:2])}.{number}",
                "title": STARS.sub("", title).strip(),
                "stars": len(STARS.search(title)[1]) if STARS.search(title) else 0,
                "coding": exercise.is_coding,
                "public": record.get("points", 0),
                "hidden": record.get("hidden_points", 0),
                "hidden_tests": len(record.get("hidden_tests", "").splitlines()),
                "written": exercise.written_points,
            }
        )
    return rows


def chapter_facts(srcdir, with_exercises=True):
    """[{number, stem, title, words, lines, minutes, prompts, exercises}] for every chapter;
    exercises (their grading records) only from the instructor notebooks."""
    facts = []
    for path in chapter_paths(srcdir):
        notebook = nbformat.read(path, as_version=4)
        words, equations, lines, minutes = reading_minutes(notebook)
        prompts = sum(c.source.startswith(":::{exercise}") for c in notebook.cells)
        facts.append(
            {
                "number": int(path.name[:2]),
                "stem": path.stem,
                "title": title_of(notebook),
                "words": words,
                "equations": equations,
                "lines": lines,
                "minutes": minutes,
                "prompts": prompts,
                "exercises": exercise_rows(path, notebook) if with_exercises else [],
            }
        )
    return facts


def rounded_minutes(minutes):
    """Minutes to the nearest 5, as a reader plans: 37.6 -> 40."""
    return max(5, 5 * round(minutes / 5))


def inline_nodes(text):
    """A title's MyST inline maths and code as nodes: "Why $d_v$ is not in `scale`"."""
    paragraph = nodes.paragraph()
    for piece in INLINE.split(text):
        if piece.startswith("$") and len(piece) > 2:
            paragraph += nodes.math(piece[1:-1], piece[1:-1])
        elif piece.startswith("`") and len(piece) > 2:
            paragraph += nodes.literal(piece[1:-1], piece[1:-1])
        elif piece:
            paragraph += nodes.Text(piece)
    return paragraph


def workload_hours(minutes, chosen_exercises):
    """(least, most) hours of reading `minutes` plus doing the exercises."""
    least = minutes + sum(EXERCISE_MINUTES[r["stars"]][0] for r in chosen_exercises)
    most = minutes + sum(EXERCISE_MINUTES[r["stars"]][1] for r in chosen_exercises)
    return least / 60, most / 60


def table(header, rows, widths=None):
    """A docutils table node from a header and rows of cells (str or node)."""
    columns = len(header)
    group = nodes.tgroup(cols=columns)
    for width in widths or [1] * columns:
        group += nodes.colspec(colwidth=width)
    head, body = nodes.thead(), nodes.tbody()
    for target, lines in ((head, [header]), (body, rows)):
        for line in lines:
            row = nodes.row()
            for cell in line:
                entry = nodes.entry()
                entry += cell if isinstance(cell, nodes.Node) else nodes.paragraph(text=str(cell))
                row += entry
            target += row
    group += head
    group += body
    return nodes.table("", group, classes=["course-table"])


class _ChapterDirective(Directive):
    has_content = True

    with_exercises = True

    def facts(self):
        env = self.state.document.settings.env
        for path in chapter_paths(env.srcdir):
            env.note_dependency(str(path))
        return chapter_facts(env.srcdir, self.with_exercises)

    def chapter_link(self, fact):
        """A paragraph holding a link to the chapter's page, as the {doc} role makes."""
        reference = addnodes.pending_xref(
            "",
            refdomain="std",
            reftype="doc",
            reftarget=f"/chapters/{fact['stem']}",
            refexplicit=True,
            refdoc=self.state.document.settings.env.docname,
        )
        reference += nodes.inline(text=f"{fact['number']}. {fact['title']}")
        paragraph = nodes.paragraph()
        paragraph += reference
        return paragraph


class ReadingTimes(_ChapterDirective):
    with_exercises = False  # the home page of the classroom edition shows it too
    option_spec = {"model": directives.flag}  # then a paragraph stating the model

    def run(self):
        rows, total = [], 0
        for fact in self.facts():
            total += rounded_minutes(fact["minutes"])
            rows.append(
                [
                    self.chapter_link(fact),
                    f"{fact['words']:,}",
                    str(fact["equations"]),
                    f"{fact['lines']:,}",
                    f"{rounded_minutes(fact['minutes'])} min",
                    str(fact["prompts"]),
                ]
            )
        rows.append(["all chapters", "", "", "", f"{total // 60} h {total % 60:02d} min", ""])
        out = [
            table(
                ["chapter", "words", "equations", "lines of code", "reading time", "exercises"],
                rows,
                [6, 1, 1, 1, 1, 1],
            )
        ]
        if "model" in self.options:
            out.append(nodes.paragraph(text=model_sentence()))
        return out


def kind(row):
    """Self-checked code is autograded; a written answer is graded by hand."""
    if row["coding"] and row["written"]:
        return "code + written"
    return "code" if row["coding"] else "written"


class ExerciseTables(_ChapterDirective):
    def run(self):
        out = []
        for fact in self.facts():
            section = nodes.rubric(text=f"Chapter {fact['number']}: {fact['title']}")
            rows = [
                [
                    row["number"],
                    inline_nodes(row["title"]),
                    "★" * row["stars"],
                    kind(row),
                    row["public"] or "–",
                    f"{row['hidden']} ({row['hidden_tests']} tests)" if row["hidden"] else "–",
                    row["written"] or "–",
                ]
                for row in fact["exercises"]
            ]
            automatic = sum(r["public"] + r["hidden"] for r in fact["exercises"])
            by_hand = sum(r["written"] for r in fact["exercises"])
            rows.append(["", "total", "", "", "", f"{automatic} automatic", f"{by_hand} by hand"])
            out += [
                section,
                table(
                    [
                        "",
                        "exercise",
                        "difficulty",
                        "kind",
                        "public points",
                        "hidden points",
                        "written points",
                    ],
                    rows,
                    [1, 5, 1, 4, 1, 2, 1],
                ),
            ]
        return out


class Syllabus(_ChapterDirective):
    """Content: lines "Period: chapter numbers" (e.g. "Week 1: 1, 2"), optionally followed by
    "| exercise numbers" (e.g. "| 1.1, 1.3, 2.2") when not every exercise is set, and by
    "| project HOURS h" when the period gives a project that many hours."""

    def chosen(self, line, by_number):
        period, _, rest = line.partition(":")
        numbers, _, rest = rest.partition("|")
        exercise_numbers, _, project = rest.partition("|")
        chosen = [by_number[int(n)] for n in re.findall(r"\d+", numbers)]
        exercises = [r for f in chosen for r in f["exercises"]]
        if exercise_numbers.strip():
            wanted = re.findall(r"\d+\.\d+", exercise_numbers)
            unknown = set(wanted) - {r["number"] for r in exercises}
            if unknown:
                raise self.error(f"{period}: no exercise {sorted(unknown)} in its chapters")
            exercises = [r for r in exercises if r["number"] in wanted]
        hours = re.fullmatch(r"\s*(?:project (\d+(?:\.\d+)?) h)?\s*", project)
        if hours is None:
            raise self.error(f"{period}: after the second | write 'project HOURS h'")
        return period.strip(), chosen, exercises, float(hours[1] or 0)

    def run(self):
        by_number = {fact["number"]: fact for fact in self.facts()}
        periods = [self.chosen(line, by_number) for line in self.content]
        with_project = any(project for *_, project in periods)
        rows = []
        for period, chosen, set_exercises, project in periods:
            minutes = sum(rounded_minutes(f["minutes"]) for f in chosen)
            paragraph = nodes.paragraph()
            for index, fact in enumerate(chosen):
                if index:
                    paragraph += nodes.Text("; ")
                paragraph += self.chapter_link(fact).children[0]
            least, most = workload_hours(minutes, set_exercises)
            row = [
                period,
                paragraph,
                f"{math.floor(minutes / 60)} h {minutes % 60:02d} min",
                f"{len(set_exercises)}: " + ", ".join(r["number"] for r in set_exercises)
                if set_exercises
                else "–",
            ]
            if with_project:
                row.append(f"{project:g} h" if project else "–")
            low, high = f"{least + project:.0f}", f"{most + project:.0f}"
            rows.append([*row, f"{low} to {high} h" if low != high else f"about {low} h"])
        header = ["period", "chapters", "reading", "exercises set"]
        widths = [1, 5, 1, 4]
        if with_project:
            header, widths = [*header, "project"], [*widths, 1]
            total = sum(project for *_, project in periods)
            rows.append(["", "", "", "", f"{total:g} h", ""])
        work = "work (reading, exercises" + (", project)" if with_project else ")")
        return [table([*header, work], rows, [*widths, 2])]


class ColabSetup(_ChapterDirective):
    """colab/setup-times.json (tools/colab_runtime.py `times`) as a paragraph and a table."""

    with_exercises = False

    def run(self):
        env = self.state.document.settings.env
        times_path = pathlib.Path(env.srcdir, "colab", "setup-times.json")
        runtime_path = pathlib.Path(env.srcdir, "colab", "runtime.txt")
        for path in (times_path, runtime_path):
            env.note_dependency(str(path))
        record = json.loads(times_path.read_text())
        versions = colab_runtime.pins(runtime_path)
        shown = ("torch", "numpy", "matplotlib", "transformers", "tokenizers")
        clone = max(chapter["clone_mb"] for chapter in record["chapters"].values())
        about = nodes.paragraph(
            text=f"Colab's runtime as Google published it ({record['runtime']}): "
            + ", ".join(f"{name} {versions[name]}" for name in shown)
            + f". Measured on {record['measured']} in the course's Colab stand-in (those "
            f"versions, on {record['machine']}; Colab's is Python 3.13), with the course cloned "
            f"from a local copy: on Colab, add the download of the clone ({clone:.0f} MB) and "
            "of what the chapter installs."
        )
        rows = []
        for fact in self.facts():
            measured = record["chapters"].get(fact["stem"])
            if measured is None:
                raise self.error(f"colab/setup-times.json has no {fact['stem']}")
            extra = [name for name in measured["installed"] if name != "attention-course"]
            rows.append(
                [
                    self.chapter_link(fact),
                    f"{measured['seconds']:.0f} s",
                    ", ".join(extra) or "the course's package only",
                    f"{measured['installed_mb']:.0f} MB",
                ]
            )
        return [
            about,
            table(
                ["chapter", "setup", "installs, besides the course", "installed"],
                rows,
                [5, 1, 5, 1],
            ),
        ]


class SlideDecks(_ChapterDirective):
    """The lecture slides of every chapter (tools/slides.py), with what each deck holds."""

    with_exercises = False

    def run(self):
        rows = []
        for fact, path in zip(self.facts(), CHAPTERS):
            counts = slides.counts(path)
            link = nodes.reference("", "slides", refuri=f"{slides.FOLDER}/{slides.deck_name(path)}")
            rows.append(
                [
                    self.chapter_link(fact),
                    nodes.paragraph("", "", link),
                    str(counts["slides"]),
                    str(counts["figures"]),
                    str(counts["code"]),
                ]
            )
        return [
            table(["chapter", "deck", "slides", "figures", "code cells"], rows, [6, 1, 1, 1, 1])
        ]


def setup(app):
    app.add_directive("course-reading-times", ReadingTimes)
    app.add_directive("course-exercises", ExerciseTables)
    app.add_directive("course-syllabus", Syllabus)
    app.add_directive("course-colab-setup", ColabSetup)
    app.add_directive("course-slides", SlideDecks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
