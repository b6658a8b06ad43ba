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

The checks live in one module per part of the course (pooling, dot_product, models,
language_models); every `check_...` is importable from here."""

from .core import CheckFailed, NotAnswered, check_attention_weights, weights_problem
from .pooling import (
    check_nadaraya_watson,
    check_kernel_weights,
    check_leave_one_out,
    check_per_key_weights,
    check_batched_regression,
)
from .dot_product import (
    check_entropy,
    check_query_jacobian,
    check_masked_softmax,
    check_causal_mask,
    check_temperature_for,
    check_top_k_attention,
)
from .models import (
    check_dot_product_step,
    check_self_attention,
    check_positional_encoding,
    check_split_heads,
    check_mha_parameter_count,
    check_kv_cache_bytes,
    check_repeat_kv,
    check_bidirectional_states,
)
from .language_models import (
    check_rotary,
    check_rotary_attention,
    check_llama3_frequencies,
    check_sliding_window_mask,
    check_cache_append,
    check_generate_cached,
    check_online_softmax_update,
    check_causal_tiles,
    check_flash_autograd,
    check_previous_word_targets,
    check_ablate_head,
    check_half_split_rows,
    check_induction_targets,
)
from .frontier import (
    check_absorbed_query,
    check_latent_cache_bytes,
    check_linear_recurrence,
    check_gated_delta_step,
    check_sink_softmax,
    check_hybrid_cache_bytes,
    check_causal_top_k,
)
