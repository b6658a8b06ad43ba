"""Build a Jupyter Book site with the course's strict settings (used by make book, make classroom
and the tests, so there is one build command), and print it to PDF (tools/pdf.py).

    python -m tools.book [SOURCE_DIR] [OUTPUT_DIR] [--no-pdf]
"""

import os
import pathlib
import subprocess
import sys

from tools import ROOT, pdf


def build(source=ROOT, output=ROOT, pdfs=tuple(pdf.EDITIONS)):
    """Build `source` into `output`/_build/html, then print the `pdfs` editions into its pdf/
    folder; any Sphinx warning fails the build. Every page is written anew (--all): Sphinx
    skips its static files when no page changed."""
    jupyter_book = pathlib.Path(sys.executable).parent / "jupyter-book"
    command = [
        str(jupyter_book),
        "build",
        str(source),
        "--path-output",
        str(output),
        "-W",
        "-n",
        "--keep-going",
        "--all",
    ]
    # The book's extensions (_ext/) import the tools package: the repository goes first on the
    # Sphinx process's path, wherever the source is (the classroom edition builds a copy).
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)})
    html = pathlib.Path(output) / "_build" / "html"
    if pdfs:
        pdf.write_pdfs(html, pdfs, pathlib.Path(source))
    return html


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--no-pdf"]
    build(
        *[pathlib.Path(a) for a in arguments[:2]],
        **({"pdfs": ()} if "--no-pdf" in sys.argv else {}),
    )
