"""The sizes of a Llama-layout decoder in one object (chapters 11 and 14).

`DecoderConfig` is built and validated once, by `TinyDecoder`'s constructor
or by a model file's reader, and then travels to every layer: a setting lives
in one place (nanoGPT's `Block(config)`). The window and the sinks are the
one setting that can change after construction (`TinyDecoder.windowed`).
"""

import dataclasses

from ._scaling import check_scaling
from ._shapes import (
    check_heads,
    check_kv_heads,
    check_rope_head_dim,
    check_window,
    require_instance,
    require_int,
    require_number,
)


@dataclasses.dataclass
class DecoderConfig:
    """The sizes of a Llama-layout decoder (chapters 11 and 14).

    hidden_dim: the SwiGLU feed-forward's width; rope_base: RoPE's base;
    norm_eps: the RMSNorms' eps; context_length: the longest text it was
    trained on (None: not stated); window, sinks: a sliding window of that
    many keys, keeping the first `sinks` tokens (None, 0: every key);
    renumber: new caches renumber positions inside the cache (StreamingLLM,
    chapter 14's `KVCache(renumber=True)`);
    tie_embeddings: the output projection reuses the embedding matrix;
    rope_scaling: a config's rope_parameters dict (chapter 10's RoPE
    scaling, applied in every layer; "dynamic" takes C from context_length
    when the dict has none), or None. Chapter 11."""

    vocab_size: int
    embed_dim: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    hidden_dim: int
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    context_length: int = None
    window: int = None
    sinks: int = 0
    tie_embeddings: bool = False
    rope_scaling: dict = None
    renumber: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "embed_dim", "num_layers", "hidden_dim"):
            require_int(name, getattr(self, name), 1)
        check_heads(self.embed_dim, self.num_heads)
        check_kv_heads(self.num_heads, self.num_kv_heads)
        check_rope_head_dim(self.head_dim, "the head size embed_dim // num_heads")
        require_number("rope_base (TinyDecoder's base)", self.rope_base, 1, strict=True)
        require_number("norm_eps", self.norm_eps, 0)
        if self.context_length is not None:
            require_int("context_length", self.context_length, 1)
        check_window(self.window, self.sinks)
        require_instance("renumber", self.renumber, bool, "a bool")
        require_instance("tie_embeddings", self.tie_embeddings, bool, "a bool")
        self.rope_scaling = check_scaling(
            self.rope_scaling, self.rope_base, self.context_length, name="rope_scaling"
        )

    @property
    def head_dim(self):
        """d_h = embed_dim / num_heads."""
        return self.embed_dim // self.num_heads

    @classmethod
    def from_gguf(cls, reader):
        """The sizes a GGUF file of a Llama-layout model states (a
        gguf.GGUFReader); its output projection is tied. Chapter 14."""

        def value(key):
            if key not in reader.fields:
                raise KeyError(f"no {key!r} in the GGUF file's metadata")
            return reader.fields[key].contents()

        architecture = value("general.architecture")
        if architecture != "llama":
            raise ValueError(f"a {architecture!r} GGUF file is not laid out like Llama")
        return cls(
            vocab_size=len(value("tokenizer.ggml.tokens")),
            embed_dim=value("llama.embedding_length"),
            num_layers=value("llama.block_count"),
            num_heads=value("llama.attention.head_count"),
            num_kv_heads=value("llama.attention.head_count_kv"),
            hidden_dim=value("llama.feed_forward_length"),
            rope_base=float(value("llama.rope.freq_base")),
            norm_eps=float(value("llama.attention.layer_norm_rms_epsilon")),
            context_length=value("llama.context_length"),
            tie_embeddings=True,
        )
