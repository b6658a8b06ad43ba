"""Multi-head latent attention, MLA (DeepSeek-AI 2024, DeepSeek-V2 and V3; chapter 15).

Notable:
- the cache holds one latent c = RMSNorm(W_DKV x) of kv_rank numbers per token, plus one
  small RoPE key shared by all heads (decoupled RoPE), instead of every head's keys and values;
- `forward(..., absorb=True)` folds W_UK into the queries and applies W_UV after the weighted
  sum, so attention runs over the cached latents themselves (the same output);
- `from_deepseek` reads transformers' DeepseekV3Attention state dict (names and shapes:
  tests/test_latent.py) and reorders DeepSeek's interleaved RoPE rows to the half-split
  pairing of `apply_rotary`;
- `attn_mask` further restricts the causal mask: DeepSeek Sparse Attention passes the keys its
  indexer selects (`attention_course.sparse`, chapter 17).
"""

import collections.abc
import math

import torch
from torch import nn

from . import _kernels
from ._shapes import (
    broadcast_shape,
    check_positions,
    check_sequence,
    require_dtype_of,
    require_float,
    require_instance,
    require_int,
    require_number,
    require_tensor,
    shape_of,
)


class LatentCache:
    """One MLA layer's cache: per token its latent c (kv_rank numbers) and its rotated RoPE key
    (rope_dim numbers), instead of every head's keys and values.

    update(latent (batch, t, kv_rank), rope_key (batch, t, rope_dim)) appends them and returns
    everything held, (batch, held + t, kv_rank) and (batch, held + t, rope_dim). As KVCache:
    `len(cache)` tokens held, `seen` the tokens appended (the position of the next one),
    `key_positions` the positions (S,) of what the last update returned, `nbytes` the bytes
    held. Chapter 15.
    """

    def __init__(self):
        self.latents = self.rope_keys = None
        self.key_positions = torch.zeros(0, dtype=torch.long)
        self.seen = 0

    def __len__(self):
        return 0 if self.latents is None else self.latents.shape[1]

    @property
    def nbytes(self):
        if self.latents is None:
            return 0
        return (self.latents.numel() + self.rope_keys.numel()) * self.latents.element_size()

    def _check(self, latent, rope_key):
        require_float("latent", latent, 3)
        require_float("rope_key", rope_key, 3)
        if (
            latent.shape[:2] != rope_key.shape[:2]
            or latent.dtype != rope_key.dtype
            or latent.device != rope_key.device
        ):
            raise ValueError(
                f"latent {shape_of(latent)} ({latent.dtype}, {latent.device}) and rope_key "
                f"{shape_of(rope_key)} ({rope_key.dtype}, {rope_key.device}) must be "
                "(batch, t, kv_rank) and (batch, t, rope_dim), of one dtype and device"
            )
        self._check_fits(latent, rope_key)

    def _check_fits(self, latent, rope_key):
        """Raise ValueError unless latent and rope_key (a pair of one batch, length, dtype and
        device) continue what the cache holds."""
        held = self.latents
        if held is not None and (
            latent.shape[0] != held.shape[0]
            or latent.shape[2] != held.shape[2]
            or rope_key.shape[2] != self.rope_keys.shape[2]
            or latent.dtype != held.dtype
            or latent.device != held.device
        ):
            raise ValueError(
                f"latent {shape_of(latent)} and rope_key {shape_of(rope_key)} "
                f"({latent.dtype}, {latent.device}) do not match the cache "
                f"{shape_of(held)}, {shape_of(self.rope_keys)} ({held.dtype}, "
                f"{held.device}): batch, kv_rank, rope_dim, dtype and device must stay"
            )

    def update(self, latent, rope_key):
        """Append latent (batch, t, kv_rank) and rope_key (batch, t, rope_dim); return all
        latents and RoPE keys held, (batch, S, kv_rank) and (batch, S, rope_dim). Chapter 15."""
        self._check(latent, rope_key)
        return self._append(latent, rope_key)

    def _append(self, latent, rope_key):
        """update for latents and RoPE keys the caller's layer made (and so trusts)."""
        if self.latents is None:
            self.latents, self.rope_keys = latent, rope_key
        else:
            self.latents = torch.cat([self.latents, latent], dim=1)
            self.rope_keys = torch.cat([self.rope_keys, rope_key], dim=1)
        self.seen += latent.shape[1]
        self.key_positions = torch.arange(self.seen)
        return self.latents, self.rope_keys


def _check_sizes(embed_dim, num_heads, kv_rank, q_rank, head_dim, rope_dim, value_dim):
    """The sizes with their defaults filled in: (head_dim, rope_dim, value_dim)."""
    for name, value in (("embed_dim", embed_dim), ("num_heads", num_heads), ("kv_rank", kv_rank)):
        require_int(name, value, 1)
    for name, value in (("q_rank", q_rank), ("head_dim", head_dim), ("value_dim", value_dim)):
        if value is not None:
            require_int(name, value, 1)
    if head_dim is None:
        if embed_dim % num_heads:
            raise ValueError(
                f"num_heads={num_heads} does not divide embed_dim={embed_dim}: give head_dim"
            )
        head_dim = embed_dim // num_heads
    if rope_dim is None:
        rope_dim = 2 * max(1, head_dim // 4)  # head_dim // 2, made even, at least 2
    require_int("rope_dim", rope_dim, 2)
    if rope_dim % 2:
        raise ValueError(f"rope_dim must be even (RoPE turns pairs), got {rope_dim}")
    return head_dim, rope_dim, head_dim if value_dim is None else value_dim


class MultiHeadLatentAttention(nn.Module):
    """DeepSeek's multi-head latent attention (DeepSeek-AI 2024): a low-rank latent KV cache,
    decoupled RoPE, and an absorbed path. Sizes in the course's symbols (the paper's, and
    transformers' DeepseekV3Config names): embed_dim d_model (d, hidden_size), num_heads H
    (n_h), kv_rank d_c (kv_lora_rank), q_rank d_c' (q_lora_rank; None: full-rank queries, as
    DeepSeek-V2-Lite), head_dim d_h (qk_nope_head_dim; default embed_dim // num_heads), rope_dim
    d_R (d_h^R, qk_rope_head_dim, even; default head_dim // 2 made even), value_dim d_v
    (v_head_dim; default head_dim), base b (rope_theta; plain RoPE), norm_eps (the two
    RMSNorms').

    forward(x (batch, n_q, embed_dim), cache=None, absorb=False, attn_mask=None) -> (output
    (batch, n_q, embed_dim), weights (batch, num_heads, n_q, n_k)), causal, n_k the cached and
    new tokens; with a LatentCache the new tokens continue the cached ones; attn_mask (bool,
    broadcastable to (batch, num_heads, n_q, n_k), True = may attend) is AND-ed with the causal
    mask (a query left with no key gets zeros).
    Equal to transformers' DeepseekV3Attention with the same weights (`from_deepseek`).
    Chapter 15.
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        kv_rank,
        q_rank=None,
        head_dim=None,
        rope_dim=None,
        value_dim=None,
        base=10000.0,
        norm_eps=1e-6,
    ):
        super().__init__()
        head_dim, rope_dim, value_dim = _check_sizes(
            embed_dim, num_heads, kv_rank, q_rank, head_dim, rope_dim, value_dim
        )
        require_number("base", base, 1, strict=True)
        require_number("norm_eps", norm_eps, 0)
        self._build(
            embed_dim, num_heads, kv_rank, q_rank, head_dim, rope_dim, value_dim, base, norm_eps
        )

    @classmethod
    def _of_checked_sizes(cls, *sizes):
        """The layer for sizes its caller has checked (from_deepseek reads them off weights)."""
        return _kernels.built(cls, *sizes)

    def _build(
        self, embed_dim, num_heads, kv_rank, q_rank, head_dim, rope_dim, value_dim, base, norm_eps
    ):
        self.embed_dim, self.num_heads, self.kv_rank, self.q_rank = (
            embed_dim,
            num_heads,
            kv_rank,
            q_rank,
        )
        self.head_dim, self.rope_dim, self.value_dim = head_dim, rope_dim, value_dim
        self.base = base
        self.scale = 1 / math.sqrt(head_dim + rope_dim)
        self.kv_down = nn.Linear(embed_dim, kv_rank, bias=False)
        self.k_rope = nn.Linear(embed_dim, rope_dim, bias=False)
        self.kv_norm = nn.RMSNorm(kv_rank, eps=norm_eps)
        self.k_up = nn.Linear(kv_rank, num_heads * head_dim, bias=False)
        self.v_up = nn.Linear(kv_rank, num_heads * value_dim, bias=False)
        query_input = embed_dim if q_rank is None else q_rank
        self.q_down = None if q_rank is None else nn.Linear(embed_dim, q_rank, bias=False)
        self.q_norm = None if q_rank is None else nn.RMSNorm(q_rank, eps=norm_eps)
        self.q_up = nn.Linear(query_input, num_heads * head_dim, bias=False)
        self.q_rope = nn.Linear(query_input, num_heads * rope_dim, bias=False)
        self.out_proj = nn.Linear(num_heads * value_dim, embed_dim, bias=False)

    # ----------------------------------------------------------------- the projections

    def project_latent(self, x, positions=None):
        """What the cache stores for x (batch, L, embed_dim) at positions (L,) (default
        0..L-1): latents c (batch, L, kv_rank), RMS-normalised, and the RoPE keys shared by
        all heads (batch, L, rope_dim), rotated by their positions. Chapter 15."""
        return self._project_latent(x, self._check_x(x, positions))

    def _project_latent(self, x, positions):
        # c = RMSNorm(W_DKV x): the latent, the one thing cached per token besides k_R
        latent = self.kv_norm(self.kv_down(x))  # (batch, L, d_c)
        # k_R = RoPE(W_KR x): one RoPE key shared by every head
        return latent, _kernels.rotate(self.k_rope(x), positions, self.base)  # (batch, L, d_R)

    def project_queries(self, x, positions=None):
        """Queries of x (batch, L, embed_dim) at positions (L,): the content part (batch,
        num_heads, L, head_dim) and the RoPE part (batch, num_heads, L, rope_dim), rotated.
        Chapter 15."""
        return self._project_queries(x, self._check_x(x, positions))

    def _project_queries(self, x, positions):
        # c_Q = RMSNorm(W_DQ x), the queries' own latent (or x itself without q_rank)
        source = x if self.q_down is None else self.q_norm(self.q_down(x))  # (b, L, d_c')
        # q_C = W_UQ c_Q per head (content); q_R = RoPE(W_QR c_Q) per head
        content = _kernels.split_heads(self.q_up(source), self.num_heads)  # (b, H, L, d_h)
        rope = _kernels.split_heads(self.q_rope(source), self.num_heads)  # (b, H, L, d_R)
        return content, _kernels.rotate(rope, positions, self.base)

    def expand(self, latents):
        """Latents (batch, S, kv_rank) -> every head's content keys (batch, num_heads, S,
        head_dim) and values (batch, num_heads, S, value_dim): W_UK c and W_UV c. Chapter 15."""
        require_float("latents", latents, 3)
        if latents.shape[-1] != self.kv_rank:
            raise ValueError(
                f"latents {shape_of(latents)} must be (batch, S, kv_rank={self.kv_rank})"
            )
        require_dtype_of("latents", latents, self.k_up.weight.dtype, "the layer's weights")
        return self._expand(latents)

    def _expand(self, latents):
        # k_C = W_UK c and v = W_UV c, per head
        return (
            _kernels.split_heads(self.k_up(latents), self.num_heads),
            _kernels.split_heads(self.v_up(latents), self.num_heads),
        )

    # ------------------------------------------------------------------- attention

    def forward(self, x, cache=None, absorb=False, attn_mask=None):
        """The forward pass of the class docstring. Chapter 15."""
        positions = self._check_x(x, None, cache)
        held = 0 if cache is None else len(cache)
        self._check_mask(attn_mask, x, held + x.shape[1])  # before the cache grows
        return self._attend(x, positions, cache, absorb, attn_mask)

    def _attend(self, x, positions, cache, absorb, attn_mask):
        """forward for checked arguments (DeepSeekSparseAttention calls it with its mask)."""
        # what the cache keeps: c = RMSNorm(W_DKV x) and k_R = RoPE(W_KR x)
        latents, rope_keys = self._project_latent(x, positions)  # (b, L, d_c), (b, L, d_R)
        # the queries: content q_C = W_UQ c_Q and q_R = RoPE(W_QR c_Q), per head
        q_content, q_rope = self._project_queries(x, positions)  # (b, H, L, d_h), (..., d_R)
        key_positions = positions
        if cache is not None:
            cache._check_fits(latents, rope_keys)
            latents, rope_keys = cache._append(latents, rope_keys)  # (b, S, ...)
            key_positions = cache.key_positions.to(x.device)
        # causal: query t sees key s <= t; AND the caller's mask
        allowed = _kernels.allowed_by_position(positions, key_positions)  # (L, S)
        if attn_mask is not None:
            allowed = allowed & attn_mask.to(x.device)  # (.., L, S) up to (b, H, L, S)
        attend = self._attend_absorbed if absorb else self._attend_explicit
        heads, weights = attend(q_content, q_rope, latents, rope_keys, allowed)
        # output W_O [head_1, ..., head_H]
        return self.out_proj(_kernels.merge_heads(heads)), weights  # (b, L, d), (b, H, L, S)

    def _attend_explicit(self, q_content, q_rope, latents, rope_keys, allowed):
        """Every head's keys and values projected up from the latents, then attention."""
        # k_C = W_UK c, v = W_UV c: every cached latent expanded, for every head
        k_content, values = self._expand(latents)  # (b, H, S, d_h), (b, H, S, d_v)
        # k = [k_C; k_R] with k_R shared by the heads, q = [q_C; q_R]
        shared = rope_keys[:, None].expand(-1, self.num_heads, -1, -1)  # (b, H, S, d_R)
        query = torch.cat([q_content, q_rope], dim=-1)  # (b, H, L, d_h + d_R)
        key = torch.cat([k_content, shared], dim=-1)  # (b, H, S, d_h + d_R)
        # softmax((q_C . k_C + q_R . k_R) / sqrt(d_h + d_R)) v
        return _kernels.attend(query, key, values, allowed, False, self.scale)

    def _attend_absorbed(self, q_content, q_rope, latents, rope_keys, allowed):
        """W_UK folded into the query, W_UV applied after the weighted sum: one key per
        token, (c, k_rope), shared by every head, and the latents as values."""
        w_uk = self.k_up.weight.view(self.num_heads, self.head_dim, self.kv_rank)
        w_uv = self.v_up.weight.view(self.num_heads, self.value_dim, self.kv_rank)
        # q_C . (W_UK c) = (q_C W_UK) . c: the query absorbs W_UK, the key is c itself
        query = torch.cat([q_content @ w_uk, q_rope], dim=-1)  # (b, H, L, d_c + d_R)
        key = torch.cat([latents, rope_keys], dim=-1)[:, None]  # (b, 1, S, d_c + d_R)
        # the weighted sum of latents sum_s p_s c_s, then W_UV: = sum_s p_s (W_UV c_s)
        mixed, weights = _kernels.attend(
            query, key, latents[:, None], allowed, False, self.scale
        )  # (b, H, L, d_c)
        return mixed @ w_uv.transpose(1, 2), weights  # (b, H, L, d_v)

    def _check_mask(self, attn_mask, x, n_keys):
        """None, or a bool mask broadcastable to the scores (batch, num_heads, L, S)."""
        if attn_mask is None:
            return
        require_tensor("attn_mask", attn_mask)
        scores = (x.shape[0], self.num_heads, x.shape[1], n_keys)
        if attn_mask.dtype != torch.bool:
            raise ValueError(
                f"attn_mask {shape_of(attn_mask)} must be bool (True = may "
                f"attend), got {attn_mask.dtype}"
            )
        if broadcast_shape(attn_mask.shape, scores) != scores:
            raise ValueError(
                f"attn_mask {shape_of(attn_mask)} does not broadcast to the scores "
                f"(batch, num_heads, L, S) = {scores}"
            )

    def _check_x(self, x, positions, cache=None):
        """x (batch, L, embed_dim) in the weights' dtype -> positions (L,) on x's device."""
        check_sequence("x", x, self.embed_dim, self.kv_down.weight.dtype)
        if cache is not None:
            require_instance("cache", cache, LatentCache, "a LatentCache or None")
            return torch.arange(cache.seen, cache.seen + x.shape[1], device=x.device)
        return check_positions(positions, x.shape[1], x.device)

    # ------------------------------------------------------------------ DeepSeek's weights

    @classmethod
    def from_deepseek(cls, state_dict, num_heads, *, interleaved=True, base=10000.0, norm_eps=1e-6):
        """A layer holding the weights of a DeepSeek-V2/V3 attention layer, given as the state
        dict of transformers' DeepseekV3Attention (names q_a_proj.weight, ..., o_proj.weight;
        q_proj.weight when the queries have no latent). Sizes are read from the shapes;
        `interleaved` (DeepSeek's checkpoints, transformers' rope_interleave=True): the RoPE
        rows pair neighbours (2i, 2i + 1) and are reordered to the half-split pairing. RoPE is
        plain (no YaRN scaling); a state dict with biases (attention_bias=True) is refused. The
        layer lives on the device and in the dtype of the weights. Chapter 15."""
        require_instance(
            "state_dict",
            state_dict,
            collections.abc.Mapping,
            "a mapping of DeepseekV3Attention's weight names to tensors",
        )
        require_int("num_heads", num_heads, 1)
        weights = _deepseek_weights(state_dict)
        kv_rank, rope_dim, head_dim, value_dim, q_rank = _deepseek_sizes(weights, num_heads)
        if rope_dim % 2:
            raise ValueError(
                f"the weights make rope_dim={rope_dim}, which must be even (RoPE turns pairs)"
            )
        require_number("base", base, 1, strict=True)
        require_number("norm_eps", norm_eps, 0)
        like = weights["o_proj.weight"]
        layer = cls._of_checked_sizes(
            like.shape[0], num_heads, kv_rank, q_rank, head_dim, rope_dim, value_dim, base, norm_eps
        ).to(like.device, like.dtype)

        def reorder(rows, heads):  # DeepSeek's (2i, 2i + 1) pairs -> (i, i + d_R / 2)
            return _kernels.interleaved_to_half_split(rows, heads) if interleaved else rows

        query_weight = weights["q_proj.weight" if q_rank is None else "q_b_proj.weight"]
        query_rows = query_weight.reshape(num_heads, head_dim + rope_dim, -1)
        kv_rows = weights["kv_b_proj.weight"].reshape(num_heads, head_dim + value_dim, -1)
        mine = {
            "kv_down.weight": weights["kv_a_proj_with_mqa.weight"][:kv_rank],
            "k_rope.weight": reorder(weights["kv_a_proj_with_mqa.weight"][kv_rank:], 1),
            "kv_norm.weight": weights["kv_a_layernorm.weight"],
            "k_up.weight": kv_rows[:, :head_dim].reshape(num_heads * head_dim, kv_rank),
            "v_up.weight": kv_rows[:, head_dim:].reshape(num_heads * value_dim, kv_rank),
            "q_up.weight": query_rows[:, :head_dim].reshape(num_heads * head_dim, -1),
            "q_rope.weight": reorder(
                query_rows[:, head_dim:].reshape(num_heads * rope_dim, -1), num_heads
            ),
            "out_proj.weight": like,
        }
        if q_rank is not None:
            mine["q_down.weight"] = weights["q_a_proj.weight"]
            mine["q_norm.weight"] = weights["q_a_layernorm.weight"]
        layer.load_state_dict(mine)
        return layer


_DEEPSEEK_NAMES = (
    "kv_a_proj_with_mqa.weight",
    "kv_a_layernorm.weight",
    "kv_b_proj.weight",
    "o_proj.weight",
)
_DEEPSEEK_QUERY_NAMES = (
    ("q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"),
    ("q_proj.weight",),
)


def _deepseek_weights(state_dict):
    """The state dict's tensors, checked: the names of one attention layer, matrices and
    vectors (the norms') of one floating dtype."""
    query_names = next(
        (names for names in _DEEPSEEK_QUERY_NAMES if all(name in state_dict for name in names)),
        None,
    )
    missing = [name for name in _DEEPSEEK_NAMES if name not in state_dict]
    if missing or query_names is None:
        raise ValueError(
            f"state_dict lacks {missing or 'q_a_proj/q_b_proj or q_proj'}: give "
            "the state dict of one DeepseekV3Attention layer (its own names, "
            "without a 'model.layers.N.self_attn.' prefix)"
        )
    biases = sorted(name for name in state_dict if str(name).endswith(".bias"))
    if biases:
        raise ValueError(
            f"state_dict holds biases {biases}: the layer has none "
            "(attention_bias=True is not supported)"
        )
    weights = {name: state_dict[name] for name in _DEEPSEEK_NAMES + query_names}
    for name, tensor in weights.items():
        require_float(f"state_dict[{name!r}]", tensor, 1 if "layernorm" in name else 2)
    if len({tensor.dtype for tensor in weights.values()}) > 1:
        raise ValueError(
            f"state_dict holds several dtypes "
            f"{sorted({str(t.dtype) for t in weights.values()})}: convert its "
            "tensors to one"
        )
    return weights


def _deepseek_sizes(weights, num_heads):
    """(kv_rank, rope_dim, head_dim, value_dim, q_rank) from the weights' shapes, each weight's
    shape checked against them."""
    kv_rank = weights["kv_a_layernorm.weight"].shape[0]
    rope_dim = weights["kv_a_proj_with_mqa.weight"].shape[0] - kv_rank
    query = weights.get("q_b_proj.weight", weights.get("q_proj.weight"))
    q_rank = weights["q_a_layernorm.weight"].shape[0] if "q_a_proj.weight" in weights else None
    kv_up = weights["kv_b_proj.weight"]
    kv_rows = kv_up.shape[0]
    if query.shape[0] % num_heads or kv_rows % num_heads:
        raise ValueError(
            f"num_heads={num_heads} does not divide the rows of the query "
            f"{shape_of(query)} and key-value {shape_of(kv_up)} up-projections"
        )
    head_dim = query.shape[0] // num_heads - rope_dim
    value_dim = kv_rows // num_heads - head_dim
    if rope_dim < 2 or head_dim < 1 or value_dim < 1:
        raise ValueError(
            f"the weights' shapes do not fit num_heads={num_heads}: rope_dim "
            f"{rope_dim}, head_dim {head_dim}, value_dim {value_dim}"
        )
    embed_dim = weights["o_proj.weight"].shape[0]
    query_input = embed_dim if q_rank is None else q_rank
    wanted = {
        "kv_a_proj_with_mqa.weight": (kv_rank + rope_dim, embed_dim),
        "kv_b_proj.weight": (num_heads * (head_dim + value_dim), kv_rank),
        "o_proj.weight": (embed_dim, num_heads * value_dim),
        "q_a_proj.weight": (q_rank, embed_dim),
        "q_b_proj.weight": (num_heads * (head_dim + rope_dim), query_input),
        "q_proj.weight": (num_heads * (head_dim + rope_dim), query_input),
    }
    for name, shape in wanted.items():
        if name in weights and weights[name].shape != shape:
            raise ValueError(
                f"state_dict[{name!r}] is {shape_of(weights[name])}, but the other "
                f"weights make it {shape} (kv_rank={kv_rank}, rope_dim={rope_dim}, "
                f"head_dim={head_dim}, value_dim={value_dim}, q_rank={q_rank}, "
                f"embed_dim={embed_dim})"
            )
    return kv_rank, rope_dim, head_dim, value_dim, q_rank


def latent_cache_bytes(*, batch_size, seq_len, num_layers, kv_rank, rope_dim, bytes_per_element=2):
    """Bytes of an MLA cache: layers * (kv_rank + rope_dim) * tokens * batch * bytes per
    element (2 for float16/bfloat16): the latent and the shared RoPE key of every token.
    Chapter 15."""
    sizes = {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "num_layers": num_layers,
        "kv_rank": kv_rank,
        "rope_dim": rope_dim,
        "bytes_per_element": bytes_per_element,
    }
    for name, value in sizes.items():
        require_int(name, value, 1, message=f"{name} must be a positive integer, got {value!r}")
    return num_layers * (kv_rank + rope_dim) * seq_len * batch_size * bytes_per_element
