"""Self-checks for the exercises: call `check_...(your_function)` and read what it says.

Each check runs your function on several inputs, awkward ones included, compares it with an
independent answer, and either prints one line saying all cases pass or raises `CheckFailed`
telling, in plain words, which case failed and how (wrong shape, NaN and what caused it, a row
that does not sum to one, a value off). While your answer is still the stub (it raises
`NotImplementedError`), a check prints "Not yet answered" and lets the notebook run on.

- `seed`: every check draws its cases from a seed. The default gives the cases the chapter
  shows; graders run the same check with other seeds as hidden tests, so an answer must be
  right in general, not only on the visible cases.
- Options that an exercise names (a temperature, a bandwidth) are passed to your function, with
  several values.
- An answer that calls the package's own function for the very quantity the exercise asks for
  does not pass: the exercise is to write it.
- `strict=True` (the graders' test cells): a stub fails like any wrong answer.

The checks live in one module per chapter, named after its notebook (`ch01_attention_pooling`
... `ch19_attention_in_a_serving_engine`; chapter 12's exercise 5 has its own,
`ch12_flash_autograd`, and so have chapter 17's exercises 6 and 7, `ch17_kv_sharing` and
`ch17_gated`), on the shared
helpers of `core`. Every `check_...` is importable from here, listed below by chapter."""

# chapter 1: Queries, keys, values and attention pooling
from .ch01_attention_pooling import check_kernel_weights, check_leave_one_out, check_nadaraya_watson

# chapter 2: Learning the kernel
from .ch02_learning_the_kernel import check_batched_regression, check_per_key_weights

# chapter 3: Attention as soft k-nearest neighbours
from .ch03_attention_as_soft_knn import check_temperature_for, check_top_k_attention

# chapter 4: Scaled dot-product attention
from .ch04_scaled_dot_product_attention import check_entropy, check_query_jacobian

# chapter 5: Masking: which keys a query may see
from .ch05_masking import check_causal_mask, check_masked_softmax

# chapter 6: Attention in encoder–decoder models
from .ch06_encoder_decoder_attention import check_bidirectional_states, check_dot_product_step

# chapter 7: Self-attention
from .ch07_self_attention import check_positional_encoding, check_self_attention

# chapter 8: Multi-head attention
from .ch08_multi_head_attention import check_mha_parameter_count, check_split_heads

# chapter 9: Grouped-query and multi-query attention
from .ch09_grouped_query_attention import check_kv_cache_bytes, check_repeat_kv

# chapter 10: Rotary position embeddings (RoPE)
from .ch10_rotary_position_embeddings import (
    check_llama3_frequencies,
    check_next_token_losses,
    check_rotary,
    check_rotary_attention,
)

# chapter 11: Decoding with a KV cache
from .ch11_decoding_with_a_kv_cache import (
    check_cache_append,
    check_generate_cached,
    check_sliding_window_mask,
)

# chapter 12, exercise 5: FlashAttention-2 as an autograd Function
from .ch12_flash_autograd import check_flash_autograd

# chapter 12: Online softmax and tiled attention
from .ch12_tiled_attention import check_causal_tiles, check_online_softmax_update

# chapter 13: Inside a pretrained model
from .ch13_inside_a_pretrained_model import check_ablate_head, check_previous_word_targets

# chapter 14: Inside a real decoder language model
from .ch14_inside_a_decoder_language_model import (
    check_half_split_rows,
    check_induction_targets,
    check_key_patched_weights,
    check_logit_attribution,
    check_streaming_positions,
)

# chapter 15: Multi-head latent attention
from .ch15_multi_head_latent_attention import (
    check_absorbed_query,
    check_decode_flop_per_byte,
    check_latent_cache_bytes,
)

# chapter 16: Linear attention and the gated delta rule
from .ch16_linear_attention import (
    check_gated_delta_step,
    check_gated_rms_norm,
    check_linear_recurrence,
    check_short_convolution,
)

# chapter 17: Sparse and hybrid attention in the models of 2025
from .ch17_gated import check_gated_attention
from .ch17_kv_sharing import check_kv_sources
from .ch17_sparse_and_hybrid_attention import (
    check_causal_top_k,
    check_hybrid_cache_bytes,
    check_index_decode_step,
    check_sink_softmax,
)

# chapter 18: FlashAttention as a GPU kernel in Triton
from .ch18_flashattention_in_triton import (
    check_forward_kernel,
    check_hbm_traffic,
    check_key_grads_kernel,
)

# chapter 19: Attention in a serving engine
from .ch19_attention_in_a_serving_engine import (
    check_admission,
    check_block_allocator,
    check_paged_decode_attention,
    check_token_slots,
)
from .core import CheckFailed, NotAnswered, check_attention_weights, weights_problem
