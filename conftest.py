"""How `make test` shares its work out between two processes (pytest-xdist, `--dist loadscope`;
CI has two cores). A unit of work is a file, or a test class: a notebook's cells share one
kernel, and a module's fixtures are built once per process; tests/test_colab.py makes each
chapter's Colab run a class of its own, so that both processes take chapters. The files that
read the built site share one build (tests/conftest.py, `site`). The longest units go first, so
that no long one starts while the other process idles; each took minutes in `make test
--durations`: the book and its PDFs (built by test_pdf, the first site file), the Colab
stand-ins, the graders, axe-core on every page, the classroom edition's book.
"""

FIRST = (
    "test_pdf.py",
    "test_colab.py",
    "test_graders.py",
    "test_site_controls.py",
    "test_site_layout.py",
    "test_classroom.py",
    "test_site_links.py",
    "test_slides.py",
    "test_widgets.py",
    "test_figure_spacing.py",
    "test_learner.py",
)


def pytest_collection_modifyitems(items):
    """The longest files first (the order kept within a file)."""
    rank = {name: position for position, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))
