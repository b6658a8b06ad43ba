"""Figures shared by the chapters: attention heatmaps and regression curves (chapter 1
onwards).

Colours are colour-blind safe: heatmaps use `viridis`, curves the Okabe–Ito palette, with
line styles that keep curves apart in grey. Every function returns the matplotlib Figure (or
Axes) so a notebook can add to it; inputs may be tensors, arrays or nested lists.
"""

import matplotlib.pyplot as plt
import torch

from ._shapes import require_rank, shape_of, type_name

OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
# line styles, so that curves stay apart in grey
LINE_STYLES = ["-", "-.", ":", (0, (5, 1)), "-", "-.", ":", (0, (5, 1))]


def _as_tensor(name, values):
    """A tensor, array or nested list of numbers (any device, dtype, with or without grad) as a
    float64 CPU tensor; TypeError naming `name` for anything else."""
    try:
        tensor = torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"{name} must be a tensor or an array of numbers, got {type_name(values)}"
        ) from None
    if tensor.dtype.is_complex:
        raise TypeError(f"{name} must hold real numbers, got {tensor.dtype}")
    return tensor.detach().to("cpu", torch.float64)


def _numpy(name, values):
    """_as_tensor as a NumPy array."""
    return _as_tensor(name, values).numpy()


def _as_grid(weights):
    """A 2-, 3- or 4-D tensor of matrices as a (rows, cols, n_q, n_k) tensor."""
    require_rank("weights", weights, (2, 3, 4))
    if weights.dim() == 2:
        return weights[None, None]
    if weights.dim() == 3:
        return weights[None]
    return weights


def plot_attention(
    weights,
    xlabel="keys",
    ylabel="queries",
    titles=None,
    extent=None,
    cmap="viridis",
    panel_size=2.6,
    vmax=1.0,
):
    """Heatmaps of attention weights with one shared colour scale and one colour bar.

    weights: (n_q, n_k) for one matrix, (n, n_q, n_k) for a row of n, or (rows, cols, n_q, n_k)
    for a grid. Row i of a matrix is query i; column j is key j. `titles` is a flat list with one
    title per panel (row-major). `extent` = (k_min, k_max, q_max, q_min) labels the axes with the
    keys' and queries' own coordinates instead of their indices. The colour scale runs from 0 to
    `vmax`: 1 by default, since weights are probabilities, so maps of different figures compare;
    `vmax=None` stretches it to the largest weight shown.
    Chapter 1.
    """
    grid = _as_grid(_as_tensor("weights", weights))
    rows, cols = grid.shape[:2]
    if titles is not None and len(titles) != rows * cols:
        raise ValueError(f"{len(titles)} titles for {rows * cols} panels of shape {shape_of(grid)}")
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(panel_size * cols + 0.8, panel_size * rows),
        squeeze=False,
        sharex=True,
        sharey=True,
        constrained_layout=True,
    )
    vmax = grid.max().item() if vmax is None else vmax
    for index, ax in enumerate(axes.flat):
        image = ax.imshow(
            grid[index // cols, index % cols].numpy(),
            cmap=cmap,
            vmin=0,
            vmax=vmax,
            aspect="auto",
            extent=extent,
            interpolation="nearest",
        )
        if titles is not None:
            ax.set_title(titles[index])
    for ax in axes[-1]:
        ax.set_xlabel(xlabel)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    return fig


def plot_regression(
    x_train,
    y_train,
    x_test,
    predictions,
    truth=None,
    ax=None,
    xlabel="x",
    ylabel="y",
    title=None,
    data_label="training data",
):
    """Training points, optionally the true curve, and one curve per entry of `predictions`.

    x_train, y_train: (n_train,); x_test: (n_test,); predictions: {label: (n_test,)};
    truth: (n_test,) or None. Returns the Axes.
    Chapter 1.
    """
    if not isinstance(predictions, dict):
        raise TypeError(
            f"predictions must be a dict {{label: (n_test,) curve}}, got {type_name(predictions)}"
        )
    x_train, y_train = _numpy("x_train", x_train), _numpy("y_train", y_train)
    x_test = _numpy("x_test", x_test)
    truth = None if truth is None else _numpy("truth", truth)
    curves = {
        label: _numpy(f"predictions[{label!r}]", curve) for label, curve in predictions.items()
    }
    if x_train.size != y_train.size:
        raise ValueError(
            f"x_train {x_train.shape} and y_train {y_train.shape} must hold one point each"
        )
    for label, curve in curves.items():
        if curve.shape != x_test.shape:
            raise ValueError(
                f"prediction {label!r} has shape {curve.shape}, x_test has {x_test.shape}"
            )
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6), constrained_layout=True)
    ax.scatter(x_train, y_train, s=12, color="0.55", alpha=0.8, label=data_label)
    if truth is not None:
        ax.plot(x_test, truth, color="black", linestyle="--", linewidth=1.5, label="true function")
    for colour, style, (label, curve) in zip(OKABE_ITO, LINE_STYLES, curves.items()):
        ax.plot(x_test, curve, color=colour, linestyle=style, linewidth=2, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small", loc="best")
    return ax


def plot_attention_schematic(
    weights, key_labels=None, value_labels=None, query_label="$q$", ax=None, first=1
):
    """One query attending to n key–value pairs: a line from the query to each key, as thick as
    its weight alpha_i, each key beside its value, and the output sum_i alpha_i v_i. weights (n,),
    non-negative and summing to 1; `first`: the index of the first pair in the labels (1, or 0
    to match Python's). Returns the Axes. Chapter 1."""
    weights = _as_tensor("weights", weights)
    require_rank("weights", weights, (1,))
    if (weights < 0).any() or abs(weights.sum().item() - 1) > 1e-6:
        raise ValueError(f"weights {shape_of(weights)} must be non-negative and sum to 1")
    n = len(weights)
    key_labels = key_labels or [f"$k_{{{i + first}}}$" for i in range(n)]
    value_labels = value_labels or [f"$v_{{{i + first}}}$" for i in range(n)]
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 0.55 * n + 1.2), constrained_layout=True)
    rows = [n - 1 - i for i in range(n)]  # first pair on top
    middle = (n - 1) / 2
    box = dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="0.3")
    ax.text(0, middle, query_label, ha="center", va="center", bbox=box, fontsize=12)
    for i, (row, alpha) in enumerate(zip(rows, weights.tolist())):
        width = 0.5 + 8 * alpha
        ax.plot(
            [0.25, 1.75],
            [middle, row],
            color=OKABE_ITO[0],
            linewidth=width,
            solid_capstyle="round",
            alpha=0.85,
        )
        on_line = middle + (row - middle) * 0.55  # past the line's middle
        ax.text(
            1.1,
            on_line,
            f"$\\alpha_{{{i + first}}} = {alpha:.2f}$",
            ha="center",
            va="center",
            fontsize=10,
            color=OKABE_ITO[0],
            bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none"),
        )
        ax.text(2.0, row, key_labels[i], ha="center", va="center", bbox=box, fontsize=11)
        ax.text(2.7, row, value_labels[i], ha="center", va="center", bbox=box, fontsize=11)
        ax.plot([2.95, 4.05], [row, middle], color=OKABE_ITO[1], linewidth=width, alpha=0.85)
    ax.text(4.5, middle, r"$\sum_i \alpha_i v_i$", ha="center", va="center", bbox=box, fontsize=12)
    for x, title in ((0, "query"), (2.0, "keys"), (2.7, "values"), (4.5, "output")):
        ax.text(x, n - 0.35, title, ha="center", va="bottom", fontsize=10, color="0.3")
    ax.set_xlim(-0.5, 5.1)
    ax.set_ylim(-0.6, n + 0.1)
    ax.axis("off")
    return ax
