"""The website in a real browser: build it, serve it on 127.0.0.1, open pages in headless Chromium,
save screenshots to _build/screenshots/, and check the rendered DOM and every internal link."""

import functools
import http.server
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

import nbformat
import pytest
import yaml
from bs4 import BeautifulSoup
from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import book  # noqa: E402  (the same build command as `make book`)

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-quic", "--hide-scrollbars"]
CHAPTERS = sorted(f"chapters/{path.stem}" for path in (ROOT / "chapters").glob("*.ipynb"))
CHAPTER = CHAPTERS[0]


def chapter_title(chapter):
    """The notebook's first heading, as the page's h1 should show it."""
    first_markdown = next(cell for cell in nbformat.read(ROOT / f"{chapter}.ipynb", as_version=4).cells
                          if cell.cell_type == "markdown")
    return first_markdown.source.splitlines()[0].lstrip("# ").strip()
SCREENSHOTS = ROOT / "_build" / "screenshots"


def chromium_or_install():
    """Debian's chromium, installed with apt-get where it is missing and we are root (as on CI)."""
    found = shutil.which("chromium")
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=environment, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], env=environment,
                       check=False, stdout=subprocess.DEVNULL)
        found = shutil.which("chromium")
    if not found:
        message = ("Debian's chromium is not installed and could not be installed here (that "
                   "needs root and apt-get): the browser tests did NOT run")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    return book.build()


@pytest.fixture(scope="module")
def base_url(site):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def chromium():
    return chromium_or_install()


def run_chromium(chromium, tmp_path, *arguments):
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    result = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *arguments],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def rendered(chromium, tmp_path, url):
    """The DOM after the page's scripts (MathJax included) have run."""
    return BeautifulSoup(run_chromium(chromium, tmp_path, "--virtual-time-budget=20000",
                                      "--dump-dom", url), "html.parser")


def screenshot(chromium, tmp_path, url, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    run_chromium(chromium, tmp_path, "--virtual-time-budget=20000", "--window-size=1280,2000",
                 f"--screenshot={path}", url)
    with Image.open(path) as image:
        low, high = zip(*image.convert("RGB").getextrema())
    assert image.size == (1280, 2000) and max(high) - min(low) > 100, "a blank screenshot"
    return path


def fetch(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.headers.get_content_type(), response.read()


def test_home_page_in_browser(chromium, base_url, tmp_path):
    dom = rendered(chromium, tmp_path, base_url + "intro.html")
    assert "Attention, from kernel regression to grouped-query attention" in dom.h1.get_text()
    navigation = [a.get("href") for a in dom.select("nav a")]
    assert any(CHAPTER in (href or "") for href in navigation), "no link to chapter 1"
    screenshot(chromium, tmp_path, base_url + "intro.html", "home")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_page_in_browser(chapter, chromium, base_url, tmp_path):
    url = base_url + chapter + ".html"
    dom = rendered(chromium, tmp_path, url)
    assert chapter_title(chapter) in dom.h1.get_text()
    if chapter == CHAPTER:
        assert "Nadaraya" in dom.get_text() and "bandwidth" in dom.get_text()

    figures = dom.select("figure")
    assert len(figures) >= 3
    for figure in figures:
        image = figure.find("img")
        assert image.get("alt") and figure.find("figcaption").get_text(strip=True)
        status, content_type, body = fetch(urllib.parse.urljoin(url, image["src"]))
        assert status == 200 and content_type == "image/png" and body[:4] == b"\x89PNG"

    maths = dom.select(".math")
    assert len(maths) > 10
    untypeset = [m.get_text()[:40] for m in maths if not m.find("mjx-container")]
    assert not untypeset, f"MathJax did not typeset: {untypeset[:3]}"

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repository = urllib.parse.urlparse(config["repository"]["url"]).path.strip("/")
    colab = (f"https://colab.research.google.com/github/{repository}/blob/"
             f"{config['repository']['branch']}/{chapter}.ipynb")
    assert colab in [a.get("href") for a in dom.find_all("a")], "no Colab link to this notebook"

    assert len(dom.select(".exercise")) >= 4
    solutions = dom.select(".solution")
    assert len(solutions) >= 4 and all("dropdown" in s.get("class", []) for s in solutions)
    screenshot(chromium, tmp_path, url, pathlib.Path(chapter).name)


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
    pages = sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)
    ids = {}
    broken = []
    for page in pages:
        for description, target, fragment in internal_targets(page, site):
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(description)
            elif fragment and target.suffix == ".html":
                if target not in ids:
                    soup = BeautifulSoup(target.read_text(), "html.parser")
                    ids[target] = {tag["id"] for tag in soup.find_all(id=True)}
                if fragment not in ids[target]:
                    broken.append(description)
    assert len(pages) >= 4
    assert not broken, broken[:10]
