"""The exercises of a chapter notebook, read once and written out for each audience.

The instructor notebooks in chapters/ are the one source of truth. An exercise is:

    a markdown cell that opens with `:::{exercise}`    the prompt, with its grading record in
                                                       metadata["exercise"] (see below)
    a markdown cell that opens with `{solution-start}` the written solution
    code cells holding `# BEGIN SOLUTION` ... `# END SOLUTION`   the answer to a coding exercise
    code cells tagged `check`                          its public test: a call of
                                                       attention_course.checks
    any other cells                                    worked verification, for the instructor only
    a markdown cell `{solution-end}`

The grading record of a prompt cell:

    points          points of the public check cells (coding exercises)
    hidden_tests    code run only by the graders (the same checks on other seeds)
    hidden_points   points of the hidden tests
    written_points  points of an answer written in words and graded by hand

From this, `learner_cells` (the learner and classroom editions), `nbgrader_cells` and
`otter_cells` (the graders' copies) write each audience's cells.

How a learner checks an answer depends on where the chapter is read: nothing runs on the
website, a notebook has a check cell under each answer, the graders' copies have their own test
cells. A chapter's exercise introduction says what is particular to it (which exercises check
themselves) in a `{check-cells}` block, and each edition adds its own HOW_TO_CHECK sentence to it:

    ```{check-cells}
    Exercises 1 and 2 ask for code and check themselves.
    ```

The website renders the block with _ext/course_site.py, the notebooks with tools/learner.py.
"""

import ast
import builtins
import dataclasses
import re

import nbformat

PROMPT, SOLUTION_START, SOLUTION_END = ":::{exercise}", "{solution-start}", "{solution-end}"
BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
SOLUTION_BLOCK = re.compile(
    rf"^([ \t]*){re.escape(BEGIN)}[ \t]*\n.*?^[ \t]*{re.escape(END)}[ \t]*$", re.M | re.S
)
WRITTEN_ANSWER = "**Your answer.** *Write your answer here.*"
CHECK_CELLS = "check-cells"  # the directive of a chapter's exercise introduction
HOW_TO_CHECK = {  # what each edition adds to it
    "website": "Nothing runs on this page: to work an exercise, open the chapter as a notebook "
    "(the Colab and download links under its title), where the check cell under your answer "
    "either confirms your code on several test cases or says what is wrong.",
    "classroom website": "Nothing runs on this page: to work an exercise, download the "
    "chapter's notebook (the link under its title), where the check cell under your answer "
    "either confirms your code on several test cases or says what is wrong.",
    "notebook": "Run the check cell under your answer: it either confirms your code on several "
    "test cases or says what is wrong.",
    "nbgrader": "Run the locked test cell under your answer: it either confirms your code on "
    "several test cases or says what is wrong, and it fails while the answer is the stub. "
    "Grading runs it again, with hidden tests on other cases.",
    "otter": "Run the `grader.check` cell under your answer: it runs the public tests, which "
    "either confirm your code or say what is wrong. Grading runs them again, with hidden tests "
    "on other cases.",
}
# On the public website only, where every solution is on the page (the learner's PDF hides it)
SOLUTIONS_SHOWN = (
    "Here each exercise's solution (folded on the website) shows a worked answer and its check."
)
CODE_SCRATCH = "# Your code for this exercise, to go with your written answer."
# A coding exercise whose model answer runs more code after the check (a comparison with the
# chapter's own run, say) gets a cell for that part too.
CODE_AFTER_CHECK = "# Your code for the rest of this exercise (the part after the check)."


@dataclasses.dataclass
class Exercise:
    """One exercise of a chapter, its cells sorted by role."""

    label: str
    prompt: nbformat.NotebookNode
    solution_text: str
    answers: list
    checks: list
    verification: list

    @property
    def record(self):
        return self.prompt.metadata.get("exercise", {})

    @property
    def is_coding(self):
        return bool(self.answers)

    @property
    def written_points(self):
        return self.record.get("written_points", 0)

    @property
    def name(self):
        """A Python-identifier form of the label: ex-01-gaussian-nw -> ex_01_gaussian_nw."""
        return self.label.replace("-", "_")

    def verification_code(self):
        return "\n\n".join(c.source for c in self.verification if c.cell_type == "code")


def _starts(cell, marker):
    return cell.cell_type == "markdown" and cell.source.lstrip().startswith(
        marker if marker == PROMPT else "```" + marker
    )


def _text_after_directive(source):
    """The markdown after a ```{solution-start} ...``` fence."""
    return source.split("```", 2)[2].strip() if source.count("```") >= 2 else ""


def parse(notebook):
    """A chapter's cells as a list of lecture cells and Exercise objects, in order."""
    items, cells, i = [], notebook.cells, 0
    while i < len(cells):
        cell = cells[i]
        if not _starts(cell, PROMPT):
            items.append(cell)
            i += 1
            continue
        label = re.search(r":label:\s*(\S+)", cell.source)[1]
        start = cells[i + 1]
        if not _starts(start, SOLUTION_START):
            raise ValueError(
                f"exercise {label}: the cell after the prompt must open a {{solution-start}} block"
            )
        j = i + 2
        answers, checks, verification = [], [], []
        while not _starts(cells[j], SOLUTION_END):
            inner = cells[j]
            if inner.cell_type == "code" and BEGIN in inner.source:
                answers.append(inner)
            elif "check" in inner.metadata.get("tags", []):
                checks.append(inner)
            else:
                verification.append(inner)
            j += 1
        if cells[j].source.strip() != "```{solution-end}\n```":
            raise ValueError(f"exercise {label}: keep the {{solution-end}} cell on its own")
        items.append(
            Exercise(
                label, cell, _text_after_directive(start.source), answers, checks, verification
            )
        )
        i = j + 1
    return items


def exercises(notebook):
    return [item for item in parse(notebook) if isinstance(item, Exercise)]


def stub_solutions(source, stub="raise NotImplementedError()"):
    """Replace each BEGIN/END SOLUTION block by `# YOUR CODE HERE` and `stub`, indented alike."""
    return SOLUTION_BLOCK.sub(lambda m: f"{m[1]}# YOUR CODE HERE\n{m[1]}{stub}", source)


CHECK_CALL = re.compile(r"^(checks\.check_\w+\(.*)\)[ \t]*$", re.M)


def strict(source):
    """The graders' form of check calls: a stub fails (strict=True) instead of printing
    "Not yet answered", so an untouched answer earns no points."""
    return CHECK_CALL.sub(r"\1, strict=True)", source)


def _copy(cell, **changes):
    new = nbformat.from_dict(dict(cell))
    new.metadata = dict(cell.metadata)
    for key, value in changes.items():
        new[key] = value
    if new.cell_type == "code":
        new.outputs, new.execution_count = [], None
    new.pop("id", None)
    return new


def total_points(record):
    return (
        record.get("points", 0) + record.get("hidden_points", 0) + record.get("written_points", 0)
    )


STARS = re.compile(r"\((★+)\)[ \t]*$", re.M)


def with_points(source, record):
    """A prompt's source with its points beside its difficulty: "Title (★★, 4 points)"."""
    points = total_points(record)
    if not points or not _starts(nbformat.v4.new_markdown_cell(source), PROMPT):
        return source
    title, newline, rest = source.partition("\n")
    title = STARS.sub(lambda m: f"({m[1]}, {points:g} point{'s' * (points != 1)})", title)
    return title + newline + rest


def _clean_prompt(exercise):
    """The prompt cell without its grading record (students see the text and the points)."""
    prompt = _copy(exercise.prompt, source=with_points(exercise.prompt.source, exercise.record))
    prompt.metadata.pop("exercise", None)
    return prompt


# ------------------------------------------------------------ learner and classroom editions


def learner_cells(notebook):
    """Prompts, stubbed answers, public checks and an answer cell for every written part."""
    cells = []
    for item in parse(notebook):
        if not isinstance(item, Exercise):
            cells.append(item)
            continue
        cells.append(_clean_prompt(item))
        cells += [_copy(c, source=stub_solutions(c.source)) for c in item.answers]
        cells += [_copy(c) for c in item.checks]
        if item.verification_code() and item.is_coding:
            cells.append(nbformat.v4.new_code_cell(CODE_AFTER_CHECK))
        if item.written_points:
            if item.verification_code() and not item.is_coding:
                cells.append(nbformat.v4.new_code_cell(CODE_SCRATCH))
            cells.append(nbformat.v4.new_markdown_cell(WRITTEN_ANSWER))
    return cells


# -------------------------------------------------------------------------------------- nbgrader


def _nbgrader(cell, grade_id, *, solution=False, grade=False, locked=False, points=None):
    cell.metadata["nbgrader"] = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if points is not None:
        cell.metadata["nbgrader"]["points"] = points
    return cell


def hidden_tests_cell(exercise):
    code = strict(exercise.record["hidden_tests"])
    return nbformat.v4.new_code_cell(f"### BEGIN HIDDEN TESTS\n{code}\n### END HIDDEN TESTS")


def nbgrader_cells(notebook):
    """The lecture, and per exercise: a locked prompt, answer cells, locked graded test cells
    (public checks, then hidden tests), and a hand-graded answer cell that holds the written
    solution (which `nbgrader generate_assignment` replaces by YOUR ANSWER HERE)."""
    cells = []
    for item in parse(notebook):
        if not isinstance(item, Exercise):
            cells.append(_copy(item))
            continue
        record, label = item.record, item.label
        cells.append(_nbgrader(_clean_prompt(item), f"{label}-prompt", locked=True))
        for n, answer in enumerate(item.answers):
            cells.append(_nbgrader(_copy(answer), f"{label}-answer-{n}", solution=True))
        for n, check in enumerate(item.checks):
            points = record["points"] / len(item.checks)
            cells.append(
                _nbgrader(
                    _copy(check, source=strict(check.source)),
                    f"{label}-tests-{n}",
                    grade=True,
                    locked=True,
                    points=points,
                )
            )
        if record.get("hidden_tests"):
            cells.append(
                _nbgrader(
                    hidden_tests_cell(item),
                    f"{label}-hidden-tests",
                    grade=True,
                    locked=True,
                    points=record["hidden_points"],
                )
            )
        if item.written_points:
            if item.verification_code() and not item.is_coding:
                # a scratch cell, as in the learner edition: nbgrader's stub for a solution
                # cell would raise NotImplementedError and stop "Run All" at a proof
                cells.append(nbformat.v4.new_code_cell(CODE_SCRATCH))
            written = nbformat.v4.new_markdown_cell(item.solution_text or WRITTEN_ANSWER)
            cells.append(
                _nbgrader(
                    written,
                    f"{label}-written",
                    solution=True,
                    grade=True,
                    points=item.written_points,
                )
            )
    return cells


# ----------------------------------------------------------------------------------------- Otter


def _raw(text):
    return nbformat.v4.new_raw_cell(text)


def _free_names(source):
    """Names that a snippet reads from the notebook's namespace, in order of appearance."""
    tree = ast.parse(source)
    assigned = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    names = [
        n.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in assigned
    ]
    return [n for n in dict.fromkeys(names) if n not in dir(builtins)]


def otter_test(source, name, points, hidden):
    """An Otter exception-based test cell: a function of the names it needs, then its call.
    Its verdict is whether the check raises, never the wording of a message."""
    arguments = ", ".join(_free_names(source))
    body = "\n".join("    " + line for line in source.strip().splitlines())
    config = (
        f'""" # BEGIN TEST CONFIG\npoints: {points}\nhidden: {str(hidden).lower()}\n'
        '""" # END TEST CONFIG'
    )
    return nbformat.v4.new_code_cell(
        f"{config}\ndef {name}({arguments}):\n{body}\n\n{name}({arguments})"
    )


def _otter_question(name, points=None, manual=False):
    config = f"# BEGIN QUESTION\nname: {name}\nmanual: {str(manual).lower()}"
    return _raw(config + (f"\npoints: {points}" if points is not None else ""))


def otter_cells(notebook, config):
    """Otter Assign's format: the assignment config, the lecture, and per exercise a question
    (solution, public and hidden tests) and, for a written part, a manually graded question."""
    cells = [_raw("# ASSIGNMENT CONFIG\n" + config)]
    for item in parse(notebook):
        if not isinstance(item, Exercise):
            cells.append(_copy(item))
            continue
        record = item.record
        if item.is_coding:
            cells += [_otter_question(item.name), _clean_prompt(item), _raw(BEGIN)]
            cells += [_copy(c) for c in item.answers]
            cells += [_raw(END), _raw("# BEGIN TESTS")]
            points = record["points"] / len(item.checks)
            cells += [
                otter_test(strict(c.source), f"test_{item.name}_{n}", points, hidden=False)
                for n, c in enumerate(item.checks)
            ]
            if record.get("hidden_tests"):
                cells.append(
                    otter_test(
                        strict(record["hidden_tests"]),
                        f"test_{item.name}_hidden",
                        record["hidden_points"],
                        hidden=True,
                    )
                )
            cells += [_raw("# END TESTS"), _raw("# END QUESTION")]
        if item.written_points:
            cells.append(_otter_question(item.name + "_written", item.written_points, manual=True))
            if not item.is_coding:
                cells.append(_clean_prompt(item))
            cells.append(_raw(BEGIN))
            if item.verification_code() and not item.is_coding:
                cells.append(
                    nbformat.v4.new_code_cell(f"{BEGIN}\n{item.verification_code()}\n{END}")
                )
            cells += [
                nbformat.v4.new_markdown_cell(item.solution_text or WRITTEN_ANSWER),
                _raw(END),
                _raw("# END QUESTION"),
            ]
    return cells
