"""Every figure reads in dark mode: the chapters' figures (plots and the package's diagrams,
PNGs drawn by matplotlib) are opaque, so the dark page never shows through behind their dark
text, and as Chromium shows them in the dark theme (which dims pictures) their darkest marks
(text, axes) still stand out from their own background by WCAG's 4.5:1 for text.

axe-core's contrast rule, run on every page in both themes (test_site_controls.py), does not
look inside pictures: this test does. Each chapter is opened once, in the dark theme, at 1280 px;
each figure is drawn again in the page as the reader sees it (on the page's background, with its
own background and padding and the theme's filter, at its shown size) and measured: its
background is the median of its outer ring of pixels, its ink the darkest 1 in 2,000 of its
pixels where the background is light (the lightest where it is dark).
"""

import base64
import hashlib
import io

import nbformat
import pytest
from PIL import Image
from test_site_layout import OPEN_FOLDED

from helpers.browser import open_page, screenshot
from helpers.site import CHAPTERS, page_name

WIDTH, HEIGHT = 1280, 800
SMALLEST_CONTRAST = 4.5  # WCAG AA for text
INK_SHARE = 0.0005  # the darkest (or lightest) 1 in 2,000 of a figure's pixels: its ink
RING_PX = 3  # the figure's outer ring of pixels: its background


def figure_names(chapter):
    """The file names the website gives the chapter's stored figures (their PNG's SHA-256)."""
    names = set()
    for cell in nbformat.read(chapter, as_version=4).cells:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                png = base64.b64decode(output.data["image/png"])
                names.add(f"{hashlib.sha256(png).hexdigest()}.png")
    return names


def stored_figures(chapter):
    for cell in nbformat.read(chapter, as_version=4).cells:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                yield Image.open(io.BytesIO(base64.b64decode(output.data["image/png"])))


# For every picture of the article: [its src, [background, ink] luminances] as it is shown
MEASURE = """async ([ring, share]) => {
  const linear = c => (c /= 255) <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  const page = getComputedStyle(document.body).backgroundColor;
  const found = [];
  for (const image of document.querySelectorAll('article img')) {
    await image.decode().catch(() => null);
    const style = getComputedStyle(image);
    const pad = parseFloat(style.paddingLeft) || 0;
    const w = Math.round(image.clientWidth), h = Math.round(image.clientHeight);
    if (!w || !h || !image.naturalWidth) {
      found.push([image.getAttribute('src'), null]);
      continue;
    }
    // the page behind it, then its own background and the picture under the theme's filter
    const canvas = Object.assign(document.createElement('canvas'), {width: w, height: h});
    const ctx = canvas.getContext('2d', {willReadFrequently: true});
    ctx.fillStyle = page;
    ctx.fillRect(0, 0, w, h);
    ctx.filter = style.filter;
    ctx.fillStyle = style.backgroundColor;
    ctx.fillRect(0, 0, w, h);
    ctx.drawImage(image, pad, pad, w - 2 * pad, h - 2 * pad);
    const data = ctx.getImageData(0, 0, w, h).data;
    const all = new Float32Array(w * h), edge = [];
    for (let k = 0; k < w * h; k++) {
      all[k] = 0.2126 * linear(data[4 * k]) + 0.7152 * linear(data[4 * k + 1])
        + 0.0722 * linear(data[4 * k + 2]);
      const x = k % w, y = Math.floor(k / w);
      if (Math.min(x, y, w - 1 - x, h - 1 - y) < ring) edge.push(all[k]);
    }
    edge.sort((a, b) => a - b);
    all.sort();
    const background = edge[Math.floor(edge.length / 2)];
    const cut = Math.max(1, Math.floor(share * all.length));
    const ink = background > 0.18 ? all[cut] : all[all.length - 1 - cut];
    found.push([image.getAttribute('src'), [background, ink]]);
  }
  return found;
}"""


def ratio(background, ink):
    """WCAG's contrast ratio of two relative luminances."""
    return (max(background, ink) + 0.05) / (min(background, ink) + 0.05)


def measured_figures(page):
    """[(src, background, ink, contrast)] of the page's shown pictures."""
    return [
        (source, *found, ratio(*found))
        for source, found in page.evaluate(MEASURE, [RING_PX, INK_SHARE])
        if found
    ]


def data_url(image):
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_the_measure_tells_readable_from_unreadable(browser):
    """On a dark page: black text on white reads (21:1), and still under a dimming filter;
    black text on a transparent picture (the dark page behind it) does not, nor grey on grey."""
    cases = [
        ((255, 255, 255, 255), (0, 0, 0, 255), "", True),
        ((255, 255, 255, 255), (0, 0, 0, 255), "brightness(.8) contrast(1.2)", True),
        ((0, 0, 0, 0), (0, 0, 0, 255), "", False),
        ((120, 120, 120, 255), (90, 90, 90, 255), "", False),
    ]
    pictures = []
    for colour, text, _, _ in cases:
        image = Image.new("RGBA", (200, 100), colour)
        for x in range(40, 160):  # a line of "text": 0.6 % of the pixels
            image.putpixel((x, 49), text)
        pictures.append(image)
    page = browser.new_page(viewport={"width": 800, "height": 600})
    page.set_content(
        "<body style='background:#121212'><article>"
        + "".join(
            f"<img style='display:block;filter:{f or 'none'}' src='{data_url(p)}'>"
            for p, (_, _, f, _) in zip(pictures, cases)
        )
        + "</article></body>"
    )
    found = measured_figures(page)
    page.close()
    assert [contrast >= SMALLEST_CONTRAST for *_, contrast in found] == [
        readable for *_, readable in cases
    ], found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_stored_figure_is_opaque(chapter):
    """A transparent background would show the dark page behind the figure's black text."""
    for image in stored_figures(chapter):
        if "A" in image.getbands() or image.mode == "P":
            assert image.convert("RGBA").getchannel("A").getextrema()[0] == 255


@pytest.fixture(scope="module")
def dark_figures(browser, base_url):
    """{chapter: [(figure file name, (background, ink, contrast))]}, each chapter in the dark
    theme at 1280 px; one screenshot of each chapter's first figure in _build/screenshots."""
    found = {}
    for chapter in CHAPTERS:
        page = open_page(browser, f"{base_url}{page_name(chapter)}.html", WIDTH, HEIGHT)
        page.emulate_media(color_scheme="dark")
        page.wait_for_function("document.documentElement.dataset.theme === 'dark'")
        page.evaluate(OPEN_FOLDED)  # the figures of folded solutions too
        names = figure_names(chapter)
        measured = [
            (source.rsplit("/", 1)[-1], (bg, ink, contrast))
            for source, bg, ink, contrast in measured_figures(page)
            if source.rsplit("/", 1)[-1] in names  # not the theme's own (the Colab logo)
        ]
        if measured:
            first = page.query_selector(f"article img[src$='{measured[0][0]}']")
            first.scroll_into_view_if_needed()
            screenshot(page, f"{chapter.stem}-dark-figure")
        found[chapter] = measured
        page.close()
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_figure_reads_in_dark_mode(chapter, dark_figures):
    measured = dark_figures[chapter]
    assert {name for name, _ in measured} == figure_names(chapter), "a figure is not on the page"
    faint = [
        f"{name[:12]}: background {bg:.2f}, ink {ink:.2f}, {ratio:.1f}:1"
        for name, (bg, ink, ratio) in measured
        if ratio < SMALLEST_CONTRAST
    ]
    assert not faint, faint
