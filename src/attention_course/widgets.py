"""Figures a reader can move: sliders and buttons computed in the browser, offline.

Each function computes a figure's data with the package's own functions, rounds it, and returns
a `Widget`, whose `_repr_html_` is one self-contained block of HTML: the data as JSON, the
course's one script and style sheet (`widgets.js`, `widgets.css` beside this file) inlined, and
a static PNG of the starting state, which is what a page without JavaScript and the printed
book show. The output holds no random ids: an element's id derives from the figure's data, so
that a notebook's stored output is the same at every run.
"""

import base64
import hashlib
import html
import io
import json
import math
import pathlib

import matplotlib
import torch

from ._shapes import require_float, require_int, require_number, shape_of
from .attention import attention_entropy
from .linear import linear_attention
from .masking import masked_softmax
from .plotting import OKABE_ITO
from .pooling import nadaraya_watson

HERE = pathlib.Path(__file__).parent
DIGITS = 4  # what the figures' numbers are rounded to


class Widget:
    """A figure that moves: `data` (what the browser reads), `static_png` (its starting state)
    and `_repr_html_` (what a notebook and the website show). Chapters 1, 4, 12 and 16."""

    def __init__(self, kind, title, caption, alt, data, static_png):
        self.kind, self.title, self.caption, self.alt = kind, title, caption, alt
        self.data, self.static_png = data, static_png
        digest = hashlib.sha1(json.dumps([kind, data], sort_keys=True).encode()).hexdigest()
        self.element_id = f"cw-{kind}-{digest[:10]}"

    def __repr__(self):
        return f"<{self.kind} widget: an interactive figure (HTML output)>"

    def _repr_html_(self):
        payload = json.dumps(self.data, separators=(",", ":")).replace("</", "<\\/")
        image = base64.b64encode(self.static_png).decode()
        style = (HERE / "widgets.css").read_text()
        script = (HERE / "widgets.js").read_text()
        return (
            f'<div class="course-widget" id="{self.element_id}" data-kind="{self.kind}">\n'
            f"<style>{style}</style>\n"
            f'<p class="course-widget-title">{html.escape(self.title)}</p>\n'
            f'<img class="course-widget-static" alt="{html.escape(self.alt)}" '
            f'src="data:image/png;base64,{image}">\n'
            f'<div class="course-widget-live" hidden></div>\n'
            f'<p class="course-widget-caption">{html.escape(self.caption)}</p>\n'
            f'<script type="application/json" class="course-widget-data">{payload}</script>\n'
            f"<script>{script}</script>\n</div>"
        )


# ------------------------------------------------------------------------------ shared parts


def _rounded(values, digits=DIGITS):
    """A tensor (any shape) or a number as nested lists of rounded Python floats."""
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float64).tolist()
    if isinstance(values, list):
        return [_rounded(v, digits) for v in values]
    return round(float(values), digits) + 0.0  # + 0.0: no -0.0 in the JSON


def _png(figure):
    """A matplotlib figure as PNG bytes without a timestamp or a version stamp; closed."""
    from matplotlib import pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def _figure(*shape, width=6.5, height=3.0):
    from matplotlib import pyplot as plt

    with matplotlib.rc_context({"font.size": 9}):
        return plt.subplots(*shape, figsize=(width, height), constrained_layout=True)


def _check_grid(name, values, maximum=None):
    """A list or 1-D tensor of positive finite numbers, at least one: the slider's positions."""
    if isinstance(values, torch.Tensor):
        require_float(name, values, 1)
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list or a 1-D tensor of numbers, got {type(values)}")
    if not values:
        raise ValueError(f"{name} must hold at least one number, got an empty {name}")
    for value in values:
        require_number(name, value, 0.0, strict=True, maximum=maximum)
    return [float(v) for v in values]


def _check_index(name, index, size):
    require_int(name, index, 0)
    if index >= size:
        raise ValueError(f"{name} must be below {size}, got {index}")


# --------------------------------------------------------------------------------- chapter 1


def bandwidth_explorer(queries, keys, values, bandwidths, initial=0, probe=0):
    """Gaussian Nadaraya–Watson with a bandwidth slider: the fit and its weight heatmap move
    together; a second slider picks the query whose weights are read out.

    queries (n_q,), keys (n_k,), values (n_k,) float tensors of one dtype; bandwidths: the
    slider's positions (positive numbers); initial: the starting position's index; probe: the
    starting query's index. The browser recomputes the weights from the rounded data, as
    `nadaraya_watson` does. Chapter 1.
    """
    require_float("queries", queries, 1)
    require_float("keys", keys, 1)
    require_float("values", values, 1)
    if keys.dtype != values.dtype or queries.dtype != keys.dtype:
        raise ValueError(
            f"queries {queries.dtype}, keys {keys.dtype} and values {values.dtype} must share "
            "one dtype"
        )
    if keys.shape != values.shape:
        raise ValueError(f"keys {shape_of(keys)} and values {shape_of(values)} disagree")
    bandwidths = _check_grid("bandwidths", bandwidths)
    _check_index("initial", initial, len(bandwidths))
    _check_index("probe", probe, len(queries))
    order = keys.argsort()  # keys in order of x: the heatmap's columns
    data = {
        "queries": _rounded(queries),
        "keys": _rounded(keys[order]),
        "values": _rounded(values[order]),
        "bandwidths": _rounded(bandwidths),
        "initial": initial,
        "probe": probe,
    }
    # the static picture: what the package computes at the starting bandwidth
    rounded = {
        name: torch.tensor(data[name], dtype=torch.float64)
        for name in data
        if name in ("queries", "keys", "values")
    }
    h = data["bandwidths"][initial]
    fit, weights = nadaraya_watson(rounded["queries"], rounded["keys"], rounded["values"], h)
    figure, (left, right) = _figure(1, 2)
    left.plot(rounded["keys"], rounded["values"], "o", ms=3, color="0.5", label="data")
    left.plot(rounded["queries"], fit, color=OKABE_ITO[0], lw=2, label="fit")
    left.axvline(data["queries"][probe], color=OKABE_ITO[1], ls="--")
    left.set(xlabel="x", ylabel="y", title=f"h = {h:.3g}")
    left.legend(fontsize=8)
    right.imshow(weights, aspect="auto", cmap="viridis", vmin=0, interpolation="nearest")
    right.axhline(probe, color=OKABE_ITO[1], ls="--")
    right.set(xlabel="key index i (sorted by x)", ylabel="query index", title="weights")
    return Widget(
        "bandwidth",
        "Nadaraya–Watson: move the bandwidth",
        "The fit: the data, the Gaussian Nadaraya–Watson fit at bandwidth h and the query "
        "read out (dashed line). The weights: one row per query, one column per key, colour "
        "from 0 (dark) to the largest weight (yellow), the query read out dashed.",
        f"The Gaussian Nadaraya–Watson fit and its weight heatmap at h = {h:.3g}.",
        data,
        _png(figure),
    )


# --------------------------------------------------------------------------------- chapter 4


def temperature_explorer(scores, scales, initial=0, labels=None):
    """Softmax weights of one query's scores times a scale (1 / temperature), with their
    entropy: from uniform (scale near 0) to argmax (large scale).

    scores (n,) floats; scales: the slider's positions (positive numbers); initial: the
    starting position's index; labels: n names of the keys (default "k1" ...). Chapter 4.
    """
    require_float("scores", scores, 1)
    scales = _check_grid("scales", scales)
    _check_index("initial", initial, len(scales))
    if labels is None:
        labels = [f"k{i + 1}" for i in range(len(scores))]
    if not isinstance(labels, (list, tuple)) or not all(isinstance(x, str) for x in labels):
        raise TypeError(f"labels must be a list of str, got {labels!r}")
    if len(labels) != len(scores):
        raise ValueError(f"labels has {len(labels)} names for scores {shape_of(scores)}")
    grid = torch.tensor(scales, dtype=scores.dtype)
    weights = masked_softmax(grid[:, None, None] * scores)[:, 0]  # (n_scales, n)
    entropy = attention_entropy(weights)  # (n_scales,)
    data = {
        "scores": _rounded(scores),
        "labels": list(labels),
        "scales": _rounded(scales, 6),
        "weights": _rounded(weights),
        "entropy": _rounded(entropy),
        "max_entropy": _rounded(math.log(len(scores))),
        "initial": initial,
    }
    figure, ax = _figure(width=5.5, height=2.6)
    ax.bar(labels, data["weights"][initial], color=OKABE_ITO[0])
    ax.set(
        ylim=(0, 1),
        ylabel="weight",
        title=f"scale {scales[initial]:.3g}: entropy "
        f"{data['entropy'][initial]:.3f} of at most {data['max_entropy']:.3f} nats",
    )
    return Widget(
        "temperature",
        "Softmax: move the scale from uniform to argmax",
        "The softmax weights of one query's scores, each score multiplied by the scale "
        "(1/temperature), and their entropy in nats: ln n for uniform weights, 0 for one-hot.",
        f"Bars of the softmax weights at scale {scales[initial]:.3g}.",
        data,
        _png(figure),
    )


# -------------------------------------------------------------------------------- chapter 12


def tile_stepper(query, key, value, block_size):
    """Tiled (Flash) attention stepped key block by key block, for each query row: the running
    max m, sum l and output after each tile.

    query (n_q, d), key (n_k, d), value (n_k, d_v) floats of one dtype; block_size: the side of
    a tile. After c key blocks a row's running statistics are those of a softmax over the keys
    read so far (`masked_softmax` with valid_lens): m its largest scaled score, l the sum of
    exp(s - m), the output its weighted values. Chapter 12.
    """
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_float(name, tensor, 2)
    if len({query.dtype, key.dtype, value.dtype}) > 1:
        raise ValueError(
            f"query {query.dtype}, key {key.dtype} and value {value.dtype} must share a dtype"
        )
    if query.shape[1] != key.shape[1] or key.shape[0] != value.shape[0]:
        raise ValueError(
            f"query {shape_of(query)}, key {shape_of(key)} and value {shape_of(value)} "
            "disagree: query and key need one d, key and value one n_k"
        )
    require_int("block_size", block_size, 1)
    n_q, n_k = query.shape[0], key.shape[0]
    scores = query @ key.T / math.sqrt(query.shape[1])  # (n_q, n_k) scaled scores
    ends = list(range(block_size, n_k, block_size)) + [n_k]  # keys read after each tile
    # after step c a row has read the keys before ends[c]: a softmax over that prefix, which is
    # what the online softmax holds then (its m the prefix's largest score, and l the sum of
    # exp(s - m), so 1 / l is the weight of the largest score)
    prefix = scores.expand(len(ends), n_q, n_k)
    weights = masked_softmax(prefix, valid_lens=torch.tensor(ends)[:, None].expand(-1, n_q))
    outputs = weights @ value  # (steps, n_q, d_v)
    steps = [
        {
            "m": _rounded(scores[:, :end].amax(dim=1)),
            "l": _rounded(1 / weights[c].amax(dim=1)),
            "out": _rounded(outputs[c]),
        }
        for c, end in enumerate(ends)
    ]
    data = {
        "scores": _rounded(scores, 2),
        "block": block_size,
        "n_q": n_q,
        "n_k": n_k,
        "steps": steps,
    }
    figure, ax = _figure(width=6.0, height=3.0)
    ax.imshow(scores, cmap="viridis", aspect="auto", interpolation="nearest")
    for edge in range(block_size, max(n_q, n_k), block_size):
        ax.axvline(edge - 0.5, color="white", lw=1.5)
        ax.axhline(edge - 0.5, color="white", lw=1.5)
    ax.set(xlabel="key", ylabel="query", title=f"scores in tiles of {block_size}")
    return Widget(
        "tiles",
        "Tiled attention, one tile at a time",
        "The scaled scores of every query (rows) and key (columns), cut into tiles; step "
        "through the key blocks and read one query row's running max m, running sum l and "
        "output, as the online softmax updates them.",
        f"The score matrix in tiles of {block_size}.",
        data,
        _png(figure),
    )


# -------------------------------------------------------------------------------- chapter 16


def _check_forgets(forgets, n):
    """Token positions 2..n (1-based), distinct and increasing: where a gate may forget."""
    if not isinstance(forgets, (list, tuple)):
        raise TypeError(f"forgets must be a list of token positions, got {type(forgets)}")
    for position in forgets:
        require_int("forgets", position, 2)
        if position > n:
            raise ValueError(f"forgets must be token positions 2..{n}, got {position}")
    if list(forgets) != sorted(set(forgets)):
        raise ValueError(f"forgets must be distinct and increasing, got {list(forgets)}")
    return list(forgets)


def decay_explorer(query, key, gammas, initial=0, forgets=(), gate=0.05):
    """How causal linear attention with a decay gamma and a gate forgets: the last query's
    unnormalised weight on every key, for each gamma on a slider and, on a second slider, no
    gate or a gate that forgets at one of the tokens in `forgets`.

    query, key (n, d) floats of one dtype; gammas: the slider's positions, numbers in (0, 1];
    initial: the starting position's index; forgets: token positions (1-based, 2..n) where the
    second slider may put the gate; gate: the gate's factor e^(g_p) in (0, 1) at that token,
    which multiplies every earlier key's weight. The weights are `linear_attention`'s with
    elu + 1 features (values = the identity, normalize=False, log_decay = ln gamma, plus
    ln gate at the forgetting token). Chapter 16.
    """
    require_float("query", query, 2)
    require_float("key", key, 2)
    if query.shape != key.shape or query.dtype != key.dtype:
        raise ValueError(
            f"query {shape_of(query)} {query.dtype} and key {shape_of(key)} {key.dtype} must "
            "share a shape and a dtype"
        )
    gammas = _check_grid("gammas", gammas, maximum=1.0)
    _check_index("initial", initial, len(gammas))
    n, d = query.shape
    forgets = _check_forgets(forgets, n)
    require_number("gate", gate, 0.0, strict=True, maximum=1.0)
    # the log-decays of every (gamma, gate) setting: (G, F + 1, n); setting 0 has no gate
    grid = torch.tensor(gammas, dtype=query.dtype)
    log_decay = grid.log()[:, None, None].expand(len(gammas), len(forgets) + 1, n).clone()
    for k, position in enumerate(forgets, start=1):
        log_decay[:, k, position - 1] += math.log(gate)  # g_p: the token that forgets
    settings = log_decay.shape[:2]
    out = linear_attention(
        query.expand(*settings, n, d),
        key.expand(*settings, n, d),
        torch.eye(n, dtype=query.dtype).expand(*settings, n, n),
        normalize=False,
        log_decay=log_decay,
    )  # (G, F + 1, n, n); value j = e_j, so row i holds query i's weights
    weights = out[..., -1, :]  # (G, F + 1, n): the last query's weight on each key
    data = {
        "gammas": _rounded(gammas),
        "forgets": forgets,
        "gate": _rounded(gate),
        "weights": _rounded(weights),
        "initial": initial,
    }
    figure, ax = _figure(width=6.0, height=2.6)
    ax.bar(range(1, n + 1), data["weights"][initial][0], color=OKABE_ITO[0])
    ax.set(
        xlabel="key position j",
        ylabel=f"weight for query {n}",
        title=f"gamma = {gammas[initial]:.3g}, no gate",
    )
    return Widget(
        "decay",
        "Linear attention with a decay and a gate: move gamma and the forgetting token",
        f"The unnormalised weight phi(q_{n}) · phi(k_j) · gamma^({n} − j) of the last query on "
        "each key, times the gate's factor for every key before a token that forgets: "
        "gamma = 1 never forgets; a smaller gamma fades old keys out; the gate cuts them.",
        f"Bars of the last query's weights at gamma = {gammas[initial]:.3g}, with no gate.",
        data,
        _png(figure),
    )


# --------------------------------------------------------------------------- chapters 13-14


def _check_tokens(tokens):
    """P lists of token strings, each non-empty."""
    if not isinstance(tokens, (list, tuple)) or not all(
        isinstance(row, (list, tuple)) and all(isinstance(t, str) for t in row) for row in tokens
    ):
        raise TypeError(f"tokens must be a list of lists of str (one per prompt), got {tokens!r}")
    if not tokens or not all(tokens):
        raise ValueError("tokens must hold at least one prompt, each of at least one token")


def _check_marks(marks, n_layers, n_heads):
    """{(layer, head): label} with layer < n_layers, head < n_heads."""
    if not isinstance(marks, dict):
        raise TypeError(f"marks must be a dict {{(layer, head): label}}, got {type(marks)}")
    for key, label in marks.items():
        if not (isinstance(key, tuple) and len(key) == 2 and isinstance(label, str)):
            raise TypeError(f"marks must map (layer, head) pairs to str, got {key!r}: {label!r}")
        for what, index, size in (("layer", key[0], n_layers), ("head", key[1], n_heads)):
            require_int(f"marks' {what}", index, 0)
            if index >= size:
                raise ValueError(f"marks: {what} {index} out of range (the model has {size})")


def head_explorer(tokens, weights, marks=None):
    """An attention explorer of a real model (as bertviz's head view): pick a prompt, a layer
    and a head, point at (hover or focus) a query token and read its weight on every key.

    tokens: P lists of the prompts' token strings (padding left out); weights: one tensor per
    layer, (P, H, L, L), as the course's models return them, L at least every prompt's length;
    marks: {(layer, head): label} of heads to name in the menus. The weights are rounded to
    two decimals (stored as hundredths). Chapters 13-14.
    """
    _check_tokens(tokens)
    if not isinstance(weights, (list, tuple)) or not weights:
        raise TypeError(
            f"weights must be a non-empty list of tensors (one per layer), got "
            f"{type(weights).__name__}"
        )
    for w in weights:
        require_float("weights", w, 4)
    if len({w.shape for w in weights}) > 1:
        raise ValueError(
            f"weights must share one shape, got {sorted({shape_of(w) for w in weights})}"
        )
    n_prompts, n_heads, length, _ = weights[0].shape
    if n_prompts != len(tokens) or max(map(len, tokens)) > length:
        raise ValueError(
            f"weights {shape_of(weights[0])} per layer do not fit tokens of {len(tokens)} prompts "
            f"of lengths {[len(t) for t in tokens]}"
        )
    marks = {} if marks is None else marks
    _check_marks(marks, len(weights), n_heads)
    hundredths = (torch.stack(weights).detach().cpu().double() * 100).round().long()
    prompts = [
        {"tokens": list(row), "weights": hundredths[:, p, :, : len(row), : len(row)].tolist()}
        for p, row in enumerate(tokens)
    ]
    first = min(marks) if marks else (0, 0)
    data = {
        "prompts": prompts,
        "marks": [[layer, head, label] for (layer, head), label in sorted(marks.items())],
        "initial": list(first),
    }
    row = list(tokens[0])
    figure, ax = _figure(width=5.5, height=5.0)
    ax.imshow(
        hundredths[first[0], 0, first[1], : len(row), : len(row)] / 100,
        cmap="viridis",
        vmin=0,
        vmax=1,
    )
    ax.set_xticks(range(len(row)), row, rotation=90, fontsize=7)
    ax.set_yticks(range(len(row)), row, fontsize=7)
    label = marks.get(first, "")
    ax.set(title=f"head {first[0]}.{first[1]} {label}".strip(), xlabel="key", ylabel="query")
    return Widget(
        "heads",
        "Attention explorer: pick a layer and a head, point at a token",
        "Each query token's attention weights (rounded to 0.01) on the keys, for the head "
        "chosen; the heads the chapter names are marked in the head menu. Point at a query "
        "token (or focus it with Tab) to show its weights.",
        f"The weights of head {first[0]}.{first[1]} on the first prompt.",
        data,
        _png(figure),
    )
