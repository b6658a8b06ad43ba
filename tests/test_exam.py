"""The exam question bank (`make exam`, tools/exam.py): it builds, each question has a model
answer and a rubric whose points add up to the question's, its numbers are the package's, and no
question reaches a published artefact: the website's HTML and PDFs (the session's build,
tests/conftest.py), the learner notebooks, the classroom edition's chapters and the graders'
copies."""

import re

import nbformat
import pytest
import yaml
from bs4 import BeautifulSoup

from helpers.browser import did_not_run
from tools import ROOT, classroom, exam, exercises, learner, pdf

CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    """The bank built into a folder of its own: (folder, questions)."""
    folder = tmp_path_factory.mktemp("exam")
    return folder, exam.build(folder, pdfs=not pdf.missing_printer_packages())


def prose(text):
    """The stretches of a text between its maths, its code and its emphasis, each on one line:
    what every rendering (HTML, a PDF's text, a notebook) keeps as written."""
    pieces = re.split(r"\$[^$]*\$|`[^`]*`|\*+", " ".join(text.split()))
    return [piece.strip(" ,.;:()") for piece in pieces if len(piece.strip(" ,.;:()")) > 30]


@pytest.fixture(scope="module")
def fragments(bank):
    """Distinctive pieces of every question: its longer stretches of prose."""
    found = {question.id: prose(question.question) for question in bank[1]}
    assert all(found.values()), "a question too short to be looked for"
    return found


def squeezed(text):
    return "".join(text.split())


def test_every_question_has_an_answer_and_a_rubric_that_adds_up(bank):
    questions = bank[1]
    assert {q.part for q in questions} == set(range(1, len(exam.course_parts()) + 1)), "every Part"
    # enough for two exams and a resit: at least four questions per Part, 24 in all
    for number in range(1, len(exam.course_parts()) + 1):
        assert sum(q.part == number for q in questions) >= 4, f"Part {number}"
    assert len(questions) >= 24
    for question in questions:
        assert question.answer and question.rubric
        assert exercises.rubric_points(question.rubric) == question.points
        assert "[[" not in question.answer + question.rubric_text + question.question


def test_every_question_has_its_minutes_in_the_stated_band(bank):
    """Every question of the source has whole minutes, between the 2.5 and 4.5 minutes a point
    that the bank's header states, and the page shows them beside the points."""
    source = exam.SOURCE.read_text()
    assert "between 2.5 and 4.5 minutes a point" in " ".join(
        line.lstrip("# ") for line in source.splitlines() if line.startswith("#")
    )
    page = " ".join(
        BeautifulSoup((bank[0] / exam.PAGE).read_text(), "html.parser").get_text().split()
    )
    for entry in yaml.safe_load(source)["questions"]:
        minutes, points = entry.get("minutes"), entry["points"]
        assert isinstance(minutes, int) and minutes > 0, entry["id"]
        assert 2.5 <= minutes / points <= 4.5, f"{entry['id']}: {minutes / points:.2f} a point"
        assert f"({points:g} points, about {minutes} minutes)" in page, entry["id"]


def test_a_question_without_minutes_is_refused(tmp_path):
    source = yaml.safe_load(exam.SOURCE.read_text())
    source["questions"] = source["questions"][:1]
    del source["questions"][0]["minutes"]
    path = tmp_path / "bank.yml"
    path.write_text(yaml.safe_dump(source))
    with pytest.raises(ValueError, match="minutes"):
        exam.read(path)


def test_levels_are_half_points_and_zero_levels_name_a_wrong_answer(bank):
    """Whole or half points only (instructors.md), and no zero level that is only "no answer",
    "none" or "neither": it names what a wrong answer says."""
    for question in bank[1]:
        for criterion in question.rubric:
            for name, points, text in criterion.levels:
                assert (2 * points).is_integer(), f"{question.id}: {points} points"
                if name == "Zero":
                    assert not re.fullmatch(r"(no|none|neither)\b[^,]*", text.strip(" .")), (
                        f"{question.id}: {text!r}"
                    )


def test_a_rubric_that_does_not_add_up_is_refused(tmp_path):
    source = yaml.safe_load(exam.SOURCE.read_text())
    source["questions"] = source["questions"][:1]
    source["questions"][0]["points"] += 1
    path = tmp_path / "bank.yml"
    path.write_text(yaml.safe_dump(source))
    with pytest.raises(ValueError, match="do not add up"):
        exam.read(path)


def test_the_numbers_are_the_packages(bank):
    """Every printed number comes from a value the build computed: the page shows it as its
    format asks, and the source types none of those numbers itself."""
    import torch

    import attention_course as ac

    questions = {q.id: q for q in bank[1]}
    cache = questions["gqa-cache"]
    expected = ac.kv_cache_bytes(
        batch_size=4, seq_len=4096, num_layers=24, num_kv_heads=4, head_dim=64
    )
    assert cache.values["gqa"] == expected / 2**30 and f"{expected / 2**30:.3f} GiB" in cache.answer
    pooled = questions["pooling-by-hand"]
    prediction = ac.nadaraya_watson(
        torch.tensor([1.0]), torch.tensor([0.0, 1.0, 3.0]), torch.tensor([1.0, 2.0, 4.0]), 1.0
    )[0]
    assert f"{float(prediction):.3f}" in pooled.answer
    source = exam.SOURCE.read_text()
    assert f"{float(prediction):.3f}" not in source and f"{expected / 2**30:.3f}" not in source
    page = (bank[0] / exam.PAGE).read_text()
    for question in bank[1]:
        assert f'id="{question.id}"' in page and exercises.rubric_title(question.rubric) in page


def test_the_bank_is_printed(bank):
    missing = pdf.missing_printer_packages()
    if missing:
        did_not_run("no printer: the exam bank's PDF was NOT tested")
    import pypdfium2

    document = pypdfium2.PdfDocument(bank[0] / exam.PRINTED)
    text = squeezed("".join(page.get_textpage().get_text_range() for page in document))
    for question in bank[1]:
        assert squeezed(exercises.rubric_title(question.rubric)) in text
        assert all(squeezed(piece) in text for piece in prose(question.question))


def answer_fragments(questions):
    """The longer stretches of prose of every model answer and every rubric level."""
    found = []
    for question in questions:
        found += prose(question.answer)
        for criterion in question.rubric:
            found += [piece for level in criterion.levels for piece in prose(level[2])]
    return found


def test_the_paper_holds_every_question_and_no_answer(bank, fragments):
    """The paper (exam-paper.html): every question of the bank with its points and minutes, the
    totals of the source, and no model answer, rubric or rubric level."""
    source = yaml.safe_load(exam.SOURCE.read_text())["questions"]
    text = " ".join(
        BeautifulSoup((bank[0] / exam.PAPER).read_text(), "html.parser").get_text().split()
    )
    for number, entry in enumerate(source, 1):
        heading = (
            f"Question {number} ({entry['points']:g} points, about {entry['minutes']} minutes)"
        )
        assert heading in text, entry["id"]
    for question, lines in fragments.items():
        assert all(line in text for line in lines), question
    points, minutes = sum(e["points"] for e in source), sum(e["minutes"] for e in source)
    assert f"{len(source)} questions, {points:g} points; about {minutes} minutes" in text
    assert "Model answer" not in text and "Rubric" not in text and "Full (" not in text
    leaked = [piece for piece in answer_fragments(bank[1]) if piece in text]
    assert not leaked, leaked[:3]


def test_a_paper_of_chosen_questions(bank):
    questions = bank[1]
    ids = [questions[5].id, questions[0].id]
    page = exam.paper(exam.chosen(questions, ids))
    text = " ".join(BeautifulSoup(page, "html.parser").get_text().split())
    # the two chosen questions in the order given, numbered 1 and 2, and no other question
    first, second = (text.index(prose(questions[i].question)[0]) for i in (5, 0))
    assert first < second and text.startswith("Examination") and "2 questions" in text
    assert text.index("Question 1 (") < first < text.index("Question 2 (") < second
    assert not [line for line in prose(questions[1].question) if line in text]
    with pytest.raises(ValueError, match="no exam question"):
        exam.chosen(questions, ["no-such-question"])


def test_the_paper_is_printed(bank):
    if pdf.missing_printer_packages():
        did_not_run("no printer: the exam paper's PDF was NOT tested")
    import pypdfium2

    document = pypdfium2.PdfDocument(bank[0] / exam.PAPER_PRINTED)
    text = squeezed("".join(page.get_textpage().get_text_range() for page in document))
    for question in bank[1]:
        assert all(squeezed(piece) in text for piece in prose(question.question)), question.id
        assert squeezed(f"{question.points:g} points, about {question.minutes} minutes") in text
    assert not [p for p in answer_fragments(bank[1]) if squeezed(p) in text]
    assert squeezed("Model answer") not in text and squeezed("Rubric (") not in text


def test_the_book_excludes_the_bank():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert exam.SOURCE.parent.name in config["exclude_patterns"]


def test_no_question_is_on_the_website_or_in_its_pdfs(site, fragments):
    pages = " ".join(
        " ".join(BeautifulSoup(path.read_text(), "html.parser").get_text().split())
        for path in site.rglob("*.html")
    )
    sources = " ".join(
        p.read_text(errors="ignore") for p in (site / "_sources").rglob("*") if p.is_file()
    )
    for question, lines in fragments.items():
        for line in lines:
            assert " ".join(line.split()) not in pages, f"{question} on the website"
            assert line not in sources, f"{question} in the website's sources"
    if pdf.missing_printer_packages():
        did_not_run("no printer: the website's PDFs were NOT searched for exam questions")
    import pypdfium2

    for name in pdf.EDITIONS.values():
        document = pypdfium2.PdfDocument(site / "pdf" / name)
        text = squeezed("".join(page.get_textpage().get_text_range() for page in document))
        for question, lines in fragments.items():
            assert not [line for line in lines if squeezed(line) in text], f"{question}: {name}"


def test_no_question_is_in_the_learner_classroom_or_graders_copies(fragments):
    texts = [
        "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
        for path in learner.OUTPUT.glob("*.ipynb")
    ]
    for chapter in CHAPTERS:
        notebook = nbformat.read(chapter, as_version=4)
        copies = [
            classroom.chapter_without_solutions(chapter).cells,
            exercises.nbgrader_cells(notebook),
            exercises.otter_cells(notebook, "name: x"),
            notebook.cells,  # the instructor notebooks, from which every edition is made
        ]
        texts += ["\n".join(cell.source for cell in cells) for cells in copies]
    everything = re.sub(r"\s+", " ", "\n".join(texts))
    for question, lines in fragments.items():
        assert not [line for line in lines if line in everything], question
