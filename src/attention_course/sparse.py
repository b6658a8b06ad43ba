"""DeepSeek Sparse Attention, DSA (DeepSeek-AI 2025, DeepSeek-V3.2; chapter 17).

Notable:
- a small "lightning indexer" scores every earlier token s for query t,
  I_ts = sum_i eta_ti ReLU(q_ti . k_s / sqrt(d_I)), and the query attends, with MLA
  (`attention_course.latent`), only to the top_k tokens of largest I_ts;
- the indexer reads MLA's query latent c_t and caches one key of d_I numbers per token, shared
  by its heads; RoPE turns the first rope_dim dimensions of q_ti and k_s (half-split pairing);
- its scores are float32 for float16/bfloat16 inputs, as in transformers (rounded, they would
  tie and the selection would turn on the rounding);
- decoding, IndexedLatentCache keeps each token's indexer key beside MLA's latent and RoPE key
  (transformers' DynamicIndexedLayer): a generated token scores every cached key, then reads
  the top_k it selects;
- the selection is a mask over all keys (as transformers' eager path): this module computes the
  maths, not the savings. Symbols, weight names and costs: tests/test_sparse.py, chapter 17.
"""

import collections.abc
import math

import torch
from torch import nn

from . import _kernels
from ._shapes import (
    HALF_PRECISION,
    check_positions,
    check_sequence,
    require_dtype_of,
    require_float,
    require_instance,
    require_int,
    require_number,
    shape_of,
)
from .latent import LatentCache, MultiHeadLatentAttention


def _check_indexer_sizes(
    embed_dim, q_rank, num_heads, head_dim, rope_dim, base, rope_checked=False
):
    """The indexer's sizes; `rope_checked`: rope_dim and base are MLA's, which its door
    checked (DeepSeekSparseAttention.from_deepseek)."""
    for name, value in (
        ("embed_dim", embed_dim),
        ("q_rank", q_rank),
        ("num_heads", num_heads),
        ("head_dim", head_dim),
    ):
        require_int(name, value, 1)
    if not rope_checked:
        require_int("rope_dim", rope_dim, 2)
        require_number("base", base, 1, strict=True)
    if rope_dim % 2 or rope_dim > head_dim:
        raise ValueError(
            f"rope_dim must be even (RoPE turns pairs) and at most "
            f"head_dim={head_dim}, got {rope_dim}"
        )


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: I_ts = sum_i eta_ti ReLU(q_ti . k_s / sqrt(d_I)),
    -inf for s > t, with q_ti the i-th block of W_IQ c_t (c_t: MLA's query latent), k_s =
    LayerNorm(W_IK x_s) and eta_ti = (W_w x_t)_i / sqrt(H_I). Sizes: embed_dim d, q_rank d_c',
    num_heads H_I (index_n_heads), head_dim d_I (index_head_dim), rope_dim (even, <= d_I),
    base (rope_theta; plain RoPE).

    forward(x (batch, L, embed_dim), q_latent (batch, L, q_rank), positions=None) ->
    index_scores (batch, L, L): positions (L,) default 0..L-1, -inf where a key's position is
    past the query's. Float32 for float16/bfloat16 inputs, the input dtype otherwise. Its top-k
    selection equals transformers' DeepseekV32Indexer's (`from_deepseek`). Chapter 17.
    """

    def __init__(self, embed_dim, q_rank, num_heads, head_dim, rope_dim, base=10000.0):
        super().__init__()
        _check_indexer_sizes(embed_dim, q_rank, num_heads, head_dim, rope_dim, base)
        self._build(embed_dim, q_rank, num_heads, head_dim, rope_dim, base)

    def _build(self, embed_dim, q_rank, num_heads, head_dim, rope_dim, base):
        self.embed_dim, self.q_rank, self.num_heads = embed_dim, q_rank, num_heads
        self.head_dim, self.rope_dim, self.base = head_dim, rope_dim, base
        self.scale = 1 / math.sqrt(head_dim)
        self.q_up = nn.Linear(q_rank, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, head_dim, bias=False)
        self.k_norm = nn.LayerNorm(head_dim, eps=1e-6)
        self.head_weights = nn.Linear(embed_dim, num_heads, bias=False)

    @classmethod
    def _trusted(cls, *sizes):
        """An indexer of sizes already checked (by DeepSeekSparseAttention's door)."""
        return _kernels.built(cls, *sizes)

    def forward(self, x, q_latent, positions=None):
        """The forward pass of the class docstring. Chapter 17."""
        return self._scores(x, q_latent, self._check(x, q_latent, positions))

    def _scores(self, x, q_latent, positions, cache=None):
        """forward for checked arguments; with a cache (an IndexedLatentCache whose fit the
        caller checked), x's keys are appended to its indexer keys and every held key is
        scored: (b, n_q, n_k)."""
        batch, length, _ = x.shape
        work = torch.float32 if x.dtype in HALF_PRECISION else x.dtype
        # q_ti: the i-th block of W_IQ c_t; k_s = LayerNorm(W_IK x_s), one for all heads
        queries = self.q_up(q_latent).view(batch, length, self.num_heads, self.head_dim)
        queries = self._rope(queries.transpose(1, 2), positions)  # (b, H_I, L, d_I)
        keys = self._rope(self.k_norm(self.k_proj(x)), positions)  # (b, L, d_I)
        key_positions = positions
        if cache is not None:
            # the cache keeps k_s, d_I numbers a token; score every key it holds
            keys = cache._append_index(keys)  # (b, n_k, d_I)
            key_positions = torch.arange(keys.shape[1], device=x.device)
        # ReLU(q_ti . k_s / sqrt(d_I))
        dots = queries.to(work) @ keys.to(work)[:, None].transpose(-2, -1)  # (b, H_I, L, L)
        votes = (dots * self.scale).relu_()
        # eta_ti = (W_w x_t)_i / sqrt(H_I); I_ts = sum_i eta_ti votes_its
        weights = self.head_weights(x).to(work) / math.sqrt(self.num_heads)  # (b, L, H_I)
        scores = torch.einsum("bth,bhts->bts", weights, votes)  # (b, L, L)
        causal = _kernels.allowed_by_position(positions, key_positions)  # (n_q, n_k)
        return scores.masked_fill(~causal, -math.inf)

    def _rope(self, x, positions):
        """RoPE on the first rope_dim dimensions of x (..., L, d_I), the rest unchanged."""
        turned = _kernels.rotate(x[..., : self.rope_dim], positions, self.base)
        return torch.cat([turned, x[..., self.rope_dim :]], dim=-1)

    def _check(self, x, q_latent, positions):
        """x and q_latent in the weights' dtype, of one batch and length -> positions (L,)."""
        dtype = self.k_proj.weight.dtype
        check_sequence("x", x, self.embed_dim, dtype)
        require_float("q_latent", q_latent, 3)
        if q_latent.shape != (*x.shape[:2], self.q_rank):
            raise ValueError(
                f"x {shape_of(x)} and q_latent {shape_of(q_latent)} must be "
                f"(batch, L, embed_dim={self.embed_dim}) and (batch, L, "
                f"q_rank={self.q_rank})"
            )
        require_dtype_of("q_latent", q_latent, dtype, "the layer's weights")
        return check_positions(positions, x.shape[1], x.device)

    @classmethod
    def from_deepseek(cls, state_dict, rope_dim, *, base=10000.0):
        """An indexer holding the weights of transformers' DeepseekV32Indexer, given as its
        state dict (wq_b.weight, wk.weight, k_norm.weight, k_norm.bias, weights_proj.weight).
        Sizes are read from the shapes, except rope_dim (the config's qk_rope_head_dim, which
        the weights do not show). The indexer's RoPE is half-split in transformers: no rows
        are reordered. The layer lives on the device and in the dtype of the weights.
        Chapter 17."""
        require_instance(
            "state_dict",
            state_dict,
            collections.abc.Mapping,
            "a mapping of DeepseekV32Indexer's weight names to tensors",
        )
        return cls._from_deepseek(state_dict, rope_dim, base, rope_checked=False)

    @classmethod
    def _from_deepseek(cls, state_dict, rope_dim, base, rope_checked):
        """from_deepseek after its door; `rope_checked`: rope_dim and base are MLA's,
        checked by its door."""
        weights = _indexer_weights(state_dict)
        num_heads, embed_dim = weights["weights_proj.weight"].shape
        head_dim = weights["wk.weight"].shape[0]
        q_up = weights["wq_b.weight"]
        if (
            q_up.shape[0] != num_heads * head_dim
            or weights["wk.weight"].shape[1] != embed_dim
            or weights["k_norm.weight"].shape != (head_dim,)
            or weights["k_norm.bias"].shape != (head_dim,)
        ):
            raise ValueError(
                "state_dict's shapes do not fit one indexer: wq_b "
                f"{shape_of(q_up)}, wk {shape_of(weights['wk.weight'])}, weights_proj "
                f"{shape_of(weights['weights_proj.weight'])}, k_norm "
                f"{shape_of(weights['k_norm.weight'])} must be (H_I * d_I, q_rank), "
                "(d_I, embed_dim), (H_I, embed_dim), (d_I,)"
            )
        like = weights["wk.weight"]
        sizes = (embed_dim, q_up.shape[1], num_heads, head_dim, rope_dim, base)
        _check_indexer_sizes(*sizes, rope_checked=rope_checked)
        layer = cls._trusted(*sizes).to(like.device, like.dtype)
        layer.load_state_dict(
            {
                "q_up.weight": q_up,
                "k_proj.weight": like,
                "k_norm.weight": weights["k_norm.weight"],
                "k_norm.bias": weights["k_norm.bias"],
                "head_weights.weight": weights["weights_proj.weight"],
            }
        )
        return layer


def top_k_mask(index_scores, k):
    """Bool, the shape of index_scores (..., n_q, n_k): True at the k largest entries of each row
    (last axis), among those that are not -inf (nor NaN); a row with fewer such entries than k
    has them all. Ties at the k-th place are broken as torch.topk breaks them. Chapter 17."""
    require_float("index_scores", index_scores)
    if index_scores.dim() < 2:
        raise ValueError(
            f"index_scores {shape_of(index_scores)} must have at least 2 "
            "dimensions (..., n_q, n_k): one row of scores per query"
        )
    require_int("k", k, 1)
    return _top_k(index_scores, k)


def _top_k(index_scores, k):
    """top_k_mask of checked arguments."""
    ranked = index_scores.masked_fill(index_scores.isnan(), -math.inf)
    kept = min(k, index_scores.shape[-1])
    top = ranked.topk(kept, dim=-1).indices  # (..., L, kept)
    chosen = torch.zeros(index_scores.shape, dtype=torch.bool, device=index_scores.device)
    return chosen.scatter_(-1, top, True) & (ranked > -math.inf)


class IndexedLatentCache(LatentCache):
    """One DSA layer's cache: MLA's (a LatentCache: per token its latent and its RoPE key) and,
    beside it, the lightning indexer's key k_s of each token (index_head_dim numbers, shared by
    the indexer's heads), as transformers' DynamicIndexedLayer keeps them.

    update_indexer(index_key (batch, t, index_head_dim)) appends indexer keys and returns all
    held, (batch, held + t, index_head_dim); `index_keys` holds them (None while empty). update,
    `len(cache)`, `seen` and `key_positions` are LatentCache's (its latents); `nbytes` counts
    the latents, RoPE keys and indexer keys. DeepSeekSparseAttention.forward(x, cache) fills
    both parts. Chapter 17.
    """

    def __init__(self):
        super().__init__()
        self.index_keys = None

    @property
    def indexed(self):
        """The number of indexer keys held. Chapter 17."""
        return 0 if self.index_keys is None else self.index_keys.shape[1]

    @property
    def nbytes(self):
        held = super().nbytes
        if self.index_keys is not None:
            held += self.index_keys.numel() * self.index_keys.element_size()
        return held

    def update_indexer(self, index_key):
        """Append index_key (batch, t, index_head_dim); return every indexer key held,
        (batch, n_k, index_head_dim). Chapter 17."""
        require_float("index_key", index_key, 3)
        held = self.index_keys
        if held is not None and (
            index_key.shape[0] != held.shape[0]
            or index_key.shape[2] != held.shape[2]
            or index_key.dtype != held.dtype
            or index_key.device != held.device
        ):
            raise ValueError(
                f"index_key {shape_of(index_key)} ({index_key.dtype}, {index_key.device}) "
                f"does not match the cache's indexer keys {shape_of(held)} ({held.dtype}, "
                f"{held.device}): batch, index_head_dim, dtype and device must stay"
            )
        return self._append_index(index_key)

    def _append_index(self, index_key):
        """update_indexer for keys the caller's layer made (and so trusts)."""
        if self.index_keys is None:
            self.index_keys = index_key
        else:
            self.index_keys = torch.cat([self.index_keys, index_key], dim=1)
        return self.index_keys


class DeepSeekSparseAttention(nn.Module):
    """DeepSeek Sparse Attention (DeepSeek-AI 2025, DeepSeek-V3.2): MLA (`.attention`, a
    MultiHeadLatentAttention) where each query attends only to the top_k earlier tokens that a
    lightning indexer (`.indexer`, reading MLA's query latent) scores highest. Arguments:
    MultiHeadLatentAttention's (q_rank required: the indexer reads c_t), top_k (index_topk),
    index_heads H_I and index_head_dim d_I; the indexer takes MLA's rope_dim and base.

    forward(x (batch, n_q, embed_dim), cache=None, absorb=False) -> (output (batch, n_q,
    embed_dim), weights (batch, num_heads, n_q, n_k), selected (batch, n_q, n_k) bool),
    causal. With a cache (an IndexedLatentCache) x's tokens continue the cached ones: the cache
    keeps their latents, RoPE keys and indexer keys, and the n_k keys are all it holds then;
    without, n_k = n_q.
    One selection serves every head. With top_k >= n_k it is plain MLA. Equal to transformers'
    DeepseekV32Attention with the same weights (`from_deepseek`), through its cache too.
    Chapter 17.
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        kv_rank,
        q_rank,
        top_k,
        index_heads,
        index_head_dim,
        head_dim=None,
        rope_dim=None,
        value_dim=None,
        base=10000.0,
        norm_eps=1e-6,
    ):
        super().__init__()
        if q_rank is None:  # MLA's door checks its value
            raise TypeError(
                "q_rank must be an integer, got None: the indexer reads the query latent"
            )
        require_int("top_k", top_k, 1)
        require_int("index_heads", index_heads, 1)
        require_int("index_head_dim", index_head_dim, 1)
        self.attention = MultiHeadLatentAttention(
            embed_dim, num_heads, kv_rank, q_rank, head_dim, rope_dim, value_dim, base, norm_eps
        )
        rope_dim = self.attention.rope_dim
        if index_head_dim < rope_dim:
            raise ValueError(
                f"index_head_dim={index_head_dim} must be at least rope_dim="
                f"{rope_dim}: the indexer turns rope_dim of its dimensions"
            )
        # embed_dim, q_rank, rope_dim and base: checked by MLA's door above
        self.indexer = LightningIndexer._trusted(
            embed_dim, q_rank, index_heads, index_head_dim, rope_dim, base
        )
        self.top_k = top_k

    def index_scores(self, x):
        """The indexer's scores I (batch, L, L) of x (batch, L, embed_dim): -inf for s > t;
        float32 for float16/bfloat16 inputs, the input dtype otherwise. Chapter 17."""
        check_sequence("x", x, self.attention.embed_dim, self.attention.kv_down.weight.dtype)
        return self._index_scores(x, torch.arange(x.shape[1], device=x.device))

    def _index_scores(self, x, positions):
        mla = self.attention
        q_latent = mla.q_norm(mla.q_down(x))  # c_t: (b, L, d_c')
        return self.indexer._scores(x, q_latent, positions)  # (b, L, L)

    def forward(self, x, cache=None, absorb=False):
        """The forward pass of the class docstring. Chapter 17."""
        check_sequence("x", x, self.attention.embed_dim, self.attention.kv_down.weight.dtype)
        if cache is None:
            positions = torch.arange(x.shape[1], device=x.device)
        else:
            self._check_cache(cache, x)
            positions = torch.arange(cache.seen, cache.seen + x.shape[1], device=x.device)
        # each query keeps the top_k keys the indexer scores highest (with a cache: of all
        # the keys it holds, x's appended)
        mla = self.attention
        q_latent = mla.q_norm(mla.q_down(x))  # c_t: (b, L, d_c')
        scores = self.indexer._scores(x, q_latent, positions, cache)  # (b, n_q, n_k)
        selected = _top_k(scores, self.top_k)  # (b, n_q, n_k)
        # MLA, causal AND selected, one selection for every head (x checked above); the
        # cache appends x's latents and RoPE keys
        output, weights = mla._attend(x, positions, cache, absorb, selected[:, None])
        return output, weights, selected

    def _check_cache(self, cache, x):
        """Raise unless cache is an IndexedLatentCache that x's latents and indexer keys can
        continue (checked before either part grows)."""
        require_instance("cache", cache, IndexedLatentCache, "an IndexedLatentCache or None")
        if cache.indexed != len(cache):
            raise ValueError(
                f"cache holds {len(cache)} latents but {cache.indexed} indexer keys: fill "
                "it through DeepSeekSparseAttention.forward only"
            )
        if cache.latents is None:
            return
        mla, held = self.attention, cache.latents
        expected = (x.shape[0], mla.kv_rank, mla.rope_dim, self.indexer.head_dim, x.dtype)
        found = (
            held.shape[0],
            held.shape[2],
            cache.rope_keys.shape[2],
            cache.index_keys.shape[2],
            held.dtype,
        )
        if expected != found or held.device != x.device:
            raise ValueError(
                f"cache holds (batch, kv_rank, rope_dim, index_head_dim, dtype) = {found} on "
                f"{held.device}; x {shape_of(x)} and this layer need {expected} on {x.device}"
            )

    @classmethod
    def from_deepseek(
        cls, state_dict, num_heads, top_k, *, interleaved=True, base=10000.0, norm_eps=1e-6
    ):
        """A layer holding the weights of transformers' DeepseekV32Attention, given as its
        state dict: MLA's weights as for MultiHeadLatentAttention.from_deepseek (`interleaved`
        reorders MLA's RoPE rows; DeepSeek's checkpoints and DeepseekV32Attention interleave),
        the indexer's under "indexer." (LightningIndexer.from_deepseek). top_k is the config's
        index_topk. RoPE is plain (no YaRN). The layer lives on the device and in the dtype of
        the weights. Chapter 17."""
        require_instance(
            "state_dict",
            state_dict,
            collections.abc.Mapping,
            "a mapping of DeepseekV32Attention's weight names to tensors",
        )
        require_int("top_k", top_k, 1)
        prefix = "indexer."
        mla_part = {
            name: tensor for name, tensor in state_dict.items() if not str(name).startswith(prefix)
        }
        index_part = {
            name[len(prefix) :]: tensor
            for name, tensor in state_dict.items()
            if str(name).startswith(prefix)
        }
        if "q_a_proj.weight" not in mla_part:
            raise ValueError(
                "state_dict lacks q_a_proj.weight: DeepSeek Sparse Attention "
                "needs MLA's query latent (q_lora_rank), which its indexer reads"
            )
        # num_heads, interleaved, base and norm_eps: checked by MLA's door
        attention = MultiHeadLatentAttention.from_deepseek(
            mla_part, num_heads, interleaved=interleaved, base=base, norm_eps=norm_eps
        )
        missing = [prefix + name for name in _INDEXER_NAMES if name not in index_part]
        if missing:
            raise ValueError(
                f"state_dict lacks {missing}: give the state dict of one "
                "DeepseekV32Attention layer, its indexer's weights included"
            )
        indexer = LightningIndexer._from_deepseek(
            index_part, attention.rope_dim, base, rope_checked=True
        )
        theirs, ours = indexer.k_proj.weight, attention.kv_down.weight
        if (theirs.dtype, theirs.device) != (ours.dtype, ours.device):
            raise ValueError(
                f"state_dict's indexer weights are {theirs.dtype} on {theirs.device}"
                f", its attention weights {ours.dtype} on {ours.device}: convert "
                "them to one dtype and device"
            )
        if (indexer.embed_dim, indexer.q_rank) != (attention.embed_dim, attention.q_rank):
            raise ValueError(
                f"state_dict's indexer reads embed_dim={indexer.embed_dim} and q_rank="
                f"{indexer.q_rank}, its attention has embed_dim={attention.embed_dim} and "
                f"q_rank={attention.q_rank}: give the weights of one layer"
            )
        layer = cls.__new__(cls)  # both parts made and checked above
        nn.Module.__init__(layer)
        layer.attention, layer.indexer, layer.top_k = attention, indexer, top_k
        return layer


_INDEXER_NAMES = ("wq_b.weight", "wk.weight", "k_norm.weight", "k_norm.bias", "weights_proj.weight")


def _indexer_weights(state_dict):
    """The state dict's tensors, checked: the indexer's names and no other (a bias the layer
    lacks would be dropped silently), floating tensors (vectors for the norm, matrices
    otherwise) of one dtype."""
    missing = [name for name in _INDEXER_NAMES if name not in state_dict]
    if missing:
        raise ValueError(
            f"state_dict lacks {missing}: give the state dict of one "
            "DeepseekV32Indexer (its own names, without a prefix)"
        )
    extra = sorted(str(name) for name in state_dict if name not in _INDEXER_NAMES)
    if extra:
        raise ValueError(f"state_dict holds {extra}, which one DeepseekV32Indexer does not have")
    weights = {name: state_dict[name] for name in _INDEXER_NAMES}
    for name, tensor in weights.items():
        require_float(f"state_dict[{name!r}]", tensor, 1 if "norm" in name else 2)
    if len({tensor.dtype for tensor in weights.values()}) > 1:
        raise ValueError(
            f"state_dict holds several dtypes "
            f"{sorted({str(t.dtype) for t in weights.values()})}: convert its "
            "tensors to one"
        )
    return weights
