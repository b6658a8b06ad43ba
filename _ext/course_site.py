"""The course's additions to the Jupyter Book website (a local Sphinx extension).

- Chapter pages open the *learner edition* (notebooks/, made by scripts/learner.py): the
  Colab button and an "Open in Colab" badge under the title point to it, and the download
  button serves it. The chapters/ notebooks hold the solutions; learners never get those.
- Code shown in solutions leaves out the graders' `# BEGIN SOLUTION` / `# END SOLUTION` lines.
- Citations read (Author, Year), in round brackets, as the learner notebooks write them.
"""

import dataclasses
import pathlib
import re
import shutil

import sphinxcontrib.bibtex.plugin
from docutils import nodes
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

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


def hide_grader_markers(app, doctree, docname):
    """Drop the solution markers from every code block of a page."""
    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        if "SOLUTION" in text:
            cleaned = GRADER_MARKER.sub("", text).rstrip("\n")
            if cleaned != text:
                block.children = [nodes.Text(cleaned)]
                block.rawsource = cleaned


def _launch_urls_to_learner_edition(buttons, pagename, learner):
    for button in buttons:
        if button.get("type") == "group":
            _launch_urls_to_learner_edition(button.get("buttons", []), pagename, learner)
        elif "colab.research.google.com" in button.get("url", ""):
            button["url"] = button["url"].replace(f"/{pagename}.ipynb", f"/{learner}")


def colab_url(config, learner):
    repository = config.html_theme_options["repository_url"].rstrip("/")
    branch = config.html_theme_options.get("repository_branch", "main")
    return (config.html_theme_options["launch_buttons"]["colab_url"].rstrip("/") + "/github/"
            + repository.split("github.com/")[1] + f"/blob/{branch}/{learner}")


def add_learner_links(app, pagename, templatename, context, doctree):
    """Colab button and badge to the learner edition; the badge goes under the page's title."""
    learner = learner_path(pagename)
    if not learner or "body" not in context:
        return
    _launch_urls_to_learner_edition(context.get("header_buttons", []), pagename, learner)
    pathto = context["pathto"]
    badge = (
        '<p class="course-launch">'
        f'<a class="course-colab" href="{colab_url(app.config, learner)}">'
        f'<img src="{pathto("_static/images/logo_colab.png", 1)}" alt="">Open in Colab</a>'
        f'<a class="course-download" href="{pathto("_sources/" + pagename + ".ipynb", 1)}" '
        'download>Download the notebook</a>'
        '<span class="course-launch-note">the chapter without its solutions; '
        f'<a href="{pathto("intro")}#how-to-read-it">on your own machine</a> it needs '
        'the course package</span></p>')
    context["body"] = context["body"].replace("</h1>", "</h1>\n" + badge, 1)


def serve_learner_edition(app, exception):
    """The download button serves _sources/chapters/<stem>.ipynb: make it the learner edition."""
    if exception or app.builder.format != "html":
        return
    learner_folder = pathlib.Path(app.srcdir) / LEARNER_FOLDER
    for target in pathlib.Path(app.outdir, "_sources", "chapters").glob("*.ipynb"):
        learner = learner_folder / target.name
        if not learner.is_file():
            raise FileNotFoundError(f"{learner}: run `make notebooks` to write the learner "
                                    "edition")
        shutil.copyfile(learner, target)


def setup(app):
    sphinxcontrib.bibtex.plugin.register_plugin("sphinxcontrib.bibtex.style.referencing",
                                                "course_author_year", RoundAuthorYear)
    app.connect("doctree-resolved", hide_grader_markers)
    app.connect("html-page-context", add_learner_links, priority=900)
    app.connect("build-finished", serve_learner_edition)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
