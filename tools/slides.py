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
  it prints (long code in smaller type, chosen from its lines; long output on the next slide);
- the chapter's summary, a slide for each of its concept checks (to ask the room), and its
  exercises with their difficulty and points.

The speaker notes (press S) are short, and each slide has its own: the sentences that lead up
to a slide's equations (a long equation named where its sentence goes on), the rest of a
section's opening, a figure's caption or, where the chapter says no more of it, what to point
out in it (its alt text), the paragraph before a code cell, a concept check's answer and
explanation, and each exercise's kind and points; where an output or a later summary slide has
nothing of its own, a question for the room.

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

from tools import CHAPTERS, ROOT, concepts, exercises, learner, release
from tools.plain_maths import maths, unicode_maths

REVEAL = ROOT / "vendor" / "reveal.js"
STYLE = ROOT / "templates" / "slides.css"
FOLDER = "slides"
SLIDE_TAG = "slide"  # a code cell shown on the slides with its output
SUMMARY = re.compile(r"^## Summary[ \t]*$", re.M)  # the lecture ends here
EXERCISES = re.compile(r"^## Exercises[ \t]*$", re.M)
MAX_OUTPUT_LINES = 8  # printed lines shown under the code; longer output gets its own slide
OUTPUT_SLIDE_LINES = 24  # printed lines on a slide of their own (then "...")
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
    """Speaker notes: the prose without its markup, its maths as Unicode text (the speaker
    view typesets nothing), tidied (`tidy`)."""
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", markdown)  # links -> their text
    text = unicode_maths(re.sub(r"[*`]", "", text))
    return html.escape(tidy(re.sub(r"\s*\n\s*", " ", text).strip()))


# "above" or "below" pointing at the chapter's page (the notes have none): not a comparison
# ("above the diagonal", "below 0.2", "far above them")
PAGE_POINTER = re.compile(
    r"\s+(?:above|below)\b"
    r"(?!\s+(?:(?:the|a|an|it|its|that|them|this|these|those|zero|one)\b|\d|[A-Z]))"
)


# the page a sentence of the chapter speaks from, as a lecturer says it of the slides
THIS_PAGE = [
    (re.compile(r"\b(?:on )?this page(?:'s)?\b"), "the chapter's page"),
    (re.compile(r"\b([Tt])he notebook (asserts|checks)\b"), r"\1he chapter's code \2"),
]


def tidy(text):
    """A note as a lecturer reads it aloud: nothing pointing at a page that is not there
    ("printed above"; "this page" is the chapter's), no double full stop, a capital first
    letter, and an end that ends (a closing colon or "..." becomes a full stop)."""
    text = PAGE_POINTER.sub("", re.sub(r"\bas (above|below)\b", "as before", text))
    for pattern, said in THIS_PAGE:
        text = pattern.sub(said, text)
    text = re.sub(r"(?<![.])\.\.(?![.])", ".", text)
    if re.match(r"[a-z]+\b(?![-.(_'’\w])", text):  # a word, not a name (k-NN, llama.cpp)
        text = text[0].upper() + text[1:]
    return re.sub(r"\s*(:|…|\.\.\.)$", ".", text.rstrip())


def first_paragraph(markdown):
    paragraphs = [p for p in markdown.split("\n\n") if p.strip() and not p.startswith("#")]
    return paragraphs[0] if paragraphs else ""


# the next sentence may open a link; an abbreviation ("Xiao et al. (2024) noticed", "e.g.")
# ends none
SENTENCE_END = re.compile(
    r"(?<=[.!?])(?<!\bet al\.)(?<!\b[Ee]\.g\.)(?<!\bi\.e\.)(?<!\bcf\.)(?<!\bFig\.)(?<!\bEq\.)"
    r"\s+(?=[A-Z(\[])"
)
MATH_SPAN = re.compile(r"\$\$.*?\$\$|\$[^$]*\$|\\\(.*?\\\)", re.S)


def split_sentences(text, maxsplit=0):
    """A text's sentences, never cut inside brackets ("( ... )", "[ ... ]") nor inside maths:
    a sentence end counts only where every bracket opened before it is closed."""
    masked = MATH_SPAN.sub(lambda m: "x" * len(m[0]), text)  # maths: no brackets, no ends
    pieces, start, depth, at = [], 0, 0, 0
    for end in SENTENCE_END.finditer(masked):
        # the brackets opened and closed since the last sentence end
        depth += sum(masked.count(c, at, end.start()) for c in "([") - sum(
            masked.count(c, at, end.start()) for c in ")]"
        )
        at = end.start()
        # a bracket the text never closes (a slip in the chapter) does not hold the cut back
        closes = sum(masked.count(c, at) for c in ")]")
        if (depth <= 0 or closes < depth) and (not maxsplit or len(pieces) < maxsplit):
            pieces.append(text[start : end.start()])
            start, depth = end.end(), 0
    return [*pieces, text[start:]]


SHORT = 300  # characters of prose on a slide without equations
FEW_WORDS_SHOWN = 90  # characters: a slide's opening this short takes its next sentence too
NOTES = 600  # characters of speaker notes on one slide (about 100 words)


def opening_sentences(markdown, limit=SHORT):
    """The first sentences of a paragraph, as many as fit in `limit` characters (at least one)."""
    sentences = split_sentences(markdown.strip())
    kept = sentences[:1]
    for sentence in sentences[1:]:
        if len(" ".join([*kept, sentence])) > limit:
            break
        kept.append(sentence)
    return " ".join(kept)


def last_sentences(markdown, limit=SHORT):
    """The last sentences of a text, as many as fit in `limit` characters (at least one)."""
    sentences = split_sentences(markdown.strip())
    kept = sentences[-1:]
    for sentence in reversed(sentences[:-1]):
        if len(" ".join([sentence, *kept])) > limit:
            break
        kept.insert(0, sentence)
    return " ".join(kept)


def inline_equations(markdown):
    """A displayed equation inside a sentence (the text before it does not end one, or the
    text after it goes on in lower case) as inline maths, the paragraph joined around it; any
    other as a paragraph break."""

    def inline(match):
        before, after = markdown[: match.start()].rstrip(), markdown[match.end() :]
        ended = not before or before.endswith((".", "!", "?")) or before.endswith("\n#")
        goes_on = re.match(r"\s*[a-z,.;]", after)
        if ended and not goes_on:
            return "\n\n"
        return (
            ("" if ended else "\0") + f"${equation_tex(match[0])}$" + ("\0" if goes_on else "\n\n")
        )

    return re.sub(r"\s*\0\s*", " ", DISPLAY_MATH.sub(inline, markdown))


def equation_tex(block):
    """$$ ... $$ (label) -> its LaTeX."""
    return block.strip().split("$$")[1].strip()


def paragraphs(markdown):
    """The prose paragraphs of a text (no headings, lists, tables, nor the asides that the
    learner edition writes as quotes: "> **Where the sources differ**"), a displayed equation
    inside a paragraph kept in it as inline maths."""
    text = inline_equations(markdown)
    return [
        p.strip()
        for p in text.split("\n\n")
        if p.strip() and not re.match(r"\s*(#|- |\d+\. |\||```|:::|<|>)", p)
    ]


# A sentence about the notebook, not the idea: its cells ("the next cell times ..."), the code
# below or above, what is printed; or one naming the steps of a numbered list ("Steps 2 and 3
# are ...") that the notes do not hold
CELL_TALK = re.compile(
    r"\bcells?\b|\bcode (?:below|above)\b|\bprint(?:s|ed|out)?\b|\b[Ss]teps? \d", re.I
)


A_CELL = re.compile(
    r"\b([Tt])he (?:next |following |last |previous )?cell"
    r"(?: (?:below|above|after (?:this one|it)))?|\s*\((?:next|this|the) cell\)"
)


def as_shown(markdown):
    """A slide's own text (a section's opening, a caption) as the room sees it: nothing that
    points at the chapter's page ("each property below is checked" -> "each property is
    checked"), a cell read as the code ("the cell below calls it" -> "the code calls it")."""
    text = PAGE_POINTER.sub("", re.sub(r"\bas (above|below)\b", "as before", markdown))
    return A_CELL.sub(lambda m: f"{m[1]}he code" if m[1] else "", text)


def without_cell_talk(markdown):
    """A text without its sentences about the notebook's cells and printouts (`CELL_TALK`);
    where every sentence is, the text with "the cell" read as "the code"."""
    sentences = [t.strip() for t in split_sentences(markdown.strip()) if t.strip()]
    kept = [t for t in sentences if not CELL_TALK.search(t)]
    if not kept:  # all about the code: said of the code instead
        said = (A_CELL.sub(lambda m: f"{m[1]}he code" if m[1] else "", t) for t in sentences)
        kept = [t for t in said if not CELL_TALK.search(t)]
    return " ".join(kept)


def notes_text(markdown, limit=NOTES):
    """Speaker notes from prose: no sentence about the notebook's cells, cut at a sentence end
    to `limit` characters."""
    markdown = without_cell_talk(markdown)
    return plain_text(opening_sentences(markdown, limit)) if markdown.strip() else ""


LONG_EQUATION = 100  # characters of an equation read as text in the notes; longer: named


def equation_sentence(before, block, after):
    """The notes for a displayed equation: the last sentences of the paragraphs `before` it,
    then, where it is part of a sentence, the equation read as text and the rest of that
    sentence from the paragraphs `after` it; where nothing leads up to it, what follows."""
    lead = last_sentences(before[-1], NOTES // MAX_EQUATIONS) if before else ""
    goes_on = bool(after) and re.match(r"[a-z,.;]", after[0])
    if lead and lead.endswith((".", "!", "?")) and not goes_on:
        return lead
    if not lead and not goes_on:
        return opening_sentences(after[0], NOTES // MAX_EQUATIONS) if after else ""
    tex = equation_tex(block)
    rest = opening_sentences(after[0], 0) if goes_on else ""
    # an equation that ends the sentence it sits in, or that ends with its own comma: the
    # placeholder that stands for a long one says that punctuation too
    own = tex.rstrip()[-1] if tex.rstrip().endswith((",", ";", ".")) else ""
    ends = not rest or rest[:1].isupper()  # the equation ends its sentence
    mark = "." if ends else own
    space = ", " if rest.startswith("where ") else " " if rest[:1].isalpha() else ""
    # the lead-in, the equation and the rest of its sentence; shorter where that is long
    named = placeholder(opening(lead))
    for said in (f"${tex}$" + ("." if ends and not own else ""), named + mark):
        if len(maths(tex)) > LONG_EQUATION and said.startswith("$"):
            continue
        # punctuated as read: "\\text{otherwise,}" ends with its comma, as "x," does
        punctuated = plain_text(said).rstrip().endswith((",", ";", "."))
        gap = " " if space == ", " and punctuated else space
        if punctuated and rest and not gap:
            gap = " "
        for words in (f"{lead} {said}{gap}{rest}", f"{opening(lead)}{said}{gap}{rest}"):
            if len(plain_text(words)) <= NOTES // 2:
                return words.strip()
    gap = " " if mark and rest else space
    return f"{opening(lead)}{named}{mark}{gap}{rest}".strip()


PLACEHOLDER = "the equation on the slide"  # in the notes, for an equation too long to read
# The words after which the placeholder completes the sentence as the equation did ("gives
# the equation on the slide", "Then the equation on the slide"); after any other word, most
# often a noun the equation spells out ("the weights", "its own frequency"), it is set off
# in brackets: "proposed the weights (the equation on the slide), where K is a kernel".
LEADS_STRAIGHT_IN = frozenset(
    "is are be was were becomes become gives give reads read computes compute produces"
    " produce obtains obtain gets get has have writes write makes make so then and or"
    " thus hence by".split()
)


def placeholder(lead):
    """The placeholder for a long equation after its unfinished lead-in `lead`."""
    words = re.findall(r"[\w']+|\S", lead)
    last = words[-1].lower() if words else ""
    straight = not words or last == ":" or last in LEADS_STRAIGHT_IN
    return PLACEHOLDER if straight else f"({PLACEHOLDER})"


def opening(lead):
    """The unfinished sentence at the end of a lead-in (what the equation completes)."""
    return split_sentences(lead)[-1] + " " if lead else ""


LIST_MARK = re.compile(r"(?:- |\d+\. )")
LIST_ROOM = 520  # characters of a list's items on a slide, after its lead-in


TABLE_ROWS = 8  # body rows of a Markdown table that a slide shows whole under its lead-in


def list_after(text, paragraph):
    """What a `paragraph` of `text` that ends with ":" announces, where a list or a table
    follows it: the list's items (bullets or numbered), each its first sentence, as Markdown,
    as many as fit in `LIST_ROOM` characters ("- ..." for the rest); the table whole where it
    has at most `TABLE_ROWS` rows; else ""."""
    at = text.find(paragraph.strip())
    if at < 0 or not paragraph.rstrip().endswith(":"):
        return ""
    following = text[at + len(paragraph.strip()) :].lstrip("\n").split("\n\n")
    rows = following[0].strip().splitlines()
    if rows and all(row.startswith("|") for row in rows):  # a table: its header, rule, rows
        return following[0].strip() if len(rows) <= TABLE_ROWS + 2 else ""
    items = []
    for block in following:
        if LIST_MARK.match(block):  # items, one per line that starts with a mark
            items += re.split(r"\n(?=- |\d+\. )", block)
        elif not (items and block.startswith(" ")):  # an item's own later paragraph goes on
            break
    marks = [LIST_MARK.match(item)[0] for item in items]
    firsts = [
        opening_sentences(re.sub(r"\s*\n\s*", " ", item[len(mark) :]), 0)
        for mark, item in zip(marks, items)
    ]
    names = [re.match(r"\*\*[^*]+\*\*[.:]?", first) for first in firsts]
    if sum(map(len, firsts)) > LIST_ROOM and all(names):  # "**Fixed patterns.** ...": names
        firsts = [name[0].rstrip(":") for name in names]
    shown, room = [], LIST_ROOM
    for mark, first in zip(marks, firsts):
        room -= len(first)
        if room < 0:
            shown.append("- …" if mark == "- " else "…")
            break
        shown.append(mark + first)
    return "\n".join(shown)


def without_lead_in(paragraph):
    """A paragraph without its last sentence where that one leads in (ends with ":") to what
    the notes do not hold: a list, a code cell, an equation; a paragraph of one sentence stays
    as it is."""
    sentences = split_sentences(paragraph.strip())
    if len(sentences) > 1 and sentences[-1].rstrip().endswith(":"):
        sentences = sentences[:-1]
    return " ".join(sentences)


def lead_in_note(lead):
    """A lead-in as a line of the notes, its equation read as text."""
    lead = without_cell_talk(lead)
    return plain_text(lead) if lead.strip() else ""


def list_items(markdown):
    """The items of a Markdown bullet list, each with its continuation lines (indented, or
    not: a lazy continuation line, as CommonMark reads it, up to a blank line)."""
    items, open_item = [], False
    for line in markdown.splitlines():
        if line.startswith("- "):
            items.append(line)
            open_item = True
        elif items and line.strip() and (open_item or line.startswith(" ")):
            items[-1] += "\n" + line
        else:
            open_item = False
    return items


EXERCISE_NUMBER = re.compile(r"\b([Ee]xercises? )(\d+(?:(?:,| and| or) \d+)*)\b(?![.\d])")
OTHER_CHAPTER = re.compile(r"[Cc]hapter (\d+)(?:'s|,) $")


def qualified_exercises(text, chapter):
    """ "(exercise 4)" -> "(exercise 12.4)" in chapter 12 (the slides' exercises are numbered
    so); "chapter 10, exercise 4" -> "chapter 10, exercise 10.4"."""

    def qualify(match):
        other = OTHER_CHAPTER.search(text[max(0, match.start() - 14) : match.start()])
        number = other[1] if other else chapter
        numbers = re.sub(r"\d+", lambda n: f"{number}.{n[0]}", match[2])
        return match[1] + numbers

    return EXERCISE_NUMBER.sub(qualify, text)


# a sentence that opens by pointing at the page: "above" or "below" in its first five words
OPENS_POINTING = re.compile(r"^\W*(?:[\w'’-]+\W+){0,4}?(?:above|below)\b")


def points_away(sentence):
    """Whether a sentence opens by pointing at the chapter's page ("The table above ...",
    "Proved above", "Nothing in the equations above ..."), which the slides do not show."""
    found = OPENS_POINTING.match(sentence)
    if found and PAGE_POINTER.search(sentence[: found.end() + 30] + " x"):
        return True
    # or a sentence (not a long run of them) about what the page shows above or below
    return len(sentence) <= SHORT and bool(
        PAGE_POINTER.search(sentence) or CELL_TALK.search(sentence)
    )


def not_pointing(markdown):
    """A section's text without the sentences that open its first paragraph by pointing at
    the page ("The tables above change one layer at a time."): it opens with the next one,
    or with the next paragraph."""
    first = first_paragraph(markdown)
    sentences = split_sentences(first.strip()) if first.strip() else []
    while sentences and points_away(sentences[0]):
        sentences.pop(0)
    if not first.strip() or len(sentences) == len(split_sentences(first.strip())):
        return markdown
    return markdown.replace(first, " ".join(sentences), 1)


# ------------------------------------------------------------------------ the chapter's parts


# A sentence that concludes (answers a section's question), one that corrects a number
CONCLUSION = re.compile(r"^(So|Thus|Hence|Therefore|In short|The answer)\b")
CORRECTION = re.compile(r"\d[\d.]*%?,? not \$?\d")


class Section:
    """One heading of the lecture and what its slides show."""

    def __init__(self, heading, level=2):
        self.heading, self.level = heading, level  # level 2 for ##, 3 for ###
        self.parts = []  # a ## section's ### sections (its notes where it has no prose)
        self.prose = []  # the section's Markdown, as the learner edition writes it
        # ("figure", number, caption, png, lead-in, alt text) or ("code", source, output,
        # the paragraph before it, the paragraph after it)
        self.items = []

    @property
    def equations(self):
        return [m[0] for text in self.prose for m in DISPLAY_MATH.finditer(text)]

    @property
    def lead_ins(self):
        """For each displayed equation, the words that lead up to it: the sentences before it
        (not those read with the equation before), and the sentence it ends or sits in, the
        equation read as text (or named, where it is long)."""
        leads = []
        for text in self.prose:
            found = list(DISPLAY_MATH.finditer(text))
            for k, match in enumerate(found):
                before = paragraphs(text[found[k - 1].end() if k else 0 : match.start()])
                if before and k and re.match(r"[a-z,.;]", before[0]):  # the last one's end
                    before[0] = (split_sentences(before[0], maxsplit=1)[1:] or [""])[0]
                before = [p for p in before if p.strip()]
                end = found[k + 1].start() if k + 1 < len(found) else len(text)
                after = paragraphs(text[match.end() : end])
                leads.append(equation_sentence(before, match[0], after))
        return leads

    def point(self, shown):
        """The result of a section without equations, for its slide beside its `shown` opening:
        where its heading asks a question, the sentence that answers it ("So, ..."); where the
        section corrects a number, the sentence that does ("... gives 82.2%, not 93.3%");
        else nothing."""
        prose = paragraphs("\n\n".join(self.prose))
        if not prose:
            return ""
        later = [prose[0][len(shown) :], *prose[1:]]
        sentences = [t for p in later for t in split_sentences(p.strip()) if t]
        answer = CONCLUSION if self.heading.rstrip().endswith("?") else CORRECTION
        found = (t for t in sentences if answer.search(t) and not t.endswith(":"))
        return next((t for t in found if len(t) <= 2 * SHORT), "")

    def opening_notes(self, point=""):
        """What the slide of a section without equations leaves unsaid: the rest of its first
        paragraph, then the first sentence of each later one (not the `point` it shows)."""
        text = "\n\n".join(self.prose)
        # the paragraphs, or where the section is a list, the first sentence of each item
        items = [opening_sentences(item[2:], 0) for item in list_items(text)]
        prose = paragraphs(text) or ([" ".join(items)] if items else [])
        if not prose:  # a heading over its parts, each on the slides that follow
            return plain_text("In this part: " + "; ".join(self.parts) + ".") if self.parts else ""
        # a paragraph that leads up to a code cell is that code slide's notes, not these
        leads = {item[3] for item in self.items if item[0] == "code"}
        later = [p for p in prose[1:] if last_sentences(p, NOTES) not in leads]
        shown = opening_sentences(prose[0])
        rest = [prose[0][len(shown) :].strip()] + [opening_sentences(p, 0) for p in later]
        rest = [r.replace(point, "").strip() if point else r for r in rest]
        # a sentence that leads in to what the notes do not hold (a list, a code cell): left
        # out, unless it is all there is
        kept = [without_lead_in(r) for r in rest if r]
        kept = [r for r in kept if not r.rstrip().endswith(":")] or kept
        said = " ".join(kept) or prose[0]
        return notes_text(said)


def printed_output(cell):
    """What a code cell prints (its text outputs), cut to OUTPUT_SLIDE_LINES lines."""
    text = "".join(
        o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
        for o in cell.outputs
        if o.output_type in ("stream", "execute_result")
    )
    lines = text.rstrip("\n").splitlines()
    if len(lines) > OUTPUT_SLIDE_LINES:
        lines = [*lines[:OUTPUT_SLIDE_LINES], "..."]
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
        self._awaiting = None  # the section whose last code cell waits for its next paragraph
        self._read(exercises.parse(self.notebook))
        for section in self.sections:  # its first paragraph, wherever it is
            k = next((k for k, p in enumerate(section.prose) if first_paragraph(p)), None)
            if k is not None:
                section.prose[k] = not_pointing(section.prose[k])

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
                    summary = learner.convert_markdown(summary, self.chapter)
                    self.summary = qualified_exercises(summary, self.number)
                    return
            elif "remove-cell" not in item.metadata.get("tags", []):
                self._read_code(item, section)

    def _read_markdown(self, source, section):
        text = learner.convert_markdown(source, self.chapter) if source.strip() else ""
        text = qualified_exercises(text, self.number)
        if text.startswith("# "):
            title, _, rest = text.partition("\n")
            self.title, self.opening = title[2:].strip(), first_paragraph(rest)
            return section
        pieces = HEADING.split(text)  # [before, hashes, heading, body, hashes, heading, ...]
        self._follow_code(pieces[0])
        if section is not None and pieces[0].strip():
            section.prose.append(pieces[0])
        for k in range(1, len(pieces), 3):
            section = Section(pieces[k + 1].strip(), len(pieces[k]))
            section.prose.append(pieces[k + 2])
            parent = next((s for s in reversed(self.sections) if s.level == 2), None)
            if section.level == 3 and parent is not None:
                parent.parts.append(section.heading)
            self.sections.append(section)
        return section

    def _follow_code(self, text):
        """The first paragraph after a code cell of the slides (what the chapter says of what
        it prints), into that cell's item; none where a heading follows."""
        section, self._awaiting = self._awaiting, None
        after = paragraphs(text)
        if section is None or not after:
            return
        k = max(k for k, item in enumerate(section.items) if item[0] == "code")
        section.items[k] = (*section.items[k][:4], after[0])

    def _read_code(self, cell, section):
        number = self.figures.get(id(cell))
        if number and section is not None:
            caption = cell.metadata["mystnb"]["figure"]["caption"]
            caption = learner.convert_markdown(caption, self.chapter)
            before = paragraphs(section.prose[-1]) if section.prose else []
            lead = last_sentences(before[-1], NOTES) if before else ""
            alt = cell.metadata["mystnb"].get("image", {}).get("alt", "")
            section.items.append(("figure", number, caption, figure_png(cell), lead, alt))
        if SLIDE_TAG in cell.metadata.get("tags", []) and section is not None:
            before = paragraphs(section.prose[-1]) if section.prose else []
            lead = last_sentences(before[-1], NOTES) if before else ""
            section.items.append(("code", cell.source, printed_output(cell), lead, ""))
            self._awaiting = section  # the paragraph after the cell, once it is read

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
    heading = render(f"## {section.heading}")
    subheading = render(f"### {section.heading}")
    equations = section.equations
    if equations:  # a slide for each group of displayed equations, with their lead-ins
        groups = range(0, len(equations), MAX_EQUATIONS)
        bodies = ["\n".join(map(render, equations[k : k + MAX_EQUATIONS])) for k in groups]
        leads = section.lead_ins
        notes = ["<br>".join(map(lead_in_note, leads[k : k + MAX_EQUATIONS])) for k in groups]
    else:  # or one with the section's opening sentences
        text = "\n\n".join(section.prose)
        opening = opening_sentences(first_paragraph(text))
        if len(opening) < FEW_WORDS_SHOWN:  # one short sentence: the next one too
            opening = opening_sentences(first_paragraph(text), SHORT + SHORT // 2)
        point = section.point(opening)
        announced = list_after(text, opening)  # "... in three steps:" and the steps
        if announced:
            opening, point = f"{opening}\n\n{announced}", ""
        if not opening.strip() and section.parts:  # a heading over its parts: their list
            opening = "In this part:\n\n" + "\n".join(f"- {part}" for part in section.parts)
        bodies = [
            render(as_shown(opening))
            + (render(point).replace("<p>", "<p class='point'>", 1) if point else "")
        ]
        notes = [section.opening_notes(point)]
    kind = "equations" if equations else ""
    slides = [
        slide((heading if k == 0 else subheading) + body, note, kind)
        for k, (body, note) in enumerate(zip(bodies, notes))
    ]
    said = set(notes)  # no two slides with the same notes
    for item in section.items:
        if item[0] == "figure":
            _, number, caption, png, lead, alt = item
            name = f"{lecture.path.stem}-figure-{number}.png"
            images[name] = base64.b64decode(png)
            label = f"Figure {lecture.number}.{number}"
            shown = opening_sentences(caption, CAPTION)
            point = html.escape(pointing_out(alt), quote=True)  # if its notes are all said before
            figure = (
                f'<figure data-point-out="{point}">'
                f'<img src="img/{name}" alt="{label}: {plain_text(caption)}">'
                f"<figcaption>{render(f'{label}. {as_shown(shown)}')}</figcaption></figure>"
            )
            notes = figure_notes(lecture, number, caption[len(shown) :], lead, alt)
            if notes in said:  # the figure before says it already: what to point out in it
                notes = pointing_out(alt) or plain_text(
                    f"{label}: the chapter says no more of it than its caption."
                )
            said.add(notes)
            slides.append(slide(subheading + figure, notes, "figure"))
        else:
            slides.extend(code_slides(subheading, section, item))
    return slides


# The code slides' type sizes (em of the slide's 30 px), largest first: the largest at which a
# cell's code and what it prints fit under the heading; its output goes on a slide of its own
# where it is long, or where they do not fit together even at the smallest size but one.
CODE_SIZES = {"": 0.6, "code-m": 0.555}  # 18 and 16.65 px (17.3 and 16 on a 1280 x 720 screen)
OUTPUT_SCALE = 0.87  # the output's type, against the code's
CODE_ROOM = 600, 1180  # px of the 1280 x 720 slide left under the heading: height, width
SLIDE_PX = 30


def code_height(lines, em):
    """The height in px of a block of `lines` lines at `em` (line height 1.2, its padding and
    margins about 2.5 lines)."""
    return (lines * 1.2 + 2.5) * em * SLIDE_PX if lines else 0


def code_size(source, output, sizes=CODE_SIZES):
    """The largest of `sizes` ({class: em}) at which the code and its output fit under the
    heading (a monospaced character is 0.6 em wide); None where none does."""
    code, printed = source.splitlines() or [""], output.splitlines()
    longest = max(map(len, code + printed))
    height, width = CODE_ROOM
    for name, em in sizes.items():
        out_em = max(em * OUTPUT_SCALE, list(CODE_SIZES.values())[-1])  # 16 px at least
        tall = code_height(len(code), em) + code_height(len(printed), out_em)
        if tall <= height and longest * 0.6 * em * SLIDE_PX <= width:
            return name
    return None


def code_parts(source):
    """A cell's code in parts that each fit a slide at the smallest size: cut at a blank line
    (else at any line) before the part grows too tall."""
    lines, parts = source.splitlines(), []
    em = list(CODE_SIZES.values())[-1]
    most = int((CODE_ROOM[0] / (em * SLIDE_PX) - 2.5) / 1.2)  # lines that fit
    while len(lines) > most:
        blank = [k for k in range(most // 2, most) if not lines[k].strip()]
        cut = blank[-1] if blank else most
        parts.append("\n".join(lines[:cut]).rstrip("\n"))
        lines = lines[cut:]
        while lines and not lines[0].strip():
            lines.pop(0)
    return [*parts, "\n".join(lines)]


def code_slides(subheading, section, item):
    """A code cell's slide, its type sized to fit; what it prints on the next slide where it
    is long or the two do not fit together; code too long for one slide over two or more."""
    _, source, output, lead, after = item
    *first, last = code_parts(source)
    if first:  # the cell over several slides, then what it prints
        slides = [
            slide(
                (subheading if k == 0 else subheading.replace("</h3>", " (continued)</h3>"))
                + f"<pre><code class='python' tabindex='0'>{html.escape(part)}</code></pre>",
                notes_text(lead)
                if k == 0
                else f"The code, continued ({k + 1} of {1 + len(first)}).",
                "code code-m" if k == 0 else "code continued code-m",
            )
            for k, part in enumerate([*first, last])
        ]
        said = notes_text(after) or plain_text(PREDICT.format("slides", section.heading))
        printed = f"<pre class='output'>{html.escape(output)}</pre>"
        out = slide(subheading + "<p class='kicker'>It prints</p>" + printed, said, "output")
        return slides + ([out] if output else [])
    together = dict(list(CODE_SIZES.items())[:-1])  # not the smallest: split first
    size = code_size(source, output, together)
    apart = bool(output) and (size is None or len(output.splitlines()) > MAX_OUTPUT_LINES)
    size = code_size(source, "", together) if apart else size
    if size is None:
        size = code_size(source, "") or list(CODE_SIZES)[-1]
    code = f"<pre><code class='python' tabindex='0'>{html.escape(source)}</code></pre>"
    printed = f"<pre class='output'>{html.escape(output)}</pre>" if output else ""
    kind = f"code {size}".strip()
    if not apart:
        return [slide(subheading + code + printed, notes_text(lead), kind)]
    shown = slide(subheading + code, notes_text(lead), kind)
    said = notes_text(after) or plain_text(PREDICT.format("slide", section.heading))
    return [shown, slide(subheading + "<p class='kicker'>It prints</p>" + printed, said, "output")]


# an output slide's notes where the chapter says nothing of what its code prints
PREDICT = (
    "What the code on the {} before prints ({}): before showing it, ask the room what they "
    "expect it to print, then read it out."
)
CAPTION = 160  # characters of a figure's caption under it on the slide
FEW_WORDS = 60  # characters: notes this short say too little on their own


def pointing_out(alt):
    """A figure's alt text (what it shows, in words) as notes: what to point out in it."""
    return notes_text(f"To point out: {alt[0].lower()}{alt[1:]}") if alt.strip() else ""


def figure_notes(lecture, number, unshown, lead, alt=""):
    """What a figure's slide does not show: what the chapter says where it refers to the
    figure ("Fig. 4.2 shows ..."), then the rest of its caption; else the paragraph that leads
    up to it; where the chapter says nothing more, what its alt text says it shows; never the
    caption the slide shows."""
    cited = re.compile(rf"\bFig(?:ure|\.)\s*{lecture.number}\.{number}(?!\d)")
    texts = [p for section in lecture.sections for p in paragraphs("\n\n".join(section.prose))]
    refers = next((p for p in texts if cited.search(p)), "")
    refers = " ".join(t for t in split_sentences(refers) if cited.search(t))  # its words
    said = " ".join(t for t in (refers, unshown.strip()) if t)
    if len(said) < FEW_WORDS:  # little or nothing: what leads up to the figure too
        said = f"{said} {lead}".strip()
    return (
        notes_text(said)
        or pointing_out(alt)
        or plain_text("The chapter says no more of it than its caption.")
    )


LONG_BULLET = 40  # words of a summary bullet on a slide; a longer one shows its first sentence


def short_bullet(bullet):
    """A summary bullet as its slide shows it, and what the notes say of it: its first
    sentence where it is long (no sentence pointing at the page), the rest in the notes."""
    text = re.sub(r"\s+", " ", bullet[2:]).strip()
    text = re.sub(r",? as (?:\w+ )?(?:above|below)(?=[.,;])", "", text)  # "..., as measured above."
    sentences = [t for t in split_sentences(text) if not points_away(t)] or [text]
    if len(" ".join(sentences).split()) <= LONG_BULLET:
        return "- " + " ".join(sentences), ""
    return "- " + sentences[0], " ".join(sentences[1:])


def summary_slides(lecture):
    bullets, rests = zip(*map(short_bullet, list_items(lecture.summary))) or ((), ())
    groups = [[]]
    for bullet in bullets:
        full = len(groups[-1]) == MAX_BULLETS or len("".join(groups[-1]) + bullet) > MAX_SUMMARY
        if groups[-1] and full:
            groups.append([])
        groups[-1].append(bullet)
    checks = len(concepts.load(lecture.number)) if lecture.number in CONCEPT_CHAPTERS else 0
    first = lecture.exercise_lines()[:1]
    notes = plain_text(
        f"The chapter in {len(bullets)} points. "
        + (
            f"The {checks} concept checks that follow test them: ask the room, then reveal "
            "the answer, which these notes give. "
            if checks
            else ""
        )
        + (f"To set afterwards: {first[0]}." if first else "")
    )
    # a later summary slide: its points, and a question for the room (its muddiest point)
    later = "The summary, points {} to {} of {}: ask the room which of them they could not " + (
        f"yet explain to a neighbour; the {checks} concept checks that follow test them."
        if checks
        else "yet explain to a neighbour."
    )
    # the rest of each long bullet after the slide's own notes, cut to fit
    rest = {b: r for b, r in zip(bullets, rests) if r}
    said = [" ".join(rest[b] for b in group if b in rest) for group in groups]
    return [
        slide(
            render("## Summary\n\n" + "\n".join(group)),
            " ".join(
                t
                for t in (
                    later.format(*shown_points(groups, k), len(bullets)) if k else notes,
                    notes_text(more, 450),
                )
                if t
            ),
            "summary",
        )
        for k, (group, more) in enumerate(zip(groups, said))
    ]


def shown_points(groups, k):
    """The first and last number of the summary points on slide k of `groups`."""
    first = sum(map(len, groups[:k])) + 1
    return first, first + len(groups[k]) - 1


CONCEPT_CHAPTERS = {int(path.stem[2:]) for path in concepts.chapter_files()}


# a subscript in the concept checks' plain text (W_Q, d_model, m_old): a symbol of one or two
# letters and a subscript of at most five, not a name in code (kv_heads, top_k, is_causal)
SUBSCRIPT = re.compile(r"(?<![A-Za-z0-9_])([A-Za-z]{1,2})_([A-Za-z0-9]{1,5})(?![A-Za-z0-9_(])")


def concept_html(text):
    """A concept check's plain text as the slide shows it: escaped, W_Q as W<sub>Q</sub>."""
    return SUBSCRIPT.sub(r"\1<sub>\2</sub>", html.escape(text))


def concept_slides(lecture):
    """One slide for each of the chapter's concept checks: the question and its options on the
    slide, the answer and its explanation in the notes."""
    if lecture.number not in CONCEPT_CHAPTERS:
        return []
    slides = []
    for q in concepts.load(lecture.number):
        body = f"<p class='kicker'>Concept check {lecture.number}.{q.number}</p>"
        body += f"<p class='prompt'>{concept_html(q.prompt)}</p>"
        if q.kind in ("choice", "order"):
            tag = "ol type='A'" if q.kind == "choice" else "ul"
            options = "".join(f"<li>{concept_html(option)}</li>" for option in q.options)
            body += f"<{tag}>{options}</{tag.split()[0]}>"
        if q.kind == "order" and not re.search(r"\bin order\b", q.prompt, re.I):
            body += "<p class='hint'>Put these steps in order.</p>"
        notes = html.escape(unicode_maths(f"Answer: {sentence(q.shown_answer)} {q.explanation}"))
        slides.append(slide(body, notes, "concept"))
    return slides


def points(number):
    """3 -> "3 points", 1 -> "1 point", 2.5 -> "2.5 points"."""
    return f"{number:g} point{'s' * (number != 1)}"


def sentence(text):
    """`text` ended with a full stop, unless it ends a sentence already."""
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."


def exercise_notes(lecture):
    """Each exercise's kind and points (its rubric stays with the model answer: the classroom
    edition's decks are these, and show no rubric)."""
    lines = []
    for k, exercise in enumerate(exercises.exercises(lecture.notebook), 1):
        kind = "self-checked code" if exercise.is_coding else "written, graded with its rubric"
        if exercise.is_coding and exercise.written_points:
            kind += f" and a written part ({points(exercise.written_points)} by its rubric)"
        total = points(exercises.total_points(exercise.record))
        lines.append(html.escape(f"{lecture.number}.{k}: {kind}; {total}."))
    return "<br>".join(lines)


def exercise_slide(lecture):
    """The exercises, and the chapter's page (relative: the classroom edition has its own)."""
    items = "\n".join(f"- {line}" for line in lecture.exercise_lines())
    page = f"../chapters/{lecture.path.stem}.html"
    return slide(
        render(f"## Exercises\n\n{items}\n\nThey are at the end of [the chapter]({page})."),
        exercise_notes(lecture),
        classes="exercises",
    )


def deck_slides(path, images):
    """One chapter's slides, as HTML <section> elements; figures are added to `images`."""
    lecture = Lecture(path)
    version = release.status().line
    title = slide(
        f"<p class='kicker'>Chapter {lecture.number}</p><h1>{html.escape(lecture.title)}</h1>"
        + render(as_shown(opening_sentences(lecture.opening, 2 * SHORT)))
        + f"<p class='course'>{html.escape(learner.book_config()['title'])}"
        + f" · {html.escape(version)}"
        + "</p><p class='course-licence'>Text and figures CC BY-SA 4.0, code MIT</p>",
        title_notes(lecture),
        classes="title",
    )
    slides = [title]
    for section in lecture.sections:
        slides.extend(section_slides(lecture, section, images))
    slides += [*summary_slides(lecture), *concept_slides(lecture), exercise_slide(lecture)]
    return lecture, without_repeats(slides)


NOTES_ASIDE = re.compile(r'<aside class="notes">(.*?)</aside>', re.S)
ANY_END = SENTENCE_END  # sentences as a listener hears them, brackets or not
REPEATABLE = 40  # characters: a sentence this short may be said twice ("Answer: Nothing.")


def without_repeats(slides):
    """The deck's slides, no sentence of a slide's notes said in an earlier slide's notes
    (a section's prose read again under its figure); where nothing new is left, a figure's
    notes say that the caption is all, any other's stay as they were."""
    said, out = set(), []
    for text in slides:
        found = NOTES_ASIDE.search(text)
        lines = found[1].split("<br>") if found else []
        kept = [
            " ".join(t for t in ANY_END.split(line) if len(t) < REPEATABLE or t not in said)
            for line in lines
        ]
        kept = [line for line in kept if line.strip()]
        label = re.search(r"<figcaption><p>(Figure \d+\.\d+)\.", text)
        point = re.search(r'<figure data-point-out="([^"]*)"', text)
        if found and not kept and label:  # a figure the slides before have said all of
            kept = [html.unescape(point[1]) if point and point[1] else ""]
            kept = [kept[0] or f"{label[1]}: the chapter says no more of it than its caption."]
        if found and kept and kept != lines:
            text = text.replace(found[0], f'<aside class="notes">{"<br>".join(kept)}</aside>')
        said.update(t for line in lines for t in ANY_END.split(line))
        out.append(text)
    return out


def title_notes(lecture):
    """The chapter's motivation: the rest of its opening paragraph, then the lecture's road
    map, the first sentence of each of its sections (its `##` headings)."""
    shown = opening_sentences(lecture.opening, 2 * SHORT)
    rest = split_sentences(lecture.opening.strip())[len(split_sentences(shown)) :]
    rest = without_cell_talk(" ".join(rest))
    parts = [s for s in lecture.sections if s.level == 2]
    road = "; ".join(re.sub(r"[`*]", "", s.heading) for s in parts)
    notes = " ".join(t for t in (rest, f"The lecture: {road}." if road else "") if t)
    return plain_text(opening_sentences(notes, NOTES)) if notes else ""


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
  // A displayed equation wider than the slide scaled down to fit it (MathJax sizes it in em),
  // on each slide as it is shown, once MathJax has typeset the deck.
  function fitEquations(slide) {{
    for (const box of slide ? slide.querySelectorAll(".math mjx-container") : []) {{
      const math = box.querySelector("mjx-math"), room = box.parentElement;
      const width = math ? math.getBoundingClientRect().width : 0;
      const fits = room.getBoundingClientRect().width;
      if (width > fits && fits > 0) {{
        const size = parseFloat(getComputedStyle(box).fontSize);
        box.style.fontSize = (size * fits / width * 0.98) + "px";
      }}
    }}
  }}
  window.addEventListener("load", () => MathJax.startup.promise.then(
    () => fitEquations(Reveal.getCurrentSlide())));
  Reveal.on("slidechanged", event => fitEquations(event.currentSlide));
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
