"""How `make test` splits its work between two processes (pytest-xdist, `--dist loadfile`; CI has
two cores). A file goes to one process: a notebook's cells share one kernel, and a module's
fixtures are built once. The files that read the built site share one build (tests/conftest.py,
`site`). The longest files go first, so that no long one starts while the other process idles;
each took minutes in `make test --durations`: the Colab stand-ins, the book and its PDFs (built
by the first site file), the graders, axe-core on every page, the classroom edition's book.
"""

FIRST = (
    "test_colab.py",
    "test_pdf.py",
    "test_graders.py",
    "test_site_controls.py",
    "test_site_layout.py",
    "test_classroom.py",
    "test_site_links.py",
    "test_learner.py",
)


def pytest_collection_modifyitems(items):
    """The longest files first (the order kept within a file)."""
    rank = {name: position for position, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))
