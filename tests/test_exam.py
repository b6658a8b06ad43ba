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
