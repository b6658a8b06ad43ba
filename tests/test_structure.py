"""The package's layout rules (DESIGN.md, Style; issue 32): no module imports another's
underscore names (what several modules share is a public name of an internal module), no
module over 600 lines, the exercise checks one module per chapter, each with a test file."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attention_course"


def modules():
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_imports_another_modules_underscore_names():
    found = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level and node.module:
                found += [
                    f"{path.relative_to(PACKAGE)}: from {'.' * node.level}{node.module} "
                    f"import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
    assert not found, "\n".join(found)


def test_no_module_is_over_600_lines():
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in modules()
    }
    assert max(sizes.values()) <= 600, {name: n for name, n in sizes.items() if n > 600}


def test_each_chapter_with_exercise_checks_has_its_module_and_its_test_file():
    chapters = sorted(path.stem for path in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    check_modules = {path.stem for path in (PACKAGE / "checks").glob("ch[0-9][0-9]_*.py")}
    tested = {
        path.stem.removeprefix("test_")
        for path in (ROOT / "tests" / "checks").glob("test_ch[0-9][0-9]_*.py")
    }
    assert check_modules, "no checks/chNN_*.py modules"
    assert check_modules <= tested, f"check modules without tests: {check_modules - tested}"
    for module in check_modules:
        assert any(module.startswith(f"ch{chapter[:2]}") for chapter in chapters), module


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_the_code_passes_the_projects_linter_and_formatter(command):
    """One configuration (pyproject.toml's [tool.ruff]) for the package, the tools, the tests
    and the Sphinx extensions, kept by the real tool."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "src", "tools", "tests", "_ext"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
