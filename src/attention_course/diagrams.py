"""Diagrams drawn in code: the parts of a model or an algorithm, and what flows between them
(chapters 6, 10, 11, 12, 13, 14, 15 and 16; chapter 8's are in `head_diagrams`).

The colours are `plotting`'s Okabe–Ito palette, as light tints behind black text, so that every
label reads in grey and in print; a box's border says what the tint says (dashed: cached).
Every size written on a diagram comes from its arguments (a model's config, a layer, the
lengths and block sizes of a loop), never from a number typed here. Each function returns the
matplotlib Figure; its Axes has its axis off, and every drawn part is a text (`ax.texts`) or a
patch (`ax.patches`, the tiles, states and chunks with a `gid` naming them).
"""

import math

import torch
from matplotlib.patches import Arc, Rectangle

from ._drawing import (
    BLUE,
    EDGE,
    GREEN,
    ORANGE,
    PINK,
    SKY,
    YELLOW,
    arrow,
    box,
    canvas,
    line,
    note,
    plus,
    tint,
)
from ._shapes import require_instance, require_int, require_rank, shape_of, type_name
from .config import DecoderConfig
from .latent import MultiHeadLatentAttention
from .plotting import LINE_STYLES, OKABE_ITO
from .pretrained.minilm import EncoderConfig


def draw_decoder_block(config):
    """One block of a Llama-layout decoder (`TinyDecoder`): RMSNorm, grouped-query attention
    with RoPE on queries and keys, a residual add, RMSNorm, the SwiGLU feed-forward and a
    second residual add, bottom to top; every size on it is read from `config` (a
    `DecoderConfig`, such as `TinyDecoder(...).config`). Returns the Figure. Chapters 11, 14."""
    require_instance("config", config, DecoderConfig, "a DecoderConfig")
    d, heads, kv_heads = config.embed_dim, config.num_heads, config.num_kv_heads
    d_h, hidden = config.head_dim, config.hidden_dim
    fig, ax = canvas(6.4, 8.2, (-1.9, 6.0), (-0.7, 12.7))
    # the residual stream, bottom to top
    box(ax, 0, 0, f"hidden states\n$n \\times {d}$")
    line(ax, [0, 0], [0.45, 5.9])
    plus(ax, 0, 6.2)
    line(ax, [0, 0], [6.5, 10.95])
    plus(ax, 0, 11.25)
    arrow(ax, (0, 11.55), (0, 12.05))
    box(ax, 0, 12.35, f"to the next block  $n \\times {d}$", fontsize=8.5)
    # attention, on a normalised copy
    line(ax, [0, 2.6], [0.8, 0.8])
    arrow(ax, (2.6, 0.8), (2.6, 1.3))
    box(ax, 2.6, 1.6, f"RMSNorm  ($\\gamma \\in \\mathbb{{R}}^{{{d}}}$)", GREEN)
    projections = [
        (1.0, "$W_Q$", heads, BLUE),
        (2.6, "$W_K$", kv_heads, BLUE),
        (4.2, "$W_V$", kv_heads, BLUE),
    ]
    for x, name, count, colour in projections:
        arrow(ax, (2.6, 1.9), (x, 2.6))
        box(ax, x, 2.95, f"{name}\n${d} \\to {count} \\times {d_h}$", colour, fontsize=8.5)
    for x in (1.0, 2.6):
        arrow(ax, (x, 3.35), (x, 3.75))
        box(ax, x, 4.05, f"RoPE\nbase {config.rope_base:,.0f}", PINK, fontsize=8)
        arrow(ax, (x, 4.4), (x, 4.75))
    arrow(ax, (4.2, 3.35), (4.2, 4.75))
    group = heads // kv_heads
    box(
        ax,
        2.6,
        5.15,
        f"causal grouped-query attention\n{heads} query heads read {kv_heads} key–value "
        f"heads\n({group} per group), $d_h = {d_h}$",
        BLUE,
        fontsize=8.5,
    )
    arrow(ax, (2.6, 5.6), (2.6, 5.9))
    box(ax, 2.6, 6.2, f"$W_O$  ${heads} \\times {d_h} \\to {d}$", BLUE, fontsize=8.5)
    arrow(ax, (1.75, 6.2), (0.25, 6.2))
    # the feed-forward network, on a normalised copy
    line(ax, [0, 2.6], [6.9, 6.9])
    arrow(ax, (2.6, 6.9), (2.6, 7.3))
    box(ax, 2.6, 7.6, f"RMSNorm  ($\\gamma \\in \\mathbb{{R}}^{{{d}}}$)", GREEN)
    for x, name in ((1.5, "$W_\\mathrm{gate}$"), (3.7, "$W_\\mathrm{up}$")):
        arrow(ax, (2.6, 7.9), (x, 8.35))
        box(ax, x, 8.7, f"{name}  ${d} \\to {hidden}$", ORANGE, fontsize=8.5)
    arrow(ax, (1.5, 9.0), (1.5, 9.3))
    box(ax, 1.5, 9.6, "SiLU", ORANGE, fontsize=8.5)
    arrow(ax, (1.5, 9.9), (2.42, 10.25))
    arrow(ax, (3.7, 9.0), (2.78, 10.25))
    plus(ax, 2.6, 10.4, "$\\odot$")
    arrow(ax, (2.6, 10.65), (2.6, 10.95))
    box(ax, 2.6, 11.25, f"$W_\\mathrm{{down}}$  ${hidden} \\to {d}$", ORANGE, fontsize=8.5)
    arrow(ax, (1.65, 11.25), (0.25, 11.25))
    # what repeats, and what each half is
    line(ax, [-1.1, -1.25, -1.25, -1.1], [0.5, 0.5, 11.8, 11.8], colour="0.4")
    note(ax, -1.55, 6.1, f"× {config.num_layers} blocks", rotation=90, fontsize=10)
    note(ax, 5.3, 4.1, "attention", rotation=90, colour=BLUE, fontsize=9.5)
    note(ax, 5.3, 9.4, "SwiGLU feed-forward", rotation=90, colour="#A04000", fontsize=9.5)
    note(ax, -0.15, 3.3, "residual\nstream", ha="right", fontsize=8)
    return fig


def draw_sentence_encoder(config):
    """A BERT-style sentence encoder (`SentenceEncoder`, all-MiniLM-L6-v2), bottom to top: the
    token, position and segment embeddings summed and normalised; one post-norm layer
    (multi-head attention with the padding mask, a residual add, LayerNorm; the GELU
    feed-forward, a residual add, LayerNorm), repeated; mean pooling over the real tokens and
    scaling to unit length. Every size is read from `config` (an `EncoderConfig`). Returns the
    Figure. Chapter 13."""
    require_instance("config", config, EncoderConfig, "an EncoderConfig")
    d, heads, ffn = config.embed_dim, config.num_heads, config.ffn_dim
    d_h = d // heads
    fig, ax = canvas(6.0, 7.4, (-2.9, 5.2), (-0.55, 11.0))
    # the embeddings: three tables, one row of each per token, summed
    tables = (
        (-1.9, "token $e_{t_i}$", config.vocab_size),
        (0.0, "position $p_i$", config.max_positions),
        (1.9, "segment $s_0$", config.num_segments),
    )
    for x, name, rows in tables:
        box(ax, x, 0, f"{name}\n{rows:,} × {d}", YELLOW, fontsize=8.5)
        arrow(ax, (x, 0.45), (0.25 * (x > 0) - 0.25 * (x < 0), 0.95))
    plus(ax, 0, 1.2)
    arrow(ax, (0, 1.5), (0, 1.85))
    box(ax, 0, 2.1, "LayerNorm", GREEN)
    # one layer: attention and the feed-forward network, each added to the stream, then
    # normalised (post-norm: the LayerNorm sits on the stream itself)
    line(ax, [0, 0], [2.4, 4.45])
    line(ax, [0, 2.6], [2.75, 2.75])
    arrow(ax, (2.6, 2.75), (2.6, 3.05))
    box(
        ax,
        2.6,
        3.55,
        f"multi-head attention: {heads} heads, $d_h = {d_h}$\n"
        f"$W_Q, W_K, W_V$: ${d} \\to {heads} \\times {d_h}$\n"
        "padding mask: the real tokens' keys only",
        BLUE,
        fontsize=8.5,
    )
    arrow(ax, (2.6, 4.05), (2.6, 4.4))
    box(ax, 2.6, 4.7, f"$W_O$  ${heads} \\times {d_h} \\to {d}$", BLUE, fontsize=8.5)
    arrow(ax, (1.75, 4.7), (0.25, 4.7))
    plus(ax, 0, 4.7)
    arrow(ax, (0, 5.0), (0, 5.35))
    box(ax, 0, 5.6, "LayerNorm", GREEN)
    line(ax, [0, 0], [5.9, 8.15])
    line(ax, [0, 2.6], [6.15, 6.15])
    arrow(ax, (2.6, 6.15), (2.6, 6.45))
    box(ax, 2.6, 6.75, f"$W_1$  ${d} \\to {ffn}$", ORANGE, fontsize=8.5)
    arrow(ax, (2.6, 7.05), (2.6, 7.3))
    box(ax, 2.6, 7.55, "GELU", ORANGE, fontsize=8.5)
    arrow(ax, (2.6, 7.8), (2.6, 8.1))
    box(ax, 2.6, 8.4, f"$W_2$  ${ffn} \\to {d}$", ORANGE, fontsize=8.5)
    arrow(ax, (1.85, 8.4), (0.25, 8.4))
    plus(ax, 0, 8.4)
    arrow(ax, (0, 8.7), (0, 9.05))
    box(ax, 0, 9.3, "LayerNorm", GREEN)
    # mean pooling: one vector per sentence
    arrow(ax, (0, 9.6), (0, 9.95))
    box(
        ax,
        0,
        10.45,
        f"mean over the real tokens, ÷ its length\nsentence vector: "
        f"unit length in $\\mathbb{{R}}^{{{d}}}$",
        SKY,
        fontsize=8.5,
    )
    # what repeats, and what each half is
    line(ax, [-0.95, -1.1, -1.1, -0.95], [2.5, 2.5, 9.55, 9.55], colour="0.4")
    note(ax, -1.45, 6.0, f"× {config.num_layers} layers", rotation=90, fontsize=10)
    note(ax, 4.75, 3.9, "attention", rotation=90, colour=BLUE, fontsize=9.5)
    note(ax, 4.75, 7.55, "feed-forward", rotation=90, colour="#A04000", fontsize=9.5)
    note(ax, -0.15, 3.6, f"$n \\times {d}$", ha="right", fontsize=8.5)
    note(ax, -2.3, 1.2, "sum, then\nnormalise", fontsize=8)
    note(ax, 0.8, 5.6, "post-norm: LayerNorm after the add", ha="left", fontsize=8)
    return fig


def draw_tiled_scores(n_queries, n_keys, query_block, key_block, row=0):
    """The score matrix of `n_queries` queries and `n_keys` keys cut into tiles of
    `query_block` x `key_block` (the last ones shorter), with the running max m, sum l and
    unnormalised output A of query block `row` carried from tile to tile along its row, then
    O = A / l. Returns the Figure; the tiles are patches with gid "tile". Chapter 12."""
    for name, value in (
        ("n_queries", n_queries),
        ("n_keys", n_keys),
        ("query_block", query_block),
        ("key_block", key_block),
    ):
        require_int(name, value, 1)
    rows, cols = math.ceil(n_queries / query_block), math.ceil(n_keys / key_block)
    require_int("row", row, 0)
    if row >= rows:
        raise ValueError(
            f"row must be a query block, 0 to {rows - 1} for {n_queries} queries in "
            f"blocks of {query_block}, got {row}"
        )
    width, height = n_keys, n_queries
    unit = max(width / 6.0, height / 4.0)  # data units per inch, the grid at most 6 x 4 in
    strip = 2.2 * unit  # room under the grid for the running statistics
    fig, ax = canvas(
        width / unit + 2.6,
        height / unit + 2.6,
        (-1.6 * unit, width + unit),
        (height + strip, -1.0 * unit),
    )
    for r in range(rows):
        for c in range(cols):
            q0, k0 = r * query_block, c * key_block
            tile_height = min(query_block, n_queries - q0)
            tile_width = min(key_block, n_keys - k0)
            ax.add_patch(
                Rectangle(
                    (k0, q0),
                    tile_width,
                    tile_height,
                    facecolor=tint(BLUE, 0.45) if r == row else "0.93",
                    edgecolor="white",
                    linewidth=2,
                    gid="tile",
                )
            )
            if r == row:
                note(ax, k0 + tile_width / 2, q0 + tile_height / 2, f"$S_{{{r}{c}}}$", fontsize=9)
    for c in range(cols):
        k0 = c * key_block
        centre = k0 + min(key_block, n_keys - k0) / 2
        note(ax, centre, -0.35 * unit, f"$K_{{{c}}}, V_{{{c}}}$", fontsize=8.5)
    q_centre = row * query_block + min(query_block, n_queries - row * query_block) / 2
    note(ax, -0.15 * unit, q_centre, f"$Q_{{{row}}}$", ha="right", fontsize=9)
    note(
        ax,
        width / 2,
        -0.8 * unit,
        f"{n_keys} keys in blocks of $B_c = {key_block}$",
        fontsize=9,
    )
    note(
        ax,
        -1.05 * unit,
        height / 2,
        f"{n_queries} queries in blocks of $B_r = {query_block}$",
        rotation=90,
        fontsize=9,
    )
    # the running statistics of query block `row`, under the grid
    y, half = height + 0.9 * unit, 0.36 * unit  # half: about half a state box's width
    start = -0.8 * unit
    box(ax, start, y, "$m = -\\infty$\n$\\ell = 0,\\ A = 0$", fontsize=8)
    previous = start + 0.15 * unit
    for c in range(cols):
        k0 = c * key_block
        centre = k0 + min(key_block, n_keys - k0) / 2
        line(ax, [centre, centre], [q_centre, y - 0.3 * unit], colour=BLUE, width=0.8, dashed=True)
        arrow(ax, (previous + half, y), (centre - half, y))
        box(ax, centre, y, f"$m, \\ell, A$\nafter $S_{{{row}{c}}}$", SKY, fontsize=8)
        previous = centre
    arrow(ax, (previous, y + 0.35 * unit), (previous, y + 0.85 * unit))
    note(
        ax,
        previous,
        y + 1.1 * unit,
        f"$O_{{{row}}} = \\mathrm{{diag}}(\\ell)^{{-1}} A$",
        fontsize=9,
    )
    return fig


def draw_linear_recurrence(n_tokens):
    """Causal linear attention as a recurrence over `n_tokens` tokens: the state S_t (and the
    normaliser z_t) grows by phi(k_t) v_t^T at each token and is read by the query, o_t from
    S_t^T phi(q_t); S_0 = 0. Returns the Figure; the states are texts with gid "state".
    Chapter 16."""
    require_int("n_tokens", n_tokens, 1)
    step = 1.9
    fig, ax = canvas(1.45 * (n_tokens + 1) + 0.6, 3.0, (-1.0, step * n_tokens + 1.0), (-1.7, 1.75))
    box(ax, 0, 0, "$S_0 = 0$\n$z_0 = 0$", ORANGE, gid="state", fontsize=9)
    for t in range(1, n_tokens + 1):
        x = step * t
        arrow(ax, (x - step + 0.5, 0), (x - 0.5, 0), shrink=0)
        note(ax, x - step / 2, 0.28, "$+$", fontsize=11)
        box(ax, x, 0, f"$S_{{{t}}}$, $z_{{{t}}}$", ORANGE, gid="state", fontsize=9)
        note(ax, x - step / 2, -1.2, f"$\\phi(k_{{{t}}})\\, v_{{{t}}}^\\top$", fontsize=9)
        arrow(ax, (x - step / 2, -0.95), (x - step / 2, -0.12), colour=GREEN)
        note(ax, x, 1.45, f"$q_{{{t}}} \\to o_{{{t}}}$", fontsize=9)
        arrow(ax, (x, 0.3), (x, 1.2), colour=BLUE)
    note(
        ax,
        step * n_tokens / 2,
        -1.55,
        "each token adds one outer product to the state: its size, $d_\\phi \\times d_v$, "
        "never grows",
        fontsize=8.5,
    )
    return fig


def draw_chunked_state(n_tokens, chunk_size):
    """The chunkwise-parallel form over `n_tokens` tokens in chunks of `chunk_size` (the last
    one shorter): inside each chunk, a lower-triangular block of products computed at once
    (row r: token r reads tokens s <= r of its chunk); between chunks, the state S passed
    along, one step per chunk. Returns the Figure; the chunks are patches with gid "chunk".
    Chapter 16."""
    require_int("n_tokens", n_tokens, 1)
    require_int("chunk_size", chunk_size, 1)
    chunks = math.ceil(n_tokens / chunk_size)
    cell = min(0.3, 7.0 / n_tokens)  # inches per token, the row at most 7 in wide
    gap = 0.7 / cell  # tokens' worth of space between chunks
    span = n_tokens + gap * (chunks - 1)
    side = min(chunk_size, n_tokens)
    fig, ax = canvas(
        (span + 2.2 / cell) * cell,
        side * cell + 2.3,
        (-1.6 / cell, span + 0.6 / cell),
        (side + 1.6 / cell, -0.75 / cell),
    )
    state_y = side + 0.75 / cell
    box(ax, -1.0 / cell, state_y, "$S_0$", ORANGE, fontsize=9)
    previous = -1.0 / cell
    for index in range(chunks):
        start = index * chunk_size
        size = min(chunk_size, n_tokens - start)
        left = start + gap * index
        colour = SKY if index % 2 == 0 else YELLOW
        ax.add_patch(
            Rectangle(
                (left, 0), size, size, facecolor="none", edgecolor=EDGE, linewidth=1, gid="chunk"
            )
        )
        for r in range(size):  # token r of the chunk reads tokens 0..r of the chunk
            ax.add_patch(
                Rectangle((left, r), r + 1, 1, facecolor=tint(colour, 0.6), edgecolor="none")
            )
        note(ax, left + size / 2, -0.3 / cell, f"tokens {start + 1}–{start + size}", fontsize=8)
        arrow(
            ax, (previous + 0.1 / cell, state_y - 0.2 / cell), (left, size), dashed=True, width=0.9
        )
        end = left + size
        arrow(ax, (previous + 0.3 / cell, state_y), (end - 0.3 / cell, state_y))
        box(ax, end, state_y, f"$S_{{{start + size}}}$", ORANGE, fontsize=9)
        previous = end
    note(
        ax,
        span / 2,
        state_y + 0.55 / cell,
        f"{n_tokens} tokens in chunks of $L = {chunk_size}$: inside a chunk, every product at "
        f"once; between chunks, the state: {chunks} steps, not {n_tokens}",
        fontsize=8.5,
    )
    return fig


def _token_list(name, tokens):
    if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"{name} must be a list of strings, got {type_name(tokens)}")
    if not tokens:
        raise ValueError(f"{name} must hold at least one token, got none")
    return list(tokens)


def draw_encoder_decoder(source, target, step, weights):
    """A recurrent encoder–decoder with additive attention (Bahdanau et al. 2015): the encoder
    states h_i over the `source` tokens, the decoder states u_t writing the `target` tokens,
    and at decoder step `step` (1 to len(target)) the context c_t = sum_i alpha_{t,i} h_i, each
    line as thick as its weight in `weights` (n,), non-negative, summing to 1; the query is
    u_{t-1}. Returns the Figure. Chapter 6."""
    source = _token_list("source", source)
    target = _token_list("target", target)
    require_int("step", step, 1)
    if step > len(target):
        raise ValueError(f"step must be 1 to {len(target)} (the target's length), got {step}")
    if isinstance(weights, str):
        raise TypeError(
            f"weights must be a tensor or an array of numbers, got {type_name(weights)}"
        )
    try:
        weights = torch.as_tensor(weights, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"weights must be a tensor or an array of numbers, got {type_name(weights)}"
        ) from None
    require_rank("weights", weights, (1,))
    if len(weights) != len(source):
        raise ValueError(
            f"weights {shape_of(weights)} must hold one weight per source token ({len(source)})"
        )
    if (weights < 0).any() or abs(weights.sum().item() - 1) > 1e-6:
        raise ValueError(f"weights {shape_of(weights)} must be non-negative and sum to 1")
    n, m = len(source), len(target)
    gap = 1.35
    decoder_left = gap * (n - 1) / 2 - gap * m / 2  # u_0 ... u_m centred over the encoder
    width = max(gap * n, gap * (m + 1)) + 1.4
    fig, ax = canvas(
        min(1.0 * width + 1.0, 9.0),
        4.6,
        (min(-0.9, decoder_left - 0.9), max(gap * (n - 1), decoder_left + gap * m) + 1.2),
        (-1.5, 4.4),
    )
    # the encoder
    for i, token in enumerate(source):
        x = gap * i
        note(ax, x, -1.15, token, fontsize=10)
        arrow(ax, (x, -0.9), (x, -0.3))
        box(ax, x, 0, f"$h_{{{i + 1}}}$", BLUE, fontsize=10)
        if i:
            arrow(ax, (x - gap + 0.3, 0), (x - 0.3, 0))
    note(ax, gap * (n - 1) + 0.55, -0.55, "encoder", ha="left", colour=BLUE, fontsize=9)
    # the decoder
    for t in range(m + 1):
        x = decoder_left + gap * t
        box(ax, x, 3.0, f"$u_{{{t}}}$", GREEN, fontsize=10)
        if t:
            arrow(ax, (x - gap + 0.3, 3.0), (x - 0.3, 3.0))
            arrow(ax, (x, 3.3), (x, 3.75))
            note(ax, x, 4.0, target[t - 1], fontsize=10)
    note(ax, decoder_left - 0.45, 3.55, "decoder", ha="right", colour="#006B4F", fontsize=9)
    # attention at step `step`: context from every encoder state, query u_{t-1}
    context_x = decoder_left + gap * step
    context_y = 1.65
    for i, alpha in enumerate(weights.tolist()):
        x = gap * i
        line(ax, [x, context_x], [0.3, context_y - 0.25], colour=ORANGE, width=0.6 + 7 * alpha)
        middle = (x + (context_x - x) * 0.45, 0.3 + (context_y - 0.55) * 0.45)
        note(
            ax,
            *middle,
            f"$\\alpha_{{{step},{i + 1}}} = {alpha:.2f}$",
            fontsize=8,
            colour="#A04000",
            bbox=dict(boxstyle="round,pad=0.1", facecolor="white", edgecolor="none"),
        )
    box(ax, context_x, context_y, f"$c_{{{step}}}$", ORANGE, fontsize=10)
    arrow(ax, (context_x, context_y + 0.3), (context_x, 2.7), colour=ORANGE)
    query_x = context_x - gap
    arrow(ax, (query_x + 0.1, 2.7), (context_x - 0.3, context_y + 0.1), colour=GREEN, dashed=True)
    note(
        ax,
        query_x - 0.1,
        context_y + 0.35,
        f"query $u_{{{step - 1}}}$",
        ha="right",
        fontsize=8.5,
        colour="#006B4F",
    )
    return fig


def draw_latent_attention(layer):
    """Multi-head latent attention's paths for one token (DeepSeek-V2): the down-projections to
    the latents, the cached latent c^KV and the decoupled RoPE key k^R (dashed: what the cache
    keeps), the up-projections to every head's keys, values and queries, and the heads' scores;
    every size is read from `layer` (a `MultiHeadLatentAttention`). Returns the Figure.
    Chapter 15."""
    require_instance("layer", layer, MultiHeadLatentAttention, "a MultiHeadLatentAttention")
    d, heads = layer.embed_dim, layer.num_heads
    d_c, d_q, d_h = layer.kv_rank, layer.q_rank, layer.head_dim
    d_r, d_v = layer.rope_dim, layer.value_dim
    fig, ax = canvas(9.2, 5.0, (-0.9, 11.6), (-1.5, 5.0))
    box(ax, 0, 2.0, f"$x_t$\n$\\mathbb{{R}}^{{{d}}}$", fontsize=10)
    # the queries: through their own latent when the layer has one
    if d_q is None:
        query_start, query_label = (0.45, 2.3), "$W_Q$"
    else:
        arrow(ax, (0.45, 2.3), (2.3, 4.3))
        note(ax, 1.2, 3.6, "$W_{DQ}$", fontsize=9)
        box(ax, 3.0, 4.3, f"$c^Q_t \\in \\mathbb{{R}}^{{{d_q}}}$\nRMSNorm", fontsize=9)
        query_start, query_label = (3.75, 4.3), "$W_{UQ}$"
    arrow(ax, query_start, (6.3, 4.3))
    note(ax, 5.0, 4.55, query_label, fontsize=9)
    box(ax, 7.0, 4.3, f"$q^C$: ${heads} \\times {d_h}$", BLUE, fontsize=9)
    arrow(ax, query_start, (4.85, 3.3), colour=PINK)
    note(ax, 4.05, 3.55, "$W_{QR}$", fontsize=9)
    box(ax, 5.3, 3.3, "RoPE", PINK, fontsize=8.5)
    arrow(ax, (5.75, 3.3), (6.3, 3.3), colour=PINK)
    box(ax, 7.0, 3.3, f"$q^R$: ${heads} \\times {d_r}$", PINK, fontsize=9)
    # the keys and values: one cached latent, projected up for every head
    arrow(ax, (0.5, 1.9), (2.2, 1.5))
    note(ax, 1.35, 1.95, "$W_{DKV}$", fontsize=9)
    box(ax, 3.0, 1.5, f"$c^{{KV}}_t \\in \\mathbb{{R}}^{{{d_c}}}$\nRMSNorm", ORANGE, dashed=True)
    arrow(ax, (3.8, 1.6), (6.3, 2.2))
    note(ax, 5.0, 2.15, "$W_{UK}$", fontsize=9)
    box(ax, 7.0, 2.2, f"$k^C$: ${heads} \\times {d_h}$", BLUE, fontsize=9)
    arrow(ax, (3.8, 1.4), (6.3, 0.9))
    note(ax, 5.0, 0.85, "$W_{UV}$", fontsize=9)
    box(ax, 7.0, 0.9, f"$v$: ${heads} \\times {d_v}$", BLUE, fontsize=9)
    # the decoupled RoPE key: one for all heads, cached beside the latent
    arrow(ax, (0.3, 1.6), (2.4, -0.4), colour=PINK)
    note(ax, 1.0, 0.35, "$W_{KR}$", fontsize=9)
    box(ax, 3.0, -0.4, f"RoPE: $k^R_t \\in \\mathbb{{R}}^{{{d_r}}}$", ORANGE, dashed=True)
    arrow(ax, (3.95, -0.3), (6.3, -0.3), colour=PINK)
    box(ax, 7.0, -0.3, f"$k^R$ shared by\nall {heads} heads", PINK, fontsize=8.5)
    # the heads
    box(
        ax,
        9.9,
        2.2,
        "each head $i$, scores\n"
        "$q^C_i \\cdot k^C_i + q^R_i \\cdot k^R$\n"
        f"over $\\sqrt{{{d_h} + {d_r}}}$, softmax,\n"
        "$\\sum \\alpha\\, v_i$, and $W_O$\n"
        f"${heads} \\times {d_v} \\to {d}$",
        fontsize=8.5,
    )
    for y in (4.3, 3.3, 2.2, 0.9, -0.3):
        arrow(ax, (7.85, y), (8.85, max(min(y, 3.6), 0.8)), width=0.9)
    for y in (1.5, -0.4):
        note(ax, 3.0, y + (0.62 if y > 0 else -0.5), "cached", colour="#A04000", fontsize=8)
    note(
        ax,
        3.0,
        -1.25,
        f"dashed: cached per token and layer: ${d_c} + {d_r} = {d_c + d_r}$ numbers "
        f"(multi-head attention: $2 \\times {heads} \\times {d_h} = {2 * heads * d_h}$)",
        fontsize=8.5,
        colour="#A04000",
    )
    return fig


def draw_rotary_pairs(head_dim):
    """Which dimensions of a head RoPE rotates together, in its two pairings: half-split
    (Llama in `transformers`, the course's `apply_rotary`: dimension i with i + head_dim/2)
    and interleaved (Su et al.'s complex form, Meta's and GGUF's weights: 2i with 2i + 1);
    pair i turns at the frequency theta_i in both. Returns the Figure; the pairs are arcs with
    gid "pair". Chapters 10, 14."""
    require_int("head_dim", head_dim, 2)
    if head_dim % 2 or head_dim > 32:
        raise ValueError(f"head_dim must be even and at most 32 to be drawn, got {head_dim}")
    half = head_dim // 2
    step = min(0.32, 1.6 / half)  # the half-split arcs' heights, staggered
    top = 1.4 + 0.28 + 0.45 + step * (half - 1) + 0.45
    fig, ax = canvas(
        max(0.55 * head_dim + 1.0, 6.5), 2.4 + 0.6 * top, (-0.8, head_dim - 0.2), (-2.1, top)
    )
    rows = (
        (
            1.4,
            "half-split (the course, Llama in transformers): $i$ with $i + d/2$",
            1,
            [(i, i + half) for i in range(half)],
        ),
        (
            -0.9,
            "interleaved (Su et al.'s complex form, GGUF files): $2i$ with $2i + 1$",
            -1,
            [(2 * i, 2 * i + 1) for i in range(half)],
        ),
    )
    for y, title, side, pairs in rows:
        for j in range(head_dim):
            box(ax, j, y, f"{j}", fontsize=8.5)
        for i, (a, b) in enumerate(pairs):
            colour = OKABE_ITO[i % len(OKABE_ITO)]
            width, height = b - a, 0.45 + (step * i if side > 0 else 0)
            centre = (a + b) / 2
            ax.add_patch(
                Arc(
                    (centre, y + side * 0.28),
                    width,
                    2 * height,
                    theta1=0 if side > 0 else 180,
                    theta2=180 if side > 0 else 360,
                    color=colour,
                    linewidth=1.6,
                    linestyle=LINE_STYLES[i % len(LINE_STYLES)],
                    gid="pair",
                )
            )
            note(
                ax,
                centre,
                y + side * (0.28 + height + 0.15),
                f"$\\theta_{{{i}}}$",
                fontsize=8.5,
                colour=colour if colour != OKABE_ITO[6] else "0.3",
                bbox=dict(boxstyle="round,pad=0.05", facecolor="white", edgecolor="none"),
            )
        note(ax, (head_dim - 1) / 2, y + side * (-0.55), title, fontsize=9)
    return fig
