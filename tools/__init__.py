"""The course's build and maintenance commands, run from the repository root as modules:

    python -m tools.book         the website and its PDFs (make book)
    python -m tools.learner      the learner edition in notebooks/ (make notebooks)
    python -m tools.classroom    the classroom edition in _build/classroom/ (make classroom)
    python -m tools.graders      nbgrader and Otter-Grader assignments (make nbgrader, make otter)
    python -m tools.notebooks    re-run the chapters' stored outputs, or time them (make execute)
    python -m tools.bench_attention   the package's attention against PyTorch's (make bench)
    python -m tools.system       the Debian packages the book and the tests need (make system)

tools/data/ holds the programs that made the files in data/, run once by hand (data/README.md
names each one's command). The other modules are the build's parts: exercises (an exercise's
cells for each audience), pdf (the PDFs), figure_text (what `make execute` records of a figure),
release (the version and release date that the website and the PDFs state).
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent  # the repository
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))  # in reading order
