"""Figures shared by the chapters: attention heatmaps and regression curves.

Colours are colour-blind safe: heatmaps use `viridis`, curves the Okabe–Ito palette.
Every function returns the matplotlib Figure (or Axes) so a notebook can add to it.
"""

import matplotlib.pyplot as plt
import torch

from ._shapes import require_rank, shape_of

OKABE_ITO = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
LINE_STYLES = ["-", "-.", ":", (0, (5, 1)), "-", "-.", ":", (0, (5, 1))]  # curves stay apart in grey


def _as_grid(weights):
    """A 2-, 3- or 4-D tensor of matrices as a (rows, cols, n_q, n_k) tensor."""
    require_rank("weights", weights, (2, 3, 4))
    if weights.dim() == 2:
        return weights[None, None]
    if weights.dim() == 3:
        return weights[None]
    return weights


def plot_attention(weights, xlabel="keys", ylabel="queries", titles=None, extent=None,
                   cmap="viridis", panel_size=2.6):
    """Heatmaps of attention weights with one shared colour scale and one colour bar.

    weights: (n_q, n_k) for one matrix, (n, n_q, n_k) for a row of n, or (rows, cols, n_q, n_k)
    for a grid. Row i of a matrix is query i; column j is key j. `titles` is a flat list with one
    title per panel (row-major). `extent` = (k_min, k_max, q_max, q_min) labels the axes with the
    keys' and queries' own coordinates instead of their indices.
    """
    grid = _as_grid(torch.as_tensor(weights).detach().cpu())
    rows, cols = grid.shape[:2]
    if titles is not None and len(titles) != rows * cols:
        raise ValueError(f"{len(titles)} titles for {rows * cols} panels of shape {shape_of(grid)}")
    fig, axes = plt.subplots(rows, cols, figsize=(panel_size * cols + 0.8, panel_size * rows),
                             squeeze=False, sharex=True, sharey=True, constrained_layout=True)
    vmax = grid.max().item()
    for index, ax in enumerate(axes.flat):
        image = ax.imshow(grid[index // cols, index % cols].numpy(), cmap=cmap, vmin=0, vmax=vmax,
                          aspect="auto", extent=extent, interpolation="nearest")
        if titles is not None:
            ax.set_title(titles[index])
    for ax in axes[-1]:
        ax.set_xlabel(xlabel)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    return fig


def plot_regression(x_train, y_train, x_test, predictions, truth=None, ax=None,
                    xlabel="x", ylabel="y", title=None, data_label="training data"):
    """Training points, optionally the true curve, and one curve per entry of `predictions`.

    x_train, y_train: (n_train,); x_test: (n_test,); predictions: {label: (n_test,)};
    truth: (n_test,) or None. Returns the Axes.
    """
    for label, curve in predictions.items():
        if curve.shape != x_test.shape:
            raise ValueError(f"prediction {label!r} has shape {shape_of(curve)}, "
                             f"x_test has {shape_of(x_test)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6), constrained_layout=True)
    ax.scatter(x_train, y_train, s=12, color="0.55", alpha=0.8, label=data_label)
    if truth is not None:
        ax.plot(x_test, truth, color="black", linestyle="--", linewidth=1.5, label="true function")
    for colour, style, (label, curve) in zip(OKABE_ITO, LINE_STYLES, predictions.items()):
        ax.plot(x_test, torch.as_tensor(curve).detach(), color=colour, linestyle=style,
                linewidth=2, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small", loc="best")
    return ax
