"""The living edition: one version (pyproject.toml's, repeated by CITATION.cff and the package),
a changelog that opens with what has not been released and has a dated section for the version,
whose release commit and numbers are checked against history where it is at hand; the errata
page in the contents, its entries naming real versions and the commits that fixed them; the
issue forms it links to; the PDFs' title page. (That every page of the built website shows the
release is tests/test_site_links.py.)

The expected values come from the files themselves, read here without tools/release.py (the
code under test): pyproject.toml through tomllib, CITATION.cff through yaml, CHANGELOG.md and
errata.md through their own regular expressions."""

import datetime
import re
import subprocess

import nbformat
import pytest
import tomllib
import yaml

import attention_course
from tools import ROOT, exercises, pdf, release

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CITATION = yaml.safe_load((ROOT / "CITATION.cff").read_text())
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
CHANGELOG = (ROOT / "CHANGELOG.md").read_text()
HEADING = re.compile(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", re.M)
SEMVER = re.compile(r"(\d+)\.(\d+)\.(\d+)")
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def changelog_sections():
    """[(name, date or None, text)] of CHANGELOG.md, in order."""
    found = list(HEADING.finditer(CHANGELOG))
    ends = [m.start() for m in found[1:]] + [len(CHANGELOG)]
    return [(m[1], m[2], CHANGELOG[m.end() : end]) for m, end in zip(found, ends)]


def released():
    """{version: (date, text)} of the changelog's releases."""
    return {name: (date, text) for name, date, text in changelog_sections() if date}


def unreleased_text():
    (text,) = [text for name, _, text in changelog_sections() if name == "Unreleased"]
    return text


def cited_date():
    """CITATION.cff's date-released as text (yaml reads a bare date as a date)."""
    value = CITATION["date-released"]
    return value.isoformat() if isinstance(value, datetime.date) else str(value)


def git(*arguments):
    """A git command's output in the repository, or None where it fails (no history)."""
    result = subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def release_commit(version):
    date, text = released()[version]
    match = re.search(r"commit `([0-9a-f]{7,40})`", text)
    assert match, f"the changelog's {version} section names no release commit"
    return match[1]


def known_commit(commit):
    if git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        pytest.skip(f"commit {commit} is not in this checkout's history")


# ------------------------------------------------------------------------------- one version


def test_one_version_everywhere():
    assert SEMVER.fullmatch(VERSION), VERSION
    assert CITATION["version"] == VERSION
    assert attention_course.__version__ == VERSION
    assert release.version() == VERSION


def test_the_changelog_opens_with_what_is_unreleased_then_releases_newest_first():
    sections = changelog_sections()
    assert sections[0][:2] == ("Unreleased", None)
    releases = sections[1:]
    assert releases and all(date for _, date, _ in releases), "every release has its date"
    versions = [tuple(int(x) for x in SEMVER.fullmatch(name).groups()) for name, _, _ in releases]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    dates = [date for _, date, _ in releases]
    assert dates == sorted(dates, reverse=True)


def test_the_current_version_has_a_dated_section_and_citation_cff_gives_its_date():
    assert VERSION in released(), f"CHANGELOG.md has no '## [{VERSION}] - date' section"
    assert released()[VERSION][0] == cited_date()


def test_the_changelog_sorts_changes_as_keep_a_changelog_does():
    for name, _, text in changelog_sections():
        kinds = re.findall(r"^### (.+)$", text, re.M)
        assert set(kinds) <= KINDS, (name, kinds)
        assert len(kinds) == len(set(kinds)), (name, "a kind twice")
        if name != "Unreleased":
            assert kinds and re.search(r"^- \S", text, re.M), f"{name}: a release lists changes"


def test_every_chapter_is_in_the_changelog_and_the_count_is_the_courses():
    """A new chapter gets its entry; the Unreleased section's count of chapters is today's."""
    for path in CHAPTERS:
        title = nbformat.read(path, as_version=4).cells[0].source.splitlines()[0][2:]
        assert " ".join(title.split()) in " ".join(CHANGELOG.split()), title
    stated = re.search(r"The course now has (\d+) chapters", unreleased_text())
    assert stated and int(stated[1]) == len(CHAPTERS)


def test_the_links_of_the_changelog_lead_to_its_commits():
    base = CONFIG["repository"]["url"]
    names = [name for name, _, _ in changelog_sections()]
    links = dict(re.findall(r"^\[([^\]]+)\]: (\S+)$", CHANGELOG, re.M))
    assert set(links) == set(names)
    for version in released():
        assert links[version] == f"{base}/tree/{release_commit(version)}"
    newest = next(iter(released()))
    assert links["Unreleased"] == f"{base}/compare/{release_commit(newest)}...main"


@pytest.mark.parametrize("version", list(released()))
def test_a_release_commit_holds_its_version_on_its_date(version):
    commit = release_commit(version)
    known_commit(commit)
    at_commit = tomllib.loads(git("show", f"{commit}:pyproject.toml"))["project"]["version"]
    assert at_commit == version
    assert git("log", "-1", "--format=%cs", commit) == released()[version][0]


def test_the_first_releases_chapters_and_points_are_those_of_its_commit():
    """The 0.1.0 section's list of chapters and its count of exercises and points, against the
    notebooks at its commit."""
    commit = release_commit("0.1.0")
    known_commit(commit)
    text = " ".join(released()["0.1.0"][1].split())
    names = git("ls-tree", "--name-only", commit, "chapters/").split()
    count, points, by_hand = 0, 0, 0
    for name in names:
        notebook = nbformat.reads(git("show", f"{commit}:{name}"), as_version=4)
        title = notebook.cells[0].source.splitlines()[0][2:]
        assert f"{int(name[9:11])}. {title}" in text, title
        for exercise in exercises.exercises(notebook):
            count += 1
            record = exercise.record
            written = exercise.written_points
            points += record.get("points", 0) + record.get("hidden_points", 0) + written
            by_hand += written
    assert len(re.findall(r"\b(\d+)\. [A-Z]", text)) == len(names)
    assert f"{count} exercises worth {points} points, {by_hand} of them graded by hand" in text


def test_the_release_status_of_a_changelog():
    text = (
        "# Changelog\n\n## [Unreleased]\n\n{pending}\n"
        "## [0.2.0] - 2027-01-10\n\n### Added\n\n- a chapter\n\n"
        "## [0.1.0] - 2026-11-24\n\n### Added\n\n- the course\n"
    )
    quiet = release.status_of("0.2.0", release.sections(text.format(pending="")))
    assert quiet.line == "Version 0.2.0 of 2027-01-10"
    busy = release.status_of("0.1.0", release.sections(text.format(pending="### Fixed\n\n- x\n")))
    assert busy.line == "Version 0.1.0 of 2026-11-24, with changes not yet released"
    for missing in ("0.3.0", "Unreleased"):
        with pytest.raises(ValueError, match="CHANGELOG.md has no section"):
            release.status_of(missing, release.sections(text.format(pending="")))


def test_this_checkouts_release_status():
    status = release.status()
    pending = bool(re.search(r"^- \S", unreleased_text(), re.M))
    assert (status.version, status.released, status.unreleased) == (
        VERSION,
        cited_date(),
        pending,
    )


def test_the_licences_page_cites_through_the_directive_and_types_no_version():
    """The citation's version is the directive's (_ext/course_site.py), never typed again."""
    text = (ROOT / "licences.md").read_text().split("## How to cite the course")[1]
    assert "```{course-citation}\n```" in text
    assert not SEMVER.search(text), "a version typed into licences.md's citing section"
    assert "CITATION.cff" in text and "changes.md" in text and "errata.md" in text


def test_the_pdfs_title_page_states_the_release_and_where_the_changes_are():
    """The title page's HTML as tools/pdf.py prints it (the built PDF: tests/test_pdf.py)."""
    info = pdf.book_info()
    for edition in pdf.EDITIONS:
        front = pdf._front_html(info, edition, [])
        assert f"Version {VERSION} of {cited_date()}" in front
        assert ("with changes not yet released" in front) == bool(
            re.search(r"^- \S", unreleased_text(), re.M)
        )
        for page in ("changes.html", "errata.html"):
            assert CONFIG["html"]["baseurl"] + page in front


# ------------------------------------------------------------------------- errata and forms

TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
ERRATA = (ROOT / "errata.md").read_text()
ROW = re.compile(r"^\| (E\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", re.M)


def errata_rows():
    return ROW.findall(ERRATA)


def test_the_errata_and_the_changelog_are_pages_of_the_book():
    pages = [chapter["file"] for part in TOC["parts"] for chapter in part["chapters"]]
    assert "errata" in pages and "changes" in pages
    assert "{include} CHANGELOG.md" in (ROOT / "changes.md").read_text()


def test_each_erratum_names_the_version_it_was_found_in_and_the_one_that_fixed_it():
    rows = errata_rows()
    table = [line for line in ERRATA.splitlines() if re.match(r"\| E\d", line)]
    assert rows and len(rows) == len(table), "an erratum row the pattern does not read"
    assert [number for number, *_ in rows] == [f"E{k}" for k in range(1, len(rows) + 1)]
    versions = released()
    for number, _, _, found, fixed in rows:
        found = found.strip()
        assert found in versions, (number, found)
        fixed_in = fixed.split(",")[0].strip()
        assert fixed_in == "unreleased" or fixed_in in versions, (number, fixed)
        if fixed_in == "unreleased":
            assert "errata" in unreleased_text(), "the changelog's Unreleased names the errata"
        else:
            order = [tuple(map(int, SEMVER.fullmatch(v).groups())) for v in (found, fixed_in)]
            assert order[1] > order[0], (number, "fixed before it was found")


def test_each_erratum_was_fixed_after_the_release_it_was_found_in():
    """Its commit exists, is not in the release it was found in, and is in the release that
    fixed it (none yet for "unreleased")."""
    base = CONFIG["repository"]["url"]
    for number, _, _, found, fixed in errata_rows():
        commits = re.findall(rf"\[`([0-9a-f]{{7}})`\]\({re.escape(base)}/commit/\1\)", fixed)
        assert commits, (number, "a link to the commit that fixed it")
        for commit in commits:
            known_commit(commit)
            before = git("merge-base", "--is-ancestor", commit, release_commit(found.strip()))
            assert before is None, (number, f"{commit} is already in {found}")
            fixed_in = fixed.split(",")[0].strip()
            if fixed_in != "unreleased":
                inside = git("merge-base", "--is-ancestor", commit, release_commit(fixed_in))
                assert inside is not None, (number, f"{commit} is not in {fixed_in}")


FORMS = ROOT / ".github" / "ISSUE_TEMPLATE"


@pytest.mark.parametrize("name", ["erratum", "question"])
def test_the_issue_forms_parse_and_the_errata_page_links_them(name):
    form = yaml.safe_load((FORMS / f"{name}.yml").read_text())
    assert form["name"] and form["description"] and form["labels"] == [name]
    fields = [item for item in form["body"] if item["type"] != "markdown"]
    ids = [item["id"] for item in fields]
    assert len(ids) == len(set(ids)) and {"where", "version"} <= set(ids)
    required = {item["id"] for item in fields if item.get("validations", {}).get("required")}
    assert "where" in required and ("version" in required) == (name == "erratum")
    link = f"{CONFIG['repository']['url']}/issues/new?template={name}.yml"
    assert link in ERRATA


def test_the_new_issue_page_offers_the_forms():
    config = yaml.safe_load((FORMS / "config.yml").read_text())
    assert config["blank_issues_enabled"] is True
    assert any(link["url"].endswith("/errata.html") for link in config["contact_links"])
    assert release.issues_url() == CONFIG["repository"]["url"] + "/issues/new/choose"
