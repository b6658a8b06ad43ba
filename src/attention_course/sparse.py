"""DeepSeek Sparse Attention, DSA (DeepSeek-AI 2025, DeepSeek-V3.2; chapter 17).

Multi-head latent attention (chapter 15, `attention_course.latent`) shrinks what each token
caches, but a query still scores every earlier token: a cost per query that grows with the
length n of the context. DSA lets each query t attend to k of them only (k = 2048 in
DeepSeek-V3.2, whatever n is). A small "lightning indexer" scores every earlier token s with

    I_ts = sum_j  eta_tj * ReLU(q_tj . k_s / sqrt(d_I)),      j = 0 .. H_I - 1,

and the query attends, with MLA, only to the k tokens of largest I_ts (all of them while t < k):

- x_t         the input of token t (embed_dim = d numbers)
- c_t         the query latent of MLA, c_t = RMSNorm(W_DQ x_t) (q_rank = d_c' numbers); the
              indexer reads it and adds no query latent of its own
- q_tj        the indexer's query of head j, the j-th block of W_IQ c_t (d_I numbers)
- k_s         the indexer's key of token s, LayerNorm(W_IK x_s) (d_I numbers), one for all
              indexer heads (so the indexer caches d_I numbers a token)
- eta_tj      the weight of head j for query t, (W_w x_t)_j / sqrt(H_I): a learnt number of
              either sign, so a head can vote for a token or against it
- H_I, d_I    the indexer's heads and head size (index_heads, index_head_dim; DeepSeek-V3.2:
              64 and 128)
- ReLU        max(0, .): a head whose query and key point apart gives 0, not a negative vote

RoPE turns the first rope_dim dimensions of each q_tj (by t) and of k_s (by s), the rest carry
no position; rope_dim is MLA's d_h^R. The indexer pairs dimension i with i + rope_dim / 2, as
`apply_rotary` (transformers' DeepseekV32Indexer does the same; MLA's own RoPE rows come from
DeepSeek's checkpoints interleaved, see `attention_course.latent`). The paper writes I_ts
without the two scales 1 / sqrt(d_I) and 1 / sqrt(H_I): they are those of the released code
and of transformers, and change the scores but not which tokens are selected. DeepSeek's kernel
also rotates q and k by a Hadamard matrix (orthogonal: the dot products stay) and rounds them to
8-bit floats; here they stay in the dtype of the computation. The causal rule is part of the
scores: I_ts = -inf for s > t.

Arguments (transformers' DeepseekV32Config names in brackets):

- LightningIndexer(embed_dim, q_rank, num_heads, head_dim, rope_dim, base): d, d_c', H_I
  (index_n_heads), d_I (index_head_dim), the rotated part of each q_tj and k_s
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
True at each row's k largest scores. DeepSeekSparseAttention.forward(x, absorb=False) -> (output
(batch, L, d), weights (batch, num_heads, L, L), selected (batch, L, L) bool): the causal MLA of
`attention_course.latent` where query t may attend only to the tokens selected for it. One
selection serves every head of MLA (DeepSeek-V3.2 runs MLA in its absorbed, MQA-like form, one
key per token shared by the heads, so a selected token is one latent to read). With k >= L every
earlier token is selected and the layer is plain MLA.

Cost per query at context length n, with MLA's n_h heads, latent size d_c (kv_rank) and RoPE
size d_R (rope_dim): the indexer scores every earlier token, n * H_I * d_I multiply-adds, and
attention reads k tokens instead of n: O(n * H_I * d_I + k * n_h * (d_c + d_R)) in the absorbed
form, against O(n * n_h * (d_c + d_R)) for MLA. The indexer is cheap per token (DeepSeek-V3.2:
H_I * d_I = 8,192 against n_h (d_c + d_R) = 73,728, in 8-bit floats, with no softmax) but still
quadratic in n over a sequence, with a far smaller constant. This module computes the maths, not
the savings: the selection is a mask over all n keys (what transformers' eager path does too); a
sparse kernel (DeepSeek's FlashMLA) gathers the k selected latents instead.
"""

import collections.abc
import math

import torch
from torch import nn

from . import _kernels
from ._shapes import (
    check_positions,
    check_sequence,
    require_dtype_of,
    require_float,
    require_instance,
    require_int,
    require_number,
    shape_of,
)
from .masking import decoding_mask
from .latent import MultiHeadLatentAttention, _state_tensors
from .masking import HALF_PRECISION


def _check_indexer_sizes(embed_dim, q_rank, num_heads, head_dim, rope_dim, base):
    for name, value in (("embed_dim", embed_dim), ("q_rank", q_rank),
                        ("num_heads", num_heads), ("head_dim", head_dim)):
        require_int(name, value, 1)
    require_int("rope_dim", rope_dim, 2)
    if rope_dim % 2 or rope_dim > head_dim:
        raise ValueError(f"rope_dim must be even (RoPE turns pairs) and at most "
                         f"head_dim={head_dim}, got {rope_dim}")
    require_number("base", base, 1, strict=True)


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: I_ts = sum_j eta_tj ReLU(q_tj . k_s / sqrt(d_I)),
    -inf for s > t; symbols and weights documented in the module (`help(attention_course.
    sparse)`).

    forward(x (batch, L, embed_dim), q_latent (batch, L, q_rank), positions=None) ->
    index_scores (batch, L, L): q_latent is MLA's normalised query latent c_t; positions (L,)
    default 0..L-1, -inf where a key's position is past the query's. Float32 for
    float16/bfloat16 inputs, the input dtype otherwise. Its top-k selection equals
    transformers' DeepseekV32Indexer's (`from_deepseek`).
    """

    def __init__(self, embed_dim, q_rank, num_heads, head_dim, rope_dim, base=10000.0):
        super().__init__()
        _check_indexer_sizes(embed_dim, q_rank, num_heads, head_dim, rope_dim, base)
        self.embed_dim, self.q_rank, self.num_heads = embed_dim, q_rank, num_heads
        self.head_dim, self.rope_dim, self.base = head_dim, rope_dim, base
        self.scale = 1 / math.sqrt(head_dim)
        self.q_up = nn.Linear(q_rank, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, head_dim, bias=False)
        self.k_norm = nn.LayerNorm(head_dim, eps=1e-6)
        self.head_weights = nn.Linear(embed_dim, num_heads, bias=False)

    def forward(self, x, q_latent, positions=None):
        return self._scores(x, q_latent, self._check(x, q_latent, positions))

    def _scores(self, x, q_latent, positions):
        batch, length, _ = x.shape
        work = torch.float32 if x.dtype in HALF_PRECISION else x.dtype
        queries = self.q_up(q_latent).view(batch, length, self.num_heads, self.head_dim)
        queries = self._rope(queries.transpose(1, 2), positions)       # (b, H_I, L, d_I)
        keys = self._rope(self.k_norm(self.k_proj(x)), positions)      # (b, L, d_I)
        dots = queries.to(work) @ keys.to(work)[:, None].transpose(-2, -1)  # (b, H_I, L, L)
        votes = (dots * self.scale).relu_()
        weights = self.head_weights(x).to(work) / math.sqrt(self.num_heads)  # (b, L, H_I)
        scores = torch.einsum("bth,bhts->bts", weights, votes)         # (b, L, L)
        causal = decoding_mask(positions, positions)                   # (L, L)
        return scores.masked_fill(~causal, -math.inf)

    def _rope(self, x, positions):
        """RoPE on the first rope_dim dimensions of x (..., L, d_I), the rest unchanged."""
        turned = _kernels.rotate(x[..., :self.rope_dim], positions, self.base)
        return torch.cat([turned, x[..., self.rope_dim:]], dim=-1)

    def _check(self, x, q_latent, positions):
        """x and q_latent in the weights' dtype, of one batch and length -> positions (L,)."""
        dtype = self.k_proj.weight.dtype
        check_sequence("x", x, self.embed_dim, dtype)
        require_float("q_latent", q_latent, 3)
        if q_latent.shape != (*x.shape[:2], self.q_rank):
            raise ValueError(f"x {shape_of(x)} and q_latent {shape_of(q_latent)} must be "
                             f"(batch, L, embed_dim={self.embed_dim}) and (batch, L, "
                             f"q_rank={self.q_rank})")
        require_dtype_of("q_latent", q_latent, dtype, "the layer's weights")
        return check_positions(positions, x.shape[1], x.device)

    @classmethod
    def from_deepseek(cls, state_dict, rope_dim, *, base=10000.0):
        """An indexer holding the weights of transformers' DeepseekV32Indexer, given as its
        state dict (wq_b.weight, wk.weight, k_norm.weight, k_norm.bias, weights_proj.weight).
        Sizes are read from the shapes, except rope_dim (the config's qk_rope_head_dim, which
        the weights do not show). The indexer's RoPE is half-split in transformers: no rows
        are reordered. The layer lives on the device and in the dtype of the weights."""
        require_instance("state_dict", state_dict, collections.abc.Mapping,
                         "a mapping of DeepseekV32Indexer's weight names to tensors")
        weights = _checked_weights(state_dict, _INDEXER_NAMES, "DeepseekV32Indexer")
        num_heads, embed_dim = weights["weights_proj.weight"].shape
        head_dim = weights["wk.weight"].shape[0]
        q_up = weights["wq_b.weight"]
        if (q_up.shape[0] != num_heads * head_dim or weights["wk.weight"].shape[1] != embed_dim
                or weights["k_norm.weight"].shape != (head_dim,)
                or weights["k_norm.bias"].shape != (head_dim,)):
            raise ValueError(
                "state_dict's shapes do not fit one indexer: wq_b "
                f"{shape_of(q_up)}, wk {shape_of(weights['wk.weight'])}, weights_proj "
                f"{shape_of(weights['weights_proj.weight'])}, k_norm "
                f"{shape_of(weights['k_norm.weight'])} must be (H_I * d_I, q_rank), "
                "(d_I, embed_dim), (H_I, embed_dim), (d_I,)")
        require_int("rope_dim", rope_dim, 2)
        like = weights["wk.weight"]
        layer = cls(embed_dim, q_up.shape[1], num_heads, head_dim, rope_dim, base).to(
            like.device, like.dtype)
        layer.load_state_dict({
            "q_up.weight": q_up, "k_proj.weight": like,
            "k_norm.weight": weights["k_norm.weight"], "k_norm.bias": weights["k_norm.bias"],
            "head_weights.weight": weights["weights_proj.weight"]})
        return layer


def top_k_mask(index_scores, k):
    """Bool, the shape of index_scores (..., L, S): True at the k largest entries of each row
    (last axis), among those that are not -inf (nor NaN); a row with fewer such entries than k
    has them all. Ties at the k-th place are broken as torch.topk breaks them."""
    require_float("index_scores", index_scores)
    if index_scores.dim() < 2:
        raise ValueError(f"index_scores {shape_of(index_scores)} must have at least 2 "
                         "dimensions (..., L, S): one row of scores per query")
    require_int("k", k, 1)
    ranked = index_scores.masked_fill(index_scores.isnan(), -math.inf)
    kept = min(k, index_scores.shape[-1])
    top = ranked.topk(kept, dim=-1).indices                        # (..., L, kept)
    chosen = torch.zeros(index_scores.shape, dtype=torch.bool, device=index_scores.device)
    return chosen.scatter_(-1, top, True) & (ranked > -math.inf)


class DeepSeekSparseAttention(nn.Module):
    """DeepSeek Sparse Attention (DeepSeek-AI 2025, DeepSeek-V3.2): MLA (`.attention`, a
    MultiHeadLatentAttention) where each query attends only to the top_k earlier tokens that a
    lightning indexer (`.indexer`, reading MLA's query latent) scores highest; arguments,
    symbols and costs documented in the module (`help(attention_course.sparse)`).

    forward(x (batch, L, embed_dim), absorb=False) -> (output (batch, L, embed_dim), weights
    (batch, num_heads, L, L), selected (batch, L, L) bool), causal, a whole sequence at a time
    (no cache). With top_k >= L it is plain MLA. Equal to transformers' DeepseekV32Attention
    with the same weights (`from_deepseek`).
    """

    def __init__(self, embed_dim, num_heads, kv_rank, q_rank, top_k, index_heads,
                 index_head_dim, head_dim=None, rope_dim=None, value_dim=None, base=10000.0,
                 norm_eps=1e-6):
        super().__init__()
        require_int("q_rank", q_rank, 1)          # the indexer reads the query latent
        require_int("top_k", top_k, 1)
        require_int("index_heads", index_heads, 1)
        require_int("index_head_dim", index_head_dim, 1)
        self.attention = MultiHeadLatentAttention(embed_dim, num_heads, kv_rank, q_rank,
                                                  head_dim, rope_dim, value_dim, base, norm_eps)
        rope_dim = self.attention.rope_dim
        if index_head_dim < rope_dim:
            raise ValueError(f"index_head_dim={index_head_dim} must be at least rope_dim="
                             f"{rope_dim}: the indexer turns rope_dim of its dimensions")
        self.indexer = LightningIndexer(embed_dim, q_rank, index_heads, index_head_dim,
                                        rope_dim, base)
        self.top_k = top_k

    def index_scores(self, x):
        """The indexer's scores I (batch, L, L) of x (batch, L, embed_dim): -inf for s > t;
        float32 for float16/bfloat16 inputs, the input dtype otherwise."""
        check_sequence("x", x, self.attention.embed_dim, self.attention.kv_down.weight.dtype)
        return self._index_scores(x)

    def _index_scores(self, x):
        mla = self.attention
        q_latent = mla.q_norm(mla.q_down(x))                           # (b, L, d_c')
        positions = torch.arange(x.shape[1], device=x.device)
        return self.indexer._scores(x, q_latent, positions)            # (b, L, L)

    def forward(self, x, absorb=False):
        check_sequence("x", x, self.attention.embed_dim, self.attention.kv_down.weight.dtype)
        selected = top_k_mask(self._index_scores(x), self.top_k)      # (b, L, L)
        output, weights = self.attention(x, absorb=absorb, attn_mask=selected[:, None])
        return output, weights, selected

    @classmethod
    def from_deepseek(cls, state_dict, num_heads, top_k, *, interleaved=True, base=10000.0,
                      norm_eps=1e-6):
        """A layer holding the weights of transformers' DeepseekV32Attention, given as its
        state dict: MLA's weights as for MultiHeadLatentAttention.from_deepseek (`interleaved`
        reorders MLA's RoPE rows; DeepSeek's checkpoints and DeepseekV32Attention interleave),
        the indexer's under "indexer." (LightningIndexer.from_deepseek). top_k is the config's
        index_topk. RoPE is plain (no YaRN). The layer lives on the device and in the dtype of
        the weights."""
        require_instance("state_dict", state_dict, collections.abc.Mapping,
                         "a mapping of DeepseekV32Attention's weight names to tensors")
        require_int("num_heads", num_heads, 1)
        require_int("top_k", top_k, 1)
        prefix = "indexer."
        mla_part = {name: tensor for name, tensor in state_dict.items()
                    if not str(name).startswith(prefix)}
        index_part = {name[len(prefix):]: tensor for name, tensor in state_dict.items()
                      if str(name).startswith(prefix)}
        if "q_a_proj.weight" not in mla_part:
            raise ValueError("state_dict lacks q_a_proj.weight: DeepSeek Sparse Attention "
                             "needs MLA's query latent (q_lora_rank), which its indexer reads")
        attention = MultiHeadLatentAttention.from_deepseek(
            mla_part, num_heads, interleaved=interleaved, base=base, norm_eps=norm_eps)
        missing = [prefix + name for name in _INDEXER_NAMES if name not in index_part]
        if missing:
            raise ValueError(f"state_dict lacks {missing}: give the state dict of one "
                             "DeepseekV32Attention layer, its indexer's weights included")
        indexer = LightningIndexer.from_deepseek(index_part, attention.rope_dim, base=base)
        theirs, ours = indexer.k_proj.weight, attention.kv_down.weight
        if (theirs.dtype, theirs.device) != (ours.dtype, ours.device):
            raise ValueError(f"state_dict's indexer weights are {theirs.dtype} on {theirs.device}"
                             f", its attention weights {ours.dtype} on {ours.device}: convert "
                             "them to one dtype and device")
        if (indexer.embed_dim, indexer.q_rank) != (attention.embed_dim, attention.q_rank):
            raise ValueError(
                f"state_dict's indexer reads embed_dim={indexer.embed_dim} and q_rank="
                f"{indexer.q_rank}, its attention has embed_dim={attention.embed_dim} and "
                f"q_rank={attention.q_rank}: give the weights of one layer")
        with torch.device("meta"):                     # sizes only: both parts replaced below
            layer = cls(attention.embed_dim, num_heads, attention.kv_rank, attention.q_rank,
                        top_k, indexer.num_heads, indexer.head_dim, attention.head_dim,
                        attention.rope_dim, attention.value_dim, base, norm_eps)
        layer.attention, layer.indexer = attention, indexer
        return layer


_INDEXER_NAMES = ("wq_b.weight", "wk.weight", "k_norm.weight", "k_norm.bias",
                  "weights_proj.weight")


def _checked_weights(state_dict, names, owner):
    """The state dict's tensors named `names`, checked: all present and no other name (a bias
    the layer lacks would be dropped silently), floating tensors (vectors for the norm,
    matrices otherwise) of one dtype."""
    missing = [name for name in names if name not in state_dict]
    if missing:
        raise ValueError(f"state_dict lacks {missing}: give the state dict of one {owner} "
                         "(its own names, without a prefix)")
    extra = sorted(str(name) for name in state_dict if name not in names)
    if extra:
        raise ValueError(f"state_dict holds {extra}, which one {owner} does not have")
    return _state_tensors(state_dict, names, "norm")
