"""What must never reach a student: the distinctive lines of every solution of a chapter."""

import re

SOLUTION_CODE = re.compile(r"# BEGIN SOLUTION\n(.*?)# END SOLUTION", re.S)


def solution_fragments(notebook):
    """Distinctive lines of every solution (answer code, the text and code of gated solution
    cells, hidden tests) that do not also appear outside the solutions."""
    fragments, inside, public = set(), False, []
    for cell in notebook.cells:
        source = cell.source
        if cell.cell_type == "markdown" and "{solution-start}" in source:
            inside = True
            source = source.split("```", 2)[-1]  # the text after the directive
        elif cell.cell_type == "markdown" and "{solution-end}" in source:
            inside = False
            continue
        if cell.cell_type == "code":
            for block in SOLUTION_CODE.findall(source):
                fragments.update(line.strip() for line in block.splitlines())
        fragments.update(cell.metadata.get("exercise", {}).get("hidden_tests", "").splitlines())
        if (
            inside and cell.cell_type == "code" and SOLUTION_CODE.search(source)
        ):  # an answer cell: its stub is public
            public.append(SOLUTION_CODE.sub("", source))
        elif inside and "check" not in cell.metadata.get("tags", []):
            fragments.update(line.strip() for line in source.splitlines())
        elif not inside:
            public.append(source)
    public_text = "\n".join(public)
    return {
        f
        for f in fragments
        if len(f) > 25 and not f.startswith(("def ", '"""', "#")) and f not in public_text
    }


def hidden_test_lines(notebook):
    return [
        line
        for cell in notebook.cells
        for line in cell.metadata.get("exercise", {}).get("hidden_tests", "").splitlines()
    ]
