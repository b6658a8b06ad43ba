"""attention_course: the tested helper package shared by every chapter of the course.

The contract for bad input, kept by every public function, class and method
(tests/test_contract.py walks them all with a table of bad inputs; the exceptions are
`checks`, whose functions take a learner's code and report every failure as CheckFailed, and
the loaders of the course's files, which take no tensors):

- The wrong kind of object (a list or None where a tensor is meant, a float or a bool where an
  integer count is meant, a module of another class, a string where a number is meant) raises
  TypeError naming the argument and what it got.
- The right kind of object with a wrong value raises ValueError naming the argument and its
  shape: a wrong rank or shape, sizes that disagree, a dtype that does not fit, a count below
  its minimum (0 where it is meaningless: a head size, a number of heads, a block size), ids,
  positions or lengths out of range, a number out of its range (a bandwidth <= 0, a NaN).
- Dtypes: scores, queries, keys, values, inputs and attention weights hold floating-point
  numbers (float64, float32, float16, bfloat16); the tensors of one call, and a layer's own
  weights, share one dtype, and results come back in it. Token ids are int64 or int32 tensors
  (what an embedding reads), positions integer tensors, lengths (`valid_lens`) integer tensors
  or whole-number floats.

Fully masked rows: a query with no allowed key gets weights of exactly 0 and an output of 0,
never NaN, with finite gradients. A key is not allowed when a bool mask blocks it, when it lies
past the row's `valid_len`, or when its score (or its float-mask entry) is -inf; so a row of
scores that are all -inf is a fully masked row (`masked_softmax`, `scaled_dot_product_attention`
alike; PyTorch's own softmax gives NaN there).

NaN and infinities inside tensors are not checked, which would cost a pass over every input (and
a wait for the GPU) on every call: they propagate as in PyTorch. A NaN in a query, key, value,
score or float-mask entry makes NaN the outputs that depend on it and no others: a NaN query its
own row; a NaN key every row that may attend to it; a NaN value every row that attends to it,
and perhaps rows whose weight on it is 0, since 0 * NaN is NaN (which ones depends on the
implementation, as among PyTorch's backends). A key blocked by a bool mask, by `valid_lens` or
by the causal mask is never read, so a NaN score there is harmless; a float mask is added to the
scores, so NaN + (-inf) is still NaN there, and +inf in a float mask is not a block (its row is
NaN), as in PyTorch. The package adds no NaN of its own: no 0/0 in an empty row, 0 log 0 taken
as 0, a zero vector's cosine score 0. What is checked: numbers passed as plain arguments (a
bandwidth, a temperature, a scale, a RoPE base: NaN raises ValueError), the keys a
KernelRegression stores (once, when stored), and `valid_lens` given as floats (NaN is not a
whole number).
"""

from . import (
    attention,
    checks,
    config,
    costs,
    data,
    decoding,
    latent,
    linear,
    masking,
    measure,
    multihead,
    plotting,
    pooling,
    positions,
    pretrained,
    rotary,
    scoring,
    sinks,
    sparse,
    tiled,
)
from .attention import AdditiveAttention, attention_entropy, scaled_dot_product_attention
from .costs import AttentionCosts, attention_costs, hybrid_cache_bytes
from .config import DecoderConfig
from .decoding import KVCache, TinyDecoder
from .data import load_mcycle, load_zen_of_python, make_synthetic_regression, split_data, target_function
from .latent import LatentCache, MultiHeadLatentAttention, latent_cache_bytes
from .linear import delta_rule, linear_attention
from .masking import causal_mask, decoding_mask, masked_softmax, valid_lens_mask
from .multihead import GroupedQueryAttention, MultiHeadAttention, kv_cache_bytes
from .plotting import plot_attention, plot_attention_schematic, plot_regression
from .positions import sinusoidal_positional_encoding
from .rotary import apply_rotary, rotary_frequencies
from .rotary import rotary_attention_factor
from .sinks import sink_attention, sink_softmax
from .sparse import DeepSeekSparseAttention, LightningIndexer, top_k_mask
from .tiled import flash_attention
from .pooling import (
    KernelRegression,
    kernel_scores,
    leave_one_out_mse,
    nadaraya_watson,
    select_bandwidth,
)
from .scoring import (
    SIMILARITIES,
    cosine_scores,
    dot_product_scores,
    rbf_scores,
    scaled_dot_product_scores,
    soft_nearest_neighbours,
)

__version__ = "0.1.0"

__all__ = [
    "AdditiveAttention",
    "apply_rotary",
    "AttentionCosts",
    "DecoderConfig",
    "DeepSeekSparseAttention",
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "KernelRegression",
    "KVCache",
    "LatentCache",
    "LightningIndexer",
    "MultiHeadLatentAttention",
    "TinyDecoder",
    "SIMILARITIES",
    "attention",
    "attention_costs",
    "attention_entropy",
    "causal_mask",
    "checks",
    "config",
    "costs",
    "cosine_scores",
    "data",
    "decoding",
    "decoding_mask",
    "delta_rule",
    "dot_product_scores",
    "flash_attention",
    "hybrid_cache_bytes",
    "kernel_scores",
    "kv_cache_bytes",
    "latent",
    "latent_cache_bytes",
    "linear",
    "linear_attention",
    "leave_one_out_mse",
    "load_mcycle",
    "load_zen_of_python",
    "make_synthetic_regression",
    "masked_softmax",
    "masking",
    "measure",
    "multihead",
    "nadaraya_watson",
    "plot_attention",
    "plot_attention_schematic",
    "plot_regression",
    "plotting",
    "pooling",
    "positions",
    "pretrained",
    "rbf_scores",
    "rotary",
    "rotary_attention_factor",
    "rotary_frequencies",
    "scaled_dot_product_attention",
    "scaled_dot_product_scores",
    "scoring",
    "select_bandwidth",
    "sink_attention",
    "sink_softmax",
    "sinks",
    "sinusoidal_positional_encoding",
    "soft_nearest_neighbours",
    "sparse",
    "split_data",
    "target_function",
    "tiled",
    "top_k_mask",
    "valid_lens_mask",
]
