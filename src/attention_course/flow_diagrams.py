"""Diagrams of what flows through one layer or one kernel: chapter 4's toy retrieval task,
self-attention's projections and products (chapter 7), one program of FlashAttention-2's
forward kernel and the kernels that `triton_flash_attention` launches (chapter 18).

Drawn as `diagrams` draws (the primitives of `_drawing`: light Okabe–Ito tints behind black
text, readable in grey, in print and on the dark theme's white figure ground); every size on a
diagram comes from its arguments. Each function returns the matplotlib Figure, its Axes with
the axis off, and names its repeated parts with a `gid`.
"""

import math

from matplotlib.patches import Rectangle

from ._drawing import BLUE, GREEN, ORANGE, PINK, SKY, arrow, box, canvas, note, tint
from ._shapes import require_int, require_number

MOST_TILES = 12  # the most key tiles a program's row can show


def _sizes(**sizes):
    """The door checks: every size a positive integer."""
    for name, value in sizes.items():
        require_int(name, value, 1)


def draw_self_attention(n, d_model, d_k, d_v):
    """Self-attention of one sequence, left to right: X (n x d_model) multiplied by W_Q, W_K
    and W_V into Q, K (n x d_k) and V (n x d_v); the scores Q K^T / sqrt(d_k) (n x n), their
    row softmax A, and the output A V (n x d_v). Every shape is read from the arguments.
    Returns the Figure; the three projections are texts with gid "projection", the matrices
    texts with gid "matrix". Chapter 7."""
    _sizes(n=n, d_model=d_model, d_k=d_k, d_v=d_v)
    fig, ax = canvas(9.6, 2.9, (-0.9, 12.4), (-1.55, 1.45))
    box(ax, 0, 0, f"$X$\n${n} \\times {d_model}$\none row\nper token", gid="matrix")
    rows = [("Q", d_k, 1.0), ("K", d_k, 0.0), ("V", d_v, -1.0)]
    for name, size, y in rows:
        # each projection of the same X
        arrow(ax, (0.75, 0), (1.45, y))
        box(ax, 2.25, y, f"$W_{name}$: ${d_model} \\to {size}$", BLUE, 8.5, gid="projection")
        arrow(ax, (3.15, y), (3.65, y))
        box(ax, 4.3, y, f"${name}$: ${n} \\times {size}$", SKY, 8.5, gid="matrix")
    # queries against keys, then the softmax of each row
    arrow(ax, (4.95, 1.0), (5.75, 0.55))
    arrow(ax, (4.95, 0.0), (5.75, 0.4))
    box(
        ax, 6.55, 0.5, f"$QK^\\top / \\sqrt{{{d_k}}}$\n${n} \\times {n}$", ORANGE, 8.5, gid="matrix"
    )
    arrow(ax, (7.35, 0.5), (7.85, 0.5))
    box(ax, 8.75, 0.5, f"$A$ = row softmax\n${n} \\times {n}$", ORANGE, 8.5, gid="matrix")
    # the weights mix the values
    arrow(ax, (9.6, 0.35), (10.25, 0.05))
    arrow(ax, (4.95, -1.0), (10.25, -0.15))
    box(ax, 11.2, 0.0, f"$AV$\n${n} \\times {d_v}$", GREEN, 8.5, gid="matrix")
    note(ax, 8.6, -1.35, f"row $i$ of $AV$: $\\sum_j A_{{ij}} v_j$, a mix of all {n} values")
    note(ax, 8.75, 1.25, "each row sums to 1", fontsize=8)
    return fig


def draw_flash_program(n_keys, block_q, block_k, head_dim):
    """One program instance of FlashAttention-2's forward kernel: its query tile Q_r (block_q x
    head_dim) loaded from HBM once, the key and value tiles of `n_keys` keys (block_k each, the
    last shorter) streaming past it one after another, the running max m, sum l and
    accumulator A on chip, and O_r = A / l with the log-sum-exp written to HBM once. Returns
    the Figure; the key and value tiles in HBM are patches with gid "tile". Chapter 18."""
    _sizes(n_keys=n_keys, block_q=block_q, block_k=block_k, head_dim=head_dim)
    tiles = math.ceil(n_keys / block_k)
    if tiles > MOST_TILES:
        raise ValueError(
            f"n_keys / block_k must be at most {MOST_TILES} tiles to be drawn, got {tiles} "
            f"({n_keys} keys in tiles of {block_k})"
        )
    fig, ax = canvas(9.6, 3.7, (-0.6, 12.6), (-2.45, 2.25))
    # HBM: the query tile, the key and value tiles, the outputs
    ax.add_patch(
        Rectangle((-0.5, 0.9), 13.0, 1.25, facecolor=tint(PINK, 0.12), edgecolor=PINK, lw=1)
    )
    note(ax, -0.35, 1.95, "HBM", ha="left", fontsize=9, colour="0.1")
    box(ax, 0.6, 1.35, f"$Q_r$\n${block_q} \\times {head_dim}$", SKY, 8)
    width = min(0.8, 7.4 / tiles)
    for c in range(tiles):
        # tile c holds keys c * block_k to the end of the tile or of the keys
        x = 2.0 + c * width
        ax.add_patch(
            Rectangle(
                (x, 1.05),
                width * 0.92,
                0.62,
                facecolor=tint(BLUE, 0.35),
                edgecolor="white",
                lw=1.5,
                gid="tile",
            )
        )
        last = min(n_keys, (c + 1) * block_k) - 1
        if tiles <= 8 or c in (0, tiles - 1):
            note(ax, x + width * 0.46, 1.36, f"{c * block_k}–{last}", fontsize=8)
    end = 2.0 + tiles * width
    note(ax, (2.0 + end) / 2, 1.9, f"$K_c, V_c$: {tiles} tiles of {block_k} keys", fontsize=8.5)
    box(ax, 11.4, 1.35, f"$O_r$: ${block_q} \\times {head_dim}$\nlse: {block_q}", GREEN, 8)
    # on chip: the query tile stays, the tiles pass, m, l and A are carried
    ax.add_patch(
        Rectangle((-0.5, -2.35), 13.0, 2.6, facecolor=tint(BLUE, 0.08), edgecolor=BLUE, lw=1)
    )
    note(ax, -0.35, -2.1, "on chip: one program", ha="left", fontsize=9, colour="0.1")
    arrow(ax, (0.6, 0.9), (0.6, -0.5))
    note(ax, 0.75, 0.55, "once", ha="left", fontsize=8)
    box(ax, 0.6, -0.95, f"$Q_r$ stays\n${block_q} \\times {head_dim}$", SKY, 8)
    arrow(ax, (1.25, -0.95), (3.45, -0.95))
    arrow(ax, ((2.0 + end) / 2, 1.0), (4.3, -0.5))
    note(ax, (2.0 + end) / 2 + 0.2, 0.55, f"one tile at a time, {tiles} times", "left", 8)
    box(ax, 4.3, -0.95, f"$S = Q_r K_c^\\top$\n${block_q} \\times {block_k}$", ORANGE, 8)
    arrow(ax, (5.35, -0.95), (6.25, -0.95))
    box(
        ax,
        8.05,
        -0.95,
        f"new max $m$, rescale $\\ell$ and $A$\n"
        f"$A \\leftarrow A e^{{m - m'}} + e^{{S - m'}} V_c$\n$A$: ${block_q} \\times {head_dim}$",
        ORANGE,
        8,
    )
    arrow(ax, (9.9, -0.95), (11.4, 0.9))
    note(ax, 10.95, -0.35, "after the last tile:\n$O_r = A / \\ell$", ha="left", fontsize=8)
    note(ax, 6.1, -2.0, f"$m$, $\\ell$: {block_q} numbers each, never written to HBM", fontsize=8)
    return fig


def draw_flash_kernels(n, batch_heads, block_q, block_k):
    """The kernels `triton_flash_attention` launches for `batch_heads` heads of n queries and
    keys, tiles of block_q queries and block_k keys: the forward kernel (a program per query
    tile and head), what it saves (Q, K, V, O and the log-sum-exp, nothing n x n), and the
    backward's three kernels: zeta = rowsum(dO * O), dK and dV by key tile, dQ by query tile.
    Each grid's program count is read from the arguments. Returns the Figure; the kernels are
    texts with gid "kernel". Chapter 18."""
    _sizes(n=n, batch_heads=batch_heads, block_q=block_q, block_k=block_k)
    query_tiles, key_tiles = math.ceil(n / block_q), math.ceil(n / block_k)
    fig, ax = canvas(9.6, 3.4, (-0.4, 12.6), (-2.2, 1.75))

    def programs(tiles, what):
        count = tiles * batch_heads
        return f"{tiles} {what} × {batch_heads} heads = {count:,} programs"

    forward = f"forward kernel\n{programs(query_tiles, 'query tiles')}"
    box(ax, 1.9, 0.9, forward, BLUE, 8, gid="kernel")
    arrow(ax, (4.1, 0.9), (4.9, 0.9))
    saved = f"saved: $Q, K, V, O$ (${n} \\times d$)\nand lse (${n}$ per head)"
    box(ax, 6.7, 0.9, saved, SKY, 8)
    note(ax, 6.7, 1.55, f"nothing of size ${n} \\times {n}$", fontsize=8)
    arrow(ax, (8.55, 0.9), (9.4, 0.9))
    box(ax, 10.8, 0.9, "$O$ to the loss;\n$dO$ comes back", fontsize=8)
    # the backward pass: zeta first, then the two gradient kernels
    note(ax, 0.0, -0.2, "backward", ha="left", fontsize=9, colour="0.1")
    box(
        ax,
        1.9,
        -1.2,
        "$\\zeta = \\mathrm{rowsum}(dO \\circ O)$\none program per block of rows",
        PINK,
        8,
        gid="kernel",
    )
    arrow(ax, (3.95, -1.05), (4.9, -0.6))
    arrow(ax, (3.95, -1.35), (4.9, -1.75))
    dkv = f"$dK, dV$ kernel\n{programs(key_tiles, 'key tiles')}"
    box(ax, 7.2, -0.6, dkv, ORANGE, 8, gid="kernel")
    dq = f"$dQ$ kernel\n{programs(query_tiles, 'query tiles')}"
    box(ax, 7.2, -1.75, dq, ORANGE, 8, gid="kernel")
    note(
        ax,
        10.85,
        -1.15,
        "each recomputes\n$\\Phi = e^{S - \\mathrm{lse}}$\ntile by tile",
        fontsize=8,
    )
    return fig


def draw_retrieval_task(n_tokens, d_in, d, noise):
    """Chapter 4's toy retrieval task, one example: n_tokens random tokens (d_in each) and a
    query token, token t plus `noise` times standard normal noise; the learned W_K and W_Q
    (d_in -> d) map them to the keys and the query; the scores q . k_j times the scale under
    study, their softmax, and the loss -ln alpha_t, the cross-entropy against token t. Every
    size is read from the arguments. Returns the Figure; the two learned projections are texts
    with gid "projection", the tensors texts with gid "tensor". Chapter 4."""
    _sizes(n_tokens=n_tokens, d_in=d_in, d=d)
    require_number("noise", noise, 0)
    fig, ax = canvas(8.6, 2.9, (-0.9, 11.4), (-1.75, 1.45))
    box(
        ax,
        0.3,
        0.85,
        f"tokens $x_1, \\dots, x_{{{n_tokens}}}$\n${n_tokens} \\times {d_in}$",
        gid="tensor",
    )
    box(ax, 0.3, -0.85, f"query token\n$x_t + {noise:g}\\,\\varepsilon$\n${d_in}$", gid="tensor")
    # the query token copies one of the tokens, with noise
    arrow(ax, (0.3, 0.45), (0.3, -0.4), dashed=True)
    note(ax, 0.45, 0.0, f"$t$: one of\nthe {n_tokens}, at random", ha="left", fontsize=8)
    for name, y, size in (("K", 0.85, f"{n_tokens} \\times {d}"), ("Q", -0.85, f"{d}")):
        # each learned projection of its own input
        arrow(ax, (1.45, y), (2.35, y))
        box(ax, 3.25, y, f"$W_{name}$: ${d_in} \\to {d}$", BLUE, 8.5, gid="projection")
        arrow(ax, (4.15, y), (4.85, y))
        letter = "keys $k_j$" if name == "K" else "query $q$"
        box(ax, 5.7, y, f"{letter}\n${size}$", SKY, 8.5, gid="tensor")
    # the query against every key, then the softmax and the loss
    arrow(ax, (6.55, 0.85), (7.3, 0.2))
    arrow(ax, (6.55, -0.85), (7.3, -0.2))
    box(
        ax,
        8.25,
        0.0,
        f"scores\n$\\mathrm{{scale}} \\cdot q \\cdot k_j$\n${n_tokens}$",
        ORANGE,
        8.5,
        gid="tensor",
    )
    arrow(ax, (9.2, 0.0), (9.7, 0.0))
    box(ax, 10.5, 0.0, f"softmax $\\alpha$\n${n_tokens}$", ORANGE, 8.5, gid="tensor")
    arrow(ax, (10.5, -0.45), (10.5, -0.95))
    box(ax, 10.5, -1.3, "loss $-\\ln \\alpha_t$", GREEN, 8.5)
    note(ax, 3.25, -1.45, "learned: $W_Q$ and $W_K$ only", fontsize=8)
    note(ax, 8.25, 0.95, "scale: $1/\\sqrt{d}$, none\nor $1/\\sqrt{d_\\mathrm{model}}$", fontsize=8)
    return fig
