"""The course's additions to the Jupyter Book website (a local Sphinx extension).

- Chapter pages open the *learner edition* (notebooks/, made by tools/learner.py): the
  Colab button and an "Open in Colab" badge under the title point to it, and the download
  button serves it. The chapters/ notebooks hold the solutions; learners never get those.
- Code shown in solutions leaves out the graders' `# BEGIN SOLUTION` / `# END SOLUTION` lines.
- Citations read (Author, Year), in round brackets, as the learner notebooks write them.
- Each exercise's title shows its points beside its difficulty, from its grading record, as
  every other edition does (tools/exercises.py's `with_points`).
- A chapter's exercise introduction (its {check-cells} block) says how to work the exercises
  where nothing runs: in the chapter's notebook, whose check cells say whether an answer is
  right; on the public website, also that each folded solution shows a worked answer
  (tools/exercises.py's HOW_TO_CHECK, by the edition in the `course_edition` setting).
- A written part's rubric (its {grading-rubric} block, tools/exercises.py) is shown beside the
  model answer, inside the folded solution, under a title with its points; where solutions are
  not shown (the learner's PDF, the classroom edition) neither is it.
- The index points into the chapters: every glossary term where a chapter defines it (in bold
  or italics) and where the course first uses it, every public name of the package where each
  chapter first uses it.
- Every page's footer names the release the reader has (its version, the date it was released,
  and whether changes have landed since) and links to the changelog, the errata and the
  repository's issue templates; the {course-citation} directive writes how to cite the course
  with that version (tools/release.py reads both from pyproject.toml and CHANGELOG.md).
- Each chapter's lecture slides (tools/slides.py) are written into the site's slides/ folder,
  and linked under the chapter's title beside the Colab and download links.
- The page furniture works (tests/test_site_controls.py): one header (the article's), so the
  theme's buttons bind the toggles a reader sees (the pinned themes render a second, hidden
  copy of each in an empty top bar: pydata-sphinx-theme #2451, sphinx-book-theme #999); one
  search box with results as you type; each script once (sphinx-thebe's configuration was
  declared twice, a JavaScript error); code colours with enough contrast; no deprecated ARIA
  role.
"""

import ast
import dataclasses
import functools
import pathlib
import re
import shutil

import nbformat
import sphinxcontrib.bibtex.plugin
from docutils import nodes
from docutils.parsers.rst import Directive
from pydata_sphinx_theme.utils import get_theme_options_dict
from sphinx import addnodes
from sphinx.transforms import SphinxTransform
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

# the one reader of exercises and the one of the release (tools/book.py puts tools on the path)
from tools import exercises, release, slides

LEARNER_FOLDER = "notebooks"
GRADER_MARKER = re.compile(r"^[ \t]*# (BEGIN|END) SOLUTION[ \t]*(\n|\Z)", re.M)


def _round_brackets():
    return BracketStyle(left="(", right=")", sep="; ")


@dataclasses.dataclass
class RoundAuthorYear(AuthorYearReferenceStyle):
    """(Vaswani et al., 2017; Shazeer, 2019): author-year citations in round brackets."""

    bracket_parenthetical: BracketStyle = dataclasses.field(default_factory=_round_brackets)


def learner_path(pagename):
    """chapters/01_x -> notebooks/01_x.ipynb; None for pages that are not chapters."""
    folder, _, stem = pagename.partition("/")
    return f"{LEARNER_FOLDER}/{stem}.ipynb" if folder == "chapters" and stem else None


def course_root(app):
    """The repository (the classroom edition builds a copy of the book elsewhere)."""
    return pathlib.Path(app.config.course_root or pathlib.Path(__file__).resolve().parents[1])


def show_points(app, docname, source):
    """A chapter's exercise titles with their points (the notebook's text, as read)."""
    if not docname.startswith("chapters/") or '"exercise"' not in source[0]:
        return
    notebook = nbformat.reads(source[0], as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and "exercise" in cell.metadata:
            cell.source = exercises.with_points(cell.source, cell.metadata["exercise"])
    source[0] = nbformat.writes(notebook)


@functools.cache
def glossary_terms(srcdir):
    """{term: the chapters its glossary entry names ("chapters/05_masking", ...)}."""
    text = pathlib.Path(srcdir, "glossary.md").read_text().split("```{glossary}")[1]
    entries = re.split(r"^(?=\w[^\n]*\n  \S)", text, flags=re.M)
    return {
        entry.split("\n")[0]: set(re.findall(r"<(chapters/[\w-]+)>", entry))
        for entry in entries
        if re.match(r"\w[^\n]*\n  \S", entry)
    }


@functools.cache
def package_names(root):
    """The package's public functions and classes (its __all__ without its modules)."""
    tree = ast.parse(pathlib.Path(root, "src", "attention_course", "__init__.py").read_text())
    modules, public = set(), []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module is None:
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Assign) and node.targets[0].id == "__all__":
            public = ast.literal_eval(node.value)
    return [name for name in public if name not in modules and name != "SIMILARITIES"]


def _words(term):
    """A term as a regex: whole words, any case of its first letter, an optional plural."""
    head, rest = re.escape(term[0]), re.escape(term[1:])
    return re.compile(rf"(?<![\w-])[{head.lower()}{head.upper()}]{rest}(?:s|es)?(?![\w-])")


@functools.cache
def first_uses(srcdir):
    """{glossary term: the first chapter, in reading order, whose text uses it}."""
    found = {}
    for path in sorted(pathlib.Path(srcdir, "chapters").glob("[0-9][0-9]_*.ipynb")):
        text = "\n".join(
            c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"
        )
        for term in glossary_terms(srcdir):
            if term not in found and _words(term).search(text):
                found[term] = f"chapters/{path.stem}"
    return found


class ChapterIndex(SphinxTransform):
    """Index entries into a chapter: before SphinxDomains (850) collects them."""

    default_priority = 840

    def apply(self, **kwargs):
        docname = self.env.docname
        if not docname.startswith("chapters/"):
            return
        srcdir = self.env.srcdir
        paragraphs = [
            p
            for p in self.document.findall(nodes.paragraph)
            if not isinstance(p.parent, nodes.term)
        ]
        for term, defined_in in glossary_terms(srcdir).items():
            pattern = _words(term)
            defining = [
                p
                for p in paragraphs
                if any(
                    pattern.fullmatch(e.astext().strip())
                    for e in p.findall(lambda n: isinstance(n, (nodes.strong, nodes.emphasis)))
                )
            ]
            used = [p for p in paragraphs if pattern.search(p.astext())]
            if defining:
                self.add_entry(defining[0], term, main=True)
            elif used and docname in defined_in:
                self.add_entry(used[0], term, main=True)
            elif used and first_uses(srcdir).get(term) == docname:
                self.add_entry(used[0], term)
        code = [
            n
            for n in self.document.findall(
                lambda n: isinstance(n, (nodes.literal, nodes.literal_block))
            )
        ]
        for name in package_names(course_root(self.app)):
            pattern = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
            used = [n for n in code if pattern.search(n.astext())]
            if used:
                self.add_entry(used[0], f"{name} (attention_course)")

    def chapter(self):
        """ "3. Attention as soft k-nearest neighbours": a sub-entry names the chapter."""
        title = next(iter(self.document.findall(nodes.title))).astext()
        return f"{int(self.env.docname.split('/')[1][:2])}. {title}"

    def add_entry(self, node, entry, main=False):
        entry = f"{entry}; {self.chapter()}"
        target_id = f"index-{self.env.new_serialno('index')}"
        target = nodes.target("", "", ids=[target_id])
        index = addnodes.index(entries=[("single", entry, target_id, "main" if main else "", None)])
        node.parent.insert(node.parent.index(node), [index, target])


class CheckCells(Directive):
    """The introduction's own words, then this edition's sentence, in one paragraph; on the
    public website, the folded solutions' sentence in a span the learner's PDF hides."""

    has_content = True

    def run(self):
        config = self.state.document.settings.env.config
        edition = config.course_edition
        if edition not in ("website", "classroom website"):
            raise self.error(f"course_edition: no website edition {edition!r}")
        container = nodes.container()
        self.state.nested_parse(self.content, self.content_offset, container)
        paragraph = container.children[-1] if container.children else None
        if not isinstance(paragraph, nodes.paragraph):
            paragraph = nodes.paragraph()
            container += paragraph
        paragraph += nodes.Text(" " + exercises.HOW_TO_CHECK[edition])
        if edition == "website":
            paragraph += nodes.Text(" ")
            paragraph += nodes.inline(
                text=exercises.SOLUTIONS_SHOWN, classes=["course-solutions-shown"]
            )
        return container.children


class Rubric(Directive):
    """A written part's rubric: "Rubric (N written points)", then its criteria and their levels as
    written, in a box of class course-rubric; a rubric that breaks the format is an error."""

    has_content = True

    def run(self):
        try:
            criteria = exercises.parse_rubric("\n".join(self.content))
        except ValueError as error:
            raise self.error(f"{{{exercises.RUBRIC}}}: {error}") from None
        box = nodes.container(classes=["course-rubric"])
        title = nodes.paragraph(classes=["course-rubric-title"])
        title += nodes.strong(text=exercises.rubric_title(criteria))
        box += title
        self.state.nested_parse(self.content, self.content_offset, box)
        return [box]


@functools.cache
def release_facts(root):
    """What every page's footer says of the release (_templates/course-release.html)."""
    return {"line": release.status(root).line, "report": release.issues_url(root)}


def show_release(app, pagename, templatename, context, doctree):
    context["course_release"] = release_facts(course_root(app))


class Citation(Directive):
    """How to cite the course, with this checkout's version: (authors, year, title, version,
    website) as a quotation, from _config.yml and pyproject.toml."""

    def run(self):
        env = self.state.document.settings.env
        root = course_root(env.app)
        for name in ("pyproject.toml", "_config.yml"):
            env.note_dependency(str(root / name))
        cited = release.citation(root)
        paragraph = nodes.paragraph()
        paragraph += nodes.Text(f"{cited['authors']} ({cited['year']}). ")
        paragraph += nodes.emphasis(text=cited["title"])
        paragraph += nodes.Text(f" (version {cited['version']}). ")
        paragraph += nodes.reference(text=cited["url"], refuri=cited["url"])
        return [nodes.block_quote("", paragraph, classes=["course-citation"])]


def hide_grader_markers(app, doctree, docname):
    """Drop the solution markers from every code block of a page."""
    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        if "SOLUTION" in text:
            cleaned = GRADER_MARKER.sub("", text).rstrip("\n")
            if cleaned != text:
                block.children = [nodes.Text(cleaned)]
                block.rawsource = cleaned


LETTERED_ITEM = re.compile(r"\([a-z]\) ")


def mark_lettered_lists(app, doctree, docname):
    """A bullet list whose every item starts "(a) ", "(b) ", ... gets the class lettered-list:
    the letters number its items, so the site's CSS drops the bullet before them."""
    for bullets in doctree.findall(nodes.bullet_list):
        items = [item for item in bullets.children if isinstance(item, nodes.list_item)]
        if items and all(LETTERED_ITEM.match(item.astext()) for item in items):
            bullets["classes"].append("lettered-list")


def _launch_urls_to_learner_edition(buttons, pagename, learner):
    for button in buttons:
        if button.get("type") == "group":
            _launch_urls_to_learner_edition(button.get("buttons", []), pagename, learner)
        elif "colab.research.google.com" in button.get("url", ""):
            button["url"] = button["url"].replace(f"/{pagename}.ipynb", f"/{learner}")


def colab_url(config, learner):
    repository = config.html_theme_options["repository_url"].rstrip("/")
    branch = config.html_theme_options.get("repository_branch", "main")
    return (
        config.html_theme_options["launch_buttons"]["colab_url"].rstrip("/")
        + "/github/"
        + repository.split("github.com/")[1]
        + f"/blob/{branch}/{learner}"
    )


def add_learner_links(app, pagename, templatename, context, doctree):
    """Colab button and badge to the learner edition; the badge goes under the page's title."""
    learner = learner_path(pagename)
    if not learner or "body" not in context:
        return
    _launch_urls_to_learner_edition(context.get("header_buttons", []), pagename, learner)
    pathto = context["pathto"]
    deck = f"{slides.FOLDER}/{slides.deck_name(learner)}"
    colab = (  # none in the classroom edition, which is not the repository's
        f'<a class="course-colab" href="{colab_url(app.config, learner)}">'
        f'<img src="{pathto("_static/images/logo_colab.png", 1)}" alt="">Open in Colab</a>'
        if app.config.html_theme_options["launch_buttons"].get("colab_url")
        else ""
    )
    badge = (
        f'<p class="course-launch">{colab}'
        f'<a class="course-download" href="{pathto("_sources/" + pagename + ".ipynb", 1)}" '
        "download>Download the notebook</a>"
        f'<a class="course-slides" href="{pathto(deck, 1)}">Lecture slides</a>'
        '<span class="course-launch-note">the chapter without its solutions; '
        f'<a href="{pathto("intro")}#how-to-read-it">on your own machine</a> it needs '
        "the course package</span></p>"
    )
    context["body"] = context["body"].replace("</h1>", "</h1>\n" + badge, 1)


def serve_learner_edition(app, exception):
    """The download button serves _sources/chapters/<stem>.ipynb: make it the learner edition."""
    if exception or app.builder.format != "html":
        return
    learner_folder = pathlib.Path(app.srcdir) / LEARNER_FOLDER
    for target in pathlib.Path(app.outdir, "_sources", "chapters").glob("*.ipynb"):
        learner = learner_folder / target.name
        if not learner.is_file():
            raise FileNotFoundError(f"{learner}: run `make notebooks` to write the learner edition")
        shutil.copyfile(learner, target)


def write_slides(app, exception):
    """Every chapter's lecture slides into the site's slides/ folder (tools/slides.py)."""
    if exception or app.builder.format != "html":
        return
    slides.build(app.outdir)  # from the repository's chapters: a classroom copy has no solutions


def furnish_theme(app):
    """Before the themes read their options (priority 400): no top bar, so no hidden copy of
    the sidebar toggles and of the search box; results as you type; code colours from the
    high-contrast accessible styles (WCAG AA on the theme's code background)."""
    options = get_theme_options_dict(app)
    options.update(
        navbar_start=[],
        navbar_center=[],
        navbar_end=[],
        navbar_persistent=[],
        search_as_you_type=True,
        pygments_light_style="a11y-high-contrast-light",
        pygments_dark_style="a11y-high-contrast-dark",
        # the theme's footer items (sphinx-book-theme 1.3.0's theme.conf), then the release's
        footer_content_items=[
            "author.html",
            "copyright.html",
            "last-updated.html",
            "extra-footer.html",
            "course-release.html",
        ],
    )


def start_in_the_readers_mode(app, pagename, templatename, context, doctree):
    """The reader's system's light or dark mode on a first visit: left empty, the theme logs
    "Got invalid theme mode: ." as an error on every page until a mode is chosen."""
    context.setdefault("default_mode", "auto")


def each_script_once(app, pagename, templatename, context, doctree):
    """sphinx-thebe adds its `const THEBE_JS_URL = ...` script twice (a SyntaxError on every
    page; its second copy names no file as "" where the first has None): keep the first copy
    of each script."""
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        key = (getattr(script, "filename", str(script)) or "", tuple(sorted(attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"][:] = unique


# DPUB-ARIA roles that ARIA 1.2 deprecates (axe's aria-deprecated-role), written by docutils for
# citations and footnotes; their lists hold list items instead.
DEPRECATED_ROLES = {
    'role="doc-biblioentry"': 'role="listitem"',
    'role="doc-endnote"': 'role="listitem"',
}


def current_aria_roles(app, pagename, templatename, context, doctree):
    body = context.get("body", "")
    for old, new in DEPRECATED_ROLES.items():
        body = body.replace(old, new)
    if "body" in context:
        context["body"] = body


def setup(app):
    sphinxcontrib.bibtex.plugin.register_plugin(
        "sphinxcontrib.bibtex.style.referencing", "course_author_year", RoundAuthorYear
    )
    app.add_config_value("course_root", "", "env")
    app.add_config_value("course_edition", "website", "env")  # or "classroom website"
    app.add_directive(exercises.CHECK_CELLS, CheckCells)
    app.add_directive("course-citation", Citation)
    app.add_directive(exercises.RUBRIC, Rubric)
    app.add_transform(ChapterIndex)
    app.connect("source-read", show_points)
    app.connect("doctree-resolved", hide_grader_markers)
    app.connect("doctree-resolved", mark_lettered_lists)
    app.connect("html-page-context", add_learner_links, priority=900)
    app.connect("build-finished", serve_learner_edition)
    app.connect("build-finished", write_slides)
    app.connect("builder-inited", furnish_theme, priority=400)
    app.connect("html-page-context", each_script_once, priority=1000)
    app.connect("html-page-context", current_aria_roles)
    app.connect("html-page-context", start_in_the_readers_mode)
    app.connect("html-page-context", show_release)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
