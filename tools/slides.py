"""Lecture slides for every chapter, made from the chapter notebook (`make slides`; `make book`
writes them into the website too).

    python -m tools.slides [SITE_DIR]   # default _build/html: decks in SITE_DIR/slides/

A chapter's deck is a reveal.js presentation (vendored in vendor/reveal.js/ with its licence,
copied beside the decks; the equations are typeset by the website's own offline MathJax, so
nothing comes from a CDN). Nothing is typed for the slides; they follow the chapter:

- a title slide: the chapter's number and title and its opening paragraph;
- for each section of the lecture (each `##` or `###` heading before the summary) a slide with
  its heading and its displayed equations, or, where it has none, its first paragraph; then a
  slide for each figure the section draws, with its number and caption as on the website, and
  one for each code cell tagged `slide` in the notebook (the few that carry the idea), with what
  it prints; the section's prose is the speaker notes (press S);
- the chapter's summary, and its exercises with their difficulty and points.

Press F for full screen, Esc for the overview, S for the speaker view with the notes.
"""

import argparse
import base64
import html
import importlib.util
import pathlib
import re
import shutil
import sys

import nbformat
from markdown_it import MarkdownIt
from mdit_py_plugins.dollarmath import dollarmath_plugin

from tools import CHAPTERS, ROOT, exercises, learner, release

REVEAL = ROOT / "vendor" / "reveal.js"
STYLE = ROOT / "templates" / "slides.css"
FOLDER = "slides"
SLIDE_TAG = "slide"  # a code cell shown on the slides with its output
SUMMARY = re.compile(r"^## Summary[ \t]*$", re.M)  # the lecture ends here
EXERCISES = re.compile(r"^## Exercises[ \t]*$", re.M)
MAX_OUTPUT_LINES = 8
MAX_EQUATIONS = 3  # displayed equations on one slide; more go on the next
MAX_BULLETS, MAX_SUMMARY = 5, 650  # bullets and characters of a summary slide
DISPLAY_MATH = re.compile(r"^\$\$.*?^\$\$[^\n]*$", re.M | re.S)
HEADING = re.compile(r"^(#{2,3}) +(.+)$", re.M)


def deck_name(chapter):
    """chapters/04_scaled_dot_product_attention.ipynb -> 04_scaled_dot_product_attention.html"""
    return f"{pathlib.Path(chapter).stem}.html"


# ------------------------------------------------------------------------------ markdown


def _inline_math(renderer, tokens, index, options, env):
    return rf"\({html.escape(tokens[index].content)}\)"


def _display_math(renderer, tokens, index, options, env):
    return rf"<div class='math'>\[{html.escape(tokens[index].content)}\]</div>"


def _markdown():
    """CommonMark with tables, and $...$ / $$...$$ left for MathJax as \\( \\) and \\[ \\]."""
    md = MarkdownIt("commonmark").use(dollarmath_plugin).enable("table")
    md.add_render_rule("math_inline", _inline_math)
    md.add_render_rule("math_block", _display_math)
    md.add_render_rule("math_block_label", _display_math)
    return md


MARKDOWN = _markdown()


def render(markdown):
    return MARKDOWN.render(markdown)


def plain_text(markdown):
    """Speaker notes: the prose without its markup (the maths kept as written)."""
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", markdown)  # links -> their text
    text = re.sub(r"[*`]", "", text)
    return html.escape(re.sub(r"\n(?!\n)", " ", text).strip())


def first_paragraph(markdown):
    paragraphs = [p for p in markdown.split("\n\n") if p.strip() and not p.startswith("#")]
    return paragraphs[0] if paragraphs else ""


SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
SHORT = 300  # characters of prose on a slide without equations


def opening_sentences(markdown, limit=SHORT):
    """The first sentences of a paragraph, as many as fit in `limit` characters (at least one)."""
    sentences = SENTENCE_END.split(markdown.strip())
    kept = sentences[:1]
    for sentence in sentences[1:]:
        if len(" ".join([*kept, sentence])) > limit:
            break
        kept.append(sentence)
    return " ".join(kept)


def list_items(markdown):
    """The items of a Markdown bullet list, each with its continuation lines."""
    items = []
    for line in markdown.splitlines():
        if line.startswith("- "):
            items.append(line)
        elif items and line.startswith(" ") and line.strip():
            items[-1] += "\n" + line
    return items


# ------------------------------------------------------------------------ the chapter's parts


class Section:
    """One heading of the lecture and what its slides show."""

    def __init__(self, heading):
        self.heading = heading
        self.prose = []  # the section's Markdown, as the learner edition writes it
        self.items = []  # ("figure", number, caption, png) or ("code", source, output)

    @property
    def equations(self):
        return [m[0] for text in self.prose for m in DISPLAY_MATH.finditer(text)]


def printed_output(cell):
    """What a code cell prints (its text outputs), cut to MAX_OUTPUT_LINES lines."""
    text = "".join(
        o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
        for o in cell.outputs
        if o.output_type in ("stream", "execute_result")
    )
    lines = text.rstrip("\n").splitlines()
    if len(lines) > MAX_OUTPUT_LINES:
        lines = [*lines[:MAX_OUTPUT_LINES], "..."]
    return "\n".join(lines)


def figure_png(cell):
    return next(o.data["image/png"] for o in cell.outputs if "image/png" in o.get("data", {}))


class Lecture:
    """A chapter read for its slides: title, opening, sections, summary and exercises."""

    def __init__(self, path):
        self.path = pathlib.Path(path)
        self.notebook = nbformat.read(self.path, as_version=4)
        self.chapter = learner.Chapter(self.path)
        self.number = self.chapter.number
        self.sections, self.summary, self.opening = [], "", ""
        self.title = ""
        # the figures numbered as the website and the learner edition number them
        self.figures = {id(c): k for k, c in enumerate(learner._figure_cells(self.notebook), 1)}
        self._read(exercises.parse(self.notebook))

    def _read(self, items):
        section = None
        for item in items:
            if isinstance(item, exercises.Exercise):
                continue
            if item.cell_type == "markdown":
                lecture, *summary = SUMMARY.split(item.source, maxsplit=1)
                section = self._read_markdown(lecture, section)
                if summary:
                    summary = EXERCISES.split(summary[0], maxsplit=1)[0]
                    self.summary = learner.convert_markdown(summary, self.chapter)
                    return
            elif "remove-cell" not in item.metadata.get("tags", []):
                self._read_code(item, section)

    def _read_markdown(self, source, section):
        text = learner.convert_markdown(source, self.chapter) if source.strip() else ""
        if text.startswith("# "):
            title, _, rest = text.partition("\n")
            self.title, self.opening = title[2:].strip(), first_paragraph(rest)
            return section
        pieces = HEADING.split(text)  # [before, hashes, heading, body, hashes, heading, ...]
        if section is not None and pieces[0].strip():
            section.prose.append(pieces[0])
        for k in range(1, len(pieces), 3):
            section = Section(pieces[k + 1].strip())
            section.prose.append(pieces[k + 2])
            self.sections.append(section)
        return section

    def _read_code(self, cell, section):
        number = self.figures.get(id(cell))
        if number and section is not None:
            caption = cell.metadata["mystnb"]["figure"]["caption"]
            caption = learner.convert_markdown(caption, self.chapter)
            section.items.append(("figure", number, caption, figure_png(cell)))
        if SLIDE_TAG in cell.metadata.get("tags", []) and section is not None:
            section.items.append(("code", cell.source, printed_output(cell)))

    def exercise_lines(self):
        return [
            f"Exercise {self.number}.{k}: "
            + exercises.with_points(e.prompt.source, e.record).partition("\n")[0].split(" ", 1)[1]
            for k, e in enumerate(exercises.exercises(self.notebook), 1)
        ]


# --------------------------------------------------------------------------------- the deck


def slide(body, notes="", classes=""):
    aside = f'\n<aside class="notes">{notes}</aside>' if notes else ""
    cls = f' class="{classes}"' if classes else ""
    return f"<section{cls}>\n{body}{aside}\n</section>"


def section_slides(lecture, section, images):
    """The slides of one section: its heading with its equations, its figures, its code."""
    notes = plain_text("\n\n".join(section.prose))
    heading = render(f"## {section.heading}")
    equations = section.equations
    if equations:  # a slide for each group of displayed equations
        groups = range(0, len(equations), MAX_EQUATIONS)
        bodies = ["\n".join(map(render, equations[k : k + MAX_EQUATIONS])) for k in groups]
    else:  # or one with the section's opening sentences
        bodies = [render(opening_sentences(first_paragraph("\n\n".join(section.prose))))]
    kind = "equations" if equations else ""
    slides = [slide(heading + body, notes, kind) for body in bodies]
    for item in section.items:
        if item[0] == "figure":
            _, number, caption, png = item
            name = f"{lecture.path.stem}-figure-{number}.png"
            images[name] = base64.b64decode(png)
            label = f"Figure {lecture.number}.{number}"
            figure = (
                f'<figure><img src="img/{name}" alt="{label}: {plain_text(caption)}">'
                f"<figcaption>{render(f'{label}. {opening_sentences(caption, 160)}')}"
                "</figcaption></figure>"
            )
            slides.append(slide(figure, plain_text(caption) + "\n\n" + notes, "figure"))
        else:
            _, source, output = item
            code = f"<pre><code class='python' tabindex='0'>{html.escape(source)}</code></pre>"
            if output:
                code += f"<pre class='output'>{html.escape(output)}</pre>"
            slides.append(slide(render(f"### {section.heading}") + code, notes, "code"))
    return slides


def summary_slides(lecture):
    bullets = list_items(lecture.summary)
    groups = [[]]
    for bullet in bullets:
        full = len(groups[-1]) == MAX_BULLETS or len("".join(groups[-1]) + bullet) > MAX_SUMMARY
        if groups[-1] and full:
            groups.append([])
        groups[-1].append(bullet)
    return [
        slide(render("## Summary\n\n" + "\n".join(group)), classes="summary") for group in groups
    ]


def exercise_slide(lecture):
    """The exercises, and the chapter's page (relative: the classroom edition has its own)."""
    items = "\n".join(f"- {line}" for line in lecture.exercise_lines())
    page = f"../chapters/{lecture.path.stem}.html"
    return slide(
        render(f"## Exercises\n\n{items}\n\nThey are at the end of [the chapter]({page})."),
        classes="exercises",
    )


def deck_slides(path, images):
    """One chapter's slides, as HTML <section> elements; figures are added to `images`."""
    lecture = Lecture(path)
    version = release.status().line
    title = slide(
        f"<p class='kicker'>Chapter {lecture.number}</p><h1>{html.escape(lecture.title)}</h1>"
        + render(opening_sentences(lecture.opening, 2 * SHORT))
        + f"<p class='course'>{html.escape(learner.book_config()['title'])}"
        + f" · {html.escape(version)}"
        + "</p><p class='course-licence'>Text and figures CC BY-SA 4.0, code MIT</p>",
        classes="title",
    )
    slides = [title]
    for section in lecture.sections:
        slides.extend(section_slides(lecture, section, images))
    slides += [*summary_slides(lecture), exercise_slide(lecture)]
    return lecture, slides


def deck(path, images):
    """The HTML of one chapter's deck; its figures are added to `images` {file name: PNG}."""
    lecture, slides = deck_slides(path, images)
    return TEMPLATE.format(
        title=html.escape(f"Chapter {lecture.number}: {lecture.title} (slides)"),
        slides="\n".join(slides),
    )


def counts(path):
    """{"slides", "figures", "code"}: how many slides a chapter's deck has, of each kind."""
    _, slides = deck_slides(path, {})
    kinds = [re.match(r'<section(?: class="(\w+)")?', s)[1] for s in slides]
    return {"slides": len(slides), "figures": kinds.count("figure"), "code": kinds.count("code")}


TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="reveal/dist/reset.css">
<link rel="stylesheet" href="reveal/dist/reveal.css">
<link rel="stylesheet" href="reveal/dist/theme/white.css">
<link rel="stylesheet" href="slides.css">
<script>
  // MathJax: the website's offline copy; typeset once the deck is laid out.
  window.MathJax = {{tex: {{inlineMath: [["\\\\(", "\\\\)"]], displayMath: [["\\\\[", "\\\\]"]]}},
                    startup: {{typeset: true}}}};
</script>
<script defer src="../_static/mathjax/tex-chtml.js"></script>
</head>
<body>
<div class="reveal"><div class="slides">
{slides}
</div></div>
<script src="reveal/dist/reveal.js"></script>
<script src="reveal/plugin/notes/notes.js"></script>
<script>
  // 16:9 at 1280 x 720, scaled to the screen; the slide number and the URL follow the slide.
  Reveal.initialize({{width: 1280, height: 720, hash: true, slideNumber: "c/t",
                      transition: "fade", transitionSpeed: "fast", plugins: [RevealNotes]}});
</script>
</body>
</html>
"""


# ------------------------------------------------------------------------------- the build


def copy_assets(out):
    """reveal.js and the course's slide style beside the decks; MathJax where the website
    keeps it, if the website was not built there."""
    shutil.copytree(REVEAL, out / "reveal", dirs_exist_ok=True)
    shutil.copy2(STYLE, out / "slides.css")
    mathjax = out.parent / "_static" / "mathjax"
    if not (mathjax / "tex-chtml.js").is_file():
        spec = importlib.util.find_spec("sphinx-mathjax-offline")
        shutil.copytree(pathlib.Path(spec.origin).parent / "static" / "mathjax", mathjax)


def build(site=ROOT / "_build" / "html", chapters=CHAPTERS):
    """Every chapter's deck into site/slides/; returns the folder."""
    out = pathlib.Path(site) / FOLDER
    images = {}
    (out / "img").mkdir(parents=True, exist_ok=True)
    copy_assets(out)
    for path in chapters:
        (out / deck_name(path)).write_text(deck(path, images), encoding="utf-8")
    for name, png in images.items():
        (out / "img" / name).write_bytes(png)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", type=pathlib.Path, default=ROOT / "_build" / "html")
    out = build(parser.parse_args(argv).site)
    print(f"slides: {len(CHAPTERS)} decks in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
