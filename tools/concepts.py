"""The chapters' concept checks: read from concepts/chNN.yml, numeric answers computed, and
exported for the learning platforms instructors use.

    python -m tools.concepts [OUTPUT_DIR]     (default _build/html/concept-checks)

Each chapter's file lists 6-10 questions of three kinds (concepts/README.md):
- choice: options and the text of the right one, shown in a fixed shuffle per question;
- numeric: `given` numbers, a prompt that names them as {name}, and an `answer` that is an
  expression evaluated here by calling the package (`ac` is attention_course; `torch` and
  `math` are there too), never a typed number; a tolerance;
- order: steps listed in their right order, shown shuffled (a fixed shuffle per question, no
  step in its right place).

The exports (write_exports): GIFT and Moodle XML (one file each, one question category per
chapter), and a QTI 1.2 zip that Canvas imports (one quiz per chapter, in one package). An
ordering question goes to the platforms as a matching question: each step to its position.
"""

import dataclasses
import functools
import html
import io
import math
import pathlib
import random
import sys
import zipfile
from xml.etree import ElementTree as ET

import yaml

from tools import ROOT

SOURCE = ROOT / "concepts"
KINDS = ("choice", "numeric", "order")
FOLDER = "concept-checks"
GIFT_FILE = "attention-course-concept-checks.gift.txt"
MOODLE_FILE = "attention-course-concept-checks.moodle.xml"
QTI_FILE = "attention-course-concept-checks.qti.zip"
POSITIONS = ("1st", "2nd", "3rd", "4th", "5th", "6th", "7th", "8th")


@dataclasses.dataclass(frozen=True)
class Question:
    """One concept check, ready to show: its prompt with the given numbers filled in, its
    options (choice), shown steps (order) or computed value (numeric)."""

    chapter: int
    number: int
    id: str
    kind: str
    prompt: str
    explanation: str
    options: tuple = ()  # choice: the options; order: the steps as shown (shuffled)
    answer: object = None  # choice: the right option; numeric: the value; order: the steps
    tolerance: float = 0.0
    unit: str = ""
    digits: int = 3
    given: dict = dataclasses.field(default_factory=dict)

    @property
    def anchor(self):
        """The question's id on its page, and its name in the exports."""
        return f"cc-{self.chapter:02d}-{self.number}"

    @property
    def shown_answer(self):
        """The answer as a reader reads it."""
        if self.kind == "numeric":
            number = format_number(self.answer, self.digits)
            return f"{number} {self.unit}" if self.unit else number
        if self.kind == "order":
            return " → ".join(self.answer)
        return self.answer


def format_number(value, digits):
    """`value` rounded to `digits` decimals, without trailing zeros (1 234.5 as 1234.5)."""
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def decimals(tolerance):
    """How many decimals an answer within `tolerance` is shown with (0 for an exact one)."""
    return max(0, -math.floor(math.log10(tolerance))) if tolerance > 0 else 0


def evaluate(expression, given):
    """A numeric answer: `expression` evaluated with the package, torch, math and `given`."""
    import torch

    import attention_course

    namespace = {"ac": attention_course, "torch": torch, "math": math, **given}
    value = eval(expression, namespace)  # the course's own files, read as code
    return float(value)


def shuffled(steps, key):
    """The steps in a fixed order of their own for this question in which no step stands in
    its right place (so that the right order is never half given away)."""
    generator = random.Random(key)
    order = list(steps)
    while any(shown == right for shown, right in zip(order, steps)):
        generator.shuffle(order)
    return tuple(order)


def arranged(options, key):
    """A choice question's options in a fixed order of their own for this question: the
    files list the right answer where it was written (often first); the readers and the
    platforms see it anywhere, the same place on every build."""
    order = list(options)
    random.Random(f"options:{key}").shuffle(order)
    return tuple(order)


def _question(chapter, number, entry):
    """A Question from one entry of a chapter's file."""
    kind, given = entry["kind"], entry.get("given", {})
    if kind not in KINDS:
        raise ValueError(f"chapter {chapter}, {entry['id']}: unknown kind {kind!r}")
    common = dict(
        chapter=chapter,
        number=number,
        id=entry["id"],
        kind=kind,
        prompt=" ".join((entry["prompt"].format(**given) if given else entry["prompt"]).split()),
        explanation=" ".join(entry["explanation"].split()),
        given=given,
    )
    texts = entry.get("options", entry.get("steps", []))
    if not all(isinstance(text, str) for text in texts):
        raise ValueError(f"chapter {chapter}, {entry['id']}: an option is not text: {texts}")
    if kind == "choice":
        options = arranged(entry["options"], f"{chapter}:{entry['id']}")
        return Question(**common, options=options, answer=entry["answer"])
    if kind == "order":
        steps = tuple(entry["steps"])
        return Question(**common, options=shuffled(steps, entry["id"]), answer=steps)
    return Question(
        **common,
        answer=evaluate(entry["answer"], given),
        tolerance=float(entry["tolerance"]),
        unit=entry.get("unit", ""),
        digits=decimals(float(entry["tolerance"])),
    )


def chapter_files():
    """concepts/ch01.yml ... in chapter order."""
    return sorted(SOURCE.glob("ch[0-9][0-9].yml"))


@functools.cache
def load(chapter):
    """Chapter `chapter`'s questions, numeric answers computed."""
    data = yaml.safe_load((SOURCE / f"ch{chapter:02d}.yml").read_text())
    if data["chapter"] != chapter:
        raise ValueError(f"ch{chapter:02d}.yml says it is chapter {data['chapter']}")
    return tuple(_question(chapter, n, e) for n, e in enumerate(data["questions"], 1))


def load_all():
    """{chapter number: its questions} for every chapter with a file."""
    return {int(path.stem[2:]): load(int(path.stem[2:])) for path in chapter_files()}


# ----------------------------------------------------------------------------- GIFT (Moodle)

GIFT_SPECIAL = "~=#{}:\\"


def gift_text(text):
    """Text escaped for GIFT: its special characters behind a backslash."""
    return "".join("\\" + c if c in GIFT_SPECIAL else c for c in text)


def _gift_answers(q):
    if q.kind == "choice":
        marks = [("=" if o == q.answer else "~") + gift_text(o) for o in q.options]
        return " ".join(marks)
    if q.kind == "numeric":
        # the page's value and tolerance, so that the page and the platforms accept the same
        return f"#{q.answer!r}:{q.tolerance!r}"
    pairs = [f"={gift_text(step)} -> {POSITIONS[i]}" for i, step in enumerate(q.answer)]
    return " ".join(pairs)


def gift_question(q):
    """One question in GIFT, with the explanation as its general feedback (####)."""
    prompt = q.prompt + (" Match each step to its position." if q.kind == "order" else "")
    return (
        f"::{q.anchor}::{gift_text(prompt)} {{\n{_gift_answers(q)}\n"
        f"####{gift_text(q.explanation)}\n}}\n"
    )


def gift(chapters, titles):
    """Every chapter's questions in GIFT, one category per chapter."""
    parts = []
    for chapter, questions in chapters.items():
        parts.append(f"$CATEGORY: $course$/{category(chapter, titles)}\n\n")
        parts += [gift_question(q) + "\n" for q in questions]
    return "".join(parts)


def category(chapter, titles):
    """The question category (bank) of a chapter."""
    return f"Attention course/Chapter {chapter:02d}. {titles.get(chapter, '')}".rstrip(". ")


# ----------------------------------------------------------------------------- Moodle XML


def _text(parent, tag, text, fmt="html"):
    element = ET.SubElement(parent, tag, {"format": fmt} if fmt else {})
    ET.SubElement(element, "text").text = text
    return element


def _moodle_answers(element, q):
    if q.kind == "choice":
        for option in q.options:
            answer = _text(element, "answer", html.escape(option))
            answer.set("fraction", "100" if option == q.answer else "0")
        ET.SubElement(element, "single").text = "true"
        ET.SubElement(element, "shuffleanswers").text = "1"
        ET.SubElement(element, "answernumbering").text = "abc"
    elif q.kind == "numeric":
        answer = _text(element, "answer", repr(q.answer), fmt="moodle_auto_format")
        answer.set("fraction", "100")
        ET.SubElement(answer, "tolerance").text = repr(q.tolerance)
    else:
        for i, step in enumerate(q.answer):
            sub = _text(element, "subquestion", html.escape(step))
            ET.SubElement(ET.SubElement(sub, "answer"), "text").text = POSITIONS[i]
        ET.SubElement(element, "shuffleanswers").text = "1"


MOODLE_TYPES = {"choice": "multichoice", "numeric": "numerical", "order": "matching"}


def moodle_xml(chapters, titles):
    """Every chapter's questions as a Moodle XML quiz file, one category per chapter."""
    quiz = ET.Element("quiz")
    for chapter, questions in chapters.items():
        head = ET.SubElement(quiz, "question", {"type": "category"})
        _text(head, "category", f"$course$/{category(chapter, titles)}", fmt=None)
        for q in questions:
            element = ET.SubElement(quiz, "question", {"type": MOODLE_TYPES[q.kind]})
            _text(element, "name", q.anchor, fmt=None)
            prompt = q.prompt + (" Match each step to its position." if q.kind == "order" else "")
            _text(element, "questiontext", html.escape(prompt))
            _text(element, "generalfeedback", html.escape(q.explanation))
            ET.SubElement(element, "defaultgrade").text = "1"
            _moodle_answers(element, q)
    ET.indent(quiz)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(quiz, encoding="unicode")


# ----------------------------------------------------------------------------- QTI 1.2 (Canvas)

QTI_NS = "http://www.imsglobal.org/xsd/ims_qtiasiv1p2"
CANVAS_TYPES = {
    "choice": "multiple_choice_question",
    "numeric": "numerical_question",
    "order": "matching_question",
}


def _field(parent, label, entry):
    field = ET.SubElement(parent, "qtimetadatafield")
    ET.SubElement(field, "fieldlabel").text = label
    ET.SubElement(field, "fieldentry").text = entry


def _material(parent, text):
    material = ET.SubElement(parent, "material")
    ET.SubElement(material, "mattext", {"texttype": "text/plain"}).text = text


def _choices(parent, ident, text=None):
    """A single-choice response (its text first, if any) and its list of choices."""
    response = ET.SubElement(parent, "response_lid", {"ident": ident, "rcardinality": "Single"})
    if text is not None:
        _material(response, text)
    return response, ET.SubElement(response, "render_choice")


def _set_score(processing, condition_of, score, action="Set"):
    condition = ET.SubElement(processing, "respcondition", {"continue": "No"})
    condition_of(ET.SubElement(condition, "conditionvar"))
    ET.SubElement(condition, "setvar", {"action": action, "varname": "SCORE"}).text = score


def _qti_choice(presentation, processing, q):
    _, render = _choices(presentation, "response1")
    for i, option in enumerate(q.options):
        label = ET.SubElement(render, "response_label", {"ident": f"{q.anchor}-{i}"})
        _material(label, option)
    right = f"{q.anchor}-{q.options.index(q.answer)}"
    _set_score(processing, lambda c: _equal(c, "response1", right), "100")


def _equal(parent, respident, text):
    ET.SubElement(parent, "varequal", {"respident": respident}).text = text


def _qti_numeric(presentation, processing, q):
    response = ET.SubElement(presentation, "response_str", {"ident": "response1"})
    response.set("rcardinality", "Single")
    ET.SubElement(
        ET.SubElement(response, "render_fib", {"fibtype": "Decimal"}),
        "response_label",
        {"ident": "answer1"},
    )

    def in_range(condition):
        ET.SubElement(condition, "vargte", {"respident": "response1"}).text = repr(
            q.answer - q.tolerance
        )
        ET.SubElement(condition, "varlte", {"respident": "response1"}).text = repr(
            q.answer + q.tolerance
        )

    _set_score(processing, in_range, "100")


def _qti_order(presentation, processing, q):
    share = f"{100 / len(q.answer):.4f}"
    for i, step in enumerate(q.answer):
        ident = f"response_{q.anchor}-{i}"
        _, render = _choices(presentation, ident, step)
        for j in range(len(q.answer)):
            label = ET.SubElement(render, "response_label", {"ident": f"{q.anchor}-p{j}"})
            _material(label, POSITIONS[j])
        _set_score(
            processing,
            lambda c, r=ident, i=i: _equal(c, r, f"{q.anchor}-p{i}"),
            share,
            action="Add",
        )


def qti_item(section, q):
    """One question as a QTI 1.2 item with Canvas's metadata."""
    item = ET.SubElement(section, "item", {"ident": q.anchor, "title": q.anchor})
    meta = ET.SubElement(ET.SubElement(item, "itemmetadata"), "qtimetadata")
    _field(meta, "question_type", CANVAS_TYPES[q.kind])
    _field(meta, "points_possible", "1.0")
    presentation = ET.SubElement(item, "presentation")
    prompt = q.prompt + (" Match each step to its position." if q.kind == "order" else "")
    _material(presentation, prompt)
    processing = ET.SubElement(item, "resprocessing")
    outcomes = ET.SubElement(processing, "outcomes")
    ET.SubElement(
        outcomes,
        "decvar",
        {"maxvalue": "100", "minvalue": "0", "varname": "SCORE", "vartype": "Decimal"},
    )
    {"choice": _qti_choice, "numeric": _qti_numeric, "order": _qti_order}[q.kind](
        presentation, processing, q
    )
    feedback = ET.SubElement(item, "itemfeedback", {"ident": "general_fb"})
    _material(ET.SubElement(feedback, "flow_mat"), q.explanation)
    ET.SubElement(
        processing, "displayfeedback", {"feedbacktype": "Response", "linkrefid": "general_fb"}
    )


def qti_assessment(chapter, questions, titles):
    """One chapter as a QTI 1.2 assessment (a Canvas quiz)."""
    root = ET.Element("questestinterop", {"xmlns": QTI_NS})
    title = category(chapter, titles).split("/", 1)[1]
    assessment = ET.SubElement(root, "assessment", {"ident": f"cc-{chapter:02d}", "title": title})
    section = ET.SubElement(assessment, "section", {"ident": "root_section"})
    for q in questions:
        qti_item(section, q)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")


def qti_manifest(chapters):
    """The package's imsmanifest.xml: one resource (assessment file) per chapter."""
    root = ET.Element(
        "manifest",
        {
            "identifier": "attention-course-concept-checks",
            "xmlns": "http://www.imsglobal.org/xsd/imsccv1p1/imscp_v1p1",
        },
    )
    ET.SubElement(root, "organizations")
    resources = ET.SubElement(root, "resources")
    for chapter in chapters:
        ident = f"cc-{chapter:02d}"
        resource = ET.SubElement(
            resources,
            "resource",
            {"identifier": ident, "type": "imsqti_xmlv1p2", "href": f"{ident}/{ident}.xml"},
        )
        ET.SubElement(resource, "file", {"href": f"{ident}/{ident}.xml"})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")


def qti_zip(chapters, titles):
    """The QTI 1.2 package as bytes: imsmanifest.xml and one assessment per chapter."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("imsmanifest.xml", qti_manifest(chapters))
        for chapter, questions in chapters.items():
            ident = f"cc-{chapter:02d}"
            archive.writestr(f"{ident}/{ident}.xml", qti_assessment(chapter, questions, titles))
    return buffer.getvalue()


# ----------------------------------------------------------------------------- writing


def chapter_titles():
    """{chapter number: its title}, from the notebooks' first headings."""
    import nbformat

    titles = {}
    for path in sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        first = next(c for c in cells if c.cell_type == "markdown")
        titles[int(path.name[:2])] = first.source.splitlines()[0].lstrip("# ").strip()
    return titles


def write_exports(folder):
    """The three exports written into `folder`; their paths."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chapters, titles = load_all(), chapter_titles()
    written = {
        GIFT_FILE: gift(chapters, titles).encode(),
        MOODLE_FILE: moodle_xml(chapters, titles).encode(),
        QTI_FILE: qti_zip(chapters, titles),
    }
    for name, data in written.items():
        (folder / name).write_bytes(data)
    return [folder / name for name in written]


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else ROOT / "_build" / "html" / FOLDER
    for path in write_exports(target):
        print(path)
