"""The exercises of a chapter notebook, read once and written out for each audience.

The instructor notebooks in chapters/ are the one source of truth. An exercise is:

    a markdown cell that opens with `:::{exercise}`    the prompt, with its grading record in
                                                       metadata["exercise"] (see below)
    a markdown cell that opens with `{solution-start}` the written solution (the model answer),
                                                       ending, for a written part, with its
                                                       rubric in a {grading-rubric} block
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

A written part's rubric says, criterion by criterion, what a full, a partial and a zero
answer contains; its criteria's points add up to `written_points` (tests/test_rubrics.py):

    ```{grading-rubric}
    - **The criterion, in a few words (2 points)**
      - *Full (2):* what an answer must contain to earn every point of the criterion.
      - *Partial (1):* what earns part of them (one line per partial level).
      - *Zero (0):* what earns nothing.
    ```

The website and the instructor's PDF show it inside the folded solution, beside the model
answer (_ext/course_site.py); the graders' copies carry it as grading notes that their tools
keep from the students (an nbgrader mark scheme, a cell of Otter's solution); the learner and
classroom editions never have it, as they have no solution.

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
RUBRIC = "grading-rubric"  # the directive of a written part's rubric, in its solution
MARK_SCHEME = ("=== BEGIN MARK SCHEME ===", "=== END MARK SCHEME ===")  # nbgrader's delimiters
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


# ---------------------------------------------------------------------------------- rubrics

RUBRIC_BLOCK = re.compile(
    rf"^```{{{re.escape(RUBRIC)}}}[ \t]*\n(?P<body>.*?)^```[ \t]*$\n?", re.M | re.S
)
CRITERION = re.compile(r"^- \*\*(?P<title>.+) \((?P<points>\d+(?:\.\d+)?) points?\)\*\*$")
LEVEL = re.compile(
    r"^  - \*(?P<level>Full|Partial|Zero) \((?P<points>\d+(?:\.\d+)?)\):\* (?P<text>.+)$"
)
CONTINUATION = re.compile(r"^    \S")


@dataclasses.dataclass
class Criterion:
    """One criterion of a rubric: its title, its points and its levels, (name, points, text)
    from full to zero."""

    title: str
    points: float
    levels: list

    def level(self, name):
        return [level for level in self.levels if level[0] == name]


def parse_rubric(body):
    """The criteria of a {grading-rubric} block's body; ValueError where the body does not
    follow the format of the module's docstring (one full level with all the criterion's
    points, at least one partial level strictly between, one zero level)."""
    criteria = []
    for number, line in enumerate(body.strip("\n").split("\n"), 1):
        if not line.strip():
            continue
        if match := CRITERION.match(line):
            criteria.append(Criterion(match["title"], float(match["points"]), []))
        elif (match := LEVEL.match(line)) and criteria:
            level = (match["level"], float(match["points"]), match["text"])
            criteria[-1].levels.append(level)
        elif CONTINUATION.match(line) and criteria and criteria[-1].levels:
            name, points, text = criteria[-1].levels[-1]
            criteria[-1].levels[-1] = (name, points, f"{text} {line.strip()}")
        else:
            raise ValueError(f"rubric line {number} is neither a criterion nor a level: {line!r}")
    if not criteria:
        raise ValueError("a rubric needs at least one criterion")
    for criterion in criteria:
        names = [name for name, _, _ in criterion.levels]
        full, partial, zero = (criterion.level(name) for name in ("Full", "Partial", "Zero"))
        if names[:1] != ["Full"] or names[-1:] != ["Zero"] or len(full) != 1 or len(zero) != 1:
            raise ValueError(f"{criterion.title}: levels Full, Partial..., Zero, in this order")
        if not partial:
            raise ValueError(f"{criterion.title}: say what earns partial credit")
        if full[0][1] != criterion.points or zero[0][1] != 0:
            raise ValueError(f"{criterion.title}: full earns the criterion's points, zero none")
        if not all(0 < points < criterion.points for _, points, _ in partial):
            raise ValueError(f"{criterion.title}: a partial level earns part of the points")
    return criteria


def split_rubric(text):
    """(the model answer, the rubric's body or "") of a solution's text."""
    found = list(RUBRIC_BLOCK.finditer(text))
    if len(found) > 1:
        raise ValueError("a solution has one {grading-rubric} block")
    if not found:
        return text, ""
    return RUBRIC_BLOCK.sub("", text).strip(), found[0]["body"].strip("\n")


def rubric_points(criteria):
    return sum(criterion.points for criterion in criteria)


def rubric_title(criteria):
    """The title "Rubric (N written points)": it grades the written points, which in an
    exercise with code are fewer than the exercise's (its heading gives the whole)."""
    points = rubric_points(criteria)
    return f"Rubric ({points:g} written point{'s' * (points != 1)})"


def rubric_markdown(body):
    """A rubric as plain Markdown, for the graders' copies."""
    return f"**{rubric_title(parse_rubric(body))}**\n\n{body}"


@dataclasses.dataclass
class Exercise:
    """One exercise of a chapter, its cells sorted by role."""

    label: str
    prompt: nbformat.NotebookNode
    solution_text: str  # the model answer (the solution's text without its rubric)
    rubric_text: str  # the body of its {grading-rubric} block, "" if it has none
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
    def rubric(self):
        return parse_rubric(self.rubric_text) if self.rubric_text else []

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
        answer, rubric = split_rubric(_text_after_directive(start.source))
        items.append(Exercise(label, cell, answer, rubric, answers, checks, verification))
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


def mark_scheme_cell(exercise):
    """A locked cell under a written answer: the rubric as a mark scheme, which
    `nbgrader generate_assignment` removes from the students' copy and `nbgrader autograde`
    puts back (from the gradebook) for the formgrader, and one line the students see."""
    points = exercise.written_points
    visible = f"*Your written answer above is graded by hand ({points:g} point"
    visible += f"{'s' * (points != 1)}), with a rubric.*"
    begin, end = MARK_SCHEME
    source = f"{visible}\n\n{begin}\n\n{rubric_markdown(exercise.rubric_text)}\n\n{end}"
    return _nbgrader(nbformat.v4.new_markdown_cell(source), f"{exercise.label}-rubric", locked=True)


def nbgrader_cells(notebook):
    """The lecture, and per exercise: a locked prompt, answer cells, locked graded test cells
    (public checks, then hidden tests), a hand-graded answer cell that holds the written
    solution (which `nbgrader generate_assignment` replaces by YOUR ANSWER HERE) and, under it,
    the locked cell of its rubric, a mark scheme."""
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
            if item.rubric_text:
                cells.append(mark_scheme_cell(item))
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
    (solution, public and hidden tests) and, for a written part, a manually graded question
    whose solution holds the model answer and its rubric."""
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
            cells.append(nbformat.v4.new_markdown_cell(item.solution_text or WRITTEN_ANSWER))
            if item.rubric_text:  # inside the solution: the grader's, never the students'
                cells.append(nbformat.v4.new_markdown_cell(rubric_markdown(item.rubric_text)))
            cells += [
                _raw(END),
                _raw("# END QUESTION"),
            ]
    return cells
