"""Multi-head, grouped-query and multi-query attention layers, and the KV cache's size
(chapters 8–9). All heads attend with `attention.scaled_dot_product_attention`."""

import torch
from torch import nn

from ._shapes import (
    broadcast_shape,
    require_dtype_of,
    require_float,
    require_instance,
    require_int,
    require_rank,
    require_same_dtype,
    require_tensor,
    shape_of,
)
from .attention import scaled_dot_product_attention


def _check_heads(embed_dim, num_heads):
    require_int("embed_dim", embed_dim)
    require_int("num_heads", num_heads)
    if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
        raise ValueError(f"num_heads={num_heads} must be >= 1 and divide embed_dim={embed_dim}")


def _check_kv_heads(num_heads, num_kv_heads):
    require_int("num_kv_heads", num_kv_heads)
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")


def split_heads(x, num_heads):
    """(batch, seq, num_heads * head_dim) -> (batch, num_heads, seq, head_dim)."""
    require_rank("x", x, 3)
    require_int("num_heads", num_heads, 1)
    if x.shape[-1] % num_heads:
        raise ValueError(f"x {shape_of(x)} does not split into num_heads={num_heads} heads: "
                         "its last dimension must be a multiple of num_heads")
    return _split_heads(x, num_heads)


def _split_heads(x, num_heads):
    batch, seq, width = x.shape
    return x.reshape(batch, seq, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x):
    """(batch, num_heads, seq, head_dim) -> (batch, seq, num_heads * head_dim)."""
    require_rank("x", x, 4)
    return _merge_heads(x)


def _merge_heads(x):
    batch, heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * head_dim)


def _check_sequence(name, x, embed_dim, dtype):
    """x (batch, seq, embed_dim) in the dtype of the layer's weights."""
    require_float(name, x, 3)
    if x.shape[-1] != embed_dim:
        raise ValueError(f"{name} {shape_of(x)} must be (batch, seq, embed_dim={embed_dim})")
    require_dtype_of(name, x, dtype, "the layer's weights")


def _grouped_mask(mask, scores_shape, kv_heads):
    """A mask broadcastable to the scores (batch, H, L, S), laid out for (batch, H_kv, g, L,
    S) (a ValueError names the shapes if it does not broadcast)."""
    if mask is None:
        return None
    require_tensor("attn_mask", mask)
    if broadcast_shape(mask.shape, scores_shape) != tuple(scores_shape):
        raise ValueError(f"attn_mask {shape_of(mask)} does not broadcast to the scores "
                         f"(batch, H, L, S) = {tuple(scores_shape)}")
    if mask.dim() < 3:
        return mask                      # (L, S) or (S,): the same for every head
    group = scores_shape[1] // kv_heads
    mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (b, H or 1, L, S)
    if mask.shape[1] == 1:
        return mask[:, :, None]          # (b, 1, 1, L, S)
    return mask.reshape(mask.shape[0], kv_heads, group, *mask.shape[2:])


def grouped_attention(q, k, v, attn_mask=None, is_causal=False):
    """Attention of query heads q (batch, H, L, d) over KV heads k, v (batch, H_kv, S, d), where
    query head h reads KV head h // (H // H_kv), as PyTorch's enable_gqa. Returns
    (output (batch, H, L, d_v), weights (batch, H, L, S))."""
    _check_grouped(q, k, v)
    return _grouped_attention(q, k, v, attn_mask, is_causal)


def _check_grouped(q, k, v, names=("q", "k", "v")):
    """q, k, v as grouped_attention takes them; `names`: the caller's argument names."""
    q_name, k_name, v_name = names
    for name, tensor in zip(names, (q, k, v)):
        require_float(name, tensor, 4)
    require_same_dtype(q_name, q, k_name, k, v_name, v)
    if (q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or k.shape[1] < 1
            or q.shape[1] % k.shape[1] or q.shape[-1] != k.shape[-1] or q.shape[-1] < 1):
        raise ValueError(f"{q_name} {shape_of(q)}, {k_name} {shape_of(k)} and {v_name} "
                         f"{shape_of(v)} must be (batch, H, L, d), (batch, H_kv, S, d) and "
                         "(batch, H_kv, S, d_v) with H a multiple of H_kv and d >= 1")


def _grouped_attention(q, k, v, attn_mask, is_causal):
    """grouped_attention for q, k, v its caller has checked."""
    batch, heads, length, _ = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    # query heads in groups of H // H_kv beside their shared KV head, read without a copy:
    grouped = q.reshape(batch, kv_heads, group, length, q.shape[-1])
    output, weights = scaled_dot_product_attention(
        grouped, k[:, :, None], v[:, :, None],
        attn_mask=_grouped_mask(attn_mask, (batch, heads, length, k.shape[2]), kv_heads),
        is_causal=is_causal)
    return (output.reshape(batch, heads, length, v.shape[-1]),   # (batch, H, L, d_v)
            weights.reshape(batch, heads, length, k.shape[2]))   # (batch, H, L, S)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017): project, split into heads, attend, concatenate,
    project with W_O.

    forward(query (batch, L, embed_dim), key (batch, S, embed_dim), value (batch, S, embed_dim),
    attn_mask=None, is_causal=False) -> (output (batch, L, embed_dim), weights (batch, num_heads,
    L, S)). attn_mask follows scaled_dot_product_attention (bool True = may attend; float added)
    and broadcasts to (batch, num_heads, L, S). Note: torch.nn.MultiheadAttention's bool masks
    mean the opposite (True = ignore).
    """

    def __init__(self, embed_dim, num_heads, bias=True):
        super().__init__()
        _check_heads(embed_dim, num_heads)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query, key, value, attn_mask=None, is_causal=False):
        dtype = self.q_proj.weight.dtype
        for name, x in (("query", query), ("key", key), ("value", value)):
            _check_sequence(name, x, self.embed_dim, dtype)
        if key.shape[:2] != value.shape[:2] or query.shape[0] != key.shape[0]:
            raise ValueError(f"query {shape_of(query)}, key {shape_of(key)} and value "
                             f"{shape_of(value)} must share the batch, key and value the length")
        q = _split_heads(self.q_proj(query), self.num_heads)  # (batch, H, L, head_dim)
        k = _split_heads(self.k_proj(key), self.num_heads)    # (batch, H, S, head_dim)
        v = _split_heads(self.v_proj(value), self.num_heads)  # (batch, H, S, head_dim)
        heads, weights = _grouped_attention(q, k, v, attn_mask, is_causal)
        return self.out_proj(_merge_heads(heads)), weights

    @classmethod
    def from_torch(cls, module):
        """A copy of a torch.nn.MultiheadAttention(batch_first=True) that gives the same outputs
        (with dropout off: eval mode or dropout=0)."""
        require_instance("module", module, nn.MultiheadAttention,
                         "a torch.nn.MultiheadAttention(batch_first=True)")
        if not module.batch_first:
            raise ValueError("from_torch needs a torch.nn.MultiheadAttention with "
                             "batch_first=True: module has batch_first=False")
        if module.bias_k is not None or module.add_zero_attn or not module._qkv_same_embed_dim:
            raise ValueError("from_torch supports neither add_bias_kv, add_zero_attn nor kdim/vdim "
                             "different from embed_dim, which module has")
        bias = module.in_proj_bias is not None
        like = module.in_proj_weight                   # the copy lives where the original does
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
    """

    def __init__(self, embed_dim, num_heads, num_kv_heads, bias=False):
        super().__init__()
        _check_heads(embed_dim, num_heads)
        _check_kv_heads(num_heads, num_kv_heads)
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * self.head_dim, embed_dim, bias=bias)

    def project_kv(self, x):
        """x (batch, L, embed_dim) -> keys, values (batch, num_kv_heads, L, head_dim): exactly what
        a KV cache stores for this layer."""
        _check_sequence("x", x, self.embed_dim, self.k_proj.weight.dtype)
        return self._project_kv(x)

    def _project_kv(self, x):
        return (_split_heads(self.k_proj(x), self.num_kv_heads),
                _split_heads(self.v_proj(x), self.num_kv_heads))

    def forward(self, x, attn_mask=None, is_causal=False):
        _check_sequence("x", x, self.embed_dim, self.q_proj.weight.dtype)
        q = _split_heads(self.q_proj(x), self.num_heads)  # (batch, H, L, head_dim)
        k, v = self._project_kv(x)                        # (batch, H_kv, L, head_dim) each
        heads, weights = _grouped_attention(q, k, v, attn_mask, is_causal)
        return self.out_proj(_merge_heads(heads)), weights

    @classmethod
    def from_multihead(cls, mha, num_kv_heads):
        """Convert a MultiHeadAttention to GQA by mean-pooling the key and value projections of
        each group of heads (Ainslie et al. 2023); query and output projections are copied."""
        require_instance("mha", mha, MultiHeadAttention, "a MultiHeadAttention")
        _check_kv_heads(mha.num_heads, num_kv_heads)
        bias = mha.q_proj.bias is not None
        like = mha.q_proj.weight                       # the copy lives where the original does
        gqa = cls(mha.embed_dim, mha.num_heads, num_kv_heads, bias=bias).to(like.device, like.dtype)
        group, head_dim = mha.num_heads // num_kv_heads, mha.head_dim

        def pool(tensor):  # (H * head_dim, ...) -> (H_kv * head_dim, ...), mean over each group
            grouped = tensor.reshape(num_kv_heads, group, head_dim, *tensor.shape[1:])
            return grouped.mean(dim=1).reshape(num_kv_heads * head_dim, *tensor.shape[1:])

        with torch.no_grad():
            for source, target, pooled in ((mha.q_proj, gqa.q_proj, False),
                                           (mha.k_proj, gqa.k_proj, True),
                                           (mha.v_proj, gqa.v_proj, True),
                                           (mha.out_proj, gqa.out_proj, False)):
                target.weight.copy_(pool(source.weight) if pooled else source.weight)
                if bias:
                    target.bias.copy_(pool(source.bias) if pooled else source.bias)
        return gqa


def kv_cache_bytes(*, batch_size, seq_len, num_layers, num_kv_heads, head_dim, bytes_per_element=2):
    """Bytes of a KV cache: 2 (keys and values) * layers * KV heads * head_dim * tokens * batch *
    bytes per element (2 for float16/bfloat16, 4 for float32, 1 for 8-bit)."""
    sizes = {"batch_size": batch_size, "seq_len": seq_len, "num_layers": num_layers,
             "num_kv_heads": num_kv_heads, "head_dim": head_dim,
             "bytes_per_element": bytes_per_element}
    for name, value in sizes.items():
        require_int(name, value, 1, message=f"{name} must be a positive integer, got {value!r}")
    return 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size * bytes_per_element
