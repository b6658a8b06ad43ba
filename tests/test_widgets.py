"""The figures a reader moves (attention_course.widgets): their data against independent
references (loops in plain Python floats, the formulas), their HTML (self-contained,
deterministic, a static picture inside), and the figures in a real browser: each control
moved by keyboard, the numbers the page shows compared with the package's for the same
settings, axe-core in light and dark mode, a phone's 390 px, print and a page without
JavaScript. The browser tests run on the notebook's output (a page holding it alone) and on
the built website's chapter pages (tests/conftest.py's `site`)."""

import base64
import json
import math
import re

import nbformat
import pytest
import torch
import torch.nn.functional as F

from attention_course import flash_attention, make_synthetic_regression, nadaraya_watson, widgets
from helpers.browser import open_page, screenshot
from tools import ROOT

PHONE = (390, 844)
LAPTOP = (1280, 800)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def regression():
    data = make_synthetic_regression(n_train=40, n_test=61, x_max=10.0, noise_std=0.5, seed=3)
    return data.x_test, data.x_train, data.y_train


def bandwidth_widget():
    queries, keys, values = regression()
    return widgets.bandwidth_explorer(queries, keys, values, [0.05, 0.2, 0.5, 2.0], 1, 30)


def temperature_widget():
    scores = torch.randn(6, generator=gen(1), dtype=torch.float64) * 8
    return widgets.temperature_explorer(scores, [2.0 ** (k / 2) for k in range(-12, 9)], 4)


def tiles_widget():
    q, k, v = torch.randn(3, 10, 4, generator=gen(2), dtype=torch.float64)
    return widgets.tile_stepper(q[:6], k, v[:, :2], block_size=4)


def decay_widget():
    q, k = torch.randn(2, 12, 3, generator=gen(4), dtype=torch.float64)
    return widgets.decay_explorer(q, k, [0.3, 0.6, 0.9, 1.0], initial=2, forgets=[4, 9])


def heads_weights():
    """Two prompts (lengths 5 and 3, padded to 5), 3 layers of 4 heads."""
    return [torch.softmax(torch.randn(2, 4, 5, 5, generator=gen(10 + n)) * 3, -1) for n in range(3)]


HEAD_TOKENS = [
    ["[CLS]", "the", " cat", "a-very-long-token-indeed-that-needs-cutting", "\n"],
    ["hi", " there", "!"],
]


def heads_widget():
    return widgets.head_explorer(
        HEAD_TOKENS, heads_weights(), {(1, 2): "previous token", (2, 0): "sink"}
    )


BUILDERS = {
    "bandwidth": bandwidth_widget,
    "temperature": temperature_widget,
    "tiles": tiles_widget,
    "decay": decay_widget,
    "heads": heads_widget,
}


# ---------------------------------------------------------------------------- the data


def test_bandwidth_data_are_the_pairs_in_key_order_rounded():
    queries, keys, values = regression()
    data = bandwidth_widget().data
    pairs = sorted(zip(keys.tolist(), values.tolist()))
    assert data["keys"] == [round(k, 4) for k, _ in pairs]
    assert data["values"] == [round(v, 4) for _, v in pairs]
    assert data["queries"] == [round(q, 4) for q in queries.tolist()]
    assert data["bandwidths"] == [0.05, 0.2, 0.5, 2.0]
    assert (data["initial"], data["probe"]) == (1, 30)


def softmax_loop(scores):
    top = max(scores)
    e = [math.exp(s - top) for s in scores]
    return [x / sum(e) for x in e]


def test_temperature_weights_and_entropy_against_a_loop():
    widget = temperature_widget()
    scores = widget.data["scores"]
    for scale, weights, entropy in zip(*(widget.data[k] for k in ("scales", "weights", "entropy"))):
        expected = softmax_loop([scale * s for s in scores])
        assert weights == pytest.approx(expected, abs=6e-5)
        h = -sum(p * math.log(p) for p in expected if p > 0)
        assert entropy == pytest.approx(h, abs=2e-4)
    assert widget.data["max_entropy"] == pytest.approx(math.log(6), abs=1e-4)
    # the slider spans uniform (entropy near ln 6) to argmax (one weight near 1)
    assert widget.data["entropy"][0] > 0.95 * math.log(6)
    assert max(widget.data["weights"][-1]) > 0.99


def online_softmax_loop(scores, values, block):
    """[(m, l, output)] after each key block, for one row: the update rule, in Python floats."""
    m, l, acc, found = -math.inf, 0.0, [0.0] * len(values[0]), []
    for start in range(0, len(scores), block):
        new_m = max([m] + scores[start : start + block])
        l *= math.exp(m - new_m)
        acc = [a * math.exp(m - new_m) for a in acc]
        for s, v in zip(scores[start : start + block], values[start : start + block]):
            l += math.exp(s - new_m)
            acc = [a + math.exp(s - new_m) * vi for a, vi in zip(acc, v)]
        m = new_m
        found.append((m, l, [a / l for a in acc]))
    return found


def test_tile_steps_against_the_online_softmax_loop_and_flash_attention():
    q, k, v = torch.randn(3, 10, 4, generator=gen(2), dtype=torch.float64)
    widget = widgets.tile_stepper(q[:6], k, v[:, :2], block_size=4)
    steps = widget.data["steps"]
    assert len(steps) == 3  # 10 keys in blocks of 4: 4, 4, 2
    scores = (q[:6] @ k.T / 2).tolist()  # d = 4: sqrt(d) = 2
    for row in range(6):
        expected = online_softmax_loop(scores[row], v[:, :2].tolist(), 4)
        for step, (m, l, out) in zip(steps, expected):
            assert step["m"][row] == pytest.approx(m, abs=6e-5)
            assert step["l"][row] == pytest.approx(l, abs=6e-5)
            assert step["out"][row] == pytest.approx(out, abs=6e-5)
    final = flash_attention(q[:6], k, v[:, :2], block_size=4)[0]
    assert torch.allclose(torch.tensor(steps[-1]["out"], dtype=torch.float64), final, atol=6e-5)
    sdpa = F.scaled_dot_product_attention(q[:6], k, v[:, :2])
    assert torch.allclose(torch.tensor(steps[-1]["out"], dtype=torch.float64), sdpa, atol=6e-5)


def test_decay_weights_against_the_formula():
    q, k = torch.randn(2, 12, 3, generator=gen(4), dtype=torch.float64)
    forgets, gate = [4, 9], 0.1
    widget = widgets.decay_explorer(
        q, k, [0.3, 0.6, 0.9, 1.0], initial=2, forgets=forgets, gate=gate
    )

    def phi(x):  # elu + 1
        return [xi + 1 if xi > 0 else math.exp(xi) for xi in x]

    last = phi(q[-1].tolist())
    assert widget.data["forgets"] == forgets and widget.data["gate"] == gate
    for gamma, per_gate in zip(widget.data["gammas"], widget.data["weights"]):
        assert len(per_gate) == 1 + len(forgets)  # no gate, then one per forgetting token
        for forget, weights in zip([None] + forgets, per_gate):
            for j in range(1, 13):  # key j (1-based), read by query 12
                base = sum(a * b for a, b in zip(last, phi(k[j - 1].tolist())))
                cut = gate if forget is not None and j < forget else 1.0
                assert weights[j - 1] == pytest.approx(base * gamma ** (12 - j) * cut, abs=6e-5)


def test_head_weights_are_the_hundredths_of_each_prompts_real_tokens():
    weights, data = heads_weights(), heads_widget().data
    assert [p["tokens"] for p in data["prompts"]] == HEAD_TOKENS
    for p, tokens in enumerate(HEAD_TOKENS):
        stored = data["prompts"][p]["weights"]
        assert (len(stored), len(stored[0])) == (3, 4)
        for layer in range(3):
            for head in range(4):
                n = len(tokens)
                expected = [
                    [round(100 * weights[layer][p, head, i, j].item()) for j in range(n)]
                    for i in range(n)
                ]
                assert stored[layer][head] == expected
    assert data["marks"] == [[1, 2, "previous token"], [2, 0, "sink"]]
    assert data["initial"] == [1, 2]


# ---------------------------------------------------------------------------- the HTML


@pytest.mark.parametrize("kind", BUILDERS)
def test_the_html_is_self_contained_deterministic_and_holds_a_static_png(kind):
    first, second = BUILDERS[kind](), BUILDERS[kind]()
    page = first._repr_html_()
    assert page == second._repr_html_()  # nbval compares it: no random ids, no timestamps
    assert f'id="{first.element_id}"' in page and f'data-kind="{kind}"' in page
    assert (widgets.HERE / "widgets.js").read_text() in page
    assert (widgets.HERE / "widgets.css").read_text() in page
    assert not re.search(
        r"<script[^>]+src=|<link |https?://(?!www\.w3\.org/2000/svg\b)", page
    )  # nothing fetched
    png = re.search(r'src="data:image/png;base64,([^"]+)"', page)[1]
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    payload = re.search(r'class="course-widget-data">(.*?)</script>', page, re.S)[1]
    assert json.loads(payload) == first.data
    assert len(page) < 150_000


def test_a_label_cannot_close_the_data_script():
    widget = widgets.temperature_explorer(torch.zeros(2), [1.0], labels=["</script>", "b"])
    payload = re.search(r'class="course-widget-data">(.*?)</script>', widget._repr_html_(), re.S)[1]
    assert json.loads(payload)["labels"] == ["</script>", "b"]


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: widgets.decay_explorer(torch.ones(3, 2), torch.ones(3, 2), [1.5]), ValueError),
        (
            lambda: widgets.decay_explorer(torch.ones(3, 2), torch.ones(3, 2), [1.0], forgets=[1]),
            ValueError,
        ),
        (
            lambda: widgets.decay_explorer(torch.ones(3, 2), torch.ones(3, 2), [1.0], gate=0.0),
            ValueError,
        ),
        (lambda: widgets.temperature_explorer(torch.ones(3), [1.0], initial=1), ValueError),
        (
            lambda: widgets.bandwidth_explorer(torch.ones(3), torch.ones(4), torch.ones(4), [0.0]),
            ValueError,
        ),
        (
            lambda: widgets.tile_stepper(
                torch.ones(2, 3), torch.ones(4, 3), torch.ones(4, 1), block_size=2.0
            ),
            TypeError,
        ),
    ],
)
def test_the_doors_refuse_bad_settings(call, error):
    with pytest.raises(error):
        call()


def test_the_learner_notebook_exported_by_nbconvert_holds_the_widget():
    from nbconvert import HTMLExporter

    from tools import learner

    path = ROOT / "chapters" / "01_attention_pooling.ipynb"
    exported, _ = HTMLExporter().from_notebook_node(learner.learner_notebook(path))
    assert 'class="course-widget"' in exported and 'data-kind="bandwidth"' in exported
    assert "window.courseWidgets" in exported and "course-widget-data" in exported


# ---------------------------------------------------------------------------- the browser

NUMBER = re.compile(r"-?\d+(?:\.\d+)?|-?inf")


def number(text):
    found = NUMBER.search(text)
    assert found, text
    return float(found[0])


def shown(figure, name):
    return number(figure.locator(f'[data-value="{name}"]').first.inner_text())


def page_data(figure):
    return json.loads(figure.locator(".course-widget-data").text_content())


def press(page, figure, selector, key, times=1):
    control = figure.locator(selector).first
    control.focus()
    for _ in range(times):
        page.keyboard.press(key)


def check_bandwidth(page, figure):
    data = page_data(figure)
    tensor = {k: torch.tensor(data[k], dtype=torch.float64) for k in ("queries", "keys", "values")}
    moves = [
        ("input[id$='-h']", "ArrowRight", 2),
        ("input[id$='-x']", "ArrowLeft", 7),
        ("input[id$='-h']", "Home", 1),
        ("input[id$='-x']", "End", 1),
    ]
    h_index, x_index = data["initial"], data["probe"]
    last_h, last_x = len(data["bandwidths"]) - 1, len(data["queries"]) - 1
    for selector, key, times in moves:
        press(page, figure, selector, key, times)
        step = {"ArrowRight": times, "ArrowLeft": -times}.get(key, 0)
        if "-h" in selector:
            h_index = 0 if key == "Home" else min(last_h, max(0, h_index + step))
        else:
            x_index = last_x if key == "End" else min(last_x, max(0, x_index + step))
        h = data["bandwidths"][h_index]
        fit, weights = nadaraya_watson(tensor["queries"], tensor["keys"], tensor["values"], h)
        w = weights[x_index]
        assert shown(figure, "h") == pytest.approx(h, abs=6e-4)
        assert shown(figure, "x") == pytest.approx(data["queries"][x_index], abs=6e-3)
        assert shown(figure, "fit") == pytest.approx(fit[x_index].item(), abs=1e-4)
        assert shown(figure, "max") == pytest.approx(w.max().item(), abs=1e-4)
        assert shown(figure, "neff") == pytest.approx(1 / (w**2).sum().item(), abs=6e-3)


def check_temperature(page, figure):
    data = page_data(figure)
    scores = torch.tensor(data["scores"], dtype=torch.float64)
    index = data["initial"]
    for key, times in (("ArrowRight", 3), ("ArrowLeft", 5), ("End", 1), ("Home", 1)):
        press(page, figure, "input[type=range]", key, times)
        step = {"ArrowRight": times, "ArrowLeft": -times}.get(key, 0)
        index = {"End": len(data["scales"]) - 1, "Home": 0}.get(key, index + step)
        scale = data["scales"][index]
        weights = torch.softmax(scale * scores, dim=0)  # PyTorch's softmax as the reference
        entropy = -(weights * weights.log()).nan_to_num().sum().item()
        assert shown(figure, "scale") == pytest.approx(scale, abs=6e-5)
        assert shown(figure, "entropy") == pytest.approx(entropy, abs=3e-4)
        assert shown(figure, "max") == pytest.approx(weights.max().item(), abs=3e-4)
        bars = [number(t) for t in figure.locator("text[data-value]").all_text_contents()]
        assert bars == pytest.approx(weights.tolist(), abs=6e-4)


def check_tiles(page, figure):
    data = page_data(figure)
    scores = torch.tensor(data["scores"])
    n_blocks = len(data["steps"])
    row, step = 0, 1
    for action in ("next", "next", "row", "previous", "slider-end", "slider-home", "next"):
        if action == "next":
            figure.get_by_role("button", name="Next tile").focus()
            page.keyboard.press("Enter")
            step = min(n_blocks, step + 1)
        elif action == "previous":
            figure.get_by_role("button", name="Previous tile").focus()
            page.keyboard.press("Space")
            step = max(0, step - 1)
        elif action == "row":
            press(page, figure, "select", "ArrowDown", 3)
            row = 3
        else:
            press(page, figure, "input[type=range]", "End" if "end" in action else "Home")
            step = n_blocks if "end" in action else 0
        if step == 0:
            assert shown(figure, "m") == -math.inf
            assert shown(figure, "l") == 0
            continue
        # the reference: the rounded scores' softmax over the keys read (rounding: 2 digits)
        end = min(data["n_k"], step * data["block"])
        m = scores[row, :end].max().item()
        assert shown(figure, "m") == pytest.approx(m, abs=6e-3)
        expected = data["steps"][step - 1]
        assert shown(figure, "l") == pytest.approx(expected["l"][row], abs=6e-5)
        out = [number(x) for x in figure.locator('[data-value="out"]').inner_text().split(",")]
        assert out == pytest.approx(expected["out"][row], abs=6e-5)


def check_tiles_against_the_package(page, figure, query, key, value, block):
    """The numbers shown after every step, for every row, against a loop of the update."""
    scores = (query @ key.T / math.sqrt(query.shape[1])).tolist()
    press(page, figure, "input[type=range]", "Home")
    for row in range(query.shape[0]):
        figure.locator("select").select_option(str(row))
        expected = online_softmax_loop(scores[row], value.tolist(), block)
        press(page, figure, "input[type=range]", "Home")
        for m, l, out in expected:
            press(page, figure, "input[type=range]", "ArrowRight")
            assert shown(figure, "m") == pytest.approx(m, abs=6e-5)
            assert shown(figure, "l") == pytest.approx(l, abs=6e-5)
            text = figure.locator('[data-value="out"]').inner_text()
            assert [number(x) for x in text.split(",")] == pytest.approx(out, abs=6e-5)


def check_decay(page, figure):
    data = page_data(figure)
    index, forget = data["initial"], 0
    gamma_slider, gate_slider = "input[type=range] >> nth=0", "input[type=range] >> nth=1"
    moves = [(gamma_slider, key) for key in ("ArrowRight", "ArrowLeft", "ArrowLeft", "End")]
    moves += [(gate_slider, "ArrowRight"), (gate_slider, "End"), (gamma_slider, "Home")]
    for slider, key in moves:
        press(page, figure, slider, key)
        step = {"ArrowRight": 1, "ArrowLeft": -1}.get(key, 0)
        if slider == gamma_slider:
            last = len(data["gammas"]) - 1
            index = {"End": last, "Home": 0}.get(key, max(0, index + step))
        else:
            forget = {"End": len(data["forgets"])}.get(key, forget + step)
        gamma = data["gammas"][index]
        assert shown(figure, "gamma") == pytest.approx(gamma, abs=6e-4)
        gate_at = figure.locator('[data-value="forget"]').inner_text()
        assert gate_at == ("none" if forget == 0 else f"token {data['forgets'][forget - 1]}")
        weights = data["weights"][index][forget]
        assert shown(figure, "first") == pytest.approx(weights[0], abs=6e-5)
        assert shown(figure, "last") == pytest.approx(weights[-1], abs=6e-5)
        memory = math.inf if gamma == 1 else 1 / (1 - gamma)
        assert shown(figure, "memory") == pytest.approx(memory, abs=6e-3)
        if gamma == 1 and forget:  # the gate cuts the keys before its token, and only those
            without, token = data["weights"][index][0], data["forgets"][forget - 1]
            cut = [data["gate"] if j < token else 1.0 for j in range(1, len(weights) + 1)]
            assert weights == pytest.approx([c * w for c, w in zip(cut, without)], abs=2e-4)


def check_heads(page, figure, reference=None):
    """Move the prompt, layer and head menus and a token by keyboard; the key weights shown
    equal reference(prompt, layer, head)[query] rounded to 0.01 (default: the data's)."""
    data = page_data(figure)
    if reference is None:

        def reference(p, layer, head):
            return [[v / 100 for v in row] for row in data["prompts"][p]["weights"][layer][head]]

    selects = figure.locator("select")
    prompt, layer, head = (selects.nth(k) for k in range(3))
    n_layers = len(data["prompts"][0]["weights"])

    def read_and_compare(query):
        p, l, h = (int(s.input_value()) for s in (prompt, layer, head))
        expected = reference(p, l, h)[query]
        keys = figure.locator(".cw-key [data-value]").all_inner_texts()
        assert [float(x) for x in keys] == pytest.approx(expected, abs=0.0051)
        assert shown(figure, "top_weight") == pytest.approx(max(expected), abs=0.0051)
        # the head view: a line from the query's row on the left to each key's row on the
        # right, as opaque as that key's weight
        lines = figure.locator(".cw-lines line")
        opacity = lines.evaluate_all("ls => ls.map(l => +l.getAttribute('stroke-opacity'))")
        assert opacity == pytest.approx(expected, abs=0.0051)
        rows = figure.locator(".cw-lines text").evaluate_all(
            "ts => ts.map(t => +t.getAttribute('y'))"
        )
        n = len(expected)
        assert len(rows) == 2 * n
        ends = lines.evaluate_all(
            "ls => ls.map(l => [+l.getAttribute('y1'), +l.getAttribute('y2')])"
        )
        assert ends == [[rows[query], rows[n + j]] for j in range(n)]

    # the starting head is the first marked one
    assert [int(layer.input_value()), int(head.input_value())] == data["initial"]
    figure.locator(".cw-token").first.focus()
    read_and_compare(0)
    for _ in range(2):
        page.keyboard.press("Tab")  # the next query token takes the focus
    read_and_compare(2)
    press(page, figure, "select >> nth=0", "ArrowDown")  # the second prompt
    assert prompt.input_value() == "1"
    press(page, figure, "select >> nth=1", "End")
    assert int(layer.input_value()) == n_layers - 1
    press(page, figure, "select >> nth=2", "ArrowDown", 2)
    figure.locator(".cw-token").nth(1).focus()
    read_and_compare(1)
    # a marked head's button jumps to it
    jump = figure.locator(".cw-jump").last
    jump.focus()
    page.keyboard.press("Enter")
    l, h, _ = data["marks"][-1]
    assert (int(layer.input_value()), int(head.input_value())) == (l, h)
    assert data["marks"][-1][2] in head.locator("option:checked").inner_text()
    figure.locator(".cw-token").last.focus()
    read_and_compare(len(data["prompts"][1]["tokens"]) - 1)
    # pointing at a query in the head view picks it, as its button does
    figure.locator(".cw-lines text").nth(1).hover()
    read_and_compare(1)
    # a long token is cut with an ellipsis and kept whole in its title
    for token in figure.locator(".cw-token").all():
        assert token.evaluate(
            "e => e.scrollWidth <= e.clientWidth + 1 || "
            "getComputedStyle(e).textOverflow === 'ellipsis'"
        )
        assert token.get_attribute("title")


CHECKS = {
    "bandwidth": check_bandwidth,
    "temperature": check_temperature,
    "tiles": check_tiles,
    "decay": check_decay,
    "heads": check_heads,
}


def check_layout(page, figure):
    """Nothing overflows at the page's width: the page does not scroll sideways, and the
    figure's text sits inside the figure."""
    width = page.viewport_size["width"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    box = figure.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, box
    cut = figure.evaluate(
        """f => [...f.querySelectorAll('p, label, output, button, select')]
            .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"""
    )
    assert not cut, cut
    # a control wider than the figure is cut off by its box (the explorer's prompt at 390 px)
    outside = figure.evaluate(
        """f => { const box = f.getBoundingClientRect();
            return [...f.querySelectorAll('input, button, select')].filter(e => {
                const r = e.getBoundingClientRect();
                return r.left < box.left - 0.5 || r.right > box.right + 0.5; })
              .map(e => e.id || e.textContent); }"""
    )
    assert not outside, outside


def check_accessible(page, figure_selector):
    from test_site_controls import SETTLED, axe_violations

    found = {}
    for mode in ("light", "dark"):
        page.emulate_media(color_scheme=mode)
        page.evaluate(SETTLED)
        found[mode] = axe_violations(page, figure_selector)
    page.emulate_media(color_scheme="light")
    assert not found["light"] and not found["dark"], found


def check_print_and_no_script(browser, url, selector):
    page = browser.new_page(viewport={"width": LAPTOP[0], "height": LAPTOP[1]})
    page.goto(url, wait_until="load")
    figure = page.locator(selector).first
    assert figure.locator(".course-widget-live").is_visible()
    assert not figure.locator(".course-widget-static").is_visible()
    page.emulate_media(media="print")
    assert not figure.locator(".course-widget-live").is_visible()
    assert figure.locator(".course-widget-static").is_visible()
    page.close()
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(url, wait_until="load")
    figure = page.locator(selector).first
    assert figure.locator(".course-widget-static").is_visible()
    assert not figure.locator(".course-widget-live").is_visible()
    context.close()


# --------------------------------------------------- the notebook's output, alone on a page


@pytest.fixture(scope="module")
def output_pages(tmp_path_factory):
    """One HTML file per widget, holding the notebook output as Jupyter inserts it."""
    folder = tmp_path_factory.mktemp("widgets")
    pages = {}
    for kind, build in BUILDERS.items():
        body = build()._repr_html_()
        path = folder / f"{kind}.html"
        path.write_text(
            '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>'
            f'{kind}</title><meta name="viewport" content="width=device-width"></head>'
            f"<body><main>{body}</main></body></html>"
        )
        pages[kind] = path.as_uri()
    return pages


@pytest.mark.parametrize("kind", BUILDERS)
@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1280", "390"])
def test_the_notebook_output_moves_by_keyboard(kind, size, browser, output_pages):
    page = open_page(browser, output_pages[kind], *size)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    figure = page.locator(".course-widget")
    assert "cw-ready" in figure.get_attribute("class")
    CHECKS[kind](page, figure)
    check_layout(page, figure)
    check_accessible(page, ".course-widget")
    page.close()
    assert not errors


def test_every_tile_of_every_row_shows_the_online_softmax(browser, output_pages):
    q, k, v = torch.randn(3, 10, 4, generator=gen(2), dtype=torch.float64)
    page = open_page(browser, output_pages["tiles"], *LAPTOP)
    check_tiles_against_the_package(page, page.locator(".course-widget"), q[:6], k, v[:, :2], 4)
    page.close()


@pytest.mark.parametrize("kind", BUILDERS)
def test_the_notebook_output_prints_and_shows_without_javascript(kind, browser, output_pages):
    check_print_and_no_script(browser, output_pages[kind], ".course-widget")


# ------------------------------------------------------------------ the website's chapters

CHAPTER_WIDGETS = {
    "chapters/01_attention_pooling": "bandwidth",
    "chapters/04_scaled_dot_product_attention": "temperature",
    "chapters/12_tiled_attention": "tiles",
    "chapters/16_linear_attention": "decay",
}
EXPLORERS = {
    "chapters/13_inside_a_pretrained_model": "PATTERN_SENTENCES",
    "chapters/14_inside_a_decoder_language_model": "EXPLORER_PROMPTS",
}


def chapter_list(name, variable):
    """A list of strings that a chapter's code assigns to `variable`, read from its source."""
    import ast

    notebook = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code" and f"{variable} = [" in cell.source:
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == variable:
                    return ast.literal_eval(node.value)
    raise AssertionError(f"{name}: no {variable}")


def model_weights(name):
    """Every head's weights on the chapter's explorer prompts, recomputed here by the model:
    reference(prompt, layer, head) -> (L, L) nested lists."""
    if "13_" in name:
        from attention_course.pretrained import load_minilm, tokenize

        encoder, tokenizer = load_minilm()
        batch = tokenize(tokenizer, chapter_list(name, EXPLORERS[name])[:3])
        with torch.no_grad():
            _, weights = encoder(batch.ids, batch.valid_lens)
        lengths = batch.valid_lens.tolist()
    else:
        from attention_course.pretrained import load_smollm2

        model, tokenizer = load_smollm2()
        encoded = [tokenizer.encode(p).ids for p in chapter_list(name, EXPLORERS[name])]
        with torch.no_grad():  # one prompt at a time, unpadded: the page's were padded
            per_prompt = [model.forward_with_weights(torch.tensor([ids]))[1] for ids in encoded]
        return lambda p, layer, head: per_prompt[p][layer][0, head].tolist()
    return lambda p, layer, head: weights[layer][p, head, : lengths[p], : lengths[p]].tolist()


@pytest.mark.parametrize("name", EXPLORERS)
@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1280", "390"])
def test_the_explorer_shows_the_models_own_weights(name, size, browser, base_url):
    page = open_page(browser, f"{base_url}{name}.html", *size)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    figures = page.locator('.course-widget[data-kind="heads"]')
    assert figures.count() == 1
    figure = figures.first
    figure.scroll_into_view_if_needed()
    assert "cw-ready" in figure.get_attribute("class")
    screenshot(page, f"widget-heads-{name[9:11]}-{size[0]}")
    check_heads(page, figure, model_weights(name))
    check_layout(page, figure)
    check_accessible(page, '.course-widget[data-kind="heads"]')
    page.close()
    assert not errors


@pytest.mark.parametrize("name", EXPLORERS)
def test_the_explorer_page_prints_the_static_picture(name, browser, base_url):
    check_print_and_no_script(
        browser, f"{base_url}{name}.html", '.course-widget[data-kind="heads"]'
    )


@pytest.mark.parametrize("name", CHAPTER_WIDGETS)
@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1280", "390"])
def test_the_chapter_page_widget_moves_by_keyboard(name, size, browser, base_url):
    kind = CHAPTER_WIDGETS[name]
    page = open_page(browser, f"{base_url}{name}.html", *size)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    figures = page.locator(f'.course-widget[data-kind="{kind}"]')
    assert figures.count() == 1
    figure = figures.first
    figure.scroll_into_view_if_needed()
    assert "cw-ready" in figure.get_attribute("class")
    screenshot(page, f"widget-{kind}-{size[0]}")
    CHECKS[kind](page, figure)
    check_layout(page, figure)
    check_accessible(page, f'.course-widget[data-kind="{kind}"]')
    page.close()
    assert not errors


@pytest.mark.parametrize("name", CHAPTER_WIDGETS)
def test_the_chapter_page_prints_the_static_picture(name, browser, base_url):
    kind = CHAPTER_WIDGETS[name]
    check_print_and_no_script(
        browser, f"{base_url}{name}.html", f'.course-widget[data-kind="{kind}"]'
    )


def test_the_chapter_pages_stay_small(site):
    for name in [*CHAPTER_WIDGETS, *EXPLORERS]:
        page = (site / f"{name}.html").read_text()
        widget = re.search(r'<div class="course-widget".*?</script>\n</div>', page, re.S)[0]
        assert len(widget) < (1_000_000 if name in EXPLORERS else 150_000), (name, len(widget))
        assert len(page) < 3_000_000, (name, len(page))


def test_the_chapters_call_the_widgets():
    """Each chapter with a widget holds one code cell calling it, with its output stored."""
    for name, kind in [*CHAPTER_WIDGETS.items(), *((n, "heads") for n in EXPLORERS)]:
        notebook = nbformat.read(ROOT / f"{name}.ipynb", as_version=4)
        cells = [
            c
            for c in notebook.cells
            if c.cell_type == "code"
            and "widgets." in c.source
            and "course-widget" in json.dumps(c.get("outputs", []))
        ]
        assert len(cells) == 1, name
        (output,) = cells[0].outputs
        assert f'data-kind="{kind}"' in output["data"]["text/html"]
