"""The built website's pages read as files (the book built once per test session,
tests/conftest.py): every internal link and image, no raw markup, every link of the learner
edition to the website, and the learner edition's numbering and citations as the website's; the
instructors' tables and reading times against the notebooks; the licence on every page; the
index, the glossary, the references and the map of the course."""

import re
import urllib.parse

import nbformat
import pytest
import tomllib
import yaml
from bs4 import BeautifulSoup
from docutils.nodes import make_id

from helpers.site import CHAPTERS, RAW_MYST, lecture_and_prompt_cells, page_name
from tools import ROOT, exercises, learner

# --------------------------------------------------------------------------- links and markup


def html_pages(site):
    """The book's pages (the slide decks, slides/, are not pages of the book: tests/test_slides.py
    checks that each credits the licence and names the release on its title slide)."""
    skipped = {"_static", "slides"}
    return sorted(p for p in site.rglob("*.html") if not skipped & set(p.relative_to(site).parts))


def element_ids(page, cache):
    if page not in cache:
        soup = BeautifulSoup(page.read_text(), "html.parser")
        cache[page] = {tag["id"] for tag in soup.find_all(id=True)}
    return cache[page]


def internal_targets(page, site):
    """(description, path, fragment) for every relative href/src of a built page."""
    soup = BeautifulSoup(page.read_text(), "html.parser")
    for tag in soup.find_all(["a", "img", "link", "script"]):
        reference = tag.get("href") or tag.get("src")
        if not reference or urllib.parse.urlparse(reference).scheme or reference.startswith("//"):
            continue
        parsed = urllib.parse.urlparse(reference)
        target = page if not parsed.path else (page.parent / urllib.parse.unquote(parsed.path))
        yield f"{page.relative_to(site)} -> {reference}", target.resolve(), parsed.fragment


def test_no_broken_internal_link_or_image(site):
    ids, broken = {}, []
    for page in html_pages(site):
        for description, target, fragment in internal_targets(page, site):
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(description)
            elif fragment and target.suffix == ".html" and fragment not in element_ids(target, ids):
                broken.append(description)
    assert len(html_pages(site)) >= 4
    assert not broken, broken[:10]


def test_no_page_shows_raw_markup(site):
    for page in html_pages(site):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        for hidden in soup.select("script, style"):
            hidden.decompose()
        raw = RAW_MYST.search(soup.get_text())
        assert not raw, f"{page.relative_to(site)}: raw MyST {raw[0]!r}"


def website_links(site, folder):
    """(how many links to the website the notebooks of `folder` hold, those that reach no
    page or anchor of the built site)."""
    ids, broken, count = {}, [], 0
    base = learner.website()
    for notebook in sorted((ROOT / folder).glob("*.ipynb")):
        for url in re.findall(rf"\]\(({re.escape(base)}[^)\s]*)\)", notebook.read_text()):
            count += 1
            path, _, fragment = url[len(base) :].partition("#")
            target = site / (path or "index.html")
            if not target.is_file() or (fragment and fragment not in element_ids(target, ids)):
                broken.append(f"{notebook.name}: {url}")
    return count, broken


def test_every_link_of_the_learner_edition_reaches_the_website(site):
    """The learner notebooks link to solutions, references and pages of the website (at
    html.baseurl): each of those pages and anchors exists in the built site."""
    count, broken = website_links(site, "notebooks")
    assert count > 100 and not broken, broken[:10]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_learner_edition_numbers_and_cites_as_the_website_does(chapter, site):
    page = BeautifulSoup((site / f"{page_name(chapter)}.html").read_text(), "html.parser")
    text = (ROOT / "notebooks" / chapter.name).read_text()
    key_of = {make_id(f"cite-{key}"): key for key in learner.bibliography()}
    citations = {
        (a["href"].split("#")[1], a.get_text())
        for a in page.select('a[href*="bibliography.html#cite-"]')
    }
    assert citations
    for anchor, shown in citations:
        assert learner.citation_text(key_of[anchor]) == shown, (anchor, shown)
    smart = str.maketrans("‘’“”", "''\"\"")  # Sphinx's smart quotes, undone
    figures = [
        " ".join(c.get_text().split()).translate(smart) for c in page.select("figure figcaption")
    ]
    notebook = nbformat.read(ROOT / "notebooks" / chapter.name, as_version=4)
    learner_figures = [c.source for c in notebook.cells if c.source.startswith("*Figure ")]
    assert learner_figures  # the figures of the lecture (those of solutions stay online)
    for caption in learner_figures:
        number, words = re.match(r"\*Figure (\d+\.\d+)\. (\S+ \S+)", caption).groups()
        words = words.replace("`", "")  # a code name, in backticks in Markdown
        assert any(f.startswith(f"Fig. {number} {words}") for f in figures), (number, words)
    exercises = [
        " ".join(t.get_text().split()) for t in page.select(".exercise > .admonition-title")
    ]
    headings = re.findall(r"### Exercise (\d+\.\d+): ", text)
    assert [e.split(" (")[0] for e in exercises] == [f"Exercise {n}" for n in headings]
    points = r"\(★+, [\d.]+ points?\)"
    assert [re.findall(points, e)[-1] for e in exercises] == re.findall(
        rf"### Exercise \d+\.\d+: .*?({points})", text
    ), "the points differ"


# ------------------------------------------------------- the instructors' guide and back matter


def table_rows(table):
    return [
        [" ".join(td.get_text().split()) for td in tr.find_all(["td", "th"])]
        for tr in table.find_all("tr")
    ]


# A displayed equation, as a reader meets one: $$...$$, or a top-level \begin{env}...\end{env}
DISPLAYED = re.compile(r"\$\$.*?\$\$|\\begin\{([a-z]+\*?)\}.*?\\end\{\1\}", re.S)


def test_reading_times_are_counted_from_the_chapters(site):
    """The home page's reading times follow the model the instructors' page states in words:
    recounted here from the notebooks (prose words outside displayed maths, displays, code
    lines) at the rates that page prints."""
    guide = " ".join(
        BeautifulSoup((site / "instructors.html").read_text(), "html.parser").get_text().split()
    )
    rates = re.search(
        r"prose at (\d+) words a minute, (\d+) minutes for each displayed equation and its "
        r"code at (\d+) lines a minute",
        guide,
    )
    assert rates, "the instructors' page states the reading-time model"
    per_word, per_equation, per_line = (int(x) for x in rates.groups())
    page = BeautifulSoup((site / "intro.html").read_text(), "html.parser")
    rows = {row[0].split(".")[0]: row for row in table_rows(page.select("table")[0])[1:-1]}
    assert len(rows) == len(CHAPTERS)
    for chapter in CHAPTERS:
        cells = list(lecture_and_prompt_cells(nbformat.read(chapter, as_version=4)))
        prose = "\n\n".join(c.source for c in cells if c.cell_type == "markdown")
        displays = len(DISPLAYED.findall(prose))
        words = len(DISPLAYED.sub(" ", prose).split())
        lines = sum(
            len([x for x in c.source.splitlines() if x.strip()])
            for c in cells
            if c.cell_type == "code"
        )
        minutes = words / per_word + displays * per_equation + lines / per_line
        minutes = max(5, 5 * round(minutes / 5))
        row = rows[str(int(chapter.name[:2]))]
        expected = [f"{words:,}", str(displays), f"{lines:,}", f"{minutes} min"]
        assert row[1:5] == expected, (chapter.name, row)


def test_the_instructors_tables_are_the_grading_records(site):
    page = BeautifulSoup((site / "instructors.html").read_text(), "html.parser")
    tables = {
        rubric.get_text().split(":")[0]: rubric.find_next("table")
        for rubric in page.select("p.rubric")
        if rubric.get_text().startswith("Chapter")
    }
    assert len(tables) == len(CHAPTERS)
    for chapter in CHAPTERS:
        found = exercises.exercises(nbformat.read(chapter, as_version=4))
        rows = table_rows(tables[f"Chapter {int(chapter.name[:2])}"])[1:-1]
        assert len(rows) == len(found)
        for row, exercise in zip(rows, found):
            record, title = exercise.record, exercise.prompt.source.splitlines()[0]
            stars = re.search(r"\((★+)\)", title)[1]
            expected_kind = (
                "code + written"
                if exercise.is_coding and exercise.written_points
                else "code"
                if exercise.is_coding
                else "written"
            )
            assert row[2:5] == [stars, expected_kind, str(record.get("points") or "–")], row
            assert row[5].startswith(str(record.get("hidden_points") or "–"))
            assert row[6] == str(exercise.written_points or "–")


def test_every_page_shows_the_licence(site):
    for page in html_pages(site):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        if soup.select_one('meta[http-equiv="Refresh"], meta[http-equiv="refresh"]'):
            continue  # index.html: a redirect to the home page
        footer = soup.select_one(".course-licence")
        assert footer and "CC BY-SA 4.0" in footer.get_text(), page.relative_to(site)


def release_facts():
    """(version, the date it was released, whether changes have landed since), from
    pyproject.toml, CITATION.cff and CHANGELOG.md read here (not through tools/release.py)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    date = str(yaml.safe_load((ROOT / "CITATION.cff").read_text())["date-released"])
    changelog = (ROOT / "CHANGELOG.md").read_text()
    unreleased = changelog.split("## [Unreleased]")[1].split("\n## [")[0]
    return version, date, bool(re.search(r"^- \S", unreleased, re.M))


def test_every_page_shows_the_release_and_links_to_the_changes_errata_and_forms(site):
    version, date, pending = release_facts()
    expected = f"Version {version} of {date}" + (", with changes not yet released" * pending)
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    for page in html_pages(site):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        if soup.select_one('meta[http-equiv="Refresh"], meta[http-equiv="refresh"]'):
            continue  # index.html: a redirect to the home page
        footer = soup.select_one("footer .course-release")
        assert footer, f"{page.relative_to(site)}: no release in the footer"
        assert " ".join(footer.get_text().split()).startswith(expected + " ·"), footer.get_text()
        targets = {
            urllib.parse.urljoin(page.relative_to(site).as_posix(), a["href"])
            for a in footer.find_all("a")
        }
        assert targets == {"changes.html", "errata.html", f"{repository}/issues/new/choose"}


def test_the_licences_page_cites_the_version_and_the_changelog_and_errata_are_pages(site):
    version, date, _ = release_facts()
    licences = BeautifulSoup((site / "licences.html").read_text(), "html.parser")
    (quote,) = licences.select("article blockquote.course-citation")
    assert f"(version {version})" in quote.get_text()
    assert quote.select_one('a[href="https://attention-course.github.io/attention-course/"]')
    changes = BeautifulSoup((site / "changes.html").read_text(), "html.parser")
    titles = [" ".join(h.get_text().split()).strip("#") for h in changes.select("article h2")]
    assert titles[0] == "Unreleased" and f"{version} - {date}" in titles
    errata = BeautifulSoup((site / "errata.html").read_text(), "html.parser")
    rows = errata.select("article table tbody tr")
    entries = re.findall(r"^\| E\d+ \|", (ROOT / "errata.md").read_text(), re.M)
    assert len(rows) == len(entries) > 0
    home = BeautifulSoup((site / "intro.html").read_text(), "html.parser")
    for name in ("changes", "errata", "projects"):
        assert home.select_one(f'nav a[href="{name}.html"]'), f"{name} not in the contents"


def test_every_link_of_the_project_notebooks_reaches_the_website(site):
    count, broken = website_links(site, "projects")
    assert count >= 4 and not broken, broken[:10]


def test_the_index_holds_every_glossary_term_and_the_glossary_every_symbol(site):
    index = BeautifulSoup((site / "genindex.html").read_text(), "html.parser").get_text()
    glossary = (ROOT / "glossary.md").read_text()
    terms = re.findall(r"^(\w[^\n]*)\n  \S", glossary.split("```{glossary}")[1], re.M)
    assert len(terms) >= 40 and all(term in index for term in terms)
    notation = (ROOT / "notation.md").read_text().split("# Notation")[1]
    symbols = [
        s
        for cell in re.findall(r"^\| (\$[^|]+) \|", notation, re.M)
        for s in re.findall(r"\$[^$]+\$", cell)
    ]
    assert len(symbols) > 25
    missing = [s for s in symbols if s not in glossary]
    assert not missing, f"notation symbols not in the glossary: {missing}"


def test_the_index_points_into_the_chapters(site):
    """Terms where chapters define or first use them, the package's names where each chapter
    first uses them; the sidebar links to the index on every page."""
    page = BeautifulSoup((site / "genindex.html").read_text(), "html.parser")
    entries = {}
    for item in page.select("table.indextable > tr > td > ul > li"):
        name = " ".join(item.find(string=True, recursive=True).split())
        entries[name] = [a["href"] for a in item.select("ul a")]
    for term, chapter in [
        ("softmax", "03_"),
        ("padding mask", "05_"),
        ("permutation equivariance", "07_"),
        ("FlashAttention", "12_"),
        ("masked_softmax (attention_course)", "05_"),
        ("flash_attention (attention_course)", "12_"),
    ]:
        assert any(f"chapters/{chapter}" in href for href in entries.get(term, [])), (
            term,
            entries.get(term),
        )
    assert sum(name.endswith("(attention_course)") for name in entries) >= 20
    home = BeautifulSoup(
        (site / "chapters" / f"{CHAPTERS[0].stem}.html").read_text(), "html.parser"
    )
    assert home.select_one('.course-index-link a[href="../genindex.html"]')


def test_references_link_to_their_papers(site):
    page = BeautifulSoup((site / "bibliography.html").read_text(), "html.parser")
    linked = 0
    for key, entry in learner.bibliography().items():
        target = entry.fields.get("url") or entry.fields.get("doi")
        if target:
            hrefs = [a["href"] for a in page.select(f"#{make_id('cite-' + key)} a")]
            assert any(target in href for href in hrefs), (key, hrefs)
            linked += 1
    assert linked >= 40


def test_the_map_links_every_chapter(site):
    page = BeautifulSoup((site / "intro.html").read_text(), "html.parser")
    section = page.find(id="the-map")
    hrefs = {a["href"].split("#")[0] for a in section.find_all("a")}
    assert all(f"chapters/{chapter.stem}.html" in hrefs for chapter in CHAPTERS)


# ------------------------------------------------------------------------------- the home page


def test_the_home_page_welcomes(site):
    """What you will be able to do, a start for three readers, one picture (chapter 1's first
    figure, the same bytes, with a text alternative), and the notation on its own page, linked
    from the home page and the glossary."""
    import base64
    import hashlib

    page = BeautifulSoup((site / "intro.html").read_text(), "html.parser")
    assert page.find(id="what-you-will-be-able-to-do").select("li")
    start = page.find(id="start-here").get_text()
    assert all(reader in start for reader in ("on your own", "Following a course", "Teaching"))
    images = page.select("article img")
    assert len(images) == 1 and len(images[0]["alt"]) > 50
    shown = hashlib.sha256((site / images[0]["src"]).read_bytes()).hexdigest()
    chapter = nbformat.read(CHAPTERS[0], as_version=4)
    first = next(
        o.data["image/png"]
        for c in chapter.cells
        for o in c.get("outputs", [])
        if "data" in o and "image/png" in o.data
    )
    assert shown == hashlib.sha256(base64.b64decode(first)).hexdigest()
    assert "| Symbol | Meaning |" not in (ROOT / "intro.md").read_text()
    for name in ("intro", "glossary"):
        linking = BeautifulSoup((site / f"{name}.html").read_text(), "html.parser")
        assert linking.select_one('article a[href="notation.html"]'), name
    notation = BeautifulSoup((site / "notation.html").read_text(), "html.parser")
    assert len(notation.select("article table tr")) > 30


def test_the_accessibility_statement_is_in_the_contents(site):
    page = BeautifulSoup((site / "accessibility.html").read_text(), "html.parser")
    sections = [h.get_text().strip("#") for h in page.select("article h2")]
    assert sections == [
        "What is done",
        "What is known not to be done",
        "How to report a barrier",
    ]
    assert page.select_one('article a[href*="/issues/new"]')
    home = BeautifulSoup((site / "intro.html").read_text(), "html.parser")
    assert home.select_one('nav a[href="accessibility.html"]'), "not in the table of contents"
