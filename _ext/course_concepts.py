"""Each chapter's concept checks on its page, and their exports for learning platforms (a local
Sphinx extension).

- A section "Concept checks" goes just before the chapter's "Exercises" (so the notebooks are
  not edited): an introduction (left out in print: it speaks of buttons), then one group of
  controls per question of concepts/chNN.yml (tools/concepts.py reads them and computes the
  numeric answers with the package). _static/course-concepts.js checks an
  answer in the page and reveals it on request; nothing is sent anywhere. Printed, the questions
  show; their answers only in the instructor edition (tools/pdf.py's `print-instructor`).
- When the build ends, the GIFT, Moodle XML and QTI 1.2 exports are written into
  concept-checks/ of the site (instructors.md links them).
"""

import html
import pathlib
import re

from docutils import nodes
from sphinx.transforms import SphinxTransform

# the one reader of the concept checks (tools/book.py puts tools on the path)
from tools import concepts

CHAPTER = re.compile(r"^chapters/(\d\d)_")
INTRO = (
    "Short questions to check your understanding of this chapter. Answer, press Check to see "
    "whether you are right, or Show answer to read the answer and why. Everything happens in "
    "this page: nothing you type is sent anywhere."
)


def _e(text):
    return html.escape(text, quote=True)


def _choice_html(q):
    rows = []
    for i, option in enumerate(q.options):
        ident = f"{q.anchor}-o{i}"
        rows.append(
            f'<div class="course-concept-option"><input type="radio" id="{ident}" '
            f'name="{q.anchor}" value="{i}"><label for="{ident}">{_e(option)}</label></div>'
        )
    return "".join(rows)


def _numeric_html(q):
    unit = f" ({_e(q.unit)})" if q.unit else ""
    return (
        f'<div class="course-concept-number-field"><label for="{q.anchor}-input">Your answer'
        f'{unit}</label> <input type="text" id="{q.anchor}-input" inputmode="decimal" '
        f'autocomplete="off" spellcheck="false" size="12"></div>'
    )


def _order_html(q):
    choices = '<option value="">–</option>' + "".join(
        f'<option value="{n}">{n}</option>' for n in range(1, len(q.options) + 1)
    )
    rows = []
    for i, step in enumerate(q.options):
        ident = f"{q.anchor}-s{i}"
        rows.append(
            f'<div class="course-concept-step"><select id="{ident}" '
            f'data-position="{q.answer.index(step) + 1}">{choices}</select>'
            f'<label for="{ident}">{_e(step)}</label></div>'
        )
    hint = '<p class="course-concept-hint">Give each step its position: 1 for the first.</p>'
    return hint + "".join(rows)


FIELDS = {"choice": _choice_html, "numeric": _numeric_html, "order": _order_html}


def _data(q):
    """What the script needs to check an answer: the right option, or the value."""
    if q.kind == "choice":
        return f' data-answer="{q.options.index(q.answer)}"'
    if q.kind == "numeric":
        unit = f' data-unit="{_e(q.unit)}"' if q.unit else ""
        return f' data-value="{q.answer!r}" data-tolerance="{q.tolerance!r}"{unit}'
    return ""


def question_html(q):
    """One concept check: a fieldset with its legend, Check and Show answer, a live verdict,
    and the answer with its explanation (hidden until asked for)."""
    return (
        f'<div class="course-concept" id="{q.anchor}" data-kind="{q.kind}"{_data(q)}>'
        f'<fieldset><legend><span class="course-concept-label">Question {q.number}.</span> '
        f"{_e(q.prompt)}</legend>{FIELDS[q.kind](q)}</fieldset>"
        '<div class="course-concept-actions">'
        '<button type="button" class="course-concept-check">Check</button>'
        f'<button type="button" class="course-concept-show" aria-expanded="false" '
        f'aria-controls="{q.anchor}-answer">Show answer</button></div>'
        '<p class="course-concept-verdict" role="status" aria-live="polite"></p>'
        f'<div class="course-concept-answer" id="{q.anchor}-answer" hidden>'
        f"<p><strong>Answer:</strong> {_e(q.shown_answer)}</p>"
        f'<p class="course-concept-explanation">{_e(q.explanation)}</p></div></div>'
    )


def concepts_section(document, chapter):
    """The section "Concept checks" of a chapter, as docutils nodes."""
    section = nodes.section(ids=["concept-checks"], names=["concept checks"])
    section += nodes.title("", "Concept checks")
    section += nodes.paragraph("", INTRO, classes=["course-concepts-intro"])
    body = "".join(question_html(q) for q in concepts.load(chapter))
    section += nodes.raw("", f'<div class="course-concepts">{body}</div>', format="html")
    document.note_implicit_target(section)
    return section


def _exercises_section(document):
    for section in document.findall(nodes.section):
        title = section.next_node(nodes.title)
        if title is not None and title.astext() == "Exercises":
            return section
    return None


class ConceptChecks(SphinxTransform):
    """The concept checks inserted before a chapter's Exercises, while the page is read (so
    that the page's contents list them)."""

    default_priority = 500

    def apply(self, **kwargs):
        match = CHAPTER.match(self.env.docname)
        exercises = _exercises_section(self.document) if match else None
        if exercises is None:
            return
        exercises.parent.insert(
            exercises.parent.index(exercises), concepts_section(self.document, int(match[1]))
        )


def write_exports(app, exception):
    """GIFT, Moodle XML and QTI 1.2 into the site's concept-checks/ folder."""
    if exception or app.builder.format != "html" or "classroom" in app.config.course_edition:
        return  # the classroom edition, hosted for students, has no instructors' files
    concepts.write_exports(pathlib.Path(app.outdir, concepts.FOLDER))


def setup(app):
    app.add_transform(ConceptChecks)
    app.connect("build-finished", write_exports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
