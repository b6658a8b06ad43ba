"""Diagrams of multi-head attention (chapter 8): how a layer cuts its projections into heads,
and how `torch.nn.MultiheadAttention` packs the same weights.

Drawn as `diagrams` draws (the primitives of `_drawing`: light Okabe–Ito tints behind black
text, readable in grey, in print and on the dark theme's white figure ground); every size on
a diagram comes from its arguments. Each function returns the matplotlib Figure, its Axes with
the axis off, and names its repeated parts with a `gid`.
"""

from matplotlib.patches import Rectangle

from ._drawing import BLUE, arrow, box, canvas, note, tint
from ._shapes import require_int
from .plotting import OKABE_ITO


def _heads(d_model, num_heads):
    """The door checks of a head layout; returns d_h."""
    require_int("d_model", d_model, 1)
    require_int("num_heads", num_heads, 1)
    if d_model % num_heads:
        raise ValueError(
            f"num_heads must divide d_model: {d_model} is not a multiple of {num_heads}"
        )
    if num_heads > len(OKABE_ITO):
        raise ValueError(f"num_heads must be at most {len(OKABE_ITO)} to be drawn, got {num_heads}")
    return d_model // num_heads


def draw_multi_head(d_model, num_heads):
    """Multi-head attention, left to right: the queries, keys and values projected by W_Q,
    W_K, W_V (d_model -> d_model), each projection's columns cut into `num_heads` blocks of
    d_h = d_model / num_heads, one scaled dot-product attention per head on its own block,
    the heads' outputs concatenated side by side and mixed by W_O. Every size is read from the
    arguments. Returns the Figure; the heads are texts with gid "head", the blocks of the
    concatenation patches with gid "block". Chapter 8."""
    d_h, gap = _heads(d_model, num_heads), 0.95
    ys = [gap * ((num_heads - 1) / 2 - i) for i in range(num_heads)]  # head 0 on top
    half = gap * num_heads / 2
    fig, ax = canvas(9.6, 1.0 + 0.62 * num_heads + 0.9, (-0.9, 12.6), (-half - 0.75, half + 0.8))
    # the inputs and their three projections, every head's columns at once
    box(ax, 0, 0, f"$Q$: $n_q \\times {d_model}$\n$K, V$: $n_k \\times {d_model}$", fontsize=9)
    arrow(ax, (0.95, 0), (1.45, 0))
    box(ax, 2.35, 0, f"$W_Q, W_K, W_V$\n${d_model} \\to {d_model}$", BLUE, fontsize=9)
    # one head per block of d_h columns
    for i, y in enumerate(ys):
        colour = OKABE_ITO[i]
        arrow(ax, (3.3, 0), (4.1, y), colour=colour, width=1.0)
        score = f"$\\mathrm{{softmax}}(q_{{{i}}} k_{{{i}}}^\\top / \\sqrt{{{d_h}}})\\, v_{{{i}}}$"
        columns = f"columns {i * d_h}–{(i + 1) * d_h - 1} of each projection"
        box(ax, 5.6, y, f"head {i}: {score}\n{columns}", colour, fontsize=8, gid="head")
        arrow(ax, (7.05, y), (7.75, y), colour=colour, width=1.0)
        ax.add_patch(
            Rectangle(
                (7.8, y - gap / 2),
                0.9,
                gap,
                facecolor=tint(colour, 0.45),
                edgecolor="white",
                linewidth=2,
                gid="block",
            )
        )
        note(ax, 8.25, y, f"$n_q \\times {d_h}$", fontsize=8)
    # the concatenation, mixed by W_O
    note(ax, 8.25, half + 0.35, f"concatenated\n$n_q \\times {num_heads * d_h}$", fontsize=8.5)
    arrow(ax, (8.75, 0), (9.35, 0))
    box(ax, 9.85, 0, f"$W_O$\n${d_model} \\to {d_model}$", BLUE, fontsize=9)
    arrow(ax, (10.35, 0), (10.85, 0))
    box(ax, 11.6, 0, f"output\n$n_q \\times {d_model}$", fontsize=9)
    note(
        ax,
        5.6,
        -half - 0.45,
        f"$H = {num_heads}$ heads of $d_h = {d_model} / {num_heads} = {d_h}$ features each",
        fontsize=9,
    )
    return fig


def draw_packed_projections(d_model, num_heads):
    """How `torch.nn.MultiheadAttention` stores what the course's `MultiHeadAttention` keeps in
    three `nn.Linear` layers: one `in_proj_weight` of 3 d_model rows, W_Q's, then W_K's, then
    W_V's, each block cut into `num_heads` bands of d_h rows, one per head; `from_torch`
    copies block r into the r-th projection, and `out_proj` as it is. Every row number comes
    from the arguments. Returns the Figure; the bands of in_proj_weight are patches with gid
    "band", those of the three projections gid "head". Chapter 8."""
    d_h = _heads(d_model, num_heads)
    stripe = 0.3 if num_heads <= 4 else 1.2 / num_heads  # the height of one head's band
    block = stripe * num_heads
    gap = 0.35  # between the projections on the right
    height = 3 * block + 2 * gap  # the right column; the left one is a little shorter
    fig, ax = canvas(7.6, 1.0 + 0.9 * height, (-3.2, 9.2), (-0.95, height + 0.5))
    note(ax, 0.45, height + 0.3, f"in_proj_weight  $({3 * d_model}, {d_model})$", fontsize=9)
    # block r of in_proj_weight on the left, the projection it is copied into on the right
    for r, name in enumerate(("q", "k", "v")):
        top = height - r * (block + gap / 3)  # in_proj_weight's block r
        target = height - r * (block + gap)  # its projection's top on the right
        letter = name.upper()
        note(
            ax,
            -0.1,
            top - block / 2,
            f"$W_{letter}$: rows {r * d_model}–{(r + 1) * d_model - 1}",
            ha="right",
            fontsize=8.5,
        )
        for i in range(num_heads):
            colour = tint(OKABE_ITO[i], 0.55)
            first = r * d_model + i * d_h
            for x, y, gid in ((0, top, "band"), (5.2, target, "head")):
                ax.add_patch(
                    Rectangle(
                        (x, y - (i + 1) * stripe),
                        0.9,
                        stripe,
                        facecolor=colour,
                        edgecolor="white",
                        linewidth=1.5,
                        gid=gid,
                    )
                )
            # the bands' rows: every band's when they are few, else the first's and the last's
            if num_heads <= 4 or i in (0, num_heads - 1):
                note(ax, 0.45, top - (i + 0.5) * stripe, f"{first}–{first + d_h - 1}", fontsize=7.5)
            label = f"head {i}: rows {i * d_h}–{(i + 1) * d_h - 1}"
            if num_heads <= 4 or i in (0, num_heads - 1):
                note(ax, 6.25, target - (i + 0.5) * stripe, label, ha="left", fontsize=8)
        arrow(ax, (1.0, top - block / 2), (5.1, target - block / 2), colour=BLUE, width=1.0)
        if r == 0:  # what copies the blocks
            note(ax, 3.05, top - block / 2 + 0.17, "from_torch copies", fontsize=8, colour=BLUE)
        note(ax, 5.65, target + 0.17, f"{name}_proj.weight  $({d_model}, {d_model})$", fontsize=8.5)
    # the output projection, which needs no cutting
    box(
        ax,
        2.9,
        -0.6,
        f"out_proj  $({d_model}, {d_model})$: copied as it is; head $i$ reads its "
        f"columns $i \\cdot {d_h}$ to $(i + 1) \\cdot {d_h} - 1$",
        fontsize=8.5,
    )
    return fig
