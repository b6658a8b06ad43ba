"""attention_course: the tested helper package shared by every chapter of the course."""

from . import (
    attention,
    checks,
    data,
    decoding,
    masking,
    multihead,
    plotting,
    pooling,
    positions,
    pretrained,
    rotary,
    scoring,
    tiled,
)
from .attention import AdditiveAttention, attention_entropy, scaled_dot_product_attention
from .decoding import KVCache, TinyDecoder, decoding_mask
from .data import load_mcycle, load_zen_of_python, make_synthetic_regression, split_data, target_function
from .masking import causal_mask, masked_softmax, valid_lens_mask
from .multihead import GroupedQueryAttention, MultiHeadAttention, kv_cache_bytes
from .plotting import plot_attention, plot_attention_schematic, plot_regression
from .positions import sinusoidal_positional_encoding
from .rotary import apply_rotary, rotary_frequencies
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
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "KernelRegression",
    "KVCache",
    "TinyDecoder",
    "SIMILARITIES",
    "attention",
    "attention_entropy",
    "causal_mask",
    "checks",
    "cosine_scores",
    "data",
    "decoding",
    "decoding_mask",
    "dot_product_scores",
    "flash_attention",
    "kernel_scores",
    "kv_cache_bytes",
    "leave_one_out_mse",
    "load_mcycle",
    "load_zen_of_python",
    "make_synthetic_regression",
    "masked_softmax",
    "masking",
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
    "rotary_frequencies",
    "scaled_dot_product_attention",
    "scaled_dot_product_scores",
    "scoring",
    "select_bandwidth",
    "sinusoidal_positional_encoding",
    "soft_nearest_neighbours",
    "split_data",
    "target_function",
    "tiled",
    "valid_lens_mask",
]
