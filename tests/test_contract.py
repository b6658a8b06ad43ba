"""The package's contract for bad input, walked over every public name.

Every public callable of attention_course and of its public submodules (functions, classes and
their public methods) must appear in REGISTRY, with a valid example call and the kind of each of
its parameters, or in EXEMPT with the reason. A callable added later without an entry fails
test_every_public_callable_is_registered; a parameter without a kind (or a stated reason to
leave it unchecked) fails test_every_parameter_has_a_kind. For each parameter, every bad value
in its kind's table must raise the table's exception (TypeError for the wrong kind of object,
ValueError for a wrong value) with a message that names the parameter.

The tables are built from kinds of argument, not from known bugs: a tensor of floats, of token
ids, of lengths; a count; a positive number; a module of some class; and so on. The package's
docstring states the contract; its NaN policy is tested at the end of this file.
"""

import dataclasses
import importlib
import inspect
import math
import pathlib
import pkgutil
import re
import sys

import matplotlib.pyplot as plt
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attention_course as ac
from attention_course import (
    attention,
    config,
    costs,
    data,
    decoding,
    deltanet,
    diagrams,
    flow_diagrams,
    head_diagrams,
    latent,
    linear,
    masking,
    measure,
    multihead,
    paging,
    plotting,
    pooling,
    positions,
    rotary,
    scoring,
    serving,
    sinks,
    sparse,
    tiled,
    triton_flash,
    widgets,
)
from attention_course.pretrained import circuits, heads, minilm, smollm2
from helpers.qwen3_next import small_qwen3_next_config

# ----------------------------------------------------------------------------- kinds of argument


@dataclasses.dataclass(frozen=True)
class Bad:
    """A bad value for a kind of argument: make(valid value) -> the bad value, and the error."""

    label: str
    make: object
    error: type


def constant(value):
    return lambda valid: value


def other_float(tensor):
    return tensor.to(torch.float32 if tensor.dtype == torch.float64 else torch.float64)


def zero_dim(tensor):
    return torch.tensor(1, dtype=tensor.dtype)


def optional(bad_values):
    """The same kind, where None is a valid value."""
    return [bad for bad in bad_values if bad.label != "None"]


NOT_A_TENSOR = [
    Bad("a list", lambda v: v.tolist(), TypeError),
    Bad("None", constant(None), TypeError),
    Bad("a string", constant("tensor"), TypeError),
]
TENSOR = NOT_A_TENSOR + [Bad("0-dim", zero_dim, ValueError)]
ANY_FLOAT = NOT_A_TENSOR + [
    Bad("int64", lambda v: v.long(), ValueError),
    Bad("bool", lambda v: v.bool(), ValueError),
    Bad("complex", lambda v: v.to(torch.complex64), ValueError),
]
FLOAT = ANY_FLOAT + [Bad("0-dim", zero_dim, ValueError)]
# floats that must share a dtype with the call's other tensors, or with a layer's weights
MATCHED = FLOAT + [Bad("another float dtype", other_float, ValueError)]
INTEGERS = TENSOR + [
    Bad("float", lambda v: v.float(), ValueError),
    Bad("bool", lambda v: v.bool(), ValueError),
]
IDS = INTEGERS + [
    Bad("uint8", lambda v: v.to(torch.uint8), ValueError),
    Bad("too large", lambda v: v + 10**6, ValueError),
    Bad("negative", lambda v: v - 10**6, ValueError),
]
LENGTHS = TENSOR + [
    Bad("bool", lambda v: v.bool(), ValueError),
    Bad("fractional", lambda v: v.double() + 0.5, ValueError),
    Bad("too large", lambda v: v + 10**6, ValueError),
    Bad("negative", lambda v: v - 10**6, ValueError),
]
WRONG_SHAPE = Bad("wrong shape", lambda v: torch.ones(7, 9, dtype=torch.bool), ValueError)
# a bool mask that broadcasts (a 0-dim mask does), or one of a fixed rank
ALLOWED = NOT_A_TENSOR + [Bad("float", lambda v: v.float(), ValueError), WRONG_SHAPE]
BOOL_MASK = ALLOWED + [Bad("0-dim", zero_dim, ValueError)]
ATTN_MASK = optional(NOT_A_TENSOR) + [
    Bad("int64", lambda v: torch.ones(v.shape, dtype=torch.long), ValueError),
    WRONG_SHAPE,
]
COUNT = [
    Bad("a string", constant("2"), TypeError),
    Bad("a float", constant(2.5), TypeError),
    Bad("a bool", constant(True), TypeError),
    Bad("None", constant(None), TypeError),
    Bad("zero", constant(0), ValueError),
    Bad("negative", constant(-1), ValueError),
]
COUNT_OR_ZERO = [bad for bad in COUNT if bad.label != "zero"]
# a position on a figure's slider: 0 ... (number of positions - 1)
INDEX = COUNT_OR_ZERO + [Bad("past the end", constant(10**6), ValueError)]
DIM = [
    Bad("a string", constant("-1"), TypeError),
    Bad("a float", constant(1.0), TypeError),
    Bad("out of range", constant(7), ValueError),
]
TOKEN = optional(COUNT_OR_ZERO) + [Bad("past the vocabulary", constant(10**6), ValueError)]
SEED = [Bad("a string", constant("0"), TypeError), Bad("a float", constant(0.5), TypeError)]
NUMBER = [
    Bad("a string", constant("1"), TypeError),
    Bad("None", constant(None), TypeError),
    Bad("NaN", constant(math.nan), ValueError),
    Bad("inf", constant(math.inf), ValueError),
]
POSITIVE = [
    Bad("a string", constant("1"), TypeError),
    Bad("None", constant(None), TypeError),
    Bad("zero", constant(0.0), ValueError),
    Bad("negative", constant(-1.0), ValueError),
    Bad("NaN", constant(math.nan), ValueError),
]
NON_NEGATIVE = [
    Bad("a string", constant("1"), TypeError),
    Bad("negative", constant(-1.0), ValueError),
    Bad("NaN", constant(math.nan), ValueError),
]
BASE = [
    Bad("a string", constant("10000"), TypeError),
    Bad("one", constant(1.0), ValueError),
    Bad("below one", constant(0.5), ValueError),
    Bad("NaN", constant(math.nan), ValueError),
]
PROBABILITY = [
    Bad("a string", constant("0.1"), TypeError),
    Bad("negative", constant(-0.1), ValueError),
    Bad("above one", constant(1.5), ValueError),
]
FRACTION = [
    Bad("a string", constant("0.5"), TypeError),
    Bad("NaN", constant(math.nan), ValueError),
    Bad("above one", constant(1.5), ValueError),
]
NAME = [
    Bad("unknown", constant("no such name"), ValueError),
    Bad("not a str", constant(3), TypeError),
]
TEXT = [Bad("a number", constant(3), TypeError), Bad("None", constant(None), TypeError)]
SENTENCES = [
    Bad("one string", constant("a sentence"), ValueError),
    Bad("empty", constant([]), ValueError),
    Bad("numbers", constant([1, 2]), TypeError),
]
FLOAT_DTYPE = [
    Bad("a string", constant("float32"), TypeError),
    Bad("an integer dtype", constant(torch.int64), ValueError),
]
INSTANCE = [
    Bad("another object", constant(object()), TypeError),
    Bad("a module of another class", lambda v: nn.Linear(8, 8), TypeError),
    Bad("None", constant(None), TypeError),
]
CALLABLE = [Bad("a number", constant(3), TypeError)]
MAPPING = [Bad("a list", constant([]), TypeError)]
FLAG = [Bad("a string", constant("yes"), TypeError), Bad("None", constant(None), TypeError)]
TOKENS = [
    Bad("one string", constant("3 1"), TypeError),
    Bad("empty", constant([]), ValueError),
    Bad("numbers", constant([3, 1]), TypeError),
    Bad("None", constant(None), TypeError),
]
CACHES = [
    Bad("a list of None", lambda v: [None] * len(v), TypeError),
    Bad("one cache", lambda v: v[0], TypeError),
    Bad("too few", lambda v: v[:1], ValueError),
]
TENSOR_LIST = [
    Bad("a number", constant(3), TypeError),
    Bad("empty", constant([]), TypeError),
    Bad("ints", lambda v: [t.long() for t in v], ValueError),
    Bad("wrong rank", lambda v: [t[0] for t in v], ValueError),
]
HEAD_PAIRS = [
    Bad("a number", constant(3), TypeError),
    Bad("not pairs", constant([(0,)]), TypeError),
    Bad("float indices", constant([(0.5, 0)]), TypeError),
    Bad("out of range", constant([(99, 0)]), ValueError),
]
LENGTH_LIST = [
    Bad("a number", constant(12), TypeError),
    Bad("strings", constant(["12"]), TypeError),
    Bad("zero", constant([0]), ValueError),
]
BANDWIDTHS = [
    Bad("a string", constant("0.5"), TypeError),
    Bad("empty", constant([]), ValueError),
    Bad("zero", constant([0.0, 1.0]), ValueError),
    Bad("negative", constant([-1.0]), ValueError),
]
ARRAY = [
    Bad("a string", constant("weights"), TypeError),
    Bad("an object", constant(object()), TypeError),
]
CURVES = [
    Bad("a list", constant([1.0]), TypeError),
    Bad("a curve of strings", lambda v: {"a": "curve"}, TypeError),
]
TOKENIZER = [Bad("an object", constant(object()), TypeError)]
# a RoPE scaling dict, as a config's rope_parameters
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
SCALING = [
    Bad("a list", constant([]), TypeError),
    Bad("None", constant(None), TypeError),
    Bad("unknown rope_type", constant({"rope_type": "longrope"}), ValueError),
    Bad("a key missing", constant({"rope_type": "linear"}), ValueError),
    Bad("an unknown key", lambda v: {**v, "partial_rotary_factor": 0.5}, ValueError),
    Bad("factor below one", lambda v: {**v, "factor": 0.5}, ValueError),
    Bad("factor a string", lambda v: {**v, "factor": "4"}, TypeError),
    Bad("factor NaN", lambda v: {**v, "factor": math.nan}, ValueError),
    Bad("length a float", lambda v: {**v, "original_max_position_embeddings": 16.0}, TypeError),
    Bad("bounds in the wrong order", lambda v: {**v, "beta_fast": 1, "beta_slow": 32}, ValueError),
    Bad("truncate not a bool", lambda v: {**v, "truncate": "no"}, TypeError),
    # YaRN's factor is a ratio of 0.1 * m * ln(factor) + 1 terms: m = -10, factor = e
    # zeroes the denominator
    Bad(
        "mscale_all_dim zeroing a denominator",
        lambda v: {**v, "factor": math.e, "mscale": 1.0, "mscale_all_dim": -10.0},
        ValueError,
    ),
]

# Parameters the package passes on unchecked, wherever they appear.
UNCHECKED = {
    "is_causal": "a flag: any truth value, as PyTorch's is_causal",
    "use_cache": "a flag: any truth value",
    "per_key": "a flag: any truth value",
    "leave_one_out": "a flag: any truth value",
    "bias": "a flag: any truth value, as nn.Linear's bias",
    "tie_embeddings": "a flag: any truth value",
    "peak": "a flag: any truth value",
    "skip_masked_tiles": "a flag: any truth value",
    "device": "passed to torch, whose error names the device",
}
PLOT_OPTIONS = {
    name: "drawing options passed to matplotlib, which checks them"
    for name in (
        "xlabel",
        "ylabel",
        "titles",
        "extent",
        "cmap",
        "panel_size",
        "vmax",
        "ax",
        "title",
        "data_label",
        "key_labels",
        "value_labels",
        "query_label",
        "first",
    )
}

# ------------------------------------------------------------------------------- the registry


@dataclasses.dataclass
class Case:
    """build() -> (callable, valid arguments by name); kinds: parameter -> bad values;
    unchecked: parameter -> why it is passed on unchecked; run_valid: False where the valid
    call is too slow for this test (another test file runs it)."""

    build: object
    kinds: dict
    unchecked: dict = dataclasses.field(default_factory=dict)
    run_valid: bool = True


def randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def tiny_decoder(**options):
    torch.manual_seed(0)
    return decoding.TinyDecoder(20, 8, 2, 1, 2, hidden_dim=16, **options)


def prefix_caches_call():
    """A tiny decoder's prefix_caches, and its arguments: caches after 3 tokens, length 2."""
    model = tiny_decoder()
    caches = model.new_caches()
    model(torch.tensor([[1, 2, 3]]), caches)
    return model.prefix_caches, dict(caches=caches, length=2)


def tiny_block():
    torch.manual_seed(0)
    return decoding.DecoderBlock(config.DecoderConfig(20, 8, 1, 2, 1, 16, window=4, sinks=1))


def tiny_latent_attention():
    torch.manual_seed(0)
    return latent.MultiHeadLatentAttention(
        16, 2, kv_rank=4, q_rank=6, head_dim=4, rope_dim=2, value_dim=3
    )


def tiny_deltanet():
    torch.manual_seed(0)
    return deltanet.GatedDeltaNet(16, 2, 4, 3, num_value_heads=4, conv_size=3)


def qwen3_next_deltanet():
    """transformers' Qwen3NextGatedDeltaNet on a small config (2 key heads, 4 value heads)."""
    import transformers

    config = small_qwen3_next_config(16, key_heads=2, value_heads=4, d_k=4, d_v=3, conv=3)
    return transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextGatedDeltaNet(config, 0)


def deepseek_state_dict():
    """A DeepseekV3Attention state dict under transformers' names, made by hand: 2 heads,
    kv_lora_rank 4, q_lora_rank 6, qk_nope_head_dim 4, qk_rope_head_dim 2, v_head_dim 3."""
    shapes = {
        "q_a_proj.weight": (6, 16),
        "q_a_layernorm.weight": (6,),
        "q_b_proj.weight": (2 * 6, 6),
        "kv_a_proj_with_mqa.weight": (4 + 2, 16),
        "kv_a_layernorm.weight": (4,),
        "kv_b_proj.weight": (2 * 7, 4),
        "o_proj.weight": (16, 2 * 3),
    }
    return {name: randn(*shape) for name, shape in shapes.items()}


def tiny_indexer():
    torch.manual_seed(0)
    return sparse.LightningIndexer(16, 6, num_heads=2, head_dim=4, rope_dim=2)


def tiny_sparse_attention():
    torch.manual_seed(0)
    return sparse.DeepSeekSparseAttention(
        16,
        2,
        kv_rank=4,
        q_rank=6,
        top_k=2,
        index_heads=2,
        index_head_dim=4,
        head_dim=4,
        rope_dim=2,
        value_dim=3,
    )


def deepseek_indexer_state_dict():
    """A DeepseekV32Indexer state dict made by hand: 3 heads of 4 (the attention has 2: equal
    small ints would look like one number checked twice), hidden 16, q_lora_rank 6."""
    shapes = {
        "wq_b.weight": (3 * 4, 6),
        "wk.weight": (4, 16),
        "k_norm.weight": (4,),
        "k_norm.bias": (4,),
        "weights_proj.weight": (3, 16),
    }
    return {name: randn(*shape) for name, shape in shapes.items()}


def deepseek_v32_state_dict():
    """A DeepseekV32Attention state dict: deepseek_state_dict's MLA and that indexer."""
    return {
        **deepseek_state_dict(),
        **{f"indexer.{name}": tensor for name, tensor in deepseek_indexer_state_dict().items()},
    }


def paged_cache():
    """A PagedKVCache of tiny_decoder_config's sizes (3 blocks of 4) holding sequence 0 of 5
    tokens, and the slots of two more."""
    cache = paging.PagedKVCache(tiny_decoder_config(), 3, 4)
    cache.reserve(cache.new_sequence(), 5)
    return cache, cache.reserve(0, 2)


def batcher_with_a_request():
    batcher = serving.ContinuousBatcher(tiny_decoder(), 4, 2)
    batcher.add_request(torch.tensor([1, 2, 3]), 2)
    return batcher


SEQUENCE = [
    Bad("a string", constant("0"), TypeError),
    Bad("a float", constant(0.0), TypeError),
    Bad("None", constant(None), TypeError),
    Bad("not held", constant(7), ValueError),
]
PAST_THE_SEQUENCE = Bad("past the sequence", constant(8), ValueError)
OUT_OF_RANGE = [
    Bad("too large", lambda v: v + 10**6, ValueError),
    Bad("negative", lambda v: v - 10**6, ValueError),
]
WINDOWED_MODEL = Bad("a windowed model", lambda v: tiny_decoder(window=4), ValueError)
PROMPTS = [
    Bad("one tensor", lambda v: v[0], TypeError),
    Bad("None", constant(None), TypeError),
    Bad("a list of lists", lambda v: [t.tolist() for t in v], TypeError),
    Bad("floats", lambda v: [t.double() for t in v], ValueError),
    Bad("2-D", lambda v: [t[None] for t in v], ValueError),
    Bad("an empty prompt", lambda v: [t[:0] for t in v], ValueError),
    Bad("past the vocabulary", lambda v: [t + 10**6 for t in v], ValueError),
]


TINY_ENCODER = dict(
    vocab_size=30522, embed_dim=8, num_heads=2, num_layers=1, ffn_dim=16, max_positions=16
)


def tiny_encoder():
    torch.manual_seed(0)
    return minilm.SentenceEncoder(minilm.EncoderConfig(**TINY_ENCODER))


def tokenizer():
    try:
        return minilm.load_tokenizer()
    except ImportError as error:
        pytest.skip(f"all-MiniLM-L6-v2's tokenizer is not installed: {error}")


def tiny_decoder_config():
    return config.DecoderConfig(
        vocab_size=10,
        embed_dim=8,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        hidden_dim=16,
        rope_base=10000.0,
        norm_eps=1e-5,
        context_length=32,
        tie_embeddings=True,
    )


def gguf_weights(config):
    names = ["token_embd.weight", "output_norm.weight"] + [
        f"blk.{layer}.{name}.weight"
        for layer in range(config.num_layers)
        for name in (
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_norm",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        )
    ]
    return {name: torch.zeros(8, 8) for name in names}


def entered(context_manager):
    """Call a function returning a context manager and enter it (it checks on entering)."""

    def call(*args, **kwargs):
        with context_manager(*args, **kwargs):
            pass

    return call


def closing_figures(plot):
    def call(*args, **kwargs):
        try:
            return plot(*args, **kwargs)
        finally:
            plt.close("all")

    return call


def method(build_object, name):
    """An object's method, for a build() function."""
    return lambda: getattr(build_object(), name)


def qkv(n_q=3, n_k=5, d=4, d_v=6):
    return dict(
        query=randn(2, n_q, d), key=randn(2, n_k, d, seed=1), value=randn(2, n_k, d_v, seed=2)
    )


def three_points():
    return dict(queries=randn(4), keys=randn(6, seed=1), values=randn(6, seed=2))


PREVIOUS_TOKEN = torch.zeros(2, 4, 4, dtype=torch.bool)
PREVIOUS_TOKEN[:, torch.arange(1, 4), torch.arange(3)] = True


def duck_typed_config():
    """A duck-typed transformers config: what attention_costs reads of a gpt-oss one."""
    import types

    return types.SimpleNamespace(
        model_type="gpt_oss",
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
    )


CONFIG = [
    Bad("not a config", constant(object()), TypeError),
    Bad("an unsupported model_type", lambda v: type(v)(model_type="bert"), ValueError),
]
LAYER_TYPES = [
    Bad("a string", constant("full_attention"), TypeError),
    Bad("numbers", constant([1, 2]), TypeError),
    Bad("empty", constant([]), ValueError),
    Bad("an unknown layer type", constant(["global_attention"]), ValueError),
]

# the bad sizes of a head diagram (both of chapter 8's: d_model = 12 split into 3 heads)
HEAD_DIAGRAM_ARGUMENTS = {
    "d_model": COUNT + [Bad("not a multiple of num_heads", constant(10), ValueError)],
    "num_heads": COUNT
    + [
        Bad("not dividing d_model", constant(5), ValueError),
        Bad("too many to draw", constant(12), ValueError),
    ],
}


REGISTRY = {
    # attention
    "attention_course.attention.AdditiveAttention": Case(
        lambda: (
            attention.AdditiveAttention,
            dict(query_size=4, key_size=3, num_hiddens=5, dropout=0.1),
        ),
        {"query_size": COUNT, "key_size": COUNT, "num_hiddens": COUNT, "dropout": PROBABILITY},
    ),
    "attention_course.attention.AdditiveAttention.scores": Case(
        lambda: (
            attention.AdditiveAttention(4, 3, 5).scores,
            dict(queries=randn(2, 2, 4), keys=randn(2, 6, 3)),
        ),
        {"queries": MATCHED, "keys": MATCHED},
    ),
    "attention_course.attention.AdditiveAttention.forward": Case(
        lambda: (
            attention.AdditiveAttention(4, 3, 5),
            dict(
                queries=randn(2, 2, 4),
                keys=randn(2, 6, 3),
                values=randn(2, 6, 7),
                valid_lens=torch.tensor([6, 2]),
            ),
        ),
        {"queries": MATCHED, "keys": MATCHED, "values": MATCHED, "valid_lens": optional(LENGTHS)},
    ),
    "attention_course.attention.attention_entropy": Case(
        lambda: (attention.attention_entropy, dict(weights=torch.softmax(randn(3, 4), -1))),
        {"weights": FLOAT},
    ),
    "attention_course.attention.scaled_dot_product_attention": Case(
        lambda: (
            attention.scaled_dot_product_attention,
            dict(**qkv(), attn_mask=torch.ones(3, 5, dtype=torch.bool), is_causal=False, scale=0.5),
        ),
        {
            "query": MATCHED,
            "key": MATCHED,
            "value": MATCHED,
            "attn_mask": ATTN_MASK,
            "scale": optional(NUMBER),
        },
    ),
    # masking
    "attention_course.masking.causal_mask": Case(
        lambda: (masking.causal_mask, dict(n_queries=3, n_keys=4)),
        {"n_queries": COUNT, "n_keys": optional(COUNT)},
    ),
    "attention_course.masking.masked_softmax": Case(
        lambda: (
            masking.masked_softmax,
            dict(scores=randn(2, 3, 4), valid_lens=torch.tensor([1, 4])),
        ),
        {"scores": FLOAT, "valid_lens": optional(LENGTHS)},
    ),
    "attention_course.masking.softmax": Case(
        lambda: (masking.softmax, dict(scores=randn(2, 3), dim=-1)),
        {"scores": ANY_FLOAT, "dim": DIM},
    ),
    "attention_course.masking.softmax_": Case(
        lambda: (masking.softmax_, dict(scores=randn(2, 3), dtype=torch.float64)),
        {"scores": FLOAT, "dtype": FLOAT_DTYPE},
    ),
    "attention_course.masking.softmax_with_mask": Case(
        lambda: (
            masking.softmax_with_mask,
            dict(scores=randn(2, 3), allowed=torch.tensor([True, False, True])),
        ),
        {"scores": FLOAT, "allowed": ALLOWED},
    ),
    "attention_course.masking.softmax_with_mask_": Case(
        lambda: (
            masking.softmax_with_mask_,
            dict(scores=randn(2, 3), allowed=torch.tensor([True, False, True]), dtype=None),
        ),
        {"scores": FLOAT, "allowed": ALLOWED, "dtype": FLOAT_DTYPE},
    ),
    "attention_course.masking.valid_lens_mask": Case(
        lambda: (
            masking.valid_lens_mask,
            dict(valid_lens=torch.tensor([1, 4]), n_queries=3, n_keys=4),
        ),
        {"valid_lens": LENGTHS, "n_queries": COUNT_OR_ZERO, "n_keys": COUNT_OR_ZERO},
    ),
    # multihead
    "attention_course.multihead.MultiHeadAttention": Case(
        lambda: (multihead.MultiHeadAttention, dict(embed_dim=8, num_heads=2, bias=True)),
        {"embed_dim": COUNT, "num_heads": COUNT},
    ),
    "attention_course.multihead.MultiHeadAttention.forward": Case(
        lambda: (
            multihead.MultiHeadAttention(8, 2),
            dict(
                query=randn(2, 3, 8),
                key=randn(2, 5, 8, seed=1),
                value=randn(2, 5, 8, seed=2),
                attn_mask=torch.ones(2, 1, 3, 5) < 2,
                is_causal=False,
            ),
        ),
        {"query": MATCHED, "key": MATCHED, "value": MATCHED, "attn_mask": ATTN_MASK},
    ),
    "attention_course.multihead.MultiHeadAttention.from_torch": Case(
        lambda: (
            multihead.MultiHeadAttention.from_torch,
            dict(module=nn.MultiheadAttention(8, 2, batch_first=True)),
        ),
        {"module": INSTANCE},
    ),
    "attention_course.multihead.GroupedQueryAttention": Case(
        lambda: (
            multihead.GroupedQueryAttention,
            dict(embed_dim=8, num_heads=2, num_kv_heads=1, bias=False),
        ),
        {"embed_dim": COUNT, "num_heads": COUNT, "num_kv_heads": COUNT},
    ),
    "attention_course.multihead.GroupedQueryAttention.forward": Case(
        lambda: (
            multihead.GroupedQueryAttention(8, 4, 2),
            dict(x=randn(2, 3, 8), attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=False),
        ),
        {"x": MATCHED, "attn_mask": ATTN_MASK},
    ),
    "attention_course.multihead.GroupedQueryAttention.project_kv": Case(
        lambda: (multihead.GroupedQueryAttention(8, 4, 2).project_kv, dict(x=randn(2, 3, 8))),
        {"x": MATCHED},
    ),
    "attention_course.multihead.GroupedQueryAttention.from_multihead": Case(
        lambda: (
            multihead.GroupedQueryAttention.from_multihead,
            dict(mha=multihead.MultiHeadAttention(8, 2), num_kv_heads=1),
        ),
        {"mha": INSTANCE, "num_kv_heads": COUNT},
    ),
    "attention_course.multihead.GroupedQueryAttention.from_config": Case(
        lambda: (multihead.GroupedQueryAttention.from_config, dict(config=tiny_decoder_config())),
        {"config": INSTANCE},
    ),
    "attention_course.multihead.grouped_attention": Case(
        lambda: (
            multihead.grouped_attention,
            dict(
                q=randn(2, 4, 3, 5),
                k=randn(2, 2, 6, 5, seed=1),
                v=randn(2, 2, 6, 7, seed=2),
                attn_mask=torch.ones(3, 6, dtype=torch.bool),
                is_causal=False,
            ),
        ),
        {"q": MATCHED, "k": MATCHED, "v": MATCHED, "attn_mask": ATTN_MASK},
    ),
    "attention_course.multihead.kv_cache_bytes": Case(
        lambda: (
            multihead.kv_cache_bytes,
            dict(
                batch_size=1,
                seq_len=8,
                num_layers=2,
                num_kv_heads=2,
                head_dim=4,
                bytes_per_element=2,
            ),
        ),
        {
            name: COUNT
            for name in (
                "batch_size",
                "seq_len",
                "num_layers",
                "num_kv_heads",
                "head_dim",
                "bytes_per_element",
            )
        },
    ),
    "attention_course.multihead.split_heads": Case(
        lambda: (multihead.split_heads, dict(x=torch.arange(24).reshape(1, 3, 8), num_heads=2)),
        {"x": TENSOR, "num_heads": COUNT},
    ),
    "attention_course.multihead.merge_heads": Case(
        lambda: (multihead.merge_heads, dict(x=torch.arange(24).reshape(1, 2, 3, 4))), {"x": TENSOR}
    ),
    # decoding
    "attention_course.masking.decoding_mask": Case(
        lambda: (
            masking.decoding_mask,
            dict(
                query_positions=torch.arange(2, 5), key_positions=torch.arange(5), window=3, sinks=1
            ),
        ),
        {
            "query_positions": INTEGERS,
            "key_positions": INTEGERS,
            "window": optional(COUNT),
            "sinks": COUNT_OR_ZERO,
        },
    ),
    "attention_course.decoding.KVCache": Case(
        lambda: (decoding.KVCache, dict(window=4, sinks=1, renumber=True)),
        {"window": optional(COUNT), "sinks": COUNT_OR_ZERO, "renumber": FLAG},
    ),
    "attention_course.decoding.KVCache.renumbered": Case(
        lambda: (decoding.KVCache(4, 1, renumber=True).renumbered, dict(positions=torch.arange(3))),
        {"positions": INTEGERS},
    ),
    "attention_course.decoding.KVCache.update": Case(
        lambda: (
            decoding.KVCache().update,
            dict(key=randn(1, 2, 3, 4), value=randn(1, 2, 3, 4, seed=1)),
        ),
        {"key": MATCHED, "value": MATCHED},
    ),
    "attention_course.decoding.DecoderBlock": Case(
        lambda: (decoding.DecoderBlock, dict(config=tiny_decoder_config())), {"config": INSTANCE}
    ),
    **{
        f"attention_course.decoding.DecoderBlock.{name}": Case(
            (
                lambda name=name: (
                    tiny_block() if name == "forward" else getattr(tiny_block(), name),
                    dict(x=randn(1, 3, 8), positions=torch.arange(3), cache=decoding.KVCache(4, 1)),
                )
            ),
            {"x": MATCHED, "positions": INTEGERS, "cache": optional(INSTANCE)},
        )
        for name in ("attend", "forward", "forward_with_weights")
    },
    "attention_course.decoding.TinyDecoder": Case(
        lambda: (
            decoding.TinyDecoder,
            dict(
                vocab_size=20,
                embed_dim=8,
                num_heads=2,
                num_kv_heads=1,
                num_layers=1,
                window=4,
                hidden_dim=16,
                sinks=1,
                base=100.0,
                norm_eps=1e-6,
                tie_embeddings=True,
                scaling=YARN,
            ),
        ),
        {
            "vocab_size": COUNT,
            "embed_dim": COUNT,
            "num_heads": COUNT,
            "num_kv_heads": COUNT,
            "num_layers": COUNT,
            "window": optional(COUNT),
            "hidden_dim": optional(COUNT),
            "sinks": COUNT_OR_ZERO,
            "base": BASE,
            "norm_eps": NON_NEGATIVE,
            "scaling": optional(SCALING),
        },
    ),
    "attention_course.decoding.TinyDecoder.from_config": Case(
        lambda: (decoding.TinyDecoder.from_config, dict(config=tiny_decoder_config())),
        {"config": INSTANCE},
    ),
    "attention_course.decoding.TinyDecoder.new_caches": Case(
        lambda: (tiny_decoder().new_caches, {}), {}
    ),
    "attention_course.decoding.TinyDecoder.prefix_caches": Case(
        prefix_caches_call,
        {
            "caches": CACHES
            + [Bad("too short", lambda v: [decoding.KVCache() for _ in v], ValueError)],
            "length": COUNT + [Bad("more than held", constant(10**6), ValueError)],
        },
    ),
    "attention_course.decoding.TinyDecoder.windowed": Case(
        lambda: (entered(tiny_decoder().windowed), dict(window=3, sinks=1, renumber=True)),
        {"window": optional(COUNT), "sinks": COUNT_OR_ZERO, "renumber": FLAG},
    ),
    "attention_course.decoding.TinyDecoder.rope_scaled": Case(
        lambda: (entered(tiny_decoder().rope_scaled), dict(scaling=YARN, base=100.0)),
        {"scaling": optional(SCALING), "base": optional(BASE)},
    ),
    "attention_course.decoding.TinyDecoder.forward": Case(
        lambda: (
            lambda model=tiny_decoder(): (  # noqa: B008 (one model per call of the outer lambda)
                model,
                dict(ids=torch.tensor([[1, 2, 3]]), caches=model.new_caches(), logits_to_keep=1),
            )
        )(),
        {"ids": IDS, "caches": optional(CACHES), "logits_to_keep": COUNT_OR_ZERO},
    ),
    "attention_course.decoding.TinyDecoder.forward_with_weights": Case(
        lambda: (tiny_decoder().forward_with_weights, dict(ids=torch.tensor([[1, 2, 3]]))),
        {"ids": IDS},
    ),
    "attention_course.decoding.TinyDecoder.generate": Case(
        lambda: (
            tiny_decoder().generate,
            dict(ids=torch.tensor([[1, 2, 3]]), max_new_tokens=2, use_cache=True, stop_id=4),
        ),
        {"ids": IDS, "max_new_tokens": COUNT_OR_ZERO, "stop_id": TOKEN},
    ),
    # rotary
    "attention_course.rotary.apply_rotary": Case(
        lambda: (
            rotary.apply_rotary,
            dict(x=randn(2, 3, 4), positions=torch.tensor([0, 5, 9]), base=100.0, scaling=YARN),
        ),
        {
            "x": FLOAT,
            "positions": optional(INTEGERS),
            "base": BASE,
            "scaling": optional(SCALING),
            "context": optional(COUNT),
        },
    ),
    "attention_course.rotary.rotary_frequencies": Case(
        lambda: (
            rotary.rotary_frequencies,
            dict(head_dim=8, base=100.0, scaling=YARN, seq_len=20, dtype=torch.float64),
        ),
        {
            "head_dim": COUNT,
            "base": BASE,
            "scaling": optional(SCALING),
            "seq_len": optional(COUNT),
            "context": optional(COUNT),
            "dtype": FLOAT_DTYPE,
        },
    ),
    "attention_course.rotary.rotary_attention_factor": Case(
        lambda: (rotary.rotary_attention_factor, dict(scaling=YARN)), {"scaling": optional(SCALING)}
    ),
    # tiled
    "attention_course.tiled.flash_attention": Case(
        lambda: (tiled.flash_attention, dict(**qkv(), is_causal=True, scale=0.5, block_size=2)),
        {
            "query": MATCHED,
            "key": MATCHED,
            "value": MATCHED,
            "scale": optional(NUMBER),
            "block_size": COUNT,
        },
    ),
    "attention_course.tiled.naive_attention": Case(
        lambda: (tiled.naive_attention, dict(**qkv(), is_causal=True)),
        {"query": MATCHED, "key": MATCHED, "value": MATCHED},
    ),
    # triton_flash
    "attention_course.triton_flash.triton_flash_attention": Case(
        lambda: (
            triton_flash.triton_flash_attention,
            dict(**qkv(), is_causal=True, scale=0.5, block_queries=16, block_keys=32),
        ),
        {
            "query": MATCHED,
            "key": MATCHED,
            "value": MATCHED,
            "scale": optional(NUMBER),
            "block_queries": optional(COUNT),
            "block_keys": optional(COUNT),
        },
    ),
    "attention_course.triton_flash.tile_sizes": Case(
        lambda: (triton_flash.tile_sizes, dict(dtype=torch.float16, head_dim=64, value_dim=64)),
        {"dtype": FLOAT_DTYPE, "head_dim": COUNT, "value_dim": COUNT},
    ),
    "attention_course.triton_flash.hbm_bytes": Case(
        lambda: (
            triton_flash.hbm_bytes,
            dict(n=256, head_dim=64, block_queries=64, bytes_per_element=2, is_causal=True),
        ),
        {"n": COUNT, "head_dim": COUNT, "block_queries": COUNT, "bytes_per_element": COUNT},
    ),
    "attention_course.tiled.tile_schedule": Case(
        lambda: (
            lambda **a: list(tiled.tile_schedule(**a)),
            dict(n_queries=5, n_keys=7, block_size=2, is_causal=True),
        ),
        {"n_queries": COUNT_OR_ZERO, "n_keys": COUNT_OR_ZERO, "block_size": COUNT},
    ),
    "attention_course.measure.largest_tensor": Case(
        lambda: (measure.largest_tensor, dict(function=torch.ones, args=(2, 3), kwargs={})),
        {"function": CALLABLE},
        {"args": "passed on to `function`", "kwargs": "passed on to `function`"},
    ),
    "attention_course.measure.peak_extra_memory": Case(
        lambda: (
            measure.peak_extra_memory,
            dict(implementation="tiled", lengths=[64], head_dim=8, block_size=16),
        ),
        {
            "implementation": NAME,
            "lengths": LENGTH_LIST,
            "head_dim": COUNT,
            "block_size": COUNT,
            "repeats": COUNT,
        },
        run_valid=False,
    ),  # a new process each call: test_measure measures
    "attention_course.measure.best_seconds": Case(
        lambda: (measure.best_seconds, dict(function=torch.ones, args=(2,), repeats=2, kwargs={})),
        {"function": CALLABLE, "repeats": COUNT},
        {"args": "passed on to `function`", "kwargs": "passed on to `function`"},
    ),
    "attention_course.measure.count_multiply_adds": Case(
        lambda: (measure.count_multiply_adds, dict(function=torch.ones, args=(2, 3), kwargs={})),
        {"function": CALLABLE},
        {"args": "passed on to `function`", "kwargs": "passed on to `function`"},
    ),
    "attention_course.measure.one_thread": Case(lambda: (measure.one_thread, {}), {}),
    "attention_course.measure.peak_extra_bytes": Case(
        lambda: (
            measure.peak_extra_bytes,
            dict(target="attention_course.measure:_attention_cases", args=("tiled", 8, [[16, 4]])),
        ),
        {"target": NAME},
        {"arguments": "passed on to `target` in the new process"},
        run_valid=False,
    ),  # a new process each call: test_measure measures
    "attention_course.measure.resident_bytes": Case(
        lambda: (measure.resident_bytes, dict(peak=True)), {}
    ),
    "attention_course.measure.reset_peak_resident_bytes": Case(
        lambda: (measure.reset_peak_resident_bytes, {}), {}
    ),
    # pooling
    **{
        f"attention_course.pooling.{name}": Case(
            lambda name=name: (getattr(pooling, name), dict(u=randn(3, 4))), {"u": ANY_FLOAT}
        )
        for name in ("gaussian_kernel", "boxcar_kernel", "epanechnikov_kernel")
    },
    "attention_course.pooling.kernel_scores": Case(
        lambda: (
            pooling.kernel_scores,
            dict(queries=randn(4), keys=randn(6, seed=1), bandwidth=2.0, kernel="epanechnikov"),
        ),
        {"queries": MATCHED, "keys": MATCHED, "bandwidth": POSITIVE, "kernel": NAME},
    ),
    "attention_course.pooling.nadaraya_watson": Case(
        lambda: (pooling.nadaraya_watson, dict(**three_points(), bandwidth=1.0, kernel="gaussian")),
        {
            "queries": MATCHED,
            "keys": MATCHED,
            "values": MATCHED,
            "bandwidth": POSITIVE,
            "kernel": NAME,
        },
    ),
    "attention_course.pooling.leave_one_out_mse": Case(
        lambda: (
            pooling.leave_one_out_mse,
            dict(keys=randn(6), values=randn(6, seed=1), bandwidth=1.0, kernel="gaussian"),
        ),
        {"keys": MATCHED, "values": MATCHED, "bandwidth": POSITIVE, "kernel": NAME},
    ),
    "attention_course.pooling.select_bandwidth": Case(
        lambda: (
            pooling.select_bandwidth,
            dict(keys=randn(6), values=randn(6, seed=1), bandwidths=[0.5, 1.0], kernel="gaussian"),
        ),
        {"keys": MATCHED, "values": MATCHED, "bandwidths": BANDWIDTHS, "kernel": NAME},
    ),
    "attention_course.pooling.KernelRegression": Case(
        lambda: (
            pooling.KernelRegression,
            dict(keys=randn(6), values=randn(6, seed=1), bandwidth=0.5, per_key=True),
        ),
        {"keys": MATCHED, "values": MATCHED, "bandwidth": POSITIVE},
    ),
    "attention_course.pooling.KernelRegression.forward": Case(
        lambda: (
            pooling.KernelRegression(randn(6), randn(6, seed=1)),
            dict(queries=randn(4, seed=2), leave_one_out=False),
        ),
        {"queries": MATCHED},
    ),
    # scoring
    **{
        f"attention_course.scoring.{name}": Case(
            lambda name=name: (
                getattr(scoring, name),
                dict(queries=randn(2, 3, 4), keys=randn(2, 5, 4, seed=1), temperature=0.5),
            ),
            {"queries": MATCHED, "keys": MATCHED, "temperature": POSITIVE},
        )
        for name in ("dot_product_scores", "scaled_dot_product_scores")
    },
    "attention_course.scoring.cosine_scores": Case(
        lambda: (
            scoring.cosine_scores,
            dict(queries=randn(3, 4), keys=randn(5, 4, seed=1), temperature=0.5, eps=1e-6),
        ),
        {"queries": MATCHED, "keys": MATCHED, "temperature": POSITIVE, "eps": NON_NEGATIVE},
    ),
    "attention_course.scoring.rbf_scores": Case(
        lambda: (
            scoring.rbf_scores,
            dict(queries=randn(3, 4), keys=randn(5, 4, seed=1), bandwidth=0.5),
        ),
        {"queries": MATCHED, "keys": MATCHED, "bandwidth": POSITIVE},
    ),
    "attention_course.scoring.soft_nearest_neighbours": Case(
        lambda: (
            scoring.soft_nearest_neighbours,
            dict(
                queries=randn(3, 4),
                keys=randn(5, 4, seed=1),
                values=randn(5, 2, seed=2),
                similarity="rbf",
                options={"bandwidth": 0.5},
            ),
        ),
        {"queries": MATCHED, "keys": MATCHED, "values": MATCHED, "similarity": NAME},
        {"options": "passed on to the similarity function, which checks them"},
    ),
    # positions
    "attention_course.positions.sinusoidal_positional_encoding": Case(
        lambda: (
            positions.sinusoidal_positional_encoding,
            dict(num_positions=5, dim=8, base=100.0, dtype=torch.float64),
        ),
        {"num_positions": COUNT, "dim": COUNT, "base": POSITIVE, "dtype": FLOAT_DTYPE},
    ),
    # data
    "attention_course.data.make_synthetic_regression": Case(
        lambda: (
            data.make_synthetic_regression,
            dict(n_train=10, n_test=5, x_max=3.0, noise_std=0.1, seed=1),
        ),
        {
            "n_train": COUNT,
            "n_test": COUNT,
            "x_max": POSITIVE,
            "noise_std": NON_NEGATIVE,
            "seed": SEED,
        },
    ),
    "attention_course.data.split_data": Case(
        lambda: (
            data.split_data,
            dict(x=randn(8), y=randn(8, seed=1), held_out_fraction=0.25, seed=2),
        ),
        {"x": TENSOR, "y": TENSOR, "held_out_fraction": FRACTION, "seed": SEED},
    ),
    "attention_course.data.target_function": Case(
        lambda: (data.target_function, dict(x=torch.linspace(0, 5, 7))),
        {"x": ANY_FLOAT + [Bad("negative", lambda v: v - 10, ValueError)]},
    ),
    "attention_course.data.data_dir": Case(lambda: (data.data_dir, {}), {}),
    # diagrams
    "attention_course.diagrams.draw_decoder_block": Case(
        lambda: (closing_figures(diagrams.draw_decoder_block), dict(config=tiny_decoder_config())),
        {"config": INSTANCE},
    ),
    "attention_course.diagrams.draw_sentence_encoder": Case(
        lambda: (
            closing_figures(diagrams.draw_sentence_encoder),
            dict(config=minilm.EncoderConfig(**TINY_ENCODER)),
        ),
        {"config": INSTANCE},
    ),
    "attention_course.diagrams.draw_rotary_pairs": Case(
        lambda: (closing_figures(diagrams.draw_rotary_pairs), dict(head_dim=6)),
        {
            "head_dim": COUNT
            + [
                Bad("odd", constant(5), ValueError),
                Bad("too many to draw", constant(34), ValueError),
            ]
        },
    ),
    "attention_course.diagrams.draw_tiled_scores": Case(
        lambda: (
            closing_figures(diagrams.draw_tiled_scores),
            dict(n_queries=10, n_keys=7, query_block=4, key_block=3, row=1),
        ),
        {
            "n_queries": COUNT,
            "n_keys": COUNT,
            "query_block": COUNT,
            "key_block": COUNT,
            "row": COUNT_OR_ZERO + [Bad("past the last block", constant(3), ValueError)],
        },
    ),
    "attention_course.diagrams.draw_linear_recurrence": Case(
        lambda: (closing_figures(diagrams.draw_linear_recurrence), dict(n_tokens=3)),
        {"n_tokens": COUNT},
    ),
    "attention_course.diagrams.draw_chunked_state": Case(
        lambda: (closing_figures(diagrams.draw_chunked_state), dict(n_tokens=7, chunk_size=3)),
        {"n_tokens": COUNT, "chunk_size": COUNT},
    ),
    "attention_course.diagrams.draw_encoder_decoder": Case(
        lambda: (
            closing_figures(diagrams.draw_encoder_decoder),
            dict(
                source=["3", "1"],
                target=["d", "b", "<eos>"],
                step=2,
                weights=torch.tensor([0.25, 0.75]),
            ),
        ),
        {
            "source": TOKENS,
            "target": TOKENS,
            "step": COUNT + [Bad("past the target", constant(4), ValueError)],
            "weights": ARRAY
            + [
                Bad("not summing to 1", lambda v: v * 2, ValueError),
                Bad("one weight too many", lambda v: torch.tensor([0.5, 0.25, 0.25]), ValueError),
                Bad("2-D", lambda v: v[None], ValueError),
            ],
        },
    ),
    "attention_course.diagrams.draw_latent_attention": Case(
        lambda: (
            closing_figures(diagrams.draw_latent_attention),
            dict(layer=tiny_latent_attention()),
        ),
        {"layer": INSTANCE},
    ),
    "attention_course.head_diagrams.draw_multi_head": Case(
        lambda: (closing_figures(head_diagrams.draw_multi_head), dict(d_model=12, num_heads=3)),
        HEAD_DIAGRAM_ARGUMENTS,
    ),
    "attention_course.head_diagrams.draw_packed_projections": Case(
        lambda: (
            closing_figures(head_diagrams.draw_packed_projections),
            dict(d_model=12, num_heads=3),
        ),
        HEAD_DIAGRAM_ARGUMENTS,
    ),
    "attention_course.flow_diagrams.draw_self_attention": Case(
        lambda: (
            closing_figures(flow_diagrams.draw_self_attention),
            dict(n=6, d_model=16, d_k=8, d_v=4),
        ),
        {"n": COUNT, "d_model": COUNT, "d_k": COUNT, "d_v": COUNT},
    ),
    "attention_course.flow_diagrams.draw_flash_program": Case(
        lambda: (
            closing_figures(flow_diagrams.draw_flash_program),
            dict(n_keys=100, block_q=16, block_k=32, head_dim=8),
        ),
        {
            "n_keys": COUNT + [Bad("too many tiles to draw", constant(1000), ValueError)],
            "block_q": COUNT,
            "block_k": COUNT,
            "head_dim": COUNT,
        },
    ),
    "attention_course.flow_diagrams.draw_retrieval_task": Case(
        lambda: (
            closing_figures(flow_diagrams.draw_retrieval_task),
            dict(n_tokens=16, d_in=32, d=256, noise=0.5),
        ),
        {"n_tokens": COUNT, "d_in": COUNT, "d": COUNT, "noise": NON_NEGATIVE},
    ),
    "attention_course.flow_diagrams.draw_flash_kernels": Case(
        lambda: (
            closing_figures(flow_diagrams.draw_flash_kernels),
            dict(n=100, batch_heads=3, block_q=16, block_k=32),
        ),
        {"n": COUNT, "batch_heads": COUNT, "block_q": COUNT, "block_k": COUNT},
    ),
    # plotting
    "attention_course.plotting.plot_attention": Case(
        lambda: (
            closing_figures(plotting.plot_attention),
            dict(weights=torch.softmax(randn(2, 3, 4), -1), titles=["a", "b"]),
        ),
        {"weights": ARRAY + [Bad("1-D", lambda v: v[0, 0], ValueError)]},
        PLOT_OPTIONS,
    ),
    "attention_course.plotting.plot_attention_schematic": Case(
        lambda: (
            closing_figures(plotting.plot_attention_schematic),
            dict(weights=torch.tensor([0.25, 0.75])),
        ),
        {"weights": ARRAY + [Bad("not summing to 1", lambda v: v * 2, ValueError)]},
        PLOT_OPTIONS,
    ),
    "attention_course.plotting.plot_regression": Case(
        lambda: (
            closing_figures(plotting.plot_regression),
            dict(
                x_train=randn(6),
                y_train=randn(6, seed=1),
                x_test=torch.linspace(0, 1, 5),
                predictions={"fit": torch.zeros(5)},
                truth=torch.ones(5),
            ),
        ),
        {
            "x_train": ARRAY,
            "y_train": ARRAY,
            "x_test": ARRAY,
            "predictions": CURVES,
            "truth": ARRAY,
        },
        PLOT_OPTIONS,
    ),
    # widgets: the figures a reader moves
    "attention_course.widgets.bandwidth_explorer": Case(
        lambda: (
            closing_figures(widgets.bandwidth_explorer),
            dict(
                queries=torch.linspace(0, 1, 5),
                keys=randn(6),
                values=randn(6, seed=1),
                bandwidths=[0.1, 0.5],
                initial=1,
                probe=2,
            ),
        ),
        {
            "queries": MATCHED,
            "keys": MATCHED,
            "values": MATCHED + [Bad("too short", lambda v: v[:3], ValueError)],
            "bandwidths": BANDWIDTHS,
            "initial": INDEX,
            "probe": INDEX,
        },
    ),
    "attention_course.widgets.temperature_explorer": Case(
        lambda: (
            closing_figures(widgets.temperature_explorer),
            dict(scores=randn(4), scales=[0.5, 1.0], initial=0, labels=["a", "b", "c", "d"]),
        ),
        {
            "scores": FLOAT,
            "scales": BANDWIDTHS,
            "initial": INDEX,
            "labels": [
                Bad("a number", constant(3), TypeError),
                Bad("numbers", constant([1, 2, 3, 4]), TypeError),
                Bad("too few", constant(["a"]), ValueError),
            ],
        },
    ),
    "attention_course.widgets.tile_stepper": Case(
        lambda: (
            closing_figures(widgets.tile_stepper),
            dict(
                query=randn(3, 4), key=randn(5, 4, seed=1), value=randn(5, 2, seed=2), block_size=2
            ),
        ),
        {
            "query": MATCHED + [Bad("another d", lambda v: v[:, :3], ValueError)],
            "key": MATCHED + [Bad("another n_k", lambda v: v[:4], ValueError)],
            "value": MATCHED + [Bad("another n_k", lambda v: v[:4], ValueError)],
            "block_size": COUNT,
        },
    ),
    "attention_course.widgets.decay_explorer": Case(
        lambda: (
            closing_figures(widgets.decay_explorer),
            dict(
                query=randn(5, 3),
                key=randn(5, 3, seed=1),
                gammas=[0.5, 1.0],
                initial=1,
                forgets=[3],
            ),
        ),
        {
            "query": MATCHED + [Bad("another n", lambda v: v[:4], ValueError)],
            "key": MATCHED + [Bad("another n", lambda v: v[:4], ValueError)],
            "gammas": BANDWIDTHS + [Bad("above one", constant([0.5, 1.5]), ValueError)],
            "initial": INDEX,
            "forgets": [
                Bad("a number", constant(3), TypeError),
                Bad("a float", constant([2.5]), TypeError),
                Bad("the first token", constant([1]), ValueError),
                Bad("past the end", constant([6]), ValueError),
                Bad("not increasing", constant([4, 3]), ValueError),
            ],
            "gate": [
                Bad("a string", constant("0.1"), TypeError),
                Bad("zero", constant(0.0), ValueError),
                Bad("above one", constant(1.5), ValueError),
            ],
        },
    ),
    "attention_course.widgets.head_explorer": Case(
        lambda: (
            closing_figures(widgets.head_explorer),
            dict(
                tokens=[["a", "b", "c"], ["d", "e"]],
                weights=[torch.softmax(randn(2, 2, 3, 3, seed=s), -1) for s in (0, 1)],
                marks={(1, 0): "sink"},
            ),
        ),
        {
            "tokens": [
                Bad("a string", constant("abc"), TypeError),
                Bad("numbers", constant([[1, 2]]), TypeError),
                Bad("an empty prompt", constant([["a"], []]), ValueError),
                Bad("too many prompts", constant([["a"], ["b"], ["c"]]), ValueError),
            ],
            "weights": [
                Bad("one tensor", lambda v: v[0], TypeError),
                Bad("empty", constant([]), TypeError),
                Bad("ints", lambda v: [w.long() for w in v], ValueError),
                Bad("3-D", lambda v: [w[0] for w in v], ValueError),
                Bad("shapes disagree", lambda v: [v[0], v[1][:, :1]], ValueError),
            ],
            "marks": [
                Bad("a list", constant([(0, 0)]), TypeError),
                Bad("a layer out of range", constant({(5, 0): "x"}), ValueError),
                Bad("a head out of range", constant({(0, 7): "x"}), ValueError),
                Bad("a label not a str", constant({(0, 0): 3}), TypeError),
            ],
        },
    ),
    # pretrained.heads
    "attention_course.pretrained.heads.attention_layers": Case(
        lambda: (heads.attention_layers, dict(model=tiny_decoder())), {"model": INSTANCE}
    ),
    "attention_course.pretrained.heads.ablated_heads": Case(
        lambda: (entered(heads.ablated_heads), dict(model=tiny_decoder(), heads=[(1, 0)])),
        {"model": INSTANCE, "heads": HEAD_PAIRS},
    ),
    "attention_course.pretrained.heads.attention_to": Case(
        lambda: (
            heads.attention_to,
            dict(
                weights=[torch.softmax(randn(2, 3, 4, 4), -1)],
                targets=PREVIOUS_TOKEN,
                valid_lens=torch.tensor([4, 3]),
            ),
        ),
        {"weights": TENSOR_LIST, "targets": BOOL_MASK, "valid_lens": LENGTHS},
    ),
    # pretrained.circuits
    "attention_course.pretrained.circuits.trace_decoder": Case(
        lambda: (
            circuits.trace_decoder,
            dict(
                model=tiny_decoder(),
                ids=torch.tensor([[1, 2, 3]]),
                patches={(1, "key"): randn(1, 3, 8)},
                head_layers=[1],
                start=1,
                earlier=circuits.trace_decoder(tiny_decoder(), torch.tensor([[1, 2, 3]])),
            ),
        ),
        {
            "model": INSTANCE,
            "ids": IDS,
            "patches": [
                Bad("a list", constant([]), TypeError),
                Bad("not a pair", lambda v: {1: next(iter(v.values()))}, TypeError),
                Bad("a bad path", lambda v: {(1, "keys"): next(iter(v.values()))}, ValueError),
                Bad(
                    "layer out of range", lambda v: {(9, "key"): next(iter(v.values()))}, ValueError
                ),
                Bad("wrong shape", lambda v: {(1, "key"): randn(1, 2, 8)}, ValueError),
                Bad(
                    "another float dtype",
                    lambda v: {(1, "key"): randn(1, 3, 8, dtype=torch.float64)},
                    ValueError,
                ),
                Bad(
                    "ints",
                    lambda v: {(1, "key"): torch.ones(1, 3, 8, dtype=torch.long)},
                    ValueError,
                ),
            ],
            "head_layers": [
                Bad("a number", constant(3), TypeError),
                Bad("floats", constant([0.5]), TypeError),
                Bad("out of range", constant([99]), ValueError),
            ],
            "start": [
                *COUNT_OR_ZERO,
                Bad("after the last layer", constant(3), ValueError),
                Bad("past a patch", constant(2), ValueError),
            ],
            "earlier": [
                Bad("another object", constant(object()), TypeError),
                Bad("None", constant(None), ValueError),  # start > 0 needs one
                Bad(
                    "a trace of other ids",
                    lambda v: circuits.trace_decoder(tiny_decoder(), torch.tensor([[1, 2]])),
                    ValueError,
                ),
            ],
        },
    ),
    "attention_course.pretrained.circuits.trace_caches": Case(
        lambda: (
            circuits.trace_caches,
            dict(
                model=tiny_decoder(),
                trace=circuits.trace_decoder(tiny_decoder(), torch.tensor([[1, 2, 3]])),
            ),
        ),
        {
            "model": INSTANCE,
            "trace": [
                Bad("another object", constant(object()), TypeError),
                Bad("None", constant(None), TypeError),
                Bad(
                    "a trace of another model",
                    lambda v: circuits.trace_decoder(
                        decoding.TinyDecoder(20, 16, 2, 1, 2, hidden_dim=16),
                        torch.tensor([[1, 2, 3]]),
                    ),
                    ValueError,
                ),
            ],
        },
    ),
    "attention_course.pretrained.circuits.direct_logit_attribution": Case(
        lambda: (
            circuits.direct_logit_attribution,
            dict(model=tiny_decoder(), writes=randn(1, 2, 3, 8), final_residual=randn(1, 3, 8)),
        ),
        {"model": INSTANCE, "writes": MATCHED, "final_residual": MATCHED},
    ),
    # pretrained.minilm
    "attention_course.pretrained.minilm.EncoderConfig": Case(
        lambda: (minilm.EncoderConfig, dict(**TINY_ENCODER, num_segments=2, norm_eps=1e-12)),
        {**{name: COUNT for name in TINY_ENCODER}, "num_segments": COUNT, "norm_eps": NON_NEGATIVE},
    ),
    "attention_course.pretrained.minilm.EncoderLayer": Case(
        lambda: (minilm.EncoderLayer, dict(config=minilm.EncoderConfig(**TINY_ENCODER))),
        {"config": INSTANCE},
    ),
    "attention_course.pretrained.minilm.EncoderLayer.forward": Case(
        lambda: (
            minilm.EncoderLayer(minilm.EncoderConfig(**TINY_ENCODER)),
            dict(x=randn(2, 3, 8), attn_mask=torch.ones(2, 1, 1, 3, dtype=torch.bool)),
        ),
        {"x": MATCHED, "attn_mask": ATTN_MASK},
    ),
    "attention_course.pretrained.minilm.SentenceEncoder": Case(
        lambda: (minilm.SentenceEncoder, dict(config=minilm.EncoderConfig(**TINY_ENCODER))),
        {"config": INSTANCE},
    ),
    "attention_course.pretrained.minilm.SentenceEncoder.embed_tokens": Case(
        lambda: (tiny_encoder().embed_tokens, dict(ids=torch.tensor([[101, 7, 102]]))), {"ids": IDS}
    ),
    **{
        f"attention_course.pretrained.minilm.SentenceEncoder.{name}": Case(
            (
                lambda name=name: (
                    tiny_encoder() if name == "forward" else getattr(tiny_encoder(), name),
                    dict(
                        ids=torch.tensor([[101, 7, 102], [101, 102, 0]]),
                        valid_lens=torch.tensor([3, 2]),
                    ),
                )
            ),
            {"ids": IDS, "valid_lens": LENGTHS},
        )
        for name in ("forward", "embed")
    },
    "attention_course.pretrained.minilm.course_state_dict": Case(
        lambda: (
            minilm.course_state_dict,
            dict(bert={}, config=minilm.EncoderConfig(**TINY_ENCODER)),
        ),
        {"bert": MAPPING, "config": INSTANCE},
        run_valid=False,
    ),  # needs a whole BERT checkpoint: test_pretrained converts one
    "attention_course.pretrained.minilm.mean_pool": Case(
        lambda: (minilm.mean_pool, dict(hidden=randn(2, 3, 4), valid_lens=torch.tensor([3, 1]))),
        {"hidden": FLOAT, "valid_lens": LENGTHS},
    ),
    "attention_course.pretrained.minilm.tokenize": Case(
        lambda: (
            minilm.tokenize,
            dict(tokenizer=tokenizer(), sentences=["Hi there", "Cats."], device=None),
        ),
        {"tokenizer": TOKENIZER, "sentences": SENTENCES},
    ),
    "attention_course.pretrained.minilm.embed_sentences": Case(
        lambda: (
            minilm.embed_sentences,
            dict(encoder=tiny_encoder(), tokenizer=tokenizer(), sentences=["Hi there", "Cats."]),
        ),
        {"encoder": INSTANCE, "tokenizer": TOKENIZER, "sentences": SENTENCES},
    ),
    # pretrained.smollm2
    "attention_course.config.DecoderConfig": Case(
        lambda: (
            config.DecoderConfig,
            {
                **dataclasses.asdict(tiny_decoder_config()),
                "window": 4,
                "sinks": 1,
                "rope_scaling": YARN,
            },
        ),
        {
            **{
                name: COUNT
                for name in (
                    "vocab_size",
                    "embed_dim",
                    "num_layers",
                    "num_heads",
                    "num_kv_heads",
                    "hidden_dim",
                )
            },
            "context_length": optional(COUNT),
            "window": optional(COUNT),
            "sinks": COUNT_OR_ZERO,
            "rope_base": BASE,
            "norm_eps": NON_NEGATIVE,
            "tie_embeddings": FLAG,
            "rope_scaling": optional(SCALING),
            "renumber": FLAG,
        },
    ),
    "attention_course.pretrained.smollm2.chat_prompt": Case(
        lambda: (smollm2.chat_prompt, dict(message="Hi", system="Be brief.")),
        {"message": TEXT, "system": TEXT},
    ),
    "attention_course.pretrained.smollm2.decoder_state_dict": Case(
        lambda: (
            smollm2.decoder_state_dict,
            dict(weights=gguf_weights(tiny_decoder_config()), config=tiny_decoder_config()),
        ),
        {"weights": MAPPING, "config": INSTANCE},
    ),
    "attention_course.rotary.interleaved_to_half_split": Case(
        lambda: (
            rotary.interleaved_to_half_split,
            dict(weight=torch.arange(16.0).reshape(8, 2), num_heads=2),
        ),
        {"weight": TENSOR, "num_heads": COUNT},
    ),
    # latent (chapter 15)
    "attention_course.latent.MultiHeadLatentAttention": Case(
        lambda: (
            latent.MultiHeadLatentAttention,
            dict(
                embed_dim=16,
                num_heads=2,
                kv_rank=4,
                q_rank=6,
                head_dim=4,
                rope_dim=2,
                value_dim=3,
                base=100.0,
                norm_eps=1e-6,
            ),
        ),
        {
            "embed_dim": COUNT,
            "num_heads": COUNT,
            "kv_rank": COUNT,
            "q_rank": optional(COUNT),
            "head_dim": optional(COUNT),
            "rope_dim": optional(COUNT),
            "value_dim": optional(COUNT),
            "base": BASE,
            "norm_eps": NON_NEGATIVE,
        },
    ),
    "attention_course.latent.MultiHeadLatentAttention.forward": Case(
        lambda: (
            tiny_latent_attention(),
            dict(
                x=randn(2, 3, 16),
                cache=latent.LatentCache(),
                absorb=True,
                attn_mask=torch.ones(2, 1, 3, 3, dtype=torch.bool),
            ),
        ),
        {"x": MATCHED, "cache": optional(INSTANCE), "attn_mask": ATTN_MASK},
        {"absorb": "a flag: any truth value"},
    ),
    **{
        f"attention_course.latent.MultiHeadLatentAttention.{name}": Case(
            (
                lambda name=name: (
                    getattr(tiny_latent_attention(), name),
                    dict(x=randn(2, 3, 16), positions=torch.tensor([4, 5, 6])),
                )
            ),
            {"x": MATCHED, "positions": optional(INTEGERS)},
        )
        for name in ("project_latent", "project_queries")
    },
    "attention_course.latent.MultiHeadLatentAttention.expand": Case(
        lambda: (tiny_latent_attention().expand, dict(latents=randn(2, 5, 4))), {"latents": MATCHED}
    ),
    "attention_course.latent.MultiHeadLatentAttention.from_deepseek": Case(
        lambda: (
            latent.MultiHeadLatentAttention.from_deepseek,
            dict(
                state_dict=deepseek_state_dict(),
                num_heads=2,
                interleaved=True,
                base=100.0,
                norm_eps=1e-6,
            ),
        ),
        {"state_dict": MAPPING, "num_heads": COUNT, "base": BASE, "norm_eps": NON_NEGATIVE},
        {"interleaved": "a flag: any truth value"},
    ),
    "attention_course.latent.LatentCache": Case(lambda: (latent.LatentCache, {}), {}),
    "attention_course.latent.LatentCache.update": Case(
        lambda: (
            latent.LatentCache().update,
            dict(latent=randn(1, 3, 4), rope_key=randn(1, 3, 2, seed=1)),
        ),
        {"latent": MATCHED, "rope_key": MATCHED},
    ),
    "attention_course.latent.latent_cache_bytes": Case(
        lambda: (
            latent.latent_cache_bytes,
            dict(batch_size=1, seq_len=8, num_layers=2, kv_rank=4, rope_dim=2, bytes_per_element=2),
        ),
        {
            name: COUNT
            for name in (
                "batch_size",
                "seq_len",
                "num_layers",
                "kv_rank",
                "rope_dim",
                "bytes_per_element",
            )
        },
    ),
    # sparse (chapter 17)
    "attention_course.sparse.LightningIndexer": Case(
        lambda: (
            sparse.LightningIndexer,
            dict(embed_dim=16, q_rank=6, num_heads=2, head_dim=4, rope_dim=2, base=100.0),
        ),
        {
            "embed_dim": COUNT,
            "q_rank": COUNT,
            "num_heads": COUNT,
            "head_dim": COUNT,
            "rope_dim": COUNT,
            "base": BASE,
        },
    ),
    "attention_course.sparse.LightningIndexer.forward": Case(
        lambda: (
            tiny_indexer(),
            dict(
                x=randn(2, 3, 16),
                q_latent=randn(2, 3, 6, seed=1),
                positions=torch.tensor([4, 5, 6]),
            ),
        ),
        {"x": MATCHED, "q_latent": MATCHED, "positions": optional(INTEGERS)},
    ),
    "attention_course.sparse.LightningIndexer.from_deepseek": Case(
        lambda: (
            sparse.LightningIndexer.from_deepseek,
            dict(state_dict=deepseek_indexer_state_dict(), rope_dim=2, base=100.0),
        ),
        {"state_dict": MAPPING, "rope_dim": COUNT, "base": BASE},
    ),
    "attention_course.sparse.top_k_mask": Case(
        lambda: (sparse.top_k_mask, dict(index_scores=randn(2, 3, 4), k=2)),
        {"index_scores": FLOAT, "k": COUNT},
    ),
    "attention_course.sparse.DeepSeekSparseAttention": Case(
        lambda: (
            sparse.DeepSeekSparseAttention,
            dict(
                embed_dim=16,
                num_heads=2,
                kv_rank=4,
                q_rank=6,
                top_k=2,
                index_heads=2,
                index_head_dim=4,
                head_dim=4,
                rope_dim=2,
                value_dim=3,
                base=100.0,
                norm_eps=1e-6,
            ),
        ),
        {
            "embed_dim": COUNT,
            "num_heads": COUNT,
            "kv_rank": COUNT,
            "q_rank": COUNT,
            "top_k": COUNT,
            "index_heads": COUNT,
            "index_head_dim": COUNT,
            "head_dim": optional(COUNT),
            "rope_dim": optional(COUNT),
            "value_dim": optional(COUNT),
            "base": BASE,
            "norm_eps": NON_NEGATIVE,
        },
    ),
    "attention_course.sparse.DeepSeekSparseAttention.forward": Case(
        lambda: (
            tiny_sparse_attention(),
            dict(x=randn(2, 3, 16), cache=sparse.IndexedLatentCache(), absorb=True),
        ),
        {"x": MATCHED, "cache": optional(INSTANCE)},
        {"absorb": "a flag: any truth value"},
    ),
    "attention_course.sparse.IndexedLatentCache": Case(lambda: (sparse.IndexedLatentCache, {}), {}),
    "attention_course.sparse.IndexedLatentCache.update_indexer": Case(
        lambda: (sparse.IndexedLatentCache().update_indexer, dict(index_key=randn(1, 3, 4))),
        {"index_key": FLOAT},
    ),
    "attention_course.sparse.DeepSeekSparseAttention.index_scores": Case(
        lambda: (tiny_sparse_attention().index_scores, dict(x=randn(2, 3, 16))), {"x": MATCHED}
    ),
    "attention_course.sparse.DeepSeekSparseAttention.from_deepseek": Case(
        lambda: (
            sparse.DeepSeekSparseAttention.from_deepseek,
            dict(
                state_dict=deepseek_v32_state_dict(),
                num_heads=2,
                top_k=2,
                interleaved=True,
                base=100.0,
                norm_eps=1e-6,
            ),
        ),
        {
            "state_dict": MAPPING,
            "num_heads": COUNT,
            "top_k": COUNT,
            "base": BASE,
            "norm_eps": NON_NEGATIVE,
        },
        {"interleaved": "a flag: any truth value"},
    ),
    # costs (chapter 17)
    "attention_course.costs.hybrid_cache_bytes": Case(
        lambda: (
            costs.hybrid_cache_bytes,
            dict(
                layer_types=["sliding_attention", "full_attention"],
                seq_len=8,
                window=4,
                num_kv_heads=2,
                head_dim=8,
                batch_size=1,
                bytes_per_element=2,
            ),
        ),
        {
            "layer_types": LAYER_TYPES,
            "window": optional(COUNT),
            **{
                name: COUNT
                for name in (
                    "seq_len",
                    "num_kv_heads",
                    "head_dim",
                    "batch_size",
                    "bytes_per_element",
                )
            },
        },
    ),
    "attention_course.costs.kv_sharing": Case(
        lambda: (
            costs.kv_sharing,
            dict(
                layer_types=["sliding_attention", "full_attention"] * 2,
                num_kv_shared_layers=2,
            ),
        ),
        {"layer_types": LAYER_TYPES, "num_kv_shared_layers": COUNT_OR_ZERO},
    ),
    "attention_course.costs.attention_costs": Case(
        lambda: (
            costs.attention_costs,
            dict(
                config=duck_typed_config(),
                seq_len=8,
                bytes_per_element=2,
                state_bytes_per_element=4,
                mla_path="absorbed",
            ),
        ),
        {
            "config": CONFIG,
            "seq_len": COUNT,
            "bytes_per_element": COUNT,
            "state_bytes_per_element": COUNT,
            "mla_path": NAME,
        },
    ),
    # deltanet (chapter 16)
    "attention_course.deltanet.GatedDeltaNet": Case(
        lambda: (
            deltanet.GatedDeltaNet,
            dict(
                embed_dim=16,
                num_heads=2,
                head_dim=4,
                value_dim=3,
                num_value_heads=4,
                conv_size=3,
                norm_eps=1e-6,
                chunk_size=8,
            ),
        ),
        {
            "embed_dim": COUNT,
            "num_heads": COUNT,
            "head_dim": COUNT,
            "value_dim": COUNT,
            "num_value_heads": optional(COUNT) + [Bad("not a multiple", constant(3), ValueError)],
            "conv_size": COUNT,
            "norm_eps": NON_NEGATIVE,
            "chunk_size": COUNT,
        },
    ),
    "attention_course.deltanet.GatedDeltaNet.forward": Case(
        lambda: (tiny_deltanet(), dict(x=randn(2, 5, 16), cache=deltanet.DeltaNetCache())),
        {"x": MATCHED, "cache": optional(INSTANCE)},
    ),
    "attention_course.deltanet.GatedDeltaNet.from_qwen3_next": Case(
        lambda: (deltanet.GatedDeltaNet.from_qwen3_next, dict(layer=qwen3_next_deltanet())),
        {"layer": INSTANCE},
    ),
    "attention_course.deltanet.DeltaNetCache": Case(lambda: (deltanet.DeltaNetCache, {}), {}),
    # linear (chapter 16)
    "attention_course.linear.linear_attention": Case(
        lambda: (
            linear.linear_attention,
            dict(
                **qkv(n_q=5, d_v=3),
                feature_map="elu",
                causal=True,
                normalize=True,
                log_decay=-randn(2, 5, seed=3).abs(),
                chunk_size=2,
            ),
        ),
        {
            "query": MATCHED,
            "key": MATCHED,
            "value": MATCHED,
            "feature_map": NAME,
            "log_decay": optional(MATCHED),
            "chunk_size": optional(COUNT),
        },
        {"causal": "a flag: any truth value", "normalize": "a flag: any truth value"},
    ),
    "attention_course.linear.delta_rule": Case(
        lambda: (
            linear.delta_rule,
            dict(
                **qkv(n_q=5, d_v=3),
                beta=randn(2, 5, seed=3).sigmoid(),
                log_decay=-randn(2, 5, 4, seed=4).abs(),
                chunk_size=2,
                initial_state=randn(2, 4, 3, seed=5),
            ),
        ),
        {
            "query": MATCHED,
            "key": MATCHED,
            "value": MATCHED,
            "beta": MATCHED,
            "log_decay": optional(MATCHED),
            "chunk_size": optional(COUNT),
            "initial_state": optional(MATCHED),
        },
    ),
    # sinks (chapter 17)
    "attention_course.sinks.sink_softmax": Case(
        lambda: (sinks.sink_softmax, dict(scores=randn(2, 3, 4, 5), sinks=randn(3, seed=1))),
        {"scores": MATCHED, "sinks": MATCHED},
    ),
    "attention_course.sinks.sink_attention": Case(
        lambda: (
            sinks.sink_attention,
            dict(
                query=randn(2, 4, 3, 5),
                key=randn(2, 2, 6, 5, seed=1),
                value=randn(2, 2, 6, 7, seed=2),
                sinks=randn(4, seed=3),
                attn_mask=torch.ones(3, 6, dtype=torch.bool),
                is_causal=False,
                scale=0.5,
            ),
        ),
        {
            "query": MATCHED,
            "key": MATCHED,
            "value": MATCHED,
            "sinks": MATCHED,
            "attn_mask": ATTN_MASK,
            "scale": optional(NUMBER),
        },
    ),
    "attention_course.sinks.gated_attention": Case(
        lambda: (
            sinks.gated_attention,
            dict(
                query=randn(2, 4, 3, 5),
                key=randn(2, 2, 6, 5, seed=1),
                value=randn(2, 2, 6, 7, seed=2),
                gate=randn(2, 4, 3, 7, seed=3),
                attn_mask=torch.ones(3, 6, dtype=torch.bool),
                is_causal=False,
                scale=0.5,
            ),
        ),
        {
            "query": MATCHED,
            "key": MATCHED,
            "value": MATCHED,
            "gate": MATCHED,
            "attn_mask": ATTN_MASK,
            "scale": optional(NUMBER),
        },
    ),
    # paging and serving (chapter 19)
    "attention_course.paging.PagedKVCache": Case(
        lambda: (
            paging.PagedKVCache,
            dict(config=tiny_decoder_config(), num_blocks=3, block_size=4, dtype=torch.float64),
        ),
        {"config": INSTANCE, "num_blocks": COUNT, "block_size": COUNT, "dtype": FLOAT_DTYPE},
    ),
    "attention_course.paging.PagedKVCache.new_sequence": Case(
        lambda: (paged_cache()[0].new_sequence, {}), {}
    ),
    "attention_course.paging.PagedKVCache.fork": Case(
        lambda: (paged_cache()[0].fork, dict(sequence=0, length=3)),
        {"sequence": SEQUENCE, "length": optional(COUNT_OR_ZERO) + [PAST_THE_SEQUENCE]},
    ),
    **{
        f"attention_course.paging.PagedKVCache.{name}": Case(
            lambda name=name: (getattr(paged_cache()[0], name), dict(sequence=0, count=3)),
            {"sequence": SEQUENCE, "count": COUNT_OR_ZERO + extra},
        )
        for name, extra in (
            ("blocks_needed", []),
            ("reserve", [Bad("more than the pool holds", constant(99), ValueError)]),
        )
    },
    "attention_course.paging.PagedKVCache.write": Case(
        lambda: (
            lambda cache, slots: (
                cache.write,
                dict(layer=0, slots=slots, key=randn(2, 1, 4), value=randn(2, 1, 4, seed=1)),
            )
        )(*paged_cache()),
        {
            "layer": COUNT_OR_ZERO + [Bad("past the layers", constant(1), ValueError)],
            "slots": INTEGERS + [Bad("past the pool", lambda v: v + 99, ValueError)],
            "key": MATCHED,
            "value": MATCHED,
        },
    ),
    **{
        f"attention_course.paging.PagedKVCache.{name}": Case(
            lambda name=name: (getattr(paged_cache()[0], name), dict(sequence=0)),
            {"sequence": SEQUENCE},
        )
        for name in ("release", "block_table", "length")
    },
    "attention_course.paging.paged_attention": Case(
        lambda: (
            paging.paged_attention,
            dict(
                query=randn(4, 2, 3),
                key_pool=randn(3, 2, 1, 3, seed=1),
                value_pool=randn(3, 2, 1, 5, seed=2),
                block_tables=torch.tensor([[2, 0], [1, 0]]),
                query_lens=torch.tensor([3, 1]),
                key_lens=torch.tensor([4, 2]),
                scale=0.5,
            ),
        ),
        {
            "query": MATCHED,
            "key_pool": MATCHED,
            "value_pool": MATCHED,
            "block_tables": INTEGERS + [Bad("past the pool", lambda v: v + 99, ValueError)],
            "query_lens": INTEGERS + OUT_OF_RANGE,
            "key_lens": INTEGERS + OUT_OF_RANGE,
            "scale": optional(NUMBER),
        },
    ),
    "attention_course.serving.ContinuousBatcher": Case(
        lambda: (
            serving.ContinuousBatcher,
            dict(model=tiny_decoder(), num_blocks=4, block_size=2, stop_id=3),
        ),
        {
            "model": INSTANCE + [WINDOWED_MODEL],
            "num_blocks": COUNT,
            "block_size": COUNT,
            "stop_id": TOKEN,
        },
    ),
    "attention_course.serving.ContinuousBatcher.add_request": Case(
        lambda: (
            serving.ContinuousBatcher(tiny_decoder(), 4, 2).add_request,
            dict(prompt=torch.tensor([1, 2, 3]), max_new_tokens=2),
        ),
        {
            "prompt": IDS + [Bad("empty", lambda v: v[:0], ValueError)],
            "max_new_tokens": COUNT_OR_ZERO + [Bad("past the pool", constant(9), ValueError)],
        },
    ),
    "attention_course.serving.ContinuousBatcher.step": Case(
        lambda: (batcher_with_a_request().step, {}), {}
    ),
    "attention_course.serving.ContinuousBatcher.output": Case(
        lambda: (batcher_with_a_request().output, dict(request=0)),
        {"request": COUNT_OR_ZERO + [Bad("never added", constant(5), ValueError)]},
    ),
    "attention_course.serving.generate_continuous": Case(
        lambda: (
            serving.generate_continuous,
            dict(
                model=tiny_decoder(),
                prompts=[torch.tensor([1, 2, 3]), torch.tensor([4], dtype=torch.int32)],
                max_new_tokens=[2, 3],
                block_size=2,
                stop_id=3,
                num_blocks=2,
            ),
        ),
        {
            "model": INSTANCE + [WINDOWED_MODEL],
            "prompts": PROMPTS,
            "max_new_tokens": COUNT_OR_ZERO
            + [
                Bad("one count too few", constant([2]), ValueError),
                Bad("a float in the list", constant([2, 1.5]), TypeError),
            ],
            "block_size": COUNT,
            "stop_id": TOKEN,
            "num_blocks": optional(COUNT) + [Bad("too small", constant(1), ValueError)],
        },
    ),
}

LOADER = (
    "reads one of the course's files (no tensor input): a missing file raises "
    "FileNotFoundError, a changed one ValueError (test_data, test_pretrained, "
    "test_smollm2)"
)
EXEMPT = {
    "attention_course.widgets.Widget": "the record that the widget functions fill and a "
    "notebook shows (tests/test_widgets.py)",
    "attention_course.runtime": "require installs libraries; tests/test_runtime.py checks its "
    "version arguments and each message",
    "attention_course.checks": "checks take the learner's function (any callable) and report "
    "every failure, theirs or the input's, as CheckFailed "
    "(tests/checks)",
    "attention_course.data.RegressionData": "a NamedTuple record of four tensors; "
    "make_synthetic_regression fills it",
    "attention_course.pretrained.circuits.DecoderTrace": "a namedtuple record of tensors; "
    "trace_decoder fills it (test_circuits)",
    "attention_course.serving.StepRecord": "a namedtuple record of request ids and counts; "
    "ContinuousBatcher.step fills it (test_serving)",
    "attention_course.costs.AttentionCosts": "a frozen dataclass record of numbers; "
    "attention_costs fills it (test_costs)",
    "attention_course.pretrained.minilm.TokenBatch": "a dataclass record the tokenizer fills; "
    "the encoder checks its ids and lengths",
    "attention_course.data.load_deepseek_reference": LOADER,
    **{
        f"attention_course.data.{name}": LOADER
        for name in (
            "load_mcycle",
            "load_zen_of_python",
            "load_execution_model",
            "load_minilm_reference",
            "load_smollm2_reference",
            "load_seq2seq_long_training",
            "load_python_reference_sections",
            "load_streaming_past_context",
            "load_serving_reference",
            "load_triton_gpu_run",
        )
    },
    **{
        f"attention_course.pretrained.minilm.{name}": LOADER
        for name in (
            "model_folder",
            "load_tokenizer",
            "load_minilm",
            "EncoderConfig.from_json",
            "SentenceEncoder.from_safetensors",
        )
    },
    **{
        f"attention_course.pretrained.smollm2.{name}": LOADER
        for name in (
            "gguf_path",
            "read_gguf",
            "metadata",
            "dequantized",
            "load_gguf_tokenizer",
            "load_smollm2",
        )
    },
    "attention_course.config.DecoderConfig.from_gguf": LOADER,
}

# ------------------------------------------------------------------------------ the walk


def public_modules():
    """attention_course and every submodule without an underscore in its path."""
    names = {"attention_course"}
    for info in pkgutil.walk_packages(ac.__path__, "attention_course."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.add(info.name)
    return sorted(names)


def home_is_public(obj):
    home = getattr(obj, "__module__", None) or ""
    return home.startswith("attention_course") and not any(
        part.startswith("_") for part in home.split(".")
    )


def public_callables():
    """{qualified name: object} for every public callable reachable as a public name of a
    public module, defined in the package, and the public methods of its classes."""
    found = {}
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        for name in dir(module):
            obj = getattr(module, name)
            if name.startswith("_") or inspect.ismodule(obj) or not callable(obj):
                continue
            if not home_is_public(obj):
                continue  # torch's, or a private helper module's: not the package's API
            qualified = f"{obj.__module__}.{obj.__qualname__}"
            found[qualified] = obj
            if inspect.isclass(obj):
                for attribute, value in vars(obj).items():
                    if not attribute.startswith("_") and (
                        inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod))
                    ):
                        found[f"{qualified}.{attribute}"] = getattr(obj, attribute)
    return found


def exemption(qualified):
    for prefix, reason in EXEMPT.items():
        if qualified == prefix or qualified.startswith(prefix + "."):
            return reason
    return None


PUBLIC = public_callables()


def test_every_name_in_all_is_walked():
    walked_modules = set(public_modules())
    for name in ac.__all__:
        obj = getattr(ac, name)
        if inspect.ismodule(obj):
            assert obj.__name__ in walked_modules, name
        elif callable(obj):
            assert f"{obj.__module__}.{obj.__qualname__}" in PUBLIC, name


def test_every_public_callable_is_registered():
    missing = sorted(name for name in PUBLIC if name not in REGISTRY and not exemption(name))
    assert not missing, (
        "public callables without an entry in tests/test_contract.py: add each "
        f"to REGISTRY (a valid call, the kind of each argument) or, with the "
        f"reason, to EXEMPT: {missing}"
    )
    stale = sorted(set(REGISTRY) - set(PUBLIC))
    assert not stale, f"REGISTRY entries for names that are not public callables: {stale}"


def parameters(qualified):
    obj = PUBLIC[qualified]
    target = obj.__init__ if inspect.isclass(obj) and dataclasses.is_dataclass(obj) else obj
    signature = inspect.signature(target)
    return [name for name in signature.parameters if name not in ("self", "cls")]


@pytest.mark.parametrize("qualified", sorted(REGISTRY))
def test_every_parameter_has_a_kind(qualified):
    case = REGISTRY[qualified]
    unclassified = [
        name
        for name in parameters(qualified)
        if name not in case.kinds and name not in case.unchecked and name not in UNCHECKED
    ]
    assert not unclassified, (
        f"{qualified}: give each parameter a kind of bad input in "
        f"REGISTRY, or say why it is unchecked: {unclassified}"
    )
    assert set(case.kinds) <= set(parameters(qualified)), qualified


def call(function, arguments):
    """function(**arguments), where "args", "kwargs" and "options" fill *args and **kwargs."""
    arguments = dict(arguments)
    args = arguments.pop("args", ())
    extra = {**arguments.pop("kwargs", {}), **arguments.pop("options", {})}
    leading = []  # the parameters before *args
    if args:
        for parameter in inspect.signature(function).parameters.values():
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                break
            leading.append(arguments.pop(parameter.name))
    return function(*leading, *args, **arguments, **extra)


@pytest.mark.parametrize(
    "qualified", sorted(name for name, case in REGISTRY.items() if case.run_valid)
)
def test_the_valid_example_runs(qualified):
    function, arguments = REGISTRY[qualified].build()
    call(function, arguments)


BAD_CALLS = [
    (qualified, parameter, bad)
    for qualified, case in sorted(REGISTRY.items())
    for parameter, bad_values in case.kinds.items()
    for bad in bad_values
]


@pytest.mark.parametrize(
    "qualified, parameter, bad",
    BAD_CALLS,
    ids=[f"{q.removeprefix('attention_course.')}-{p}-{b.label}" for q, p, b in BAD_CALLS],
)
def test_bad_input_raises_naming_the_argument(qualified, parameter, bad):
    function, arguments = REGISTRY[qualified].build()
    arguments = dict(arguments)
    arguments[parameter] = bad.make(arguments.get(parameter))
    with pytest.raises(Exception) as raised:
        call(function, arguments)
    error = raised.value
    assert type(error) is bad.error, (
        f"{bad.label} {parameter}: expected {bad.error.__name__}, got "
        f"{type(error).__name__}: {error}"
    )
    assert re.search(rf"(?<![\w]){re.escape(parameter)}(?![\w])", str(error)), (
        f"{bad.label} {parameter}: the message does not name {parameter!r}: {error}"
    )


def test_exemptions_are_for_names_that_exist():
    for prefix in EXEMPT:
        assert any(name == prefix or name.startswith(prefix + ".") for name in PUBLIC), prefix


# ---------------------------------------------------------------------------- the NaN policy


def nan_rows(tensor):
    """Which rows (last axis reduced) hold a NaN."""
    return torch.isnan(tensor).any(-1)


def qkv_with_nan(where, index, dtype=torch.float64):
    q, k, v = (
        randn(2, 5, 4, dtype=dtype),
        randn(2, 6, 4, dtype=dtype, seed=1),
        randn(2, 6, 3, dtype=dtype, seed=2),
    )
    {"query": q, "key": k, "value": v}[where][0, index, 0] = math.nan
    return q, k, v


@pytest.mark.parametrize("where, index", [("query", 2), ("key", 4), ("value", 1)])
def test_a_nan_input_propagates_as_in_pytorch(where, index):
    q, k, v = qkv_with_nan(where, index)
    theirs = F.scaled_dot_product_attention(q, k, v)
    ours, weights = ac.scaled_dot_product_attention(q, k, v)
    tiled_output, _ = ac.flash_attention(q, k, v, block_size=2)
    assert torch.equal(nan_rows(ours), nan_rows(theirs))
    assert torch.equal(nan_rows(tiled_output), nan_rows(theirs))
    assert nan_rows(ours)[1].logical_not().all()  # the other sequence is untouched
    expected_rows = {"query": [index], "key": range(5), "value": range(5)}[where]
    assert nan_rows(ours)[0].nonzero().flatten().tolist() == list(expected_rows)


def test_a_blocked_key_is_never_read():
    q, k, v = qkv_with_nan("key", 4)
    allowed = torch.ones(5, 6, dtype=torch.bool)
    allowed[:, 4] = False
    output, weights = ac.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    assert torch.isfinite(output).all() and (weights[..., 4] == 0).all()
    causal, _ = ac.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.isfinite(causal[0, :4]).all() and nan_rows(causal)[0, 4]
    scores = randn(2, 3, 4, dtype=torch.float64)
    scores[0, :, 3] = math.nan
    weights = ac.masked_softmax(scores, torch.tensor([3, 4]))
    assert torch.isfinite(weights[0]).all() and nan_rows(weights)[1].logical_not().all()
    assert nan_rows(ac.masked_softmax(scores))[0].all()  # read, it propagates


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_or_plus_inf_in_a_float_mask_spoils_its_row_as_in_pytorch(value):
    q, k, v = qkv_with_nan("query", 0)
    q = q.nan_to_num()
    bias = torch.zeros(5, 6, dtype=torch.float64)
    bias[3, 2] = value
    ours, _ = ac.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert torch.equal(nan_rows(ours), nan_rows(theirs))
    assert nan_rows(ours)[:, 3].all() and nan_rows(ours).sum() == 2


def test_minus_inf_in_a_float_mask_blocks_and_a_fully_blocked_row_is_zero():
    q, k, v = (t.nan_to_num() for t in qkv_with_nan("query", 0))
    bias = torch.zeros(5, 6, dtype=torch.float64)
    bias[1] = -math.inf
    bias[2, :3] = -math.inf
    q.requires_grad_(True)
    output, weights = ac.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert (output[:, 1] == 0).all() and (weights[:, 1] == 0).all()
    assert (weights[:, 2, :3] == 0).all()
    torch.testing.assert_close(
        output[:, [0, 2, 3, 4]],
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias)[:, [0, 2, 3, 4]],
    )
    output.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_numbers_passed_as_arguments_are_checked_for_nan():
    for call_with_nan in (
        lambda: ac.nadaraya_watson(randn(3), randn(4), randn(4), math.nan),
        lambda: ac.scaled_dot_product_attention(**qkv(), scale=math.nan),
        lambda: ac.dot_product_scores(randn(2, 3), randn(4, 3), math.nan),
        lambda: ac.apply_rotary(randn(3, 4), base=math.nan),
        lambda: ac.masked_softmax(randn(2, 3, 4), torch.tensor([1.0, math.nan])),
    ):
        with pytest.raises(ValueError):
            call_with_nan()


def test_nan_is_not_checked_inside_tensors():
    """Inputs are not scanned: a NaN query goes through every function that takes one."""
    x = torch.tensor([0.0, math.nan, 2.0])
    values = ac.target_function(x)
    assert torch.isnan(values[1]) and torch.isfinite(values[[0, 2]]).all()
    assert torch.isnan(ac.apply_rotary(x[None, :2].expand(2, 2))).any()
    predictions, _ = ac.nadaraya_watson(x, torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]))
    assert torch.isnan(predictions).tolist() == [False, True, False]


def test_the_contract_is_documented_beside_the_package():
    contract = (pathlib.Path(ac.__file__).with_name("CONTRACT.md")).read_text()
    for phrase in (
        "TypeError naming the argument",
        "ValueError naming the argument",
        "Fully masked rows",
        "NaN and infinities inside tensors are not checked",
    ):
        assert phrase in contract, phrase
    assert "CONTRACT.md" in ac.__doc__


# ------------------------------------------------------------------ checked once on every path


SHAPES_FILE = inspect.getsourcefile(importlib.import_module("attention_course._shapes"))


def checks_made(function, arguments):
    """The argument checks a valid call makes: (check, argument name, id of the value) for every
    call of a `require_*` or `check_*` function of `_shapes` made from outside `_shapes` (a check
    calling another is one check), recorded with a profiler hook."""
    made = []

    def profile(frame, event, arg):
        code = frame.f_code
        if (
            event == "call"
            and code.co_filename == SHAPES_FILE
            and code.co_name.startswith(("require_", "check_"))
            and frame.f_back is not None
            and frame.f_back.f_code.co_filename != SHAPES_FILE
        ):
            values = frame.f_locals
            if not code.co_argcount:  # require_same_dtype(name, t, name, t...)
                named = values[code.co_varnames[0]]
                made.append((code.co_name, named[::2], tuple(map(id, named[1::2]))))
                return
            first = code.co_varnames[0]
            name = values[first] if isinstance(values[first], str) else first
            value = values.get(code.co_varnames[1]) if code.co_argcount > 1 else None
            made.append((code.co_name, name, id(value)))

    sys.setprofile(profile)
    try:
        call(function, arguments)
    finally:
        sys.setprofile(None)
    return made


@pytest.mark.parametrize(
    "qualified", sorted(name for name, case in REGISTRY.items() if case.run_valid)
)
def test_no_argument_is_checked_twice_on_one_path(qualified):
    """Check once, at the door: a valid call checks each (argument, value) at most once, however
    many layers it passes through (a model's layers, a kernel, the helper a door calls)."""
    function, arguments = REGISTRY[qualified].build()
    made = checks_made(function, arguments)
    repeated = sorted({entry for entry in made if made.count(entry) > 1})
    assert not repeated, f"checked more than once: {repeated}"


# ------------------------------------------------------------- Part V: bad input, completed
# (issue 32's adversarial pass over chapters 15-17; the chunked forms of linear attention and the
# delta rule on empty dimensions and on closed gates are tested in tests/test_linear.py:
# test_chunked_forms_of_an_empty_dimension_equal_the_unchunked_ones and
# test_a_decay_that_closes_the_gate_gives_the_formulas_finite_answer)

# (weight, a wrong shape that leaves the sizes read from the other weights as they are)
WRONG_DEEPSEEK_SHAPES = [
    ("kv_a_proj_with_mqa.weight", (6, 15)),
    ("kv_b_proj.weight", (14, 5)),
    ("o_proj.weight", (16, 7)),
    ("q_a_proj.weight", (6, 15)),
    ("q_a_proj.weight", (5, 16)),
    ("q_b_proj.weight", (12, 7)),
]


def full_rank_query_state_dict():
    """deepseek_state_dict without a query latent: q_proj (2 * 6, 16)."""
    state = {
        name: tensor
        for name, tensor in deepseek_state_dict().items()
        if not name.startswith(("q_a_", "q_b_"))
    }
    return {**state, "q_proj.weight": randn(12, 16)}


@pytest.mark.parametrize("name, shape", WRONG_DEEPSEEK_SHAPES + [("q_proj.weight", (12, 15))])
def test_from_deepseek_names_a_weight_of_the_wrong_shape(name, shape):
    state = deepseek_state_dict() if name != "q_proj.weight" else full_rank_query_state_dict()
    right = tuple(state[name].shape)
    state[name] = randn(*shape)
    with pytest.raises(ValueError) as raised:
        latent.MultiHeadLatentAttention.from_deepseek(state, num_heads=2)
    assert name in str(raised.value) and str(shape) in str(raised.value)
    assert str(right) in str(raised.value)


@pytest.mark.parametrize("name, shape", WRONG_DEEPSEEK_SHAPES)
def test_sparse_from_deepseek_names_a_weight_of_the_wrong_shape(name, shape):
    state = deepseek_v32_state_dict()
    right = tuple(state[name].shape)
    state[name] = randn(*shape)
    with pytest.raises(ValueError) as raised:
        sparse.DeepSeekSparseAttention.from_deepseek(state, num_heads=2, top_k=2)
    assert name in str(raised.value) and str(shape) in str(raised.value)
    assert str(right) in str(raised.value)


@pytest.mark.parametrize(
    "model_type, layer_types",
    [
        ("gpt_oss", ["sliding_attention", "full_attention", "sliding_attention"]),
        ("gpt_oss", ["sliding_attention"]),
        ("gpt_oss", []),
        ("qwen3_next", ["linear_attention"]),
        ("qwen3_next", []),
    ],
)
def test_attention_costs_refuses_layer_types_that_disagree_with_the_layer_count(
    model_type, layer_types
):
    """transformers' own configs refuse them (layer_type_validation); an empty list would
    count zero layers."""
    config = duck_typed_config()
    config.model_type, config.layer_types = model_type, layer_types
    with pytest.raises(ValueError, match="num_hidden_layers is 2|at least one layer"):
        costs.attention_costs(config, seq_len=8)


def test_every_public_definition_names_its_chapter():
    """d2l's back-link: every public definition's docstring ends with the chapter that teaches
    it ("Chapter 11." or "Chapters 8-9."), so that a learner who meets it later finds it."""
    ending = re.compile(r"Chapters? \d+[^\n]*\.$")
    missing = sorted(
        name
        for name, obj in PUBLIC.items()
        if not ending.search((inspect.getdoc(obj) or "").strip())
    )
    assert not missing, f"{len(missing)} docstrings without their chapter: {missing}"
