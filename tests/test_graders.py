"""The instructor's path with the real graders: every chapter becomes an nbgrader assignment and
an Otter-Grader assignment; grading a correct, an untouched and a one-mistake submission gives
full, zero and partial automatic points; feedback and student notebooks show no hidden test and
no rubric, which the graders' own copies (nbgrader's source and autograded notebooks, Otter's
master and autograder notebooks) hold."""

import csv
import json
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest

from helpers.chapter_pool import for_each_chapter, result_for
from helpers.solution_text import hidden_test_lines, solution_fragments
from tools import exercises, graders, learner

CHAPTERS = graders.CHAPTERS
# The graders run as an instructor would run them: the environment's tools on PATH (nbgrader
# calls `alembic`), the installed package finding its own data (no COURSE_DATA_DIR).
ENV = {key: value for key, value in os.environ.items() if key != "COURSE_DATA_DIR"}
ENV["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{ENV['PATH']}"

# One believable mistake per graded chapter: the answer of its first coding exercise.
MISTAKES = {
    "01": "return values.mean() * torch.ones_like(queries)  # average pooling",
    "03": "return queries @ keys.T / temperature  # dot product, not cosine",
    "05": "return torch.softmax(scores, dim=-1)  # the mask is forgotten",
}
AUTOGRADED = [path for path in CHAPTERS if path.name[:2] in MISTAKES]


def run(command, cwd):
    result = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(map(str, command))}:\n{result.stderr[-3000:]}"
    return result


def automatic_points(path):
    """(total automatic points, points of the first coding exercise) from the grading records."""
    found = [e for e in exercises.exercises(nbformat.read(path, as_version=4)) if e.is_coding]
    points = [e.record["points"] + e.record["hidden_points"] for e in found]
    return sum(points), points[0]


def with_answers(notebook, answers):
    """A copy of `notebook` whose answer cells (by nbgrader grade_id, or in order) are replaced."""
    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))
    for cell in notebook.cells:
        key = cell.metadata.get("nbgrader", {}).get("grade_id")
        if key in answers:
            cell.source = answers[key]
    return notebook


def mistaken(source, chapter):
    """The answer source with its solution block replaced by the chapter's mistake."""
    return exercises.SOLUTION_BLOCK.sub(lambda m: f"{m[1]}{MISTAKES[chapter]}", source, count=1)


def assert_no_solution(text, instructor):
    """No solution line (the rubrics' lines among them: they are in the solutions), no hidden
    test, no mark scheme."""
    for fragment in solution_fragments(instructor):
        assert fragment not in text, f"solution text reached the students: {fragment!r}"
    for line in hidden_test_lines(instructor):
        assert line not in text, f"a hidden test reached the students: {line!r}"
    assert "MARK SCHEME" not in text and exercises.RUBRIC not in text


def assert_every_rubric(path, instructor):
    """The notebook at `path` holds the rubric of every written part of the chapter."""
    text = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)
    rubrics = [e.rubric_text for e in exercises.exercises(instructor) if e.written_points]
    assert rubrics and all(rubric in text for rubric in rubrics)


# ------------------------------------------------------------------------------------ nbgrader


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """An nbgrader course with every chapter released."""
    root = tmp_path_factory.mktemp("nbgrader")
    graders.write_nbgrader(CHAPTERS, root)
    run(["nbgrader", "generate_assignment", "*"], root)
    return root


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_nbgrader_release_has_no_solution_and_valid_cells(chapter, course):
    instructor = nbformat.read(chapter, as_version=4)
    release = course / "release" / chapter.stem / chapter.name
    assert_no_solution(release.read_text(), instructor)
    assert_every_rubric(course / "source" / chapter.stem / chapter.name, instructor)
    cells = nbformat.read(release, as_version=4).cells
    graded = [c.metadata["nbgrader"] for c in cells if c.metadata.get("nbgrader", {}).get("grade")]
    found = exercises.exercises(instructor)
    tests = [g for g in graded if not g["solution"]]
    assert all(g["locked"] and g["points"] > 0 for g in tests)
    assert len(tests) == sum(len(e.checks) + bool(e.record.get("hidden_tests")) for e in found)
    written = [g for g in graded if g["solution"]]
    assert len(written) == sum(bool(e.written_points) for e in found)
    assert sum(g["points"] for g in graded) == sum(
        e.record.get("points", 0) + e.record.get("hidden_points", 0) + e.written_points
        for e in found
    )
    assert sum("YOUR ANSWER HERE" in c.source for c in cells) == len(written)
    rubric_cells = [
        c for c in cells if c.metadata.get("nbgrader", {}).get("grade_id", "")[-7:] == "-rubric"
    ]
    assert len(rubric_cells) == len(written), "each written answer keeps its rubric's cell"
    assert all("graded by hand" in c.source for c in rubric_cells)
    stubs = sum("raise NotImplementedError()" in c.source for c in cells)
    assert stubs == sum(len(e.answers) for e in found), "a stub where no code is asked for"
    summary = [c for c in instructor.cells if "Summary" in c.source][0]
    plain = learner.convert_markdown(summary.source, learner.Chapter(chapter, False, "nbgrader"))
    assert any(c.source == plain for c in cells), "the lecture part is kept"
    prompts = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert ":::{" not in prompts and "{cite}" not in prompts and "### Exercise" in prompts
    assert "#sol-" not in prompts, "an assignment links to no solution"
    assert_says_how_to_check(prompts, "nbgrader")


def assert_says_how_to_check(markdown, edition):
    """The edition's own sentence on checking an answer, no other edition's, no folded
    solution (the chapter's {check-cells} block, rendered for this grader)."""
    introduction = markdown[markdown.index("## Exercises") :].split("### Exercise")[0]
    text = " ".join(introduction.split())
    for other, sentence in exercises.HOW_TO_CHECK.items():
        assert (" ".join(sentence.split()) in text) == (other == edition), other
    assert "folded" not in text and "{check-cells}" not in text


@pytest.fixture(scope="module")
def autograded(course):
    """Three submissions per graded chapter, autograded and with feedback; their grades."""
    for chapter in AUTOGRADED:
        source = nbformat.read(course / "source" / chapter.stem / chapter.name, as_version=4)
        release = nbformat.read(course / "release" / chapter.stem / chapter.name, as_version=4)
        solutions = {
            c.metadata["nbgrader"]["grade_id"]: c.source
            for c in source.cells
            if c.metadata.get("nbgrader", {}).get("solution")
        }
        first = next(key for key in solutions if "-answer-" in key)
        submissions = {
            "correct": with_answers(release, solutions),
            "untouched": release,
            "one-mistake": with_answers(
                release, {**solutions, first: mistaken(solutions[first], chapter.name[:2])}
            ),
        }
        for student, notebook in submissions.items():
            folder = course / "submitted" / student / chapter.stem
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, folder / chapter.name)
        run(["nbgrader", "autograde", chapter.stem, "--create"], course)
        run(["nbgrader", "generate_feedback", chapter.stem], course)
    run(["nbgrader", "export"], course)
    with open(course / "grades.csv") as grades:
        return {
            (row["assignment"], row["student_id"]): float(row["raw_score"])
            for row in csv.DictReader(grades)
        }


@pytest.mark.parametrize("chapter", AUTOGRADED, ids=lambda path: path.stem)
def test_nbgrader_autograde_gives_full_zero_and_partial_points(chapter, autograded):
    total, first = automatic_points(chapter)
    assert autograded[chapter.stem, "correct"] == total
    assert autograded[chapter.stem, "untouched"] == 0
    assert autograded[chapter.stem, "one-mistake"] == total - first


@pytest.mark.parametrize("chapter", AUTOGRADED, ids=lambda path: path.stem)
def test_written_answers_wait_for_the_formgrader(chapter, course, autograded):
    from nbgrader.api import Gradebook

    written = sum(
        bool(e.written_points) for e in exercises.exercises(nbformat.read(chapter, as_version=4))
    )
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        notebook = gradebook.find_submission_notebook(chapter.stem, chapter.stem, "correct")
        waiting = [g for g in notebook.grades if g.needs_manual_grade]
        assert notebook.needs_manual_grade and len(waiting) == written


@pytest.mark.parametrize("chapter", AUTOGRADED, ids=lambda path: path.stem)
def test_the_formgrader_sees_each_rubric_under_its_answer(chapter, course, autograded):
    """autograde puts the mark schemes back (their cells are locked) in the notebook that the
    formgrader shows, whatever the student did to them."""
    instructor = nbformat.read(chapter, as_version=4)
    for student in ("correct", "untouched"):
        assert_every_rubric(
            course / "autograded" / student / chapter.stem / chapter.name, instructor
        )


@pytest.mark.parametrize("chapter", AUTOGRADED, ids=lambda path: path.stem)
def test_nbgrader_feedback_shows_no_hidden_test(chapter, course, autograded):
    instructor = nbformat.read(chapter, as_version=4)
    for student in ("correct", "untouched", "one-mistake"):
        page = (course / "feedback" / student / chapter.stem / f"{chapter.stem}.html").read_text()
        assert "BEGIN HIDDEN TESTS" not in page
        for line in hidden_test_lines(instructor):
            assert line.split("(")[1] not in page, f"{student}: hidden test {line!r} shown"
        # the mark scheme's delimiters and its levels' labels, however the HTML renders them
        assert "MARK SCHEME" not in page and "Full (" not in page, f"{student}: a rubric shown"
    untouched = course / "feedback" / "untouched" / chapter.stem / f"{chapter.stem}.html"
    assert "Hidden tests failed" in untouched.read_text()


# --------------------------------------------------------------------------------------- Otter


def otter_assign(chapter, root):
    """`otter assign` of one chapter. For the autograded chapters it also runs Otter's tests on
    the solutions; every other chapter's checks already run on its solutions under nbval (the
    same check cells), so its notebook is not executed a second time here."""
    tested = [] if chapter.name[:2] in MISTAKES else ["--no-run-tests"]
    return run(["otter", "assign", *tested, chapter.name, "dist"], root / chapter.stem)


@pytest.fixture(scope="module")
def otter(tmp_path_factory):
    """Every chapter through `otter assign`."""
    root = tmp_path_factory.mktemp("otter")
    graders.write_otter(CHAPTERS, root)
    assigned = for_each_chapter(lambda chapter: otter_assign(chapter, root), CHAPTERS)
    return root, assigned


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_otter_assign_gives_a_student_notebook_without_solutions(chapter, otter):
    root, assigned = otter
    result_for(assigned, chapter)
    instructor = nbformat.read(chapter, as_version=4)
    dist = root / chapter.stem / "dist"
    student = (dist / "student" / chapter.name).read_text()
    assert_no_solution(student, instructor)
    assert_every_rubric(dist / "autograder" / chapter.name, instructor)  # the grader's copy
    for exercise in exercises.exercises(instructor):
        if exercise.is_coding:
            assert f'grader.check(\\"{exercise.name}\\")' in student
    student_cells = nbformat.read(dist / "student" / chapter.name, as_version=4).cells
    assert_says_how_to_check(
        "\n".join(c.source for c in student_cells if c.cell_type == "markdown"), "otter"
    )
    assert len(list((dist / "autograder").glob(f"{chapter.stem}-autograder_*.zip"))) == 1
    requirements = (dist / "autograder" / "requirements.txt").read_text()
    package = (
        "attention-course[pretrained]" if graders.extras_needed(instructor) else "attention-course"
    )
    assert "torch" in requirements and f"{package} @ git+" in requirements


def otter_score(zip_path, notebook, folder):
    folder.mkdir()
    path = folder / "submission.ipynb"
    nbformat.write(notebook, path)
    run(["otter", "run", "-a", str(zip_path), "-o", str(folder), str(path)], folder)
    results = json.loads((folder / "results.json").read_text())
    return sum(test.get("score", 0) for test in results["tests"])


def test_otter_run_gives_full_zero_and_partial_points(otter, tmp_path):
    chapter = CHAPTERS[0]
    dist = otter[0] / chapter.stem / "dist"
    zip_path = next((dist / "autograder").glob("*.zip"))
    solved = nbformat.read(dist / "autograder" / chapter.name, as_version=4)
    untouched = nbformat.read(dist / "student" / chapter.name, as_version=4)
    one_mistake = nbformat.from_dict(json.loads(json.dumps(solved)))
    answer = next(c for c in one_mistake.cells if exercises.BEGIN in c.source)
    answer.source = mistaken(answer.source, chapter.name[:2])
    total, first = automatic_points(chapter)
    assert otter_score(zip_path, solved, tmp_path / "correct") == total
    assert otter_score(zip_path, untouched, tmp_path / "untouched") == 0
    assert otter_score(zip_path, one_mistake, tmp_path / "one-mistake") == total - first


def test_otter_for_colab_ships_public_test_files_and_installs_otter(tmp_path):
    chapter = CHAPTERS[0]
    instructor = nbformat.read(chapter, as_version=4)
    graders.write_otter([chapter], tmp_path, colab=True)
    # the tests on the solutions ran in `otter` (the same chapter, without Colab's settings)
    run(["otter", "assign", "--no-run-tests", chapter.name, "dist"], tmp_path / chapter.stem)
    student = tmp_path / chapter.stem / "dist" / "student"
    coding = [e.name for e in exercises.exercises(instructor) if e.is_coding]
    assert sorted(p.stem for p in (student / "tests").glob("*.py")) == sorted(coding)
    text = (student / chapter.name).read_text()
    assert "%pip install -q otter-grader" in text and "grader.export" not in text
    assert_no_solution(text, instructor)
    for test_file in (student / "tests").glob("*.py"):
        assert "hidden=True" not in test_file.read_text()
        assert_no_solution(test_file.read_text(), instructor)
