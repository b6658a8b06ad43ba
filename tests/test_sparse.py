"""DeepSeek Sparse Attention (chapter 17): the lightning indexer's scores against a brute-force
loop over (t, s, j) built from the formula (float64, 1e-12), its selection against transformers'
DeepseekV32Indexer with the weights copied in; the whole layer against transformers'
DeepseekV32Attention (float64, 1e-10, SDPA and eager, the top-k folded into the mask), sparse
and dense; decoding token by token through an IndexedLatentCache against transformers'
DeepseekV32Attention through its DynamicCache (latents, RoPE keys and indexer keys held, and
outputs: float64, 1e-10) and against the whole sequence; top_k_mask against a sort;
MultiHeadLatentAttention's attn_mask against a brute-force MLA; the parameter count at
DeepSeek-V3.2's published shape; bad input.

What is tested, in the symbols of the paper and of transformers:

- x_t         the input of token t (embed_dim = d numbers)
- c_t         the query latent of MLA, c_t = RMSNorm(W_DQ x_t) (q_rank = d_c' numbers); the
              indexer reads it and adds no query latent of its own
- q_ti        the indexer's query of head i, the i-th block of W_IQ c_t (d_I numbers)
- k_s         the indexer's key of token s, LayerNorm(W_IK x_s) (d_I numbers), one for all
              indexer heads (so the indexer caches d_I numbers a token)
- eta_ti      the weight of head i for query t, (W_w x_t)_i / sqrt(H_I): a learnt number of
              either sign, so a head can vote for a token or against it
- H_I, d_I    the indexer's heads and head size (index_heads, index_head_dim; DeepSeek-V3.2:
              64 and 128)
- ReLU        max(0, .): a head whose query and key point apart gives 0, not a negative vote

RoPE turns the first rope_dim dimensions of each q_ti (by t) and of k_s (by s), the rest carry
no position; rope_dim is MLA's d_h^R. The indexer pairs dimension m with m + rope_dim / 2, as
`apply_rotary` (transformers' DeepseekV32Indexer does the same; MLA's own RoPE rows come from
DeepSeek's checkpoints interleaved, see `attention_course.latent`). The paper writes I_ts
without the two scales 1 / sqrt(d_I) and 1 / sqrt(H_I): they are those of the released code
and of transformers, and change the scores but not which tokens are selected. DeepSeek's kernel
also rotates q and k by a Hadamard matrix (orthogonal: the dot products stay) and rounds them to
8-bit floats; here they stay in the dtype of the computation. The causal rule is part of the
scores: I_ts = -inf for s > t.

Arguments (transformers' DeepseekV32Config names in brackets):

- LightningIndexer(embed_dim, q_rank, num_heads, head_dim, rope_dim, base): d, d_c', H_I
  (index_n_heads), d_I (index_head_dim), the rotated part of each q_ti and k_s
  (qk_rope_head_dim, even, at most d_I) and RoPE's base (rope_theta; plain RoPE, no YaRN).
- DeepSeekSparseAttention(embed_dim, num_heads, kv_rank, q_rank, top_k, index_heads,
  index_head_dim, head_dim, rope_dim, value_dim, base, norm_eps): MultiHeadLatentAttention's
  arguments (q_rank required: the indexer reads c_t), k (index_topk), H_I and d_I; the indexer
  takes MLA's rope_dim and base.

The indexer's weights (nn.Linear without bias, stored (out, in)) and where `from_deepseek` finds
them in a DeepseekV32Indexer's state dict (a DeepseekV32Attention's, under "indexer."):

- q_up          W_IQ  (H_I * d_I, d_c')   wq_b
- k_proj        W_IK  (d_I, d)            wk
- k_norm        LayerNorm(d_I), eps 1e-6  k_norm (weight and bias)
- head_weights  W_w   (H_I, d)            weights_proj

Results: LightningIndexer.forward(x (batch, L, d), q_latent (batch, L, d_c'), positions=None) ->
index_scores (batch, L, L), computed and returned in float32 for float16/bfloat16 inputs (as
transformers does: rounded to bfloat16's 8 significant bits, scores would tie and the selection
would turn on the rounding), in the input dtype otherwise. top_k_mask(index_scores, k) -> bool,
True at each row's k largest scores. DeepSeekSparseAttention.forward(x, cache=None,
absorb=False) -> (output (batch, L, d), weights (batch, num_heads, L, S), selected (batch, L, S)
bool): the causal MLA of `attention_course.latent` where query t may attend only to the tokens
selected for it; with an IndexedLatentCache the S keys are every token cached, whose latent,
RoPE key and indexer key k_s the cache keeps (kv_rank + rope_dim + index_head_dim numbers a
token; transformers' DynamicIndexedLayer holds the same). One
selection serves every head of MLA (DeepSeek-V3.2 runs MLA in its absorbed, MQA-like form, one
key per token shared by the heads, so a selected token is one latent to read). With k >= L every
earlier token is selected and the layer is plain MLA.

Cost per query at context length n, with MLA's n_h heads, latent size d_c (kv_rank) and RoPE
size d_R (rope_dim): the indexer scores every earlier token, n * H_I * d_I multiply-adds, and
attention reads k tokens instead of n: O(n * H_I * d_I + k * n_h * (d_c + d_R)) in the absorbed
form, against O(n * n_h * (d_c + d_R)) for MLA. The indexer is cheap per token (DeepSeek-V3.2:
H_I * d_I = 8,192 against n_h (2 d_c + d_R) = 139,264 for MLA's scores and weighted sum,
in 8-bit floats, with no softmax) but still
quadratic in n over a sequence, with a far smaller constant. This module computes the maths, not
the savings: the selection is a mask over all n keys (what transformers' eager path does too); a
sparse kernel (DeepSeek's FlashMLA) gathers the k selected latents instead.
"""

import contextlib
import math

import pytest
import torch

from attention_course import (
    DeepSeekSparseAttention,
    IndexedLatentCache,
    LatentCache,
    LightningIndexer,
    MultiHeadLatentAttention,
    top_k_mask,
)
from helpers.mla_reference import mla_by_loops
from helpers.rotary_reference import rotation_matrix
from helpers.weights import randomized
from tools.data import deepseek_reference as reference

DeepseekV32Config = pytest.importorskip("transformers").DeepseekV32Config
create_causal_mask = pytest.importorskip("transformers.masking_utils").create_causal_mask
v32 = pytest.importorskip("transformers.models.deepseek_v32.modeling_deepseek_v32")

# Small DeepSeek-V3.2 attention layers: every size different, so that a mix-up shows.
SMALL = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=4,
    kv_lora_rank=8,
    q_lora_rank=12,
    qk_nope_head_dim=6,
    qk_rope_head_dim=4,
    v_head_dim=5,
    index_n_heads=4,
    index_head_dim=8,
    index_topk=4,
    num_hidden_layers=1,
    max_position_embeddings=64,
)
CONFIGS = {
    "small": {},
    "wider": dict(
        hidden_size=48,
        num_attention_heads=3,
        num_key_value_heads=3,
        kv_lora_rank=10,
        q_lora_rank=7,
        qk_nope_head_dim=5,
        qk_rope_head_dim=6,
        v_head_dim=8,
        index_n_heads=3,
        index_head_dim=16,
        index_topk=6,
    ),
    "two index heads": dict(
        hidden_size=64,
        index_n_heads=2,
        index_head_dim=12,
        index_topk=3,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    ),
}


def config(implementation="sdpa", **overrides):
    made = DeepseekV32Config(**{**SMALL, **overrides})
    made._attn_implementation = implementation
    return made


def theta(made):
    return made.rope_parameters["rope_theta"]


def random_input(batch=2, seq=12, width=32, seed=0, dtype=torch.float64):
    return 0.5 * torch.randn(
        batch, seq, width, generator=torch.Generator().manual_seed(seed), dtype=dtype
    )


def their_causal_mask(made, x):
    """The mask DeepseekV32Model builds (bool for SDPA, additive for eager), (batch, 1, L, L)."""
    positions = torch.arange(x.shape[1])[None]
    return create_causal_mask(
        config=made,
        inputs_embeds=x,
        attention_mask=None,
        past_key_values=None,
        position_ids=positions,
        allow_is_causal_skip=False,
    )


@contextlib.contextmanager
def rms_norm_in_float64():
    """Within the block, DeepseekV32RMSNorm computes in its input's dtype (not float32)."""
    original = v32.DeepseekV32RMSNorm.forward
    v32.DeepseekV32RMSNorm.forward = reference.rms_norm_in_its_dtype
    try:
        yield
    finally:
        v32.DeepseekV32RMSNorm.forward = original


def clear_rows(scores, k, margin=1e-4):
    """Rows (..., L) whose selection is unambiguous: at most k allowed keys, or a gap above
    margin between the k-th and the (k+1)-th largest score (transformers ranks float32
    scores; exact ties, at 0 where every head's ReLU is 0, are common)."""
    ordered = scores.sort(dim=-1, descending=True).values
    if ordered.shape[-1] <= k:
        return torch.ones(ordered.shape[:-1], dtype=torch.bool)
    kth, next_one = ordered[..., k - 1], ordered[..., k]
    return torch.isneginf(next_one) | (kth - next_one > margin)


# ------------------------------------------------------------ the indexer, by loops


def layer_norm(v, gain, bias, eps=1e-6):
    centred = v - v.mean()
    return gain * centred / math.sqrt(float((centred * centred).mean()) + eps) + bias


def turn(position, head_dim, rope_dim, base):
    """RoPE on the first rope_dim dimensions (pairs m, m + rope_dim / 2), the rest kept."""
    matrix = torch.eye(head_dim, dtype=torch.float64)
    matrix[:rope_dim, :rope_dim] = rotation_matrix(position, rope_dim, base)
    return matrix


def index_scores_by_loops(indexer, x, q_latent, positions):
    """I_ts = sum_i w_ti ReLU(q_ti . k_s / sqrt(d_I)), w_t = W_w x_t / sqrt(H_I), one sequence
    x (n, d), q_latent (n, d_c'), one term at a time; -inf where s > t."""
    W = {name: p.detach().double() for name, p in indexer.state_dict().items()}
    H, d, r, base = indexer.num_heads, indexer.head_dim, indexer.rope_dim, indexer.base
    n = len(x)
    keys = [
        turn(int(positions[s]), d, r, base)
        @ layer_norm(W["k_proj.weight"] @ x[s], W["k_norm.weight"], W["k_norm.bias"])
        for s in range(n)
    ]
    scores = torch.full((n, n), -math.inf, dtype=torch.float64)
    for t in range(n):
        w = W["head_weights.weight"] @ x[t] / math.sqrt(H)
        for s in range(n):
            if positions[s] > positions[t]:
                continue
            total = 0.0
            for i in range(H):
                q = turn(int(positions[t]), d, r, base) @ (
                    W["q_up.weight"][i * d : (i + 1) * d] @ q_latent[t]
                )
                total += w[i] * max(0.0, float(q @ keys[s]) / math.sqrt(d))
            scores[t, s] = total
    return scores


@pytest.mark.parametrize(
    "sizes",
    [
        dict(embed_dim=16, q_rank=6, num_heads=3, head_dim=8, rope_dim=4),
        dict(embed_dim=12, q_rank=5, num_heads=2, head_dim=6, rope_dim=6, base=50.0),
    ],
    ids=str,
)
@pytest.mark.parametrize("shuffled", [False, True], ids=["positions 0..L-1", "shuffled"])
def test_indexer_scores_equal_the_formula_computed_by_loops(sizes, shuffled):
    indexer = randomized(LightningIndexer(**sizes), seed=1)
    x = random_input(seq=7, width=sizes["embed_dim"], seed=2)
    q_latent = random_input(seq=7, width=sizes["q_rank"], seed=3)
    positions = torch.tensor([5, 0, 3, 9, 1, 4, 2]) if shuffled else torch.arange(7)
    with torch.no_grad():
        scores = indexer(x, q_latent, positions if shuffled else None)
    assert scores.shape == (2, 7, 7) and scores.dtype == torch.float64
    for sequence in range(2):
        expected = index_scores_by_loops(indexer, x[sequence], q_latent[sequence], positions)
        torch.testing.assert_close(scores[sequence], expected, rtol=0, atol=1e-12)
    assert (scores.isneginf() == (positions[None, :] > positions[:, None])).all()


# ------------------------------------------------------ the indexer against transformers


def their_selection(indices, scores):
    """Transformers' top-k indices (batch, L, k') as a bool (batch, L, L), without the future
    tokens it also takes while t + 1 < k (its causal mask blocks them)."""
    theirs = torch.zeros(scores.shape, dtype=torch.bool).scatter_(-1, indices.long(), True)
    return theirs & ~scores.isneginf()


def assert_same_selection(ours, theirs, scores, k):
    """ours and theirs (batch, L, L) bool: the same tokens wherever the choice is unambiguous,
    and elsewhere (a tie at the k-th place) a selection of the same scores. Returns the
    number of tied rows."""
    clear = clear_rows(scores, k)
    assert torch.equal(ours[clear], theirs[clear])
    assert torch.equal(ours.sum(-1), theirs.sum(-1))
    kept = [
        scores.masked_fill(~chosen, -math.inf).sort(-1, descending=True).values
        for chosen in (ours, theirs)
    ]
    torch.testing.assert_close(kept[0], kept[1], rtol=0, atol=1e-4)
    return int((~clear).sum())


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])  # bool or additive causal mask
@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS)
def test_indexer_selects_what_transformers_indexer_selects(overrides, implementation):
    made = config(implementation, **overrides)
    rotary = v32.DeepseekV32RotaryEmbedding(made)
    tied = rows = 0
    for seed in range(4):
        theirs = randomized(v32.DeepseekV32Indexer(made, 0), seed)
        ours = LightningIndexer.from_deepseek(
            theirs.state_dict(), made.qk_rope_head_dim, base=theta(made)
        )
        x = random_input(seq=16, width=made.hidden_size, seed=10 + seed)
        q_latent = random_input(seq=16, width=made.q_lora_rank, seed=20 + seed)
        positions = torch.arange(16)[None]
        mask = their_causal_mask(made, x)[:, 0]
        with torch.no_grad():
            indices = theirs(x, q_latent, rotary(x, positions), mask, positions)
            scores = ours(x, q_latent)
        assert indices.shape == (2, 16, made.index_topk)
        selected = top_k_mask(scores, made.index_topk)
        tied += assert_same_selection(
            selected, their_selection(indices, scores), scores, made.index_topk
        )
        rows += 2 * 16
    assert tied < rows // 4  # most rows have one right answer


# ------------------------------------------------------- the layer against transformers


def their_layer(made, seed, dtype=torch.float64):
    return randomized(v32.DeepseekV32Attention(made, layer_idx=0), seed, dtype)


def course_copy(layer, made):
    return DeepSeekSparseAttention.from_deepseek(
        layer.state_dict(), made.num_attention_heads, made.index_topk, base=theta(made)
    )


def run_theirs(layer, made, x, exact=True):
    """DeepseekV32Attention on x, causal, with float64 RoPE angles and RMSNorms (exact=False:
    its own DeepseekV32RotaryEmbedding and RMSNorms, in float32): its output and the selection
    (batch, L, L) of its indexer (called again with the inputs the layer gives it: the
    indexer is deterministic)."""
    positions = torch.arange(x.shape[1])
    cos_sin = (
        reference.cos_sin(made, positions, x.dtype)
        if exact
        else v32.DeepseekV32RotaryEmbedding(made)(x, positions[None])
    )
    mask = their_causal_mask(made, x)
    with torch.no_grad(), rms_norm_in_float64() if exact else contextlib.nullcontext():
        output, _ = layer(x, cos_sin, mask)
        q_latent = layer.q_a_layernorm(layer.q_a_proj(x))
        indices = layer.indexer(x, q_latent, cos_sin, mask[:, 0], None)
    causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    selected = torch.zeros(*x.shape[:2], x.shape[1], dtype=torch.bool)
    return output, selected.scatter_(-1, indices.long(), True) & causal


def assert_equal_where_the_selections_agree(ours, layer, made, x, atol=1e-10, exact=True):
    """Our layer's output, selection and index scores against DeepseekV32Attention's: the
    same selection wherever it is unambiguous (a tie at the k-th place may be broken either
    way), and the same output for every query whose selection is the same. Returns the
    output and the fraction of queries compared."""
    expected, their_selected = run_theirs(layer, made, x, exact)
    with torch.no_grad():
        output, weights, selected = ours(x)
        scores = ours.index_scores(x)
    assert_same_selection(selected, their_selected, scores, made.index_topk)
    same = (selected == their_selected).all(-1)  # (batch, L)
    torch.testing.assert_close(output[same], expected[same], rtol=0, atol=atol)
    return output, weights, selected, same.double().mean().item()


LAYER_CASES = [(name, seed) for name in ("small", "wider") for seed in range(3)]


@pytest.mark.parametrize("name, seed", LAYER_CASES, ids=[f"{n}-seed{s}" for n, s in LAYER_CASES])
def test_equals_deepseek_v32_attention_in_float64_and_sparsity_matters(name, seed):
    made = config(**CONFIGS[name])
    theirs = their_layer(made, seed)
    ours = course_copy(theirs, made)
    x = random_input(width=made.hidden_size, seed=100 + seed)
    output, weights, selected, compared = assert_equal_where_the_selections_agree(
        ours, theirs, made, x
    )
    assert compared > 0.9
    with torch.no_grad():
        absorbed, absorbed_weights, _ = ours(x, absorb=True)
        dense, _ = ours.attention(x)
    torch.testing.assert_close(absorbed, output, rtol=0, atol=1e-12)
    torch.testing.assert_close(absorbed_weights, weights, rtol=0, atol=1e-12)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    assert torch.equal(selected.sum(-1), causal.sum(-1).clamp(max=made.index_topk).expand(2, -1))
    assert not (selected & ~causal).any()
    assert ((weights > 0) == selected[:, None]).all()  # exactly the selected tokens
    assert (output - dense).abs().max() > 1e-2  # sparsity changes the output


@pytest.mark.parametrize("name", ["small", "wider"])
@pytest.mark.parametrize("top_k", [12, 40], ids=["k=L", "k>L"])
def test_with_top_k_at_least_the_length_it_is_plain_mla(name, top_k):
    made = config(**{**CONFIGS[name], "index_topk": top_k})
    theirs = their_layer(made, seed=7)
    ours = course_copy(theirs, made)
    x = random_input(width=made.hidden_size, seed=8)
    expected, _ = run_theirs(theirs, made, x)
    with torch.no_grad():
        for absorb in (False, True):
            output, weights, selected = ours(x, absorb=absorb)
            dense, dense_weights = ours.attention(x, absorb=absorb)
            assert torch.equal(
                selected, torch.ones(2, 12, 12, dtype=torch.bool).tril().expand(2, -1, -1)
            )
            torch.testing.assert_close(output, dense, rtol=0, atol=1e-12)
            torch.testing.assert_close(weights, dense_weights, rtol=0, atol=1e-12)
            torch.testing.assert_close(output, expected, rtol=0, atol=1e-10)


def test_eager_attention_agrees_up_to_its_float32_softmax():
    """transformers' eager path takes the softmax in float32 and folds the selection into an
    additive mask (its finfo.min): the same output to float32 rounding."""
    made = config("eager")
    theirs = their_layer(made, seed=1)
    ours = course_copy(theirs, made)
    x = random_input(width=made.hidden_size, seed=101)
    output, _, _, compared = assert_equal_where_the_selections_agree(
        ours, theirs, made, x, atol=1e-6
    )
    assert compared > 0.9
    with torch.no_grad():
        dense, _ = ours.attention(x)
    assert (output - dense).abs().max() > 1e-2


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_transformers_own_float32_path_agrees_to_float32_rounding(implementation):
    """Unpatched: transformers' RoPE angles and RMSNorms in float32, the layer in float32."""
    made = config(implementation, **CONFIGS["wider"])
    theirs = their_layer(made, seed=4, dtype=torch.float32)
    ours = course_copy(theirs, made)
    x = random_input(width=made.hidden_size, seed=104, dtype=torch.float32)
    _, _, _, compared = assert_equal_where_the_selections_agree(
        ours, theirs, made, x, atol=1e-5, exact=False
    )
    assert compared > 0.9


def test_the_indexer_gets_no_gradient_through_the_selection():
    """top-k is a choice, not a differentiable function: the attention's loss reaches MLA's
    weights, not the indexer's (DeepSeek-V3.2 trains the indexer with a loss of its own)."""
    made = config()
    ours = course_copy(their_layer(made, seed=2), made)
    ours(random_input(width=made.hidden_size))[0].square().sum().backward()
    assert all(p.grad is None for p in ours.indexer.parameters())
    assert all(
        torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0 for p in ours.attention.parameters()
    )


def test_parameters_equal_deepseek_v32_attention_at_the_published_shape():
    published = DeepseekV32Config()
    with torch.device("meta"):
        theirs = v32.DeepseekV32Attention(published, 0)
        ours = DeepSeekSparseAttention(
            published.hidden_size,
            published.num_attention_heads,
            published.kv_lora_rank,
            published.q_lora_rank,
            published.index_topk,
            published.index_n_heads,
            published.index_head_dim,
            published.qk_nope_head_dim,
            published.qk_rope_head_dim,
            published.v_head_dim,
        )
    counts = [
        sum(p.numel() for p in module.parameters())
        for module in (ours, theirs, ours.indexer, theirs.indexer)
    ]
    assert counts[0] == counts[1] and counts[2] == counts[3]
    assert counts[2] == 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
    assert ours.top_k == 2048


# ----------------------------------------------------------------------------- top_k_mask


def top_k_by_sorting(scores, k):
    """Row by row: sort the entries that are not -inf, largest first, keep the first k."""
    chosen = torch.zeros(scores.shape, dtype=torch.bool)
    flat, out = scores.reshape(-1, scores.shape[-1]), chosen.view(-1, scores.shape[-1])
    for row in range(flat.shape[0]):
        finite = [(float(v), i) for i, v in enumerate(flat[row]) if v > -math.inf]
        for _, i in sorted(finite, reverse=True)[:k]:
            out[row, i] = True
    return chosen


@pytest.mark.parametrize("k", [1, 2, 5, 9, 30])
def test_top_k_mask_equals_sorting(k):
    generator = torch.Generator().manual_seed(k)
    scores = torch.randn(3, 4, 9, generator=generator, dtype=torch.float64)
    blocked = torch.rand(3, 4, 9, generator=generator) < 0.4  # rows with few finite entries
    blocked[0, 0] = True  # and one with none
    scores = scores.masked_fill(blocked, -math.inf)
    chosen = top_k_mask(scores, k)
    assert chosen.shape == scores.shape and chosen.dtype == torch.bool
    assert torch.equal(chosen, top_k_by_sorting(scores, k))
    assert torch.equal(chosen.sum(-1), (~blocked).sum(-1).clamp(max=k))
    assert not chosen[0, 0].any()


def test_top_k_mask_in_two_dimensions_and_half_precision():
    scores = torch.tensor([[0.5, -1.0, 2.0, 0.25], [1.0, float("nan"), -math.inf, 3.0]])
    assert top_k_mask(scores, 2).tolist() == [
        [True, False, True, False],
        [True, False, False, True],
    ]
    assert top_k_mask(scores.bfloat16(), 3).tolist() == [
        [True, False, True, True],
        [True, False, False, True],
    ]


def test_top_k_mask_refuses_bad_input():
    with pytest.raises(ValueError, match=r"index_scores \(4,\) must have at least 2"):
        top_k_mask(torch.randn(4), 2)
    with pytest.raises(ValueError, match="index_scores .* floating-point"):
        top_k_mask(torch.ones(2, 3, dtype=torch.long), 2)
    with pytest.raises(TypeError, match="index_scores must be a torch.Tensor"):
        top_k_mask([[1.0, 2.0]], 1)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        top_k_mask(torch.randn(2, 3), 0)
    with pytest.raises(TypeError, match="k must be an integer"):
        top_k_mask(torch.randn(2, 3), 2.0)


# ---------------------------------------------------------------- MLA's attn_mask


def small_mla(seed=0):
    torch.manual_seed(seed)
    return MultiHeadLatentAttention(
        12, 3, kv_rank=5, q_rank=7, head_dim=4, rope_dim=6, value_dim=2
    ).double()


@pytest.mark.parametrize("shape", [(7, 7), (2, 1, 7, 7), (2, 3, 7, 7), (1, 7)], ids=str)
def test_an_attn_mask_that_allows_everything_changes_nothing(shape):
    layer = small_mla()
    x = random_input(seq=7, width=12, seed=4)
    with torch.no_grad():
        for absorb in (False, True):
            plain = layer(x, absorb=absorb)
            masked = layer(x, absorb=absorb, attn_mask=torch.ones(shape, dtype=torch.bool))
            assert torch.equal(masked[0], plain[0]) and torch.equal(masked[1], plain[1])


@pytest.mark.parametrize("seed", range(3))
def test_a_random_attn_mask_on_both_paths_equals_the_loops(seed):
    layer = small_mla(seed)
    x = random_input(seq=7, width=12, seed=5 + seed)
    allowed = torch.rand(2, 3, 7, 7, generator=torch.Generator().manual_seed(seed)) < 0.6
    allowed[0, 1, 3] = False  # a query with no key
    with torch.no_grad():
        explicit, weights = layer(x, attn_mask=allowed)
        absorbed, absorbed_weights = layer(x, absorb=True, attn_mask=allowed)
    torch.testing.assert_close(absorbed, explicit, rtol=0, atol=1e-12)
    torch.testing.assert_close(absorbed_weights, weights, rtol=0, atol=1e-12)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    assert ((weights > 0) == (allowed & causal)).all()
    assert (weights[0, 1, 3] == 0).all()
    for sequence in range(2):
        torch.testing.assert_close(
            explicit[sequence],
            mla_by_loops(layer, x[sequence], allowed[sequence]),
            rtol=0,
            atol=1e-12,
        )


def test_attn_mask_with_a_cache_covers_the_cached_keys_too():
    layer = small_mla(1)
    x = random_input(seq=7, width=12, seed=9)
    allowed = torch.rand(2, 1, 7, 7, generator=torch.Generator().manual_seed(3)) < 0.7
    allowed[..., 4:, 4:] |= torch.eye(3, dtype=torch.bool)  # let each new query see itself
    with torch.no_grad():
        whole, _ = layer(x, attn_mask=allowed)
        for absorb in (False, True):
            cache = LatentCache()
            first, _ = layer(x[:, :4], cache, absorb=absorb, attn_mask=allowed[..., :4, :4])
            rest, weights = layer(x[:, 4:], cache, absorb=absorb, attn_mask=allowed[..., 4:, :])
            assert weights.shape == (2, 3, 3, 7)
            torch.testing.assert_close(torch.cat([first, rest], 1), whole, rtol=0, atol=1e-12)
        with pytest.raises(
            ValueError,
            match=r"attn_mask \(2, 1, 3, 3\) does not broadcast to "
            r"the scores \(batch, num_heads, L, S\) = "
            r"\(2, 3, 3, 10\)",
        ):
            layer(x[:, 4:], cache, attn_mask=allowed[..., 4:, 4:])
    assert len(cache) == 7  # the refused call added nothing


def test_attn_mask_refuses_what_is_not_a_bool_mask_of_the_scores():
    layer = small_mla()
    x = random_input(seq=5, width=12)
    with pytest.raises(ValueError, match=r"attn_mask \(5, 5\) must be bool .* torch.float64"):
        layer(x, attn_mask=torch.zeros(5, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"attn_mask \(2, 2, 5, 5\) does not broadcast"):
        layer(x, attn_mask=torch.ones(2, 2, 5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="attn_mask must be a torch.Tensor"):
        layer(x, attn_mask=[[True]])


# ------------------------------------------------- decoding through the indexer-key cache


def run_ours_in_chunks(layer, x, chunks, absorb=False):
    """Our layer fed x (batch, SEQ, d) in chunks through one IndexedLatentCache: outputs
    (batch, SEQ, d), the cache, and each chunk's selection (batch, size, S)."""
    cache, outputs, selections, start = IndexedLatentCache(), [], [], 0
    with torch.no_grad():
        for size in chunks:
            output, weights, selected = layer(x[:, start : start + size], cache, absorb)
            assert weights.shape == (x.shape[0], layer.attention.num_heads, size, start + size)
            outputs.append(output)
            selections.append(selected)
            start += size
    return torch.cat(outputs, dim=1), cache, selections


DECODE_CASES = [(name, seed) for name in ("small", "wider", "two index heads") for seed in range(2)]


@pytest.mark.parametrize("name, seed", DECODE_CASES, ids=[f"{n}-seed{s}" for n, s in DECODE_CASES])
def test_decoding_token_by_token_equals_deepseek_v32_attention_through_its_cache(name, seed):
    """A prefill of 5 tokens, then 7 generated one at a time, through our IndexedLatentCache
    and through transformers' DynamicCache (its DynamicIndexedLayer keeps the indexer keys):
    the same latents, RoPE keys and indexer keys held (1e-10), and the same output (1e-10)
    for every query whose selection is unambiguous."""
    made = config(**CONFIGS[name])
    theirs = their_layer(made, seed)
    ours = course_copy(theirs, made)
    x = random_input(width=made.hidden_size, seed=200 + seed)
    chunks = [5] + [1] * 7
    with rms_norm_in_float64():
        expected, their_cache = reference.run(theirs, made, x, chunks)
    output, cache, _ = run_ours_in_chunks(ours, x, chunks)
    held = their_cache.layers[0]
    assert type(held).__name__ == "DynamicIndexedLayer"
    latents, rope_keys = reference.cached(their_cache)
    torch.testing.assert_close(cache.latents, latents, rtol=0, atol=1e-10)
    torch.testing.assert_close(cache.rope_keys, rope_keys, rtol=0, atol=1e-10)
    torch.testing.assert_close(cache.index_keys, held.indexer_keys, rtol=0, atol=1e-10)
    assert len(cache) == cache.indexed == cache.seen == 12
    # a query whose k-th and (k+1)-th index scores tie may be given either token
    with torch.no_grad():
        clear = clear_rows(ours.index_scores(x), made.index_topk)  # (batch, L)
    assert clear.double().mean() > 0.75
    torch.testing.assert_close(output[clear], expected[clear], rtol=0, atol=1e-10)
    # sparsity matters in the generated tokens: dense MLA through a cache differs
    with torch.no_grad():
        dense, _ = ours.attention(x)
    assert (output[:, 5:] - dense[:, 5:]).abs().max() > 1e-2


@pytest.mark.parametrize("absorb", [False, True], ids=["explicit", "absorbed"])
@pytest.mark.parametrize("chunks", [[12], [4, 8], [5, 1, 1, 1, 1, 1, 1, 1], [1] * 12])
def test_cached_decoding_equals_the_whole_sequence(chunks, absorb):
    """Brute force: the layer fed in chunks through its cache selects what it selects over
    the whole sequence, row for row, and gives its output (1e-12); the cache holds
    (kv_rank + rope_dim + index_head_dim) numbers a token."""
    made = config(**CONFIGS["wider"])
    ours = course_copy(their_layer(made, seed=5), made)
    x = random_input(width=made.hidden_size, seed=6)
    with torch.no_grad():
        whole, whole_weights, whole_selected = ours(x, absorb=absorb)
    output, cache, selections = run_ours_in_chunks(ours, x, chunks, absorb)
    start = 0
    for selected in selections:
        size = selected.shape[1]
        expected = whole_selected[:, start : start + size, : start + size]
        assert torch.equal(selected, expected)
        start += size
    torch.testing.assert_close(output, whole, rtol=0, atol=1e-12)
    per_token = made.kv_lora_rank + made.qk_rope_head_dim + made.index_head_dim
    assert cache.nbytes == 2 * 12 * per_token * 8  # batch 2, 12 tokens, float64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cache_keeps_the_layers_dtype_and_device(dtype):
    """In float32 and bfloat16 the cache holds the input's dtype and device, and decoding
    through it gives the whole sequence's output to the dtype's rounding, for every query
    whose selection is unambiguous (the indexer's float32 scores, summed in another order,
    may break a tie at the k-th place the other way)."""
    made = config(**CONFIGS["small"])
    ours = course_copy(their_layer(made, seed=2), made).to(dtype)
    x = random_input(width=made.hidden_size, seed=3, dtype=dtype)
    with torch.no_grad():
        whole, _, _ = ours(x)
        clear = clear_rows(ours.index_scores(x), made.index_topk, margin=1e-3)
    output, cache, _ = run_ours_in_chunks(ours, x, [6] + [1] * 6)
    for held in (cache.latents, cache.rope_keys, cache.index_keys):
        assert (held.dtype, held.device) == (dtype, x.device)
    assert output.dtype == dtype
    tolerance = 1e-5 if dtype == torch.float32 else 5e-2
    assert clear.double().mean() > 0.75
    torch.testing.assert_close(
        output[clear], whole[clear], rtol=0, atol=tolerance * whole.abs().max().item()
    )


def test_an_indexed_cache_refuses_what_does_not_continue_it():
    layer = DeepSeekSparseAttention(
        32, 4, kv_rank=8, q_rank=12, top_k=3, index_heads=2, index_head_dim=8
    )
    with pytest.raises(TypeError, match="cache must be an IndexedLatentCache or None"):
        layer(torch.randn(2, 3, 32), LatentCache())
    cache = IndexedLatentCache()
    layer(torch.randn(2, 3, 32), cache)
    before = (cache.latents, cache.rope_keys, cache.index_keys)
    with pytest.raises(ValueError, match=r"cache holds \(batch, kv_rank, rope_dim, index_head_dim"):
        layer(torch.randn(1, 1, 32), cache)  # another batch
    with pytest.raises(ValueError, match=r"x \(2, 1, 32\) is torch.float64"):
        layer(torch.randn(2, 1, 32, dtype=torch.float64), cache)
    assert (cache.latents, cache.rope_keys, cache.index_keys) == before  # nothing appended
    cache.update(torch.randn(2, 1, 8), torch.randn(2, 1, 4))  # latents without index keys
    with pytest.raises(ValueError, match="cache holds 4 latents but 3 indexer keys"):
        layer(torch.randn(2, 1, 32), cache)
    with pytest.raises(ValueError, match=r"index_key \(2, 1, 6\) .* does not match"):
        cache.update_indexer(torch.randn(2, 1, 6))
    with pytest.raises(TypeError, match="index_key must be a torch.Tensor"):
        cache.update_indexer([[0.0]])
    assert cache.update_indexer(torch.randn(2, 1, 8)).shape == (2, 4, 8)


# ------------------------------------------------------------------------------ bad input


def test_sizes_and_their_checks():
    layer = DeepSeekSparseAttention(
        32, 4, kv_rank=8, q_rank=12, top_k=3, index_heads=2, index_head_dim=8
    )
    assert layer.attention.rope_dim == layer.indexer.rope_dim == 4
    assert layer.indexer.q_up.weight.shape == (2 * 8, 12)
    assert layer.indexer.k_proj.weight.shape == (8, 32)
    assert layer.indexer.head_weights.weight.shape == (2, 32)
    with pytest.raises(ValueError, match="index_head_dim=2 must be at least rope_dim=4"):
        DeepSeekSparseAttention(32, 4, 8, 12, 3, 2, index_head_dim=2)
    with pytest.raises(TypeError, match="q_rank must be an integer, got None"):
        DeepSeekSparseAttention(32, 4, 8, None, 3, 2, 8)
    with pytest.raises(ValueError, match="rope_dim must be even .* at most head_dim=4, got 6"):
        LightningIndexer(16, 6, 2, head_dim=4, rope_dim=6)
    with pytest.raises(ValueError, match="rope_dim must be even"):
        LightningIndexer(16, 6, 2, head_dim=8, rope_dim=3)


def test_indexer_refuses_inputs_that_do_not_fit():
    indexer = LightningIndexer(16, 6, 2, head_dim=8, rope_dim=4)
    with pytest.raises(ValueError, match=r"x \(2, 5, 16\) and q_latent \(2, 4, 6\)"):
        indexer(torch.randn(2, 5, 16), torch.randn(2, 4, 6))
    with pytest.raises(
        ValueError,
        match=r"q_latent \(2, 5, 7\) must be .* \(batch, L, "
        r"q_rank=6\)",
    ):
        indexer(torch.randn(2, 5, 16), torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match=r"q_latent \(2, 5, 6\) is torch.float64"):
        indexer(torch.randn(2, 5, 16), torch.randn(2, 5, 6, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"positions \(4,\) must be \(seq,\) = \(5,\)"):
        indexer(torch.randn(2, 5, 16), torch.randn(2, 5, 6), torch.arange(4))


def test_from_deepseek_refuses_a_wrong_state_dict():
    made = config()
    state = their_layer(made, seed=0).state_dict()
    index_state = {
        name[len("indexer.") :]: tensor
        for name, tensor in state.items()
        if name.startswith("indexer.")
    }
    with pytest.raises(ValueError, match=r"lacks \['indexer.wk.weight'\]"):
        DeepSeekSparseAttention.from_deepseek(
            {k: v for k, v in state.items() if k != "indexer.wk.weight"}, 4, 4
        )
    v3 = reference.random_layer(reference.config(q_lora_rank=None)).state_dict()
    with pytest.raises(ValueError, match="lacks q_a_proj.weight"):
        DeepSeekSparseAttention.from_deepseek(v3, 4, 4)
    with pytest.raises(
        ValueError,
        match="indexer weights are torch.float32 on cpu, its attention weights torch.float64",
    ):
        DeepSeekSparseAttention.from_deepseek(
            {
                **state,
                **{
                    name: tensor.float()
                    for name, tensor in state.items()
                    if name.startswith("indexer.")
                },
            },
            4,
            4,
        )
    with pytest.raises(ValueError, match="several dtypes"):
        DeepSeekSparseAttention.from_deepseek(
            {**state, "indexer.wk.weight": state["indexer.wk.weight"].float()}, 4, 4
        )
    with pytest.raises(ValueError, match=r"holds \['wq_b.bias'\]"):
        LightningIndexer.from_deepseek({**index_state, "wq_b.bias": torch.zeros(32)}, 4)
    with pytest.raises(ValueError, match=r"shapes do not fit one indexer: wq_b \(24, 12\)"):
        LightningIndexer.from_deepseek(
            {**index_state, "wq_b.weight": torch.zeros(24, 12, dtype=torch.float64)}, 4
        )
    with pytest.raises(ValueError, match="rope_dim must be even .* at most head_dim=8, got 10"):
        LightningIndexer.from_deepseek(index_state, 10)
    narrow = {
        **index_state,
        "wk.weight": index_state["wk.weight"][:, :16],
        "weights_proj.weight": index_state["weights_proj.weight"][:, :16],
    }
    with pytest.raises(
        ValueError, match="reads embed_dim=16 and q_rank=12, its attention has embed_dim=32"
    ):
        DeepSeekSparseAttention.from_deepseek(
            {**state, **{f"indexer.{k}": v for k, v in narrow.items()}}, 4, 4
        )
