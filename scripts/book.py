"""Build a Jupyter Book site with the course's strict settings (used by make book, make student
and the tests, so there is one build command).

    python scripts/book.py [SOURCE_DIR] [OUTPUT_DIR]
"""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def build(source=ROOT, output=ROOT):
    """Build `source` into `output`/_build/html; any Sphinx warning fails the build. Every
    page is written anew (--all): Sphinx skips its static files when no page changed."""
    jupyter_book = pathlib.Path(sys.executable).parent / "jupyter-book"
    command = [str(jupyter_book), "build", str(source), "--path-output", str(output),
               "-W", "-n", "--keep-going", "--all"]
    subprocess.run(command, check=True)
    return pathlib.Path(output) / "_build" / "html"


if __name__ == "__main__":
    arguments = [pathlib.Path(a) for a in sys.argv[1:3]]
    build(*arguments)
