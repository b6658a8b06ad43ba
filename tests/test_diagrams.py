"""The diagrams of attention_course.diagrams: each returns a Figure with its labelled parts,
and every size written on it comes from its arguments (the door checks are walked by
tests/test_contract.py, as for every public name)."""

import math

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure

from attention_course import (
    DecoderConfig,
    MultiHeadLatentAttention,
    TinyDecoder,
    draw_chunked_state,
    draw_decoder_block,
    draw_encoder_decoder,
    draw_flash_kernels,
    draw_flash_program,
    draw_latent_attention,
    draw_linear_recurrence,
    draw_multi_head,
    draw_packed_projections,
    draw_retrieval_task,
    draw_rotary_pairs,
    draw_self_attention,
    draw_sentence_encoder,
    draw_tiled_scores,
)
from attention_course.pretrained import EncoderConfig


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(fig):
    """Every text drawn on the figure's Axes, in one string per text."""
    return [text.get_text() for ax in fig.axes for text in ax.texts]


def joined(fig):
    return "\n".join(texts(fig))


def with_gid(fig, gid):
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == gid] + [
        t for ax in fig.axes for t in ax.texts if t.get_gid() == gid
    ]


def config(**sizes):
    base = dict(
        vocab_size=50, embed_dim=96, num_layers=7, num_heads=4, num_kv_heads=2, hidden_dim=200
    )
    return DecoderConfig(**{**base, **sizes})


# ------------------------------------------------------------------------ the decoder block


def test_the_decoder_block_shows_its_parts():
    fig = draw_decoder_block(config())
    assert isinstance(fig, Figure)
    drawn = joined(fig)
    for part in ("RMSNorm", "RoPE", "grouped-query attention", "SiLU", "$W_Q$", "$W_K$", "$W_V$"):
        assert part in drawn, part
    for name in ("W_O", "W_\\mathrm{gate}", "W_\\mathrm{up}", "W_\\mathrm{down}"):
        assert name in drawn, name
    assert drawn.count("RMSNorm") == 2  # before attention, before the feed-forward
    assert texts(fig).count("+") == 2  # the two residual adds
    assert "$\\odot$" in texts(fig)  # SwiGLU's product


def test_the_decoder_blocks_sizes_come_from_its_config():
    fig = draw_decoder_block(config(rope_base=500000.0))
    drawn = joined(fig)
    assert "$96 \\to 4 \\times 24$" in drawn  # W_Q: d_model -> H x d_h
    assert drawn.count("$96 \\to 2 \\times 24$") == 2  # W_K, W_V: H_kv heads
    assert "$96 \\to 200$" in drawn and "$200 \\to 96$" in drawn  # SwiGLU's width
    assert "4 query heads read 2 key–value heads" in drawn and "(2 per group)" in drawn
    assert "× 7 blocks" in drawn and "base 500,000" in drawn
    other = joined(draw_decoder_block(config(embed_dim=64, num_heads=8, num_kv_heads=1)))
    assert "$64 \\to 8 \\times 8$" in other and "8 query heads read 1 key–value heads" in other
    assert "96" not in other


def test_the_decoder_block_reads_a_models_config():
    model = TinyDecoder(30, embed_dim=32, num_heads=4, num_kv_heads=2, num_layers=3)
    drawn = joined(draw_decoder_block(model.config))
    assert f"$32 \\to {model.config.hidden_dim}$" in drawn and "× 3 blocks" in drawn


# -------------------------------------------------------------------- the sentence encoder


def test_the_sentence_encoder_shows_its_parts():
    fig = draw_sentence_encoder(EncoderConfig())
    assert isinstance(fig, Figure)
    drawn = joined(fig)
    for part in ("token $e_{t_i}$", "position $p_i$", "segment $s_0$", "multi-head attention"):
        assert part in drawn, part
    for part in ("padding mask", "$W_O$", "$W_1$", "GELU", "$W_2$", "mean over the real tokens"):
        assert part in drawn, part
    # post-norm: a LayerNorm after the embeddings' sum and after each of the two residual adds
    assert texts(fig).count("LayerNorm") == 3
    assert texts(fig).count("+") == 3


def test_the_sentence_encoders_sizes_come_from_its_config():
    drawn = joined(draw_sentence_encoder(EncoderConfig()))  # all-MiniLM-L6-v2's sizes
    assert "30,522 × 384" in drawn and "512 × 384" in drawn and "2 × 384" in drawn
    assert "12 heads, $d_h = 32$" in drawn and "$384 \\to 12 \\times 32$" in drawn
    assert "$384 \\to 1536$" in drawn and "$1536 \\to 384$" in drawn and "× 6 layers" in drawn
    other = EncoderConfig(
        vocab_size=100, embed_dim=64, num_heads=8, num_layers=3, ffn_dim=256, max_positions=40
    )
    drawn = joined(draw_sentence_encoder(other))
    assert "100 × 64" in drawn and "40 × 64" in drawn and "8 heads, $d_h = 8$" in drawn
    assert "$64 \\to 256$" in drawn and "× 3 layers" in drawn and "384" not in drawn


# ------------------------------------------------------------------------------ the tiles


@pytest.mark.parametrize(
    "n_queries, n_keys, query_block, key_block", [(1000, 777, 250, 200), (5, 9, 5, 2), (3, 3, 8, 8)]
)
def test_the_tiles_cover_the_score_matrix(n_queries, n_keys, query_block, key_block):
    fig = draw_tiled_scores(n_queries, n_keys, query_block, key_block)
    tiles = with_gid(fig, "tile")
    rows, cols = math.ceil(n_queries / query_block), math.ceil(n_keys / key_block)
    assert len(tiles) == rows * cols
    assert sum(t.get_width() * t.get_height() for t in tiles) == n_queries * n_keys
    assert max(t.get_width() for t in tiles) == min(key_block, n_keys)
    assert max(t.get_height() for t in tiles) == min(query_block, n_queries)


def test_the_running_statistics_follow_the_chosen_row():
    fig = draw_tiled_scores(1000, 777, 250, 200, row=2)
    drawn = texts(fig)
    assert [t for t in drawn if t.startswith("$S_")] == [f"$S_{{2{c}}}$" for c in range(4)]
    assert sum("after $S_{2" in t for t in drawn) == 4  # (m, l, A) after each tile
    assert "$m = -\\infty$" in joined(fig) and "$O_{2} = " in joined(fig)
    assert "777 keys in blocks of $B_c = 200$" in drawn
    assert "1000 queries in blocks of $B_r = 250$" in drawn
    assert "$K_{3}, V_{3}$" in drawn and "$K_{4}, V_{4}$" not in drawn


# -------------------------------------------------------------------- linear attention


@pytest.mark.parametrize("n_tokens", [1, 4, 9])
def test_the_recurrence_draws_one_state_per_token(n_tokens):
    fig = draw_linear_recurrence(n_tokens)
    states = with_gid(fig, "state")
    assert len(states) == n_tokens + 1  # S_0 and one per token
    assert states[0].get_text().startswith("$S_0 = 0$")
    assert states[-1].get_text() == f"$S_{{{n_tokens}}}$, $z_{{{n_tokens}}}$"
    assert f"$q_{{{n_tokens}}} \\to o_{{{n_tokens}}}$" in texts(fig)


@pytest.mark.parametrize("n_tokens, chunk_size", [(20, 8), (16, 4), (3, 8), (5, 1)])
def test_the_chunks_and_the_states_between_them(n_tokens, chunk_size):
    fig = draw_chunked_state(n_tokens, chunk_size)
    chunks = with_gid(fig, "chunk")
    count = math.ceil(n_tokens / chunk_size)
    assert len(chunks) == count
    assert sum(c.get_width() for c in chunks) == n_tokens
    states = [t for t in texts(fig) if t.startswith("$S_")]
    ends = [min((i + 1) * chunk_size, n_tokens) for i in range(count)]
    assert states == ["$S_0$"] + [f"$S_{{{end}}}$" for end in ends]
    assert f"{count} steps, not {n_tokens}" in joined(fig)


# ----------------------------------------------------------------------- encoder-decoder


def test_the_encoder_decoder_labels_come_from_its_arguments():
    source, target = ["7", "0", "2", "5"], ["h", "a", "c", "f", "<eos>"]
    weights = torch.tensor([0.1, 0.2, 0.6, 0.1])
    fig = draw_encoder_decoder(source, target, 3, weights)
    drawn = texts(fig)
    for token in source + target:
        assert token in drawn, token
    assert [t for t in drawn if t.startswith("$h_")] == [f"$h_{{{i}}}$" for i in range(1, 5)]
    assert [t for t in drawn if t.startswith("$u_")] == [f"$u_{{{t}}}$" for t in range(6)]
    assert "$c_{3}$" in drawn and "query $u_{2}$" in drawn
    alphas = [t for t in drawn if t.startswith("$\\alpha")]
    assert alphas == [f"$\\alpha_{{3,{i + 1}}} = {w:.2f}$" for i, w in enumerate(weights.tolist())]


def test_the_alignment_lines_are_as_thick_as_their_weights():
    fig = draw_encoder_decoder(["1", "2", "3"], ["b", "c", "d"], 1, [0.7, 0.2, 0.1])
    widths = [line.get_linewidth() for line in fig.axes[0].lines][-3:]
    assert widths[0] > widths[1] > widths[2]


# ------------------------------------------------------------------------------------ MLA


def test_the_latent_paths_sizes_come_from_the_layer():
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(
        embed_dim=48, num_heads=3, kv_rank=10, q_rank=20, head_dim=12, rope_dim=6, value_dim=5
    )
    drawn = joined(draw_latent_attention(layer))
    for label in (
        "$x_t$\n$\\mathbb{R}^{48}$",
        "$c^{KV}_t \\in \\mathbb{R}^{10}$",
        "$c^Q_t \\in \\mathbb{R}^{20}$",
        "$q^C$: $3 \\times 12$",
        "$k^C$: $3 \\times 12$",
        "$v$: $3 \\times 5$",
        "$q^R$: $3 \\times 6$",
        "$k^R_t \\in \\mathbb{R}^{6}$",
        "all 3 heads",
        "$10 + 6 = 16$ numbers",
        "$2 \\times 3 \\times 12 = 72$",
        "$W_{DKV}$",
        "$W_{UK}$",
        "$W_{UV}$",
        "$W_{KR}$",
        "$W_{QR}$",
    ):
        assert label in drawn, label
    assert joined(draw_latent_attention(layer)).count("cached") == 3  # two boxes, one note


def test_a_layer_without_a_query_latent_draws_w_q():
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(32, 2, kv_rank=8, q_rank=None, head_dim=8, rope_dim=4)
    drawn = joined(draw_latent_attention(layer))
    assert "$W_Q$" in drawn and "c^Q" not in drawn and "$W_{UQ}$" not in drawn


# ------------------------------------------------------------------------- RoPE's pairs


def arc_ends(arc):
    x, _ = arc.center
    return (round(x - arc.width / 2), round(x + arc.width / 2))


@pytest.mark.parametrize("head_dim", [2, 8, 32])
def test_the_two_pairings_join_the_right_dimensions(head_dim):
    fig = draw_rotary_pairs(head_dim)
    arcs = with_gid(fig, "pair")
    half = head_dim // 2
    assert len(arcs) == head_dim  # head_dim / 2 pairs in each pairing
    assert [arc_ends(a) for a in arcs[:half]] == [(i, i + half) for i in range(half)]
    assert [arc_ends(a) for a in arcs[half:]] == [(2 * i, 2 * i + 1) for i in range(half)]
    drawn = texts(fig)
    assert drawn.count(f"$\\theta_{{{half - 1}}}$") == 2  # the same frequency in both
    assert [t for t in drawn if t.isdigit()] == [str(j) for j in range(head_dim)] * 2


# ------------------------------------------------------------------------ multi-head attention


@pytest.mark.parametrize("d_model, num_heads", [(12, 3), (32, 4), (8, 1), (64, 8)])
def test_multi_head_draws_one_head_and_one_block_per_head(d_model, num_heads):
    fig = draw_multi_head(d_model, num_heads)
    heads, blocks = with_gid(fig, "head"), with_gid(fig, "block")
    assert len(heads) == num_heads and len(blocks) == num_heads
    # head i owns columns i * d_h ... (i + 1) * d_h - 1: counted here from the blocks' widths
    width = d_model / num_heads
    for i, head in enumerate(heads):
        first, last = round(i * width), round((i + 1) * width) - 1
        assert head.get_text().startswith(f"head {i}: ")
        assert f"columns {first}–{last} of each projection" in head.get_text()
        assert f"\\sqrt{{{round(width)}}}" in head.get_text()  # the scale is 1/sqrt(d_h)
    # the blocks of the concatenation are stacked without a gap, as tall as each other
    tops = sorted(block.get_y() for block in blocks)
    heights = {round(block.get_height(), 9) for block in blocks}
    assert len(heights) == 1
    height = heights.pop()
    assert tops == pytest.approx([tops[0] + k * height for k in range(num_heads)])


def test_multi_heads_sizes_come_from_its_arguments():
    drawn = joined(draw_multi_head(12, 3))
    assert drawn.count("$12 \\to 12$") == 2  # W_Q, W_K, W_V together, and W_O
    assert "$n_q \\times 12$" in drawn and "$n_k \\times 12$" in drawn
    assert "$H = 3$ heads of $d_h = 12 / 3 = 4$ features each" in drawn
    other = joined(draw_multi_head(32, 8))
    assert "$32 \\to 32$" in other and "$d_h = 32 / 8 = 4$" in other and "12 \\to" not in other


@pytest.mark.parametrize("d_model, num_heads", [(16, 4), (12, 3), (8, 1), (64, 8)])
def test_the_packed_weight_has_a_band_per_head_and_role(d_model, num_heads):
    fig = draw_packed_projections(d_model, num_heads)
    bands, heads = with_gid(fig, "band"), with_gid(fig, "head")
    assert len(bands) == 3 * num_heads and len(heads) == 3 * num_heads
    drawn = joined(fig)
    assert f"in_proj_weight  $({3 * d_model}, {d_model})$" in drawn
    for name in ("q", "k", "v"):
        assert f"{name}_proj.weight  $({d_model}, {d_model})$" in drawn
    # W_K's block starts where W_Q's ends, one d_model of rows later
    assert f"$W_K$: rows {d_model}–{2 * d_model - 1}" in drawn
    last = d_model - d_model // num_heads
    assert f"head {num_heads - 1}: rows {last}–{d_model - 1}" in drawn
    # every band as tall as every other: one head's d_h rows each
    assert len({round(patch.get_height(), 9) for patch in bands + heads}) == 1


# --------------------------------------------------------------------------- door checks


@pytest.mark.parametrize(
    "call, error, names",
    [
        (lambda: draw_decoder_block(object()), TypeError, "config"),
        (lambda: draw_sentence_encoder(config()), TypeError, "config"),
        (lambda: draw_tiled_scores(10, 7, 0, 3), ValueError, "query_block"),
        (lambda: draw_tiled_scores(10, 7, 4, 3, row=3), ValueError, "row"),
        (lambda: draw_tiled_scores(10, 7.0, 4, 3), TypeError, "n_keys"),
        (lambda: draw_linear_recurrence(0), ValueError, "n_tokens"),
        (lambda: draw_chunked_state(8, True), TypeError, "chunk_size"),
        (lambda: draw_encoder_decoder("31", ["d"], 1, [1.0]), TypeError, "source"),
        (lambda: draw_encoder_decoder(["3"], [], 1, [1.0]), ValueError, "target"),
        (lambda: draw_encoder_decoder(["3"], ["d"], 2, [1.0]), ValueError, "step"),
        (lambda: draw_encoder_decoder(["3", "1"], ["d"], 1, [1.0]), ValueError, "weights"),
        (lambda: draw_encoder_decoder(["3", "1"], ["d"], 1, [0.9, 0.9]), ValueError, "weights"),
        (lambda: draw_latent_attention(torch.nn.Linear(2, 2)), TypeError, "layer"),
        (lambda: draw_rotary_pairs(7), ValueError, "head_dim"),
        (lambda: draw_multi_head(12, 5), ValueError, "num_heads"),
        (lambda: draw_multi_head(12.0, 3), TypeError, "d_model"),
        (lambda: draw_packed_projections(12, 9), ValueError, "num_heads"),
    ],
)
def test_bad_arguments_are_named(call, error, names):
    with pytest.raises(error, match=names):
        call()


# ------------------------------------------------------------ chapters 7 and 18's flow diagrams


@pytest.mark.parametrize("n, d_model, d_k, d_v", [(6, 16, 8, 8), (3, 10, 4, 7)])
def test_self_attention_draws_three_projections_and_its_shapes(n, d_model, d_k, d_v):
    fig = draw_self_attention(n, d_model, d_k, d_v)
    projections = [t.get_text() for t in with_gid(fig, "projection")]
    # one projection per query, key and value, each from d_model to its own size
    assert projections == [
        f"$W_Q$: ${d_model} \\to {d_k}$",
        f"$W_K$: ${d_model} \\to {d_k}$",
        f"$W_V$: ${d_model} \\to {d_v}$",
    ]
    matrices = "\n".join(t.get_text() for t in with_gid(fig, "matrix"))
    assert f"${n} \\times {d_model}$" in matrices  # X
    assert matrices.count(f"${n} \\times {n}$") == 2  # the scores and the weights
    assert f"$AV$\n${n} \\times {d_v}$" in matrices


@pytest.mark.parametrize("n_tokens, d_in, d, noise", [(16, 32, 256, 0.5), (5, 3, 7, 0)])
def test_retrieval_task_draws_two_learned_projections_and_its_shapes(n_tokens, d_in, d, noise):
    fig = draw_retrieval_task(n_tokens, d_in, d, noise)
    projections = [t.get_text() for t in with_gid(fig, "projection")]
    # W_K for the tokens, W_Q for the query token, each from d_in to d
    assert projections == [f"$W_K$: ${d_in} \\to {d}$", f"$W_Q$: ${d_in} \\to {d}$"]
    tensors = "\n".join(t.get_text() for t in with_gid(fig, "tensor"))
    assert f"$x_1, \\dots, x_{{{n_tokens}}}$\n${n_tokens} \\times {d_in}$" in tensors
    assert f"$x_t + {noise:g}\\,\\varepsilon$\n${d_in}$" in tensors
    assert f"keys $k_j$\n${n_tokens} \\times {d}$" in tensors
    assert f"query $q$\n${d}$" in tensors
    # one score and one weight per token
    assert tensors.count(f"\n${n_tokens}$") == 2
    assert "loss $-\\ln \\alpha_t$" in joined(fig)


@pytest.mark.parametrize("n_keys, block_k", [(256, 32), (100, 32), (5, 8), (48, 4)])
def test_flash_program_draws_one_tile_per_block_of_keys(n_keys, block_k):
    fig = draw_flash_program(n_keys, 64, block_k, 16)
    # ceil by counting: the tiles that start before the last key
    expected = len(range(0, n_keys, block_k))
    assert len(with_gid(fig, "tile")) == expected
    assert f"{expected} tiles of {block_k} keys" in joined(fig)
    # the last tile ends at the last key
    if expected <= 8:
        assert f"{(expected - 1) * block_k}–{n_keys - 1}" in texts(fig)


def test_flash_program_refuses_more_tiles_than_it_can_draw():
    with pytest.raises(ValueError, match="at most"):
        draw_flash_program(1000, 64, 32, 16)


@pytest.mark.parametrize("n, heads, block_q, block_k", [(256, 4, 64, 64), (100, 3, 16, 32)])
def test_flash_kernels_draws_four_kernels_with_their_program_counts(n, heads, block_q, block_k):
    fig = draw_flash_kernels(n, heads, block_q, block_k)
    kernels = [t.get_text() for t in with_gid(fig, "kernel")]
    assert len(kernels) == 4  # forward, zeta, dK and dV, dQ
    query_tiles = -(-n // block_q)
    key_tiles = -(-n // block_k)
    assert f"= {query_tiles * heads:,} programs" in kernels[0]
    assert f"{key_tiles} key tiles × {heads} heads = {key_tiles * heads:,}" in kernels[2]
    assert f"{query_tiles} query tiles × {heads} heads" in kernels[3]
    assert f"nothing of size ${n} \\times {n}$" in joined(fig)
