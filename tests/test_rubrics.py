"""The rubrics of the written parts (tools/exercises.py's {grading-rubric} blocks): every
written part has one whose criteria add up to its points, each saying what a full, a partial
and a zero answer contains; the instructor's renderings show it beside the model answer and the
students' never do. (The real graders' copies are tests/test_graders.py's, the PDFs
tests/test_pdf.py's, the classroom edition tests/test_classroom.py's.)"""

import re

import nbformat
import pytest
from bs4 import BeautifulSoup

from tools import ROOT, exercises, learner

CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
GOOD = """\
- **The variance grows as d (2 points)**
  - *Full (2):* derives Var(q . k) = d from independent unit-variance entries,
    and says so.
  - *Partial (1):* states it without the derivation.
  - *Zero (0):* neither.
- **The scale (1 point)**
  - *Full (1):* 1/sqrt(d).
  - *Partial (0.5):* 1/d.
  - *Zero (0):* none."""


def written(path):
    return [e for e in exercises.exercises(nbformat.read(path, as_version=4)) if e.written_points]


def rubric_lines(exercise):
    """The rubric's level texts, which no student copy may hold."""
    return [text for c in exercise.rubric for _, _, text in c.levels if len(text) > 25]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_written_part_has_a_rubric_adding_up_to_its_points(chapter):
    found = exercises.exercises(nbformat.read(chapter, as_version=4))
    assert any(e.written_points for e in found)
    for exercise in found:
        if not exercise.written_points:
            assert not exercise.rubric_text, f"{exercise.label}: a rubric without written points"
            continue
        criteria = exercise.rubric  # parse_rubric checks the full, partial and zero levels
        assert criteria, f"{exercise.label}: no rubric"
        assert exercises.rubric_points(criteria) == exercise.written_points, exercise.label
        assert "{grading-rubric}" not in exercise.solution_text, "the model answer holds no rubric"
        assert exercise.solution_text, f"{exercise.label}: a model answer beside the rubric"


def test_the_rubric_format_is_enforced():
    criteria = exercises.parse_rubric(GOOD)
    assert [(c.title, c.points) for c in criteria] == [
        ("The variance grows as d", 2),
        ("The scale", 1),
    ]
    assert criteria[0].levels[0] == (
        "Full",
        2,
        "derives Var(q . k) = d from independent unit-variance entries, and says so.",
    )
    broken = {
        "no partial level": GOOD.replace(
            "  - *Partial (1):* states it without the derivation.\n", ""
        ),
        "full below the criterion": GOOD.replace("*Full (2):*", "*Full (1.5):*"),
        "a partial as large as full": GOOD.replace("*Partial (0.5):*", "*Partial (1):*"),
        "zero earning points": GOOD.replace("*Zero (0):* none.", "*Zero (0.5):* none."),
        "levels out of order": GOOD.replace(
            "*Full (1):* 1/sqrt(d).", "*Zero (0):* 1/sqrt(d)."
        ).replace("*Zero (0):* none.", "*Full (1):* none."),
        "a stray line": GOOD + "\nthe points may be rounded",
        "nothing": "",
    }
    for why, body in broken.items():
        with pytest.raises(ValueError):
            exercises.parse_rubric(body)
            pytest.fail(why)


def test_the_solution_text_and_the_rubric_are_split():
    text = f"The model answer.\n\n```{{{exercises.RUBRIC}}}\n{GOOD}\n```\n"
    assert exercises.split_rubric(text) == ("The model answer.", GOOD)
    assert exercises.split_rubric("Only an answer.") == ("Only an answer.", "")
    with pytest.raises(ValueError):
        exercises.split_rubric(text + text)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_graders_copies_carry_the_rubric_and_the_learner_cells_do_not(chapter):
    notebook = nbformat.read(chapter, as_version=4)
    found = written(chapter)
    learner_text = "\n".join(c.source for c in exercises.learner_cells(notebook))
    nbgrader = exercises.nbgrader_cells(notebook)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nbgrader]
    begin, end = exercises.MARK_SCHEME
    otter = exercises.otter_cells(notebook, "name: x")
    for exercise in found:
        assert not any(line in learner_text for line in rubric_lines(exercise)), exercise.label
        # nbgrader: the locked, ungraded cell right under the hand-graded answer
        rubric_cell = nbgrader[ids.index(f"{exercise.label}-rubric")]
        assert ids.index(f"{exercise.label}-rubric") == ids.index(f"{exercise.label}-written") + 1
        meta = rubric_cell.metadata["nbgrader"]
        assert meta["locked"] and not meta["grade"] and not meta["solution"] and not meta["task"]
        scheme = rubric_cell.source.split(begin)[1].split(end)[0]
        assert exercise.rubric_text in scheme and rubric_cell.source.split(begin)[0].strip()
        answer = nbgrader[ids.index(f"{exercise.label}-written")].source
        assert exercise.rubric_text not in answer
        # Otter: inside the solution of the manually graded question
        opening = next(
            i
            for i, c in enumerate(otter)
            if c.cell_type == "raw" and f"name: {exercise.name}_written" in c.source
        )
        closing = next(i for i in range(opening, len(otter)) if otter[i].source == "# END QUESTION")
        question = [c.source for c in otter[opening:closing]]
        inside = "\n".join(
            question[question.index(exercises.BEGIN) : question.index(exercises.END)]
        )
        assert exercise.rubric_text in inside


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_the_website_shows_each_rubric_inside_its_folded_solution(chapter, site):
    page = BeautifulSoup((site / "chapters" / f"{chapter.stem}.html").read_text(), "html.parser")
    boxes = page.select(".course-rubric")
    found = written(chapter)
    assert len(boxes) == len(found)
    for box, exercise in zip(boxes, found):
        assert box.find_parent(class_="solution"), f"{exercise.label}: outside its solution"
        title = box.select_one(".course-rubric-title").get_text()
        assert title == exercises.rubric_title(exercise.rubric)
        text = " ".join(box.get_text().split())
        criteria = exercise.rubric
        assert text.count("Full (") == text.count("Zero (") == len(criteria)
        assert all(re.sub(r"\$[^$]*\$", "", c.title).split()[0] in text for c in criteria)


def test_the_learner_notebooks_hold_no_rubric():
    text = "\n".join(path.read_text() for path in learner.OUTPUT.glob("*.ipynb"))
    assert exercises.RUBRIC not in text and exercises.MARK_SCHEME[0] not in text
    for chapter in CHAPTERS:
        for exercise in written(chapter):
            assert not any(line in text for line in rubric_lines(exercise)), exercise.label
