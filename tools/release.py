"""The course's release: its version, the date that version was released, and whether changes
have landed since, as the website's footer, the PDFs' title page and the licences page's
citation state them.

- The version has one home, `version` in pyproject.toml; CITATION.cff and the package's
  `__version__` repeat it for the tools that read them (tests/test_release.py keeps them equal).
- CHANGELOG.md (Keep a Changelog, https://keepachangelog.com/en/1.1.0/) says what each release
  changed: "## [Unreleased]" first, for what has landed since the last release, then one section
  per release, newest first, "## [0.1.0] - 2026-11-24". The version's section gives its date;
  an Unreleased section with entries adds "with changes not yet released".

A release renames the Unreleased section to the new version and its date, starts an empty
Unreleased section, and sets the version and date in pyproject.toml, CITATION.cff and the
package (CHANGELOG.md's preamble lists the steps).
"""

import dataclasses
import re

import tomllib
import yaml

from tools import ROOT

UNRELEASED = "Unreleased"
SECTION = re.compile(r"^## \[(?P<name>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?[ \t]*$", re.M)
ENTRY = re.compile(r"^- \S", re.M)  # a list item of the changelog: one change


@dataclasses.dataclass(frozen=True)
class Section:
    """One section of the changelog: its name (a version or "Unreleased"), its date (None for
    Unreleased) and its text, without the heading."""

    name: str
    date: object
    text: str

    @property
    def has_changes(self):
        return bool(ENTRY.search(self.text))


def version(root=ROOT):
    """The course's version: pyproject.toml's, the one place it is written."""
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def sections(text):
    """The changelog's sections, in the file's order."""
    found = list(SECTION.finditer(text))
    ends = [match.start() for match in found[1:]] + [len(text)]
    return [
        Section(match["name"], match["date"], text[match.end() : end].strip("\n"))
        for match, end in zip(found, ends)
    ]


def changelog(root=ROOT):
    return sections((root / "CHANGELOG.md").read_text())


@dataclasses.dataclass(frozen=True)
class Status:
    """A version, the date it was released, and whether changes have landed since."""

    version: str
    released: str
    unreleased: bool

    @property
    def line(self):
        """ "Version 0.1.0 of 2026-11-24, with changes not yet released": what every page says."""
        later = ", with changes not yet released" if self.unreleased else ""
        return f"Version {self.version} of {self.released}{later}"


def status_of(version_name, changelog_sections):
    """The Status of `version_name` by the changelog's sections; ValueError where the changelog
    has no dated section for it."""
    by_name = {section.name: section for section in changelog_sections}
    release = by_name.get(version_name)
    if release is None or release.date is None:
        raise ValueError(
            f"CHANGELOG.md has no section '## [{version_name}] - YYYY-MM-DD' for the version "
            "in pyproject.toml: add the release's section (or fix the version)"
        )
    pending = by_name.get(UNRELEASED)
    return Status(version_name, release.date, bool(pending and pending.has_changes))


def status(root=ROOT):
    """This checkout's Status: pyproject.toml's version, dated by CHANGELOG.md."""
    return status_of(version(root), changelog(root))


def citation(root=ROOT):
    """How to cite the course, as the licences page shows it: (authors, year, title, version,
    website), from _config.yml and pyproject.toml."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    return {
        "authors": config["author"],
        "year": str(config["copyright"]),
        "title": config["title"],
        "version": version(root),
        "url": config["html"]["baseurl"],
    }


def issues_url(root=ROOT):
    """Where readers report an error or ask a question: the repository's new-issue page, which
    offers the templates in .github/ISSUE_TEMPLATE/."""
    config = yaml.safe_load((root / "_config.yml").read_text())
    return config["repository"]["url"].rstrip("/") + "/issues/new/choose"
