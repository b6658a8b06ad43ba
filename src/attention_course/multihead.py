"""Multi-head, grouped-query and multi-query attention layers, and the KV cache's size
(chapters 8–9). All heads attend with `attention.scaled_dot_product_attention`."""

import torch
from torch import nn

from . import _kernels
from ._shapes import (
    check_attn_mask,
    check_grouped,
    check_heads,
    check_kv_heads,
    check_sequence,
    require_instance,
    require_int,
    require_rank,
    shape_of,
)
from .config import DecoderConfig


def split_heads(x, num_heads):
    """(batch, seq, num_heads * head_dim) -> (batch, num_heads, seq, head_dim). Chapter 8."""
    require_rank("x", x, 3)
    require_int("num_heads", num_heads, 1)
    if x.shape[-1] % num_heads:
        raise ValueError(
            f"x {shape_of(x)} does not split into num_heads={num_heads} heads: "
            "its last dimension must be a multiple of num_heads"
        )
    return _kernels.split_heads(x, num_heads)


def merge_heads(x):
    """(batch, num_heads, seq, head_dim) -> (batch, seq, num_heads * head_dim). Chapter 8."""
    require_rank("x", x, 4)
    return _kernels.merge_heads(x)


def grouped_attention(q, k, v, attn_mask=None, is_causal=False):
    """Attention of query heads q (batch, H, L, d) over KV heads k, v (batch, H_kv, S, d), where
    query head h reads KV head h // (H // H_kv), as PyTorch's enable_gqa. Returns
    (output (batch, H, L, d_v), weights (batch, H, L, S)). Chapter 9."""
    check_grouped(q, k, v)
    check_attn_mask(attn_mask, is_causal, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
    return _kernels.grouped_attention(q, k, v, attn_mask, is_causal)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017): project, split into heads, attend, concatenate,
    project with W_O.

    forward(query (batch, L, embed_dim), key (batch, S, embed_dim), value (batch, S, embed_dim),
    attn_mask=None, is_causal=False) -> (output (batch, L, embed_dim), weights (batch, num_heads,
    L, S)). attn_mask follows scaled_dot_product_attention (bool True = may attend; float added)
    and broadcasts to (batch, num_heads, L, S). Note: torch.nn.MultiheadAttention's bool masks
    mean the opposite (True = ignore).
    Chapter 8.
    """

    def __init__(self, embed_dim, num_heads, bias=True):
        super().__init__()
        check_heads(embed_dim, num_heads)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        """The forward pass of the class docstring. Chapter 8."""
        dtype = self.q_proj.weight.dtype
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_sequence(name, x, self.embed_dim, dtype)
        if key.shape[:2] != value.shape[:2] or query.shape[0] != key.shape[0]:
            raise ValueError(
                f"query {shape_of(query)}, key {shape_of(key)} and value "
                f"{shape_of(value)} must share the batch, key and value the length"
            )
        check_attn_mask(
            attn_mask, is_causal, (query.shape[0], self.num_heads, query.shape[1], key.shape[1])
        )
        q = _kernels.split_heads(self.q_proj(query), self.num_heads)  # (batch, H, L, d_h)
        k = _kernels.split_heads(self.k_proj(key), self.num_heads)  # (batch, H, S, d_h)
        v = _kernels.split_heads(self.v_proj(value), self.num_heads)  # (batch, H, S, d_h)
        heads, weights = _kernels.grouped_attention(q, k, v, attn_mask, is_causal)
        return self.out_proj(_kernels.merge_heads(heads)), weights

    @classmethod
    def from_torch(cls, module):
        """A copy of a torch.nn.MultiheadAttention(batch_first=True) that gives the same outputs
        (with dropout off: eval mode or dropout=0). Chapter 8."""
        require_instance(
            "module",
            module,
            nn.MultiheadAttention,
            "a torch.nn.MultiheadAttention(batch_first=True)",
        )
        if not module.batch_first:
            raise ValueError(
                "from_torch needs a torch.nn.MultiheadAttention with "
                "batch_first=True: module has batch_first=False"
            )
        if module.bias_k is not None or module.add_zero_attn or not module._qkv_same_embed_dim:
            raise ValueError(
                "from_torch supports neither add_bias_kv, add_zero_attn nor kdim/vdim "
                "different from embed_dim, which module has"
            )
        bias = module.in_proj_bias is not None
        like = module.in_proj_weight  # the copy lives where the original does
        copy = cls(module.embed_dim, module.num_heads, bias=bias).to(like.device, like.dtype)
        with torch.no_grad():
            for index, projection in enumerate((copy.q_proj, copy.k_proj, copy.v_proj)):
                rows = slice(index * module.embed_dim, (index + 1) * module.embed_dim)
                projection.weight.copy_(module.in_proj_weight[rows])
                if bias:
                    projection.bias.copy_(module.in_proj_bias[rows])
            copy.out_proj.weight.copy_(module.out_proj.weight)
            if bias:
                copy.out_proj.bias.copy_(module.out_proj.bias)
        return copy


class GroupedQueryAttention(nn.Module):
    """Grouped-query self-attention (Ainslie et al. 2023): num_heads query heads share
    num_kv_heads key/value heads; query head h reads KV head h // (num_heads // num_kv_heads).
    num_kv_heads == num_heads is multi-head attention, num_kv_heads == 1 multi-query attention
    (Shazeer 2019).

    forward(x (batch, L, embed_dim), attn_mask=None, is_causal=False) -> (output (batch, L,
    embed_dim), weights (batch, num_heads, L, L)); masks as in scaled_dot_product_attention.
    Chapter 9.
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, bias=False):
        super().__init__()
        check_heads(embed_dim, num_heads)
        check_kv_heads(num_heads, num_kv_heads)
        self._build(embed_dim, num_heads, num_kv_heads, bias)

    def _build(self, embed_dim, num_heads, num_kv_heads, bias):
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * self.head_dim, embed_dim, bias=bias)

    @classmethod
    def from_config(cls, config):
        """The attention of a decoder layer, sized by a DecoderConfig (which checked its
        sizes when it was made). Chapter 11."""
        require_instance("config", config, DecoderConfig, "a DecoderConfig")
        return cls._of_checked_sizes(config.embed_dim, config.num_heads, config.num_kv_heads)

    @classmethod
    def _of_checked_sizes(cls, embed_dim, num_heads, num_kv_heads, bias=False):
        """The layer for sizes a caller has checked (a decoder's config, from_multihead)."""
        return _kernels.built(cls, embed_dim, num_heads, num_kv_heads, bias)

    def project_kv(self, x):
        """x (batch, L, embed_dim) -> keys, values (batch, num_kv_heads, L, head_dim): exactly what
        a KV cache stores for this layer. Chapter 9."""
        check_sequence("x", x, self.embed_dim, self.k_proj.weight.dtype)
        return (
            _kernels.split_heads(self.k_proj(x), self.num_kv_heads),
            _kernels.split_heads(self.v_proj(x), self.num_kv_heads),
        )

    def forward(self, x, attn_mask=None, is_causal=False):
        """The forward pass of the class docstring. Chapter 9."""
        check_sequence("x", x, self.embed_dim, self.q_proj.weight.dtype)
        check_attn_mask(attn_mask, is_causal, (x.shape[0], self.num_heads, x.shape[1], x.shape[1]))
        q = _kernels.split_heads(self.q_proj(x), self.num_heads)  # (batch, H, L, d_h)
        k = _kernels.split_heads(self.k_proj(x), self.num_kv_heads)  # (batch, H_kv, L, d_h)
        v = _kernels.split_heads(self.v_proj(x), self.num_kv_heads)  # (batch, H_kv, L, d_h)
        heads, weights = _kernels.grouped_attention(q, k, v, attn_mask, is_causal)
        return self.out_proj(_kernels.merge_heads(heads)), weights

    @classmethod
    def from_multihead(cls, mha, num_kv_heads):
        """Convert a MultiHeadAttention to GQA by mean-pooling the key and value projections of
        each group of heads (Ainslie et al. 2023); query and output projections are copied.
        Chapter 9."""
        require_instance("mha", mha, MultiHeadAttention, "a MultiHeadAttention")
        check_kv_heads(mha.num_heads, num_kv_heads)
        bias = mha.q_proj.bias is not None
        like = mha.q_proj.weight  # the copy lives where the original does
        gqa = cls._of_checked_sizes(mha.embed_dim, mha.num_heads, num_kv_heads, bias).to(
            like.device, like.dtype
        )
        group, head_dim = mha.num_heads // num_kv_heads, mha.head_dim

        def pool(tensor):  # (H * head_dim, ...) -> (H_kv * head_dim, ...), mean over each group
            grouped = tensor.reshape(num_kv_heads, group, head_dim, *tensor.shape[1:])
            return grouped.mean(dim=1).reshape(num_kv_heads * head_dim, *tensor.shape[1:])

        with torch.no_grad():
            for source, target, pooled in (
                (mha.q_proj, gqa.q_proj, False),
                (mha.k_proj, gqa.k_proj, True),
                (mha.v_proj, gqa.v_proj, True),
                (mha.out_proj, gqa.out_proj, False),
            ):
                target.weight.copy_(pool(source.weight) if pooled else source.weight)
                if bias:
                    target.bias.copy_(pool(source.bias) if pooled else source.bias)
        return gqa


def kv_cache_bytes(*, batch_size, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_element=2):
    """Bytes of a KV cache: 2 (keys and values) * layers * KV heads * head_dim * tokens * batch *
    bytes per element (2 for float16/bfloat16, 4 for float32, 1 for 8-bit). Chapter 9."""
    sizes = {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "num_layers": num_layers,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "bytes_per_element": bytes_per_element,
    }
    for name, value in sizes.items():
        require_int(name, value, 1, message=f"{name} must be a positive integer, got {value!r}")
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
