"""Run the chapter notebooks: `execute` rewrites their stored outputs, `bench` times them.

    python -m tools.notebooks execute [NOTEBOOK ...]   # default: every chapter
    python -m tools.notebooks bench   [NOTEBOOK ...]

Outputs are normalised so that re-running an unchanged notebook changes nothing but images:
cell ids are stable, execution timestamps are dropped.
"""

import argparse
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

from tools import CHAPTERS

FIGURE_TEXT = pathlib.Path(__file__).with_name("figure_text.py")


def run(notebook, cwd):
    """Execute a notebook object in place with the current Python's kernel, in folder cwd;
    each figure's output records its smallest text (tools/figure_text.py)."""
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        extra_arguments=[f"--IPKernelApp.exec_files={FIGURE_TEXT}"],
    )
    client.execute()
    return notebook


def normalise(notebook):
    """Stable cell ids and no per-run metadata, so diffs show only real changes."""
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number:03d}"
        cell.metadata.pop("execution", None)
    notebook.metadata.pop("widgets", None)
    return notebook


def execute(paths):
    for path in paths:
        start = time.perf_counter()
        notebook = nbformat.read(path, as_version=4)
        nbformat.write(normalise(run(notebook, path.parent)), path)
        print(f"executed {path.name} in {time.perf_counter() - start:.1f} s")


def bench(paths):
    rows = []
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        run(notebook, path.parent)
        rows.append((path.name, time.perf_counter() - start))
    width = max(len(name) for name, _ in rows) + 2
    print(f"{'notebook':<{width}}{'seconds':>9}")
    for name, seconds in rows:
        print(f"{name:<{width}}{seconds:>9.1f}")
    print(f"{'total':<{width}}{sum(seconds for _, seconds in rows):>9.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["execute", "bench"])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    args = parser.parse_args(argv)
    paths = [path.resolve() for path in args.notebooks] or CHAPTERS
    {"execute": execute, "bench": bench}[args.command](paths)


if __name__ == "__main__":
    sys.exit(main())
