"""attention_course: the tested helper package shared by every chapter of the course.

- one module per topic, named in README.md's layout map; every public definition's docstring
  ends with the chapter that teaches it;
- every public name checks its arguments once, at the door (a clear TypeError or ValueError
  naming the argument and its shape; fully masked rows give zeros, never NaN), then calls the
  trusted kernels in `_kernels`; the rules, NaN included, are in CONTRACT.md beside this file;
- `checks`: the exercises' self-checks, one module per chapter;
- `measure`: the one timer and the memory probes the chapters use.
"""

from . import (
    attention,
    checks,
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
    pretrained,
    rotary,
    scoring,
    serving,
    sinks,
    sparse,
    tiled,
    triton_flash,
    widgets,
)
from .attention import AdditiveAttention, attention_entropy, scaled_dot_product_attention
from .config import DecoderConfig
from .costs import AttentionCosts, attention_costs, hybrid_cache_bytes, kv_sharing
from .data import (
    load_mcycle,
    load_zen_of_python,
    make_synthetic_regression,
    split_data,
    target_function,
)
from .decoding import KVCache, TinyDecoder
from .deltanet import DeltaNetCache, GatedDeltaNet
from .diagrams import (
    draw_chunked_state,
    draw_decoder_block,
    draw_encoder_decoder,
    draw_latent_attention,
    draw_linear_recurrence,
    draw_rotary_pairs,
    draw_sentence_encoder,
    draw_tiled_scores,
)
from .flow_diagrams import (
    draw_flash_kernels,
    draw_flash_program,
    draw_retrieval_task,
    draw_self_attention,
)
from .head_diagrams import draw_multi_head, draw_packed_projections
from .latent import LatentCache, MultiHeadLatentAttention, latent_cache_bytes
from .linear import delta_rule, linear_attention
from .masking import causal_mask, decoding_mask, masked_softmax, valid_lens_mask
from .multihead import GroupedQueryAttention, MultiHeadAttention, kv_cache_bytes
from .paging import PagedKVCache, paged_attention
from .plotting import plot_attention, plot_attention_schematic, plot_regression
from .pooling import (
    KernelRegression,
    kernel_scores,
    leave_one_out_mse,
    nadaraya_watson,
    select_bandwidth,
)
from .positions import sinusoidal_positional_encoding
from .rotary import apply_rotary, rotary_attention_factor, rotary_frequencies
from .scoring import (
    SIMILARITIES,
    cosine_scores,
    dot_product_scores,
    rbf_scores,
    scaled_dot_product_scores,
    soft_nearest_neighbours,
)
from .serving import ContinuousBatcher, StepRecord, generate_continuous
from .sinks import gated_attention, sink_attention, sink_softmax
from .sparse import (
    DeepSeekSparseAttention,
    IndexedLatentCache,
    LightningIndexer,
    top_k_mask,
)
from .tiled import flash_attention
from .triton_flash import hbm_bytes, triton_flash_attention

__version__ = "0.1.0"

__all__ = [
    "AdditiveAttention",
    "apply_rotary",
    "AttentionCosts",
    "ContinuousBatcher",
    "DecoderConfig",
    "DeepSeekSparseAttention",
    "DeltaNetCache",
    "GatedDeltaNet",
    "GroupedQueryAttention",
    "MultiHeadAttention",
    "KernelRegression",
    "KVCache",
    "IndexedLatentCache",
    "LatentCache",
    "LightningIndexer",
    "MultiHeadLatentAttention",
    "PagedKVCache",
    "StepRecord",
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
    "deltanet",
    "delta_rule",
    "diagrams",
    "draw_chunked_state",
    "draw_decoder_block",
    "draw_encoder_decoder",
    "draw_flash_kernels",
    "draw_flash_program",
    "draw_latent_attention",
    "draw_linear_recurrence",
    "draw_multi_head",
    "draw_packed_projections",
    "draw_retrieval_task",
    "draw_rotary_pairs",
    "draw_self_attention",
    "draw_sentence_encoder",
    "draw_tiled_scores",
    "dot_product_scores",
    "flash_attention",
    "flow_diagrams",
    "gated_attention",
    "generate_continuous",
    "hbm_bytes",
    "head_diagrams",
    "hybrid_cache_bytes",
    "kernel_scores",
    "kv_cache_bytes",
    "kv_sharing",
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
    "paged_attention",
    "paging",
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
    "serving",
    "sink_attention",
    "sink_softmax",
    "sinks",
    "sinusoidal_positional_encoding",
    "soft_nearest_neighbours",
    "sparse",
    "split_data",
    "target_function",
    "tiled",
    "triton_flash",
    "triton_flash_attention",
    "top_k_mask",
    "valid_lens_mask",
    "widgets",
]
