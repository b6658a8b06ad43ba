"""Decoding with a KV cache (chapter 11).

- `KVCache`: one layer's keys and values, with an optional sliding window
  and attention sinks (StreamingLLM), positions renumbered inside the
  cache if asked (chapter 14);
- `TinyDecoder`: a decoder-only transformer laid out like Llama (pre-norm
  RMSNorm, grouped-query attention with RoPE, SwiGLU), its sizes in one
  `DecoderConfig`; every mask is built from absolute positions, so a chunk
  of new queries against cached keys, a window and sinks follow one rule.
"""

import contextlib

import torch
from torch import nn

from . import _kernels
from ._scaling import check_scaling, rotate
from ._shapes import (
    TOKEN_ID_DTYPES,
    check_sequence,
    check_window,
    is_integer,
    require_float,
    require_instance,
    require_int,
    require_integer,
    require_number,
    shape_of,
    type_name,
)
from .config import DecoderConfig
from .multihead import GroupedQueryAttention


@contextlib.contextmanager
def _overridden(config, **fields):
    """Within the block, config's fields (read by every layer) take the given
    values; the old ones come back after, whatever happens."""
    saved = {name: getattr(config, name) for name in fields}
    try:
        for name, value in fields.items():
            setattr(config, name, value)
        yield config
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


class KVCache:
    """One layer's key-value cache.

    update(key, value) appends key and value (batch, kv_heads, t, head_dim) and
    returns all keys and values to attend to, (batch, kv_heads, held + t,
    head_dim). With window=W the cache then keeps the last W tokens (and, with
    sinks=k, also the first k tokens, as StreamingLLM's attention sinks).
    `key_positions` gives the positions (S,) of the keys the last update
    returned, `seen` the number of tokens appended so far (the position of the
    next token), `nbytes` the bytes held.

    renumber=True is StreamingLLM's rule for positions (chapter 14): a
    decoder's layer then caches its keys before RoPE and, at each update,
    rotates the queries and every key by their position inside the cache
    rather than in the text: the sinks 0, ..., k - 1, then the keys that
    the update's first query can see, k, k + 1, ..., the new tokens last
    (`renumbered`). One token at a time, the query and its n visible keys
    sit at 0, ..., n - 1, so no position exceeds window + sinks - 1 however
    long the stream; until a token leaves the window nothing changes.
    Chapter 11.
    """

    def __init__(self, window=None, sinks=0, renumber=False):
        check_window(window, sinks)
        require_instance("renumber", renumber, bool, "a bool")
        self._start(window, sinks, renumber)

    @classmethod
    def _of_checked_window(cls, window, sinks, renumber=False):
        """An empty cache for a window and sinks its decoder has checked."""
        cache = cls.__new__(cls)
        cache._start(window, sinks, renumber)
        return cache

    def _start(self, window, sinks, renumber):
        self.window, self.sinks, self.renumber = window, sinks, renumber
        # the first text position after the sinks that the last update's
        # first query could see: it sits at position `sinks` in the cache
        self._first_seen = sinks
        self.keys = self.values = None
        # positions (held,) of the tokens held
        self.positions = torch.zeros(0, dtype=torch.long)
        self.key_positions = self.positions
        self.seen = 0

    def __len__(self):
        return 0 if self.keys is None else self.keys.shape[2]

    @property
    def nbytes(self):
        if self.keys is None:
            return 0
        return (self.keys.numel() + self.values.numel()) * self.keys.element_size()

    def _check(self, key, value):
        for name, tensor in (("key", key), ("value", value)):
            require_float(name, tensor, 4)
        if key.shape != value.shape or key.dtype != value.dtype or key.device != value.device:
            raise ValueError(
                f"key {shape_of(key)} ({key.dtype}, {key.device}) and value "
                f"{shape_of(value)} ({value.dtype}, {value.device}) must both "
                "be (batch, kv_heads, t, head_dim), of one dtype and device"
            )
        if self.keys is not None:
            held = self.keys
            if (
                key.shape[:2] != held.shape[:2]
                or key.shape[3] != held.shape[3]
                or key.dtype != held.dtype
                or key.device != held.device
            ):
                raise ValueError(
                    f"key {shape_of(key)} ({key.dtype}, {key.device}) does "
                    f"not match the cache {shape_of(held)} ({held.dtype}, "
                    f"{held.device}): batch, kv_heads, "
                    "head_dim, dtype and device must stay the same"
                )

    def _check_holds(self, batch, kv_heads, head_dim, dtype, device):
        """Raise ValueError unless what the cache holds fits a layer's keys of
        this batch, kv_heads, head_dim, dtype and device."""
        held = self.keys
        if held is not None and (
            held.shape[0] != batch
            or held.shape[1] != kv_heads
            or held.shape[3] != head_dim
            or held.dtype != dtype
            or held.device != device
        ):
            raise ValueError(
                f"the cache holds keys {shape_of(held)} ({held.dtype}, {held.device}); this "
                f"step's are (batch={batch}, kv_heads={kv_heads}, t, head_dim={head_dim}) "
                f"({dtype}, {device}): batch, kv_heads, head_dim, dtype and device must stay "
                "the same"
            )

    def update(self, key, value):
        """Append key, value (batch, kv_heads, t, head_dim); return all keys and
        values to attend to (batch, kv_heads, held + t, head_dim). Chapter 11."""
        self._check(key, value)
        return self._append(key, value)

    def _append(self, key, value):
        """update for keys and values the caller's layer made (and so trusts)."""
        new = torch.arange(self.seen, self.seen + key.shape[2])
        if self.renumber and self.window is not None:
            self._first_seen = max(self.sinks, self.seen - self.window + 1)
        if self.keys is None:
            keys, values, positions = key, value, new
        else:
            keys = torch.cat([self.keys, key], dim=2)
            values = torch.cat([self.values, value], dim=2)
            positions = torch.cat([self.positions, new])
        self.seen += key.shape[2]
        self.key_positions = positions
        self.keys, self.values, self.positions = keys, values, positions
        if self.window is not None:
            keep = (positions >= self.seen - self.window) | (positions < self.sinks)
            if not keep.all():  # drop what fell out of the window
                self.keys = keys[:, :, keep.to(keys.device)]
                self.values = values[:, :, keep.to(values.device)]
                self.positions = positions[keep]
        return keys, values

    def renumbered(self, positions):
        """Positions in the text (an integer tensor) -> their positions inside
        the cache at the last update: a sink keeps its own; a later token
        moves down so that the first one the update's first query could see
        sits just after the sinks (keys nobody could see come out below it,
        masked anyway). Without renumber, or before anything left the
        window, the positions themselves. Chapter 14."""
        require_integer("positions", positions, 1)
        return self._renumbered(positions)

    def _renumbered(self, positions):
        shift = self._first_seen - self.sinks
        return (
            positions
            if shift == 0
            else torch.where(positions < self.sinks, positions, positions - shift)
        )


class DecoderBlock(nn.Module):
    """Pre-norm block: x + attention(RMSNorm(x)), then + SwiGLU(RMSNorm(x)).

    DecoderBlock(config), a DecoderConfig; forward(x (batch, L, embed_dim),
    positions (L,), cache=None) -> (batch, L, embed_dim); with a cache the
    queries attend to the cached keys as well. Chapter 11."""

    def __init__(self, config):
        super().__init__()
        require_instance("config", config, DecoderConfig, "a DecoderConfig")
        self._build(config)

    @classmethod
    def _of_checked_config(cls, config):
        """The block for a config its decoder has checked."""
        return _kernels.built(cls, config)

    def _build(self, config):
        self.config = config  # shared with the decoder: one window for all
        self.attention_norm = nn.RMSNorm(config.embed_dim, eps=config.norm_eps)
        self.attention = GroupedQueryAttention._of_checked_sizes(
            config.embed_dim, config.num_heads, config.num_kv_heads
        )
        self.mlp_norm = nn.RMSNorm(config.embed_dim, eps=config.norm_eps)
        self.gate_proj = nn.Linear(config.embed_dim, config.hidden_dim, bias=False)
        self.up_proj = nn.Linear(config.embed_dim, config.hidden_dim, bias=False)
        self.down_proj = nn.Linear(config.hidden_dim, config.embed_dim, bias=False)

    @property
    def base(self):
        """RoPE's base, read from the config."""
        return self.config.rope_base

    @property
    def window(self):
        return self.config.window

    @property
    def sinks(self):
        return self.config.sinks

    def attend(self, x, positions, cache=None):
        """RoPE attention of x (batch, L, embed_dim) at positions (L,) ->
        (output (batch, L, embed_dim), weights (batch, H, L, S)). Chapter 11."""
        return self._attend(x, self._check(x, positions, cache), cache)

    def _attend(self, x, positions, cache):
        layer = self.attention
        # project: q (batch, H, L, d_h); k, v (batch, H_kv, L, d_h)
        q = _kernels.split_heads(layer.q_proj(x), layer.num_heads)
        k = _kernels.split_heads(layer.k_proj(x), layer.num_kv_heads)
        v = _kernels.split_heads(layer.v_proj(x), layer.num_kv_heads)
        if cache is not None and cache.renumber:
            # StreamingLLM: cache the keys unrotated; rotate the queries and
            # all keys by their positions inside the cache (chapter 14)
            k, v = cache._append(k, v)
            key_positions = cache.key_positions
            q = self._rotated(q, cache._renumbered(positions))
            k = self._rotated(k, cache._renumbered(key_positions).to(x.device))
        else:
            # rotate queries and keys in one call (keys once, then cached),
            # with the config's RoPE scaling if it has one (chapter 10)
            rotated = self._rotated(torch.cat([q, k], dim=1), positions)
            q, k = rotated.split([q.shape[1], k.shape[1]], dim=1)
            # append to the cache: keys and values (batch, H_kv, S, d_h)
            key_positions = positions
            if cache is not None:
                k, v = cache._append(k, v)
                key_positions = cache.key_positions
        # causal (and windowed) mask from absolute positions, then attention
        mask = _kernels.allowed_by_position(positions, key_positions, self.window, self.sinks)
        heads, weights = _kernels.grouped_attention(q, k, v, mask.to(x.device))
        return layer.out_proj(_kernels.merge_heads(heads)), weights

    def _rotated(self, x, positions):
        """RoPE at positions, with the config's base and scaling."""
        return rotate(x, positions, self.base, self.config.rope_scaling)

    def forward_with_weights(self, x, positions, cache=None):
        """(the block's output (batch, L, embed_dim), its attention weights
        (batch, H, L, S)). Chapter 11."""
        return self._forward(x, self._check(x, positions, cache), cache)

    def _forward(self, x, positions, cache):
        # attention sublayer: x + attention(RMSNorm(x))
        attended, weights = self._attend(self.attention_norm(x), positions, cache)
        return self._feed_forward(x + attended), weights

    def _feed_forward(self, x):
        """The feed-forward sublayer: x + W_down (silu(W_gate h) * W_up h), h =
        RMSNorm(x) (shared with chapter 19's paged forward pass)."""
        h = self.mlp_norm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))

    def forward(self, x, positions, cache=None):
        """The forward pass of the class docstring. Chapter 11."""
        return self.forward_with_weights(x, positions, cache)[0]

    def _check(self, x, positions, cache):
        """Check the arguments of attend/forward -> positions on x's device."""
        check_sequence("x", x, self.config.embed_dim, self.attention.q_proj.weight.dtype)
        require_integer("positions", positions, 1)
        if positions.shape[0] != x.shape[1]:
            raise ValueError(
                f"positions {shape_of(positions)} must hold one position per "
                f"token of x {shape_of(x)}"
            )
        if cache is not None:
            require_instance("cache", cache, KVCache, "a KVCache or None")
            cache._check_holds(
                x.shape[0], self.attention.num_kv_heads, self.attention.head_dim, x.dtype, x.device
            )
        return positions.to(x.device)


class TinyDecoder(nn.Module):
    """A decoder-only transformer (RoPE, GQA, pre-norm RMSNorm, SwiGLU, causal).

    forward(ids (batch, seq), caches=None) -> logits (batch, seq, vocab_size).
    With caches (one KVCache per layer, from new_caches()) the ids continue the
    tokens already cached, at positions cache.seen onwards. With
    logits_to_keep=k (as in transformers), only the last k positions' logits
    (batch, k, vocab_size): the output projection, a fifth of a small model's
    work, is spent on no other position (0: every position). generate(ids,
    max_new_tokens, use_cache=True) appends greedy tokens -> (batch, seq +
    max_new_tokens); with and without the cache the tokens are identical
    (unless positions are renumbered inside a window: see generate).

    Keyword-only sizes of a real model (defaults: chapter 11's): hidden_dim of
    the SwiGLU feed-forward (4 * embed_dim), the RoPE base, the RMSNorms' eps,
    tie_embeddings (the output projection reuses the embedding matrix), and
    scaling, a RoPE scaling dict as a config's rope_parameters (chapter 10).
    They are checked and kept in one DecoderConfig, `model.config`, which
    every layer reads. Chapter 11.
    """

    def __init__(
        self,
        vocab_size,
        embed_dim,
        num_heads,
        num_kv_heads,
        num_layers,
        window=None,
        *,
        hidden_dim=None,
        sinks=0,
        base=10000.0,
        norm_eps=1e-6,
        tie_embeddings=False,
        scaling=None,
    ):
        super().__init__()
        if hidden_dim is None and is_integer(embed_dim):
            hidden_dim = 4 * embed_dim
        check_scaling(scaling, name="scaling", frequencies=False)  # named as here
        self.config = DecoderConfig(
            vocab_size,
            embed_dim,
            num_layers,
            num_heads,
            num_kv_heads,
            hidden_dim,
            rope_base=base,
            norm_eps=norm_eps,
            window=window,
            sinks=sinks,
            tie_embeddings=tie_embeddings,
            rope_scaling=scaling,
        )
        self._build(self.config)

    @classmethod
    def from_config(cls, config):
        """A decoder of the sizes a DecoderConfig holds (it is kept, not
        copied: the model and its layers read it). Chapter 14."""
        require_instance("config", config, DecoderConfig, "a DecoderConfig")
        model = cls.__new__(cls)
        nn.Module.__init__(model)
        model.config = config
        model._build(config)
        return model

    def _build(self, config):
        shape = (config.vocab_size, config.embed_dim)
        if torch.empty(0).device.type == "meta":
            # built to be filled (load_smollm2): an Embedding given its weight
            # skips the normal_ draw, which on "meta" loads PyTorch's Python
            # meta kernels (about 3 s, once per process)
            self.embed = nn.Embedding(*shape, _weight=torch.empty(shape))
        else:
            self.embed = nn.Embedding(*shape)
        self.blocks = nn.ModuleList(
            DecoderBlock._of_checked_config(config) for _ in range(config.num_layers)
        )
        self.norm = nn.RMSNorm(config.embed_dim, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.embed_dim, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight  # one matrix, two uses

    @property
    def vocab_size(self):
        return self.config.vocab_size

    @property
    def window(self):
        return self.config.window

    @property
    def sinks(self):
        return self.config.sinks

    def new_caches(self):
        """One empty KVCache per layer, with the model's window and sinks. Chapter 11."""
        config = self.config
        return [
            KVCache._of_checked_window(config.window, config.sinks, config.renumber)
            for _ in self.blocks
        ]

    def prefix_caches(self, caches, length):
        """New caches, as new_caches() makes them (the model's window and sinks), holding the
        keys and values of the first `length` tokens that `caches` hold: what they would hold
        after reading those tokens themselves, without a pass over them. Every query among
        the first window + sinks tokens reads all the keys before it: `caches` must still
        hold tokens 0 to length - 1, the model's window must take them whole (length <=
        window + sinks), and both must place keys alike (the same renumber). Chapter 14."""
        self._check_prefix(caches, length)
        fresh = self.new_caches()
        for cache, source in zip(fresh, caches):
            # positions 0 .. length - 1, appended as the layer would append them
            cache._append(source.keys[:, :, :length], source.values[:, :, :length])
        return fresh

    def _check_prefix(self, caches, length):
        """caches: one KVCache per layer, each holding its first `length` tokens."""
        if not isinstance(caches, (list, tuple)) or not all(
            isinstance(cache, KVCache) for cache in caches
        ):
            raise TypeError(
                "caches must be a list of KVCache, one per layer (from new_caches()), "
                f"got {type_name(caches)}"
            )
        if len(caches) != len(self.blocks):
            raise ValueError(f"{len(caches)} caches for {len(self.blocks)} layers")
        require_int("length", length, 1)
        config = self.config
        if config.window is not None and length > config.window + config.sinks:
            raise ValueError(
                f"length={length} is more than the model's window + sinks = "
                f"{config.window} + {config.sinks}: its caches would not hold those tokens whole"
            )
        first = torch.arange(length)
        for cache in caches:
            if cache.renumber != config.renumber:
                raise ValueError(
                    f"caches renumber={cache.renumber} but the model's new caches "
                    f"renumber={config.renumber}: their keys are rotated differently"
                )
            if cache.positions.shape[0] < length or not torch.equal(
                cache.positions[:length], first
            ):
                raise ValueError(
                    f"caches must hold their first length={length} tokens, positions 0 to "
                    f"{length - 1}; one holds {cache.positions.shape[0]} starting "
                    f"{cache.positions[:3].tolist()}"
                )

    @contextlib.contextmanager
    def windowed(self, window, sinks=0, renumber=False):
        """Within the block, the model reads through a sliding window of
        `window` tokens and keeps the first `sinks` (masks and new caches
        alike), as if built with them; its own settings come back after.
        renumber=True: new caches renumber positions inside the cache
        (StreamingLLM, `KVCache`; chapter 14); a pass without caches reads
        its tokens at their own positions, as a fresh cache would. Chapter 11."""
        check_window(window, sinks)
        require_instance("renumber", renumber, bool, "a bool")
        with _overridden(self.config, window=window, sinks=sinks, renumber=renumber):
            yield self

    @contextlib.contextmanager
    def rope_scaled(self, scaling=None, base=None):
        """Within the block, every layer rotates its queries and keys with
        the RoPE scaling `scaling` (a config's rope_parameters dict, or None
        for none; "dynamic" takes C from config.context_length when the dict
        has none) and the base `base` (None: the model's own; a larger one is
        the NTK-aware base change), as if built with them; its own settings
        come back after. Chapter 10."""
        config = self.config
        if base is not None:
            require_number("base", base, 1, strict=True)
        new_base = config.rope_base if base is None else float(base)
        checked = check_scaling(scaling, new_base, config.context_length, name="scaling")
        with _overridden(config, rope_scaling=checked, rope_base=new_base):
            yield self

    def _check_ids(self, ids):
        require_integer("ids", ids, 2, what="integer token ids")
        if ids.dtype not in TOKEN_ID_DTYPES:
            raise ValueError(
                f"ids {shape_of(ids)} must hold integer token ids (int64 or "
                f"int32, what an embedding reads), got {ids.dtype}"
            )
        if ids.shape[1] < 1:
            raise ValueError(f"ids {shape_of(ids)} must be (batch, seq) with seq >= 1")
        if ((ids < 0) | (ids >= self.vocab_size)).any():
            raise ValueError(
                f"ids {shape_of(ids)} must lie in [0, vocab_size="
                f"{self.vocab_size}), got {ids.min().item()} to "
                f"{ids.max().item()}"
            )

    def forward(self, ids, caches=None, logits_to_keep=0):
        """The forward pass of the class docstring. Chapter 11."""
        self._check_ids(ids)
        if caches is not None:
            self._check_caches(caches, ids)
        require_int("logits_to_keep", logits_to_keep, 0)
        return self._logits(ids, caches, logits_to_keep)

    def _logits(self, ids, caches, logits_to_keep=0):
        """forward for checked ids, caches and logits_to_keep."""
        start = 0 if caches is None else caches[0].seen
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.embed(ids)  # (batch, seq, embed_dim)
        for block, cache in zip(self.blocks, caches or [None] * len(self.blocks)):
            x, _ = block._forward(x, positions, cache)
        x = x[:, -logits_to_keep:]  # -0: every position
        return self.lm_head(self.norm(x))  # (batch, seq or k, vocab_size)

    def _check_caches(self, caches, ids):
        """caches: one KVCache per layer, all at the same position, holding
        keys of ids' batch in the model's dtype."""
        if not isinstance(caches, (list, tuple)) or not all(
            isinstance(cache, KVCache) for cache in caches
        ):
            got = (
                [type_name(c) for c in caches]
                if isinstance(caches, (list, tuple))
                else type_name(caches)
            )
            raise TypeError(
                f"caches must be a list of KVCache, one per layer (from new_caches()), got {got}"
            )
        if len(caches) != len(self.blocks):
            raise ValueError(f"{len(caches)} caches for {len(self.blocks)} layers")
        seen = {cache.seen for cache in caches}
        if len(seen) > 1:
            raise ValueError(
                f"caches hold different numbers of tokens {sorted(seen)}: "
                "every layer's cache must have seen the same tokens"
            )
        attention = self.blocks[0].attention
        caches[0]._check_holds(
            ids.shape[0],
            attention.num_kv_heads,
            attention.head_dim,
            attention.q_proj.weight.dtype,
            ids.device,
        )

    @torch.no_grad()
    def forward_with_weights(self, ids):
        """One pass over ids (batch, seq) without a cache: (logits (batch, seq,
        vocab_size), every layer's attention weights, a list of (batch, H,
        seq, seq)). Chapter 11."""
        self._check_ids(ids)
        positions = torch.arange(ids.shape[1], device=ids.device)
        x, weights = self.embed(ids), []
        for block in self.blocks:
            x, layer_weights = block._forward(x, positions, None)
            weights.append(layer_weights)
        return self.lm_head(self.norm(x)), weights

    @torch.inference_mode()
    def generate(self, ids, max_new_tokens, use_cache=True, stop_id=None):
        """Greedy decoding: ids (batch, seq) -> (batch, seq + max_new_tokens).
        With the cache: one prefill pass over the prompt, then one token per
        step; without it every step re-reads the whole sequence. With stop_id
        (an end-of-text token), decoding stops once every row has produced it
        (rows that stopped earlier repeat it), so the result may be shorter.
        Under windowed(..., renumber=True) the two differ once tokens leave the
        window: a pass without the cache reads the text's own positions. Chapter 11."""
        self._check_ids(ids)
        require_int("max_new_tokens", max_new_tokens, 0)
        if stop_id is not None:
            require_int("stop_id", stop_id, 0)
            if stop_id >= self.vocab_size:
                raise ValueError(
                    f"stop_id={stop_id} must lie in [0, vocab_size="
                    f"{self.vocab_size}): the model never produces it"
                )
        caches = self.new_caches() if use_cache else None
        tokens, new = ids, ids  # new: what the model reads next
        stopped = torch.zeros(len(ids), 1, dtype=torch.bool, device=ids.device)
        for _ in range(max_new_tokens):
            logits = self._logits(new, caches) if use_cache else self._logits(tokens, None)
            next_token = logits[:, -1].argmax(-1, keepdim=True)  # (batch, 1)
            if stop_id is not None:
                next_token = next_token.masked_fill(stopped, stop_id)
                stopped |= next_token == stop_id
            tokens = torch.cat([tokens, next_token], dim=1)
            new = next_token
            if stop_id is not None and len(ids) and stopped.all():
                break
        return tokens
