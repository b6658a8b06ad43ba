"""Build the exam question bank, an instructor edition only (`make exam`), and a paper.

    python -m tools.exam [--out DIR] [--source FILE] [--paper ID,ID,...] [--no-pdf]
    # DIR: _build/instructor

The source, instructor/exam_bank.yml, holds written questions per Part with model answers and
rubrics (the chapters' {grading-rubric} format, tools/exercises.py). The numbers of the model
answers and rubrics are computed here, at build time, by the course's package: each question's
`values` are Python expressions, and [[name]] or [[name:format]] prints one. The bank is written
to DIR/exam-bank.html (with the MathJax it needs, offline) and printed to DIR/exam-bank.pdf with
the book's Chromium (tools/pdf.py). Beside it, DIR/exam-paper.html (and .pdf) is a paper to set:
the questions only, with their points and estimated minutes, no model answer and no rubric;
--paper chooses its questions by id (all of the bank's by default), numbered in that order.

The rule: the repository is public, so the bank is not secret, but it is kept out of every
published artefact. _config.yml excludes instructor/ from the book, and nothing that builds the
website, its PDFs, the learner, classroom or graders' editions reads it (tests/test_exam.py
checks that no question reaches them). instructors.md says what to do with questions that must
stay unseen.
"""

import argparse
import concurrent.futures
import dataclasses
import html
import math
import pathlib
import re
import shutil
import sysconfig

import yaml

from tools import ROOT, exercises, pdf

SOURCE = ROOT / "instructor" / "exam_bank.yml"
OUTPUT = ROOT / "_build" / "instructor"
PAGE, PRINTED = "exam-bank.html", "exam-bank.pdf"
PAPER, PAPER_PRINTED = "exam-paper.html", "exam-paper.pdf"
MATHJAX = pathlib.Path(sysconfig.get_path("purelib"), "sphinx-mathjax-offline", "static", "mathjax")
VALUE = re.compile(r"\[\[(\w+)(?::([^\]]*))?\]\]")
STYLE = """
body { font-family: sans-serif; max-width: 48rem; margin: 2rem auto; line-height: 1.45; }
.question { border-top: 1px solid #999; margin-top: 1.5rem; }
.answer, .rubric { margin-left: 1rem; padding-left: 0.75rem; border-left: 0.25rem solid #0072b2; }
.rubric { border-left-color: #e69f00; }
code { font-size: 0.95em; }
@media print { .question { break-inside: avoid-page; } }
"""


@dataclasses.dataclass
class Question:
    """One question of the bank, its numbers filled in: `values` {name: value}."""

    id: str
    part: int
    points: float
    minutes: int
    question: str
    answer: str
    rubric_text: str
    values: dict

    @property
    def rubric(self):
        return exercises.parse_rubric(self.rubric_text)


def course_parts():
    """The captions of the course's Parts in _toc.yml (not the back matter), in order."""
    return [caption for caption in pdf.parts().values() if caption.startswith("Part ")]


def evaluate(expressions):
    """The values of a question's expressions, in order, each seeing the package (`ac`), torch,
    math and the values before it."""
    import torch

    import attention_course

    names = {"ac": attention_course, "torch": torch, "math": math}
    values = {}
    for name, expression in expressions.items():
        values[name] = eval(str(expression), {**names, **values})  # noqa: S307 (our own file)
    return values


def fill(text, values, where):
    def replace(match):
        name, spec = match[1], match[2] or ""
        if name not in values:
            raise ValueError(f"{where}: no value {name!r}")
        return format(values[name], spec)

    return VALUE.sub(replace, text)


def read(source=SOURCE):
    """The bank's questions, their numbers computed, each checked: a model answer, a rubric
    whose points add up to the question's, a Part of the book, an estimate of its minutes."""
    questions = []
    parts = len(course_parts())
    for entry in yaml.safe_load(source.read_text())["questions"]:
        where = f"exam question {entry['id']}"
        values = evaluate(entry.get("values") or {})
        question = Question(
            entry["id"],
            entry["part"],
            entry["points"],
            entry.get("minutes"),
            fill(entry["question"].strip(), values, where),
            fill(entry["answer"].strip(), values, where),
            fill(entry["rubric"].strip(), values, where),
            values,
        )
        if not question.answer or not 1 <= question.part <= parts:
            raise ValueError(f"{where}: a model answer and a Part from 1 to {parts} are needed")
        if exercises.rubric_points(question.rubric) != question.points:
            raise ValueError(f"{where}: its rubric's points do not add up to {question.points}")
        if not isinstance(question.minutes, int) or question.minutes <= 0:
            raise ValueError(f"{where}: its minutes, a whole number above 0, are needed")
        questions.append(question)
    if len({q.id for q in questions}) != len(questions):
        raise ValueError("two exam questions share an id")
    return questions


def markdown_html(text):
    """Markdown with $...$ and $$...$$ maths as HTML that MathJax typesets."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    def maths(content, options):
        if options.get("display_mode"):
            return f"\\[{html.escape(content)}\\]"
        return f"\\({html.escape(content)}\\)"

    return MarkdownIt("commonmark").use(dollarmath_plugin, renderer=maths).render(text)


def worth(question):
    """A question's points and estimated minutes, as its heading shows them."""
    return f"{question.points:g} points, about {question.minutes} minutes"


def html_page(title, body):
    """A whole HTML page: the style, MathJax (offline) and the body's pieces."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{STYLE}</style>"
        "<script>window.MathJax = {tex: {inlineMath: [['\\\\(', '\\\\)']]}};</script>"
        '<script src="mathjax/tex-chtml-full.js"></script></head><body>'
        + "\n".join(body)
        + "</body></html>"
    )


def page(questions):
    """The bank as one HTML page: per Part (its caption from _toc.yml), each question with its
    points and minutes, its model answer and its rubric."""
    captions = course_parts()
    info = pdf.book_info()
    body = [
        f"<h1>Exam question bank</h1><p><em>{html.escape(info['title'])}</em>, version "
        f"{html.escape(str(info['version']))}. Instructor edition: not for students; "
        "kept out of every published edition of the course (instructors.md). The minutes are "
        "an estimate for a prepared student with a calculator, about 3 to 4 minutes a point.</p>"
    ]
    for number, caption in enumerate(captions, 1):
        chosen = [q for q in questions if q.part == number]
        if not chosen:
            continue
        body.append(f"<h2>{html.escape(caption)}</h2>")
        for index, q in enumerate(chosen, 1):
            title = f"Question {number}.{index} ({worth(q)})"
            body.append(
                f'<section class="question" id="{q.id}"><h3>{title}</h3>'
                f'<p class="question-id">id for a paper: <code>{q.id}</code></p>'
                f"{markdown_html(q.question)}"
                f'<div class="answer"><h4>Model answer</h4>{markdown_html(q.answer)}</div>'
                f'<div class="rubric"><h4>{exercises.rubric_title(q.rubric)}</h4>'
                f"{markdown_html(q.rubric_text)}</div></section>"
            )
    return html_page("Exam question bank", body)


def paper(questions):
    """A paper to set: the questions in the order given, numbered from 1, each with its points
    and minutes; no model answer, no rubric."""
    points = sum(q.points for q in questions)
    minutes = sum(q.minutes for q in questions)
    body = [
        f"<h1>Examination: {html.escape(pdf.book_info()['title'])}</h1>"
        f"<p>{len(questions)} questions, {points:g} points; about {minutes} minutes. "
        "Answer every question; show your working. A calculator is allowed.</p>"
    ]
    for number, q in enumerate(questions, 1):
        body.append(
            f'<section class="question" id="{q.id}"><h3>Question {number} ({worth(q)})</h3>'
            f"{markdown_html(q.question)}</section>"
        )
    return html_page("Examination", body)


def chosen(questions, ids=None):
    """The questions of a paper: those whose ids are given, in that order (all by default)."""
    if not ids:
        return questions
    by_id = {q.id: q for q in questions}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise ValueError(f"no exam question {', '.join(unknown)} in the bank")
    return [by_id[i] for i in ids]


def print_pdf(folder, name=PAGE, printed_name=PRINTED):
    """folder/name (the bank's page by default) printed to folder/printed_name with the book's
    Chromium."""
    from playwright.sync_api import sync_playwright

    executable = pdf.require_printer()

    def printed():
        with pdf.served(folder) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, args=pdf.CHROMIUM_FLAGS
            )
            opened = pdf.open_for_print(browser, base + name)
            opened.emulate_media(media="print")
            margin = {side: f"{mm}mm" for side, mm in pdf.MARGIN_MM.items()}
            opened.pdf(
                path=str(folder / printed_name), format="A4", print_background=True, margin=margin
            )
            browser.close()

    # as tools/pdf.py: Playwright's sync API in a thread with no running asyncio loop
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(printed).result()
    return folder / printed_name


def build(out=OUTPUT, pdfs=True, source=SOURCE, paper_ids=None):
    """The bank's page and a paper (and their PDFs) in `out`; the questions of the bank."""
    questions = read(source)
    # the paper's questions first: an unknown id stops the build before anything is written
    set_questions = chosen(questions, paper_ids)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(MATHJAX, out / "mathjax", dirs_exist_ok=True)
    (out / PAGE).write_text(page(questions))
    (out / PAPER).write_text(paper(set_questions))
    print(f"exam bank: {len(questions)} questions, {out / PAGE}")
    print(f"exam paper: {len(set_questions)} questions, {out / PAPER}")
    if pdfs:
        print(f"exam bank: {print_pdf(out)}")
        print(f"exam paper: {print_pdf(out, PAPER, PAPER_PRINTED)}")
    return questions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=OUTPUT)
    parser.add_argument("--source", type=pathlib.Path, default=SOURCE, help="a bank of your own")
    parser.add_argument("--paper", help="the paper's question ids, comma-separated (default all)")
    parser.add_argument("--no-pdf", action="store_true")
    args = parser.parse_args(argv)
    ids = [i.strip() for i in args.paper.split(",") if i.strip()] if args.paper else None
    build(args.out.resolve(), pdfs=not args.no_pdf, source=args.source.resolve(), paper_ids=ids)


if __name__ == "__main__":
    main()
