"""The drawing primitives of `diagrams`: tinted boxes, arrows, lines and notes on an Axes whose
axis is off, in `plotting`'s Okabe–Ito palette (light tints behind black text, so that labels
read in grey, in print and on the dark theme's white figure ground)."""

import matplotlib.pyplot as plt
from matplotlib.colors import to_rgb

from .plotting import OKABE_ITO

BLUE, ORANGE, GREEN, PINK, YELLOW, SKY = OKABE_ITO[:6]
EDGE = "0.25"


def tint(colour, amount=0.25):
    """`colour` mixed with white: `amount` of the colour (light fills behind black text)."""
    return tuple(amount * c + (1 - amount) for c in to_rgb(colour))


def canvas(width, height, xlim, ylim):
    fig, ax = plt.subplots(figsize=(width, height), constrained_layout=True)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    return fig, ax


def box(ax, x, y, text, colour=None, fontsize=9, dashed=False, gid=None):
    """A rounded box with `text` centred at (x, y)."""
    ax.text(
        x,
        y,
        text,
        ha="center",
        va="center",
        fontsize=fontsize,
        gid=gid,
        bbox=dict(
            boxstyle="round,pad=0.35",
            facecolor="white" if colour is None else tint(colour),
            edgecolor=EDGE if colour is None else colour,
            linestyle="--" if dashed else "-",
            linewidth=1.4 if dashed else 1.0,
        ),
    )


def arrow(ax, start, end, colour=EDGE, width=1.2, style="-|>", dashed=False, shrink=0):
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops=dict(
            arrowstyle=style,
            color=colour,
            lw=width,
            linestyle="--" if dashed else "-",
            shrinkA=shrink,
            shrinkB=shrink,
        ),
    )


def line(ax, xs, ys, colour=EDGE, width=1.2, dashed=False):
    ax.plot(xs, ys, color=colour, linewidth=width, linestyle="--" if dashed else "-")


def note(ax, x, y, text, ha="center", fontsize=8.5, colour="0.2", **options):
    ax.text(x, y, text, ha=ha, va="center", fontsize=fontsize, color=colour, **options)


def plus(ax, x, y, symbol="+"):
    ax.text(
        x,
        y,
        symbol,
        ha="center",
        va="center",
        fontsize=12,
        bbox=dict(boxstyle="circle,pad=0.15", facecolor="white", edgecolor=EDGE),
    )
