"""What a model's attention costs per token (attention_course.costs, chapter 17), against the
pinned transformers itself.

(a) Cache bytes: for each supported family a tiny model (2-6 layers, the real layer pattern,
    random weights, eager attention) runs a prompt with use_cache=True, and every tensor its
    cache holds is summed, layer by layer. Where transformers holds something else than what
    the formula counts, the test computes what transformers holds from the config and asserts
    the exact relation: a sliding layer keeps w - 1 tokens between steps (the next query is
    the w-th), where attention_costs counts the w tokens that the step reads. Everything else
    is equal: transformers caches MLA's latents and RoPE keys (not expanded keys), DSA's
    indexer keys beside them, and a linear layer's state (float32) and its convolution's K
    inputs (the model's dtype).
(b) FLOPs: torch's FlopCounterMode on the transformers attention layers, decoding one token
    after n cached ones. What grows with n (slopes between context lengths) must equal the
    package's slope; the attention core (the bmm products, plus the expansion of the latents
    where transformers runs MLA explicitly) must equal the package's count exactly. The
    absorbed MLA path, which transformers does not run, is checked against a formula derived
    here and against the course's own MultiHeadLatentAttention(absorb=True). A linear layer's
    constant is counted with an elementwise-operation counter on transformers' recurrent
    step functions (FlopCounterMode counts matrix products only, and these have none).
(c) The released configs' defaults, read from transformers' config classes.

The conventions tested (attention_course.costs counts them so):

Symbols: n tokens in the sequence (`seq_len`), the newest one included; H
query heads, H_kv key-value heads, d_h the size of a head's queries and keys,
d_v of its values; w a sliding window; b bytes per number
(`bytes_per_element`: 2 for bfloat16, 4 for float32) and b_s the bytes of a
linear layer's state (`state_bytes_per_element`).

Layer kinds and what each holds for one sequence (`cache_bytes`):

- "full": softmax attention over every token, a key and a value of H_kv d_h
  numbers per token: 2 n H_kv d_h b bytes (`kv_cache_bytes`, chapter 9).
- "sliding": the same over the last w tokens only, min(n, w) tokens. The
  window is transformers' `sliding_window`: a query reads itself and the
  w - 1 tokens before it (its mask allows key s for query t when t - w < s <=
  t). Between two steps transformers' `DynamicSlidingWindowLayer` keeps w - 1
  tokens (the next query brings the w-th); this module counts the w that the
  step reads, as it counts n, the newest token's key and value included, for
  a full layer.
- "latent": multi-head latent attention (MLA; DeepSeek-V2, V3; Kimi Linear's
  attention layers, there without RoPE): per token a latent c of d_c numbers
  (`kv_lora_rank`) and one RoPE key of d_R (`qk_rope_head_dim`) shared by the
  heads: n (d_c + d_R) b bytes (`latent_cache_bytes`, chapter 15), which is
  what transformers caches.
- "sparse latent": DeepSeek Sparse Attention (DSA, DeepSeek-V3.2): MLA whose
  query reads only the k = min(`index_topk`, n) keys that a lightning indexer
  picks. Its cache is MLA's plus the indexer's key of d_I (`index_head_dim`)
  numbers per token: n (d_c + d_R + d_I) b bytes. (The indexer keys are
  counted at b bytes, as transformers holds them; serving engines such as
  LightLLM keep them in FP8 with float32 scales per block.)
- "linear": a gated delta rule layer (Qwen3-Next's Gated DeltaNet, Kimi
  Linear's KDA) of H_s heads, each with a state of d_k x d_v numbers, plus the
  window of its short causal convolution over q, k and v: K inputs of C
  channels (K = `linear_conv_kernel_dim`; C = 2 H_k d_k + H_s d_v for
  Qwen3-Next, whose H_k = `linear_num_key_heads` query-key heads serve H_s =
  `linear_num_value_heads` value heads; C = 3 H_s d for Kimi Linear, d_k = d_v
  = d = `linear_head_dim`): H_s d_k d_v b_s + K C b bytes, whatever n. These
  are the shapes transformers allocates (its state in float32, the window in
  the model's dtype; chapter 16). The next step reads K - 1 of the K inputs.

Which layer is which, read from the config as transformers' modeling code
reads it:

- "llama": every layer full (its config has no `layer_types`).
- "qwen3", "gemma3_text", "gpt_oss": `config.layer_types`, with
  `sliding_window` for the sliding layers. Qwen3's config derives it: layer i
  slides when `use_sliding_window` is true and i >= `max_window_layers` (its
  `sliding_window` is None otherwise; the released Qwen3 checkpoints do not
  slide). Gemma 3: five sliding layers, then a full one; gpt-oss: sliding and
  full alternately, sliding first, w = 128.
- "deepseek_v3": every layer MLA ("latent"); the multi-token-prediction
  module, used for speculative decoding, is not counted.
- "deepseek_v32": every layer DSA ("sparse latent").
- "qwen3_next": `layer_types` "linear_attention" (Gated DeltaNet) and
  "full_attention" (gated softmax attention with GQA: "full").
- "kimi_linear": "linear_attention" (KDA) and "full_attention", which is MLA
  without RoPE: "latent".

Arithmetic (`flops_per_token`): the attention core of ONE new token reading a
context of n tokens (its own included), in every layer: 2 FLOPs per
multiply-add, projections excluded (W_Q, W_K, W_V, W_O, MLA's down and up
projections, the indexer's W_Q and weights, the gates). Not counted either: the
softmax (max, exp, sum, division), the 1/sqrt(d) scale, masks, gpt-oss's sink
logit, normalisations, the indexer's ReLU and its top-k selection:
elementwise work that FLOP counts of matrix products leave out. Per layer:

- "full": scores q . k over n keys, 2 n H d_h, and the weighted sum of values,
  2 n H d_v: 2 n H (d_h + d_v). Query heads count, not KV heads: grouped
  queries share keys, not arithmetic.
- "sliding": the same with min(n, w) keys.
- "latent", `mla_path="absorbed"` (the default; DeepSeek-V2's decoding): W_UK
  folded into each head's query and W_UV applied after the weighted sum, so a
  head's keys are the latents with the shared RoPE key, (c, k_R), and its
  values the latents: scores 2 n H (d_c + d_R), weighted sum 2 n H d_c. The
  two absorption products themselves, q_h^T W_UK^(h) and W_UV^(h) applied to
  the weighted latent, are NOT included: like projections they cost a
  constant per token, 2 H d_c (d_h + d_v) (as much as expanding one token's
  latent), and a deployment can fold them into W_Q and W_O.
- "latent", `mla_path="expanded"`: what transformers runs (explicit MLA from a
  latent cache): every cached latent expanded into H keys and values at every
  step, 2 n d_c H (d_h + d_v), then attention with keys of d_h + d_R and
  values of d_v, 2 n H (d_h + d_R + d_v).
- "sparse latent": the indexer scores all n keys with H_I heads
  (`index_n_heads`) of d_I numbers, 2 n H_I d_I, and sums the heads' ReLU'd
  scores with per-head weights, 2 n H_I; then MLA (either path) over
  k = min(index_topk, n) keys. transformers' eager code runs dense MLA over
  all n keys with a mask instead; the sparse count is what DSA needs.
- "linear": a constant, per head (the state S, d_k x d_v; transformers'
  `torch_recurrent_gated_delta_rule`, `recurrent_kimi_delta_attention`):
  decay S <- gamma S, d_k d_v multiplications (gamma one number per head for
  Gated DeltaNet, one per key channel for KDA); state read S^T k, 2 d_k d_v;
  delta correction delta = beta (v - S^T k), 2 d_v; state update
  S <- S + k delta^T, 2 d_k d_v; output read S^T q, 2 d_k d_v. In all
  H_s (7 d_k d_v + 2 d_v). Not counted: the L2 normalisation of q and k, q's
  1/sqrt(d_k), exp of the gates, the output norm and gate, and the short
  convolution (2 K C per token, a per-token constant like the projections).

Sources: the configs and modeling files of transformers 5 (DeepseekV3,
DeepseekV32, Qwen3Next, KimiLinear, GptOss, Gemma3, Qwen3, Llama);
DeepSeek-AI, "DeepSeek-V2" (2024, MLA and its absorbed form) and
"DeepSeek-V3.2-Exp" (2025, DSA's lightning indexer); Yang, Kautz and
Hatamizadeh, "Gated Delta Networks" (ICLR 2025); Kimi Team, "Kimi Linear"
(2025); OpenAI, "gpt-oss-120b & gpt-oss-20b model card" (2025); Gemma Team,
"Gemma 3 technical report" (2025); Kaplan et al., "Scaling laws for neural
language models" (2020), for 2 FLOPs per multiply-add and the attention term.
"""

import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from attention_course import LatentCache, MultiHeadLatentAttention
from attention_course.costs import AttentionCosts, attention_costs, hybrid_cache_bytes

transformers = pytest.importorskip("transformers")
qwen3_next = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
kimi_linear = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")

aten = torch.ops.aten
WINDOW = 5  # the tiny models' sliding window, smaller than the prompts
COMMON = dict(
    vocab_size=50,
    hidden_size=32,
    intermediate_size=48,
    num_attention_heads=4,
    attn_implementation="eager",
)
MLA = dict(
    num_key_value_heads=4,
    kv_lora_rank=12,
    qk_rope_head_dim=4,
    qk_nope_head_dim=6,
    v_head_dim=5,
    n_routed_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=16,
)
DEEPSEEK = dict(MLA, q_lora_rank=10, n_group=2, topk_group=1, first_k_dense_replace=1)
TOP_K = 7  # the tiny DSA's index_topk


def tiny_config(family):
    """A tiny transformers config of each family, with its real layer pattern."""
    made = {
        "llama": lambda: transformers.LlamaConfig(
            num_hidden_layers=2, num_key_value_heads=2, **COMMON
        ),
        # layers i >= max_window_layers slide: full, full, sliding, sliding
        "qwen3": lambda: transformers.Qwen3Config(
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=8,
            use_sliding_window=True,
            sliding_window=WINDOW,
            max_window_layers=2,
            **COMMON,
        ),
        # five sliding layers, then a full one
        "gemma3_text": lambda: transformers.Gemma3TextConfig(
            num_hidden_layers=6, num_key_value_heads=2, head_dim=8, sliding_window=WINDOW, **COMMON
        ),
        # sliding and full alternately
        "gpt_oss": lambda: transformers.GptOssConfig(
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=8,
            sliding_window=WINDOW,
            num_local_experts=4,
            num_experts_per_tok=2,
            **COMMON,
        ),
        "deepseek_v3": lambda: transformers.DeepseekV3Config(
            num_hidden_layers=2, **DEEPSEEK, **COMMON
        ),
        "deepseek_v32": lambda: transformers.DeepseekV32Config(
            num_hidden_layers=2,
            index_topk=TOP_K,
            index_head_dim=8,
            index_n_heads=3,
            **DEEPSEEK,
            **COMMON,
        ),
        # three linear layers, then a full one; two query-key heads serve four value heads
        "qwen3_next": lambda: transformers.Qwen3NextConfig(
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=8,
            linear_key_head_dim=6,
            linear_value_head_dim=5,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
            **COMMON,
        ),
        # linear layers and, at index 4, an MLA layer
        "kimi_linear": lambda: transformers.KimiLinearConfig(
            num_hidden_layers=5,
            linear_head_dim=6,
            linear_num_heads=3,
            num_experts=4,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            **{**MLA, "n_routed_experts": 4},
            **COMMON,
        ),
    }[family]()
    assert made.model_type == family
    return made


FAMILIES = [
    "llama",
    "qwen3",
    "gemma3_text",
    "gpt_oss",
    "deepseek_v3",
    "deepseek_v32",
    "qwen3_next",
    "kimi_linear",
]
MODELS = {}


def tiny_model(family):
    if family not in MODELS:
        torch.manual_seed(0)
        MODELS[family] = transformers.AutoModelForCausalLM.from_config(tiny_config(family)).eval()
    return MODELS[family]


def prompt(n, seed=0):
    return torch.randint(
        0, COMMON["vocab_size"], (1, n), generator=torch.Generator().manual_seed(seed)
    )


def run_prompt(model, n):
    with torch.no_grad():
        return model(prompt(n), use_cache=True).past_key_values


# ------------------------------------------------------------------------ (a) cache bytes


def held_tensors(cache_layer):
    """{name: tensor} of every tensor a transformers cache layer holds, the tensors in its
    dicts (a linear layer's conv_states and recurrent_states) included."""
    held = {}
    for name, value in vars(cache_layer).items():
        if isinstance(value, torch.Tensor):
            held[name] = value
        elif isinstance(value, dict):
            held.update(
                {
                    f"{name}[{key}]": item
                    for key, item in value.items()
                    if isinstance(item, torch.Tensor)
                }
            )
    return held


def nbytes(tensor):
    return tensor.numel() * tensor.element_size()


def kv_token_bytes(config, b):
    """A key and a value of one token in one softmax layer."""
    return 2 * config.num_key_value_heads * config.head_dim * b


WHAT_IS_HELD = {
    "full": {"keys", "values"},
    "sliding": {"keys", "values"},
    "latent": {"keys", "values"},
    "sparse latent": {"keys", "values", "indexer_keys"},
    "linear": {"conv_states[0]", "recurrent_states[0]"},
}


def transformers_holds(config, kind, n, b):
    """Bytes transformers' cache layer holds after a prompt of n tokens, from the config:
    what the cache classes of cache_utils keep, derived independently of the package."""
    if kind == "full":
        return n * kv_token_bytes(config, b)
    if kind == "sliding":  # DynamicSlidingWindowLayer: the last w - 1
        return min(n, config.sliding_window - 1) * kv_token_bytes(config, b)
    if kind in ("latent", "sparse latent"):  # latents and RoPE keys, DSA's indexer keys
        latent = n * (config.kv_lora_rank + config.qk_rope_head_dim) * b
        return latent + (n * config.index_head_dim * b if kind == "sparse latent" else 0)
    if config.model_type == "qwen3_next":  # a float32 state and K conv inputs
        heads, d_k, d_v = (
            config.linear_num_value_heads,
            config.linear_key_head_dim,
            config.linear_value_head_dim,
        )
        channels = 2 * config.linear_num_key_heads * d_k + heads * d_v
    else:
        heads, d_k = config.linear_num_heads, config.linear_head_dim
        d_v, channels = d_k, 3 * heads * d_k
    return heads * d_k * d_v * 4 + config.linear_conv_kernel_dim * channels * b


@pytest.mark.parametrize("n", [3, 9])
@pytest.mark.parametrize("family", FAMILIES)
def test_cache_bytes_against_transformers_caches(family, n):
    model = tiny_model(family)
    config = model.config
    cache = run_prompt(model, n)
    ours = attention_costs(config, n, bytes_per_element=4, state_bytes_per_element=4)
    assert len(cache.layers) == len(ours.layer_kinds) == config.num_hidden_layers
    theirs = []
    for index, (layer, kind) in enumerate(zip(cache.layers, ours.layer_kinds)):
        held = held_tensors(layer)
        if kind == "sliding":  # bookkeeping, not cached content
            assert held.pop("_sliding_window_tensor").item() == config.sliding_window
        assert set(held) == WHAT_IS_HELD[kind], (index, kind, set(held))
        assert all(t.dtype == torch.float32 for t in held.values())
        theirs.append(sum(nbytes(t) for t in held.values()))
        assert theirs[-1] == transformers_holds(config, kind, n, 4), (index, kind)
        if kind in ("latent", "sparse latent"):  # the latents, not expanded keys
            assert held["keys"].shape[-1] == config.kv_lora_rank
            assert held["values"].shape[-1] == config.qk_rope_head_dim
        # the only difference: a sliding layer between steps lacks the step's own token
        missing = kv_token_bytes(config, 4) if kind == "sliding" and n >= WINDOW else 0
        assert ours.layer_cache_bytes[index] == theirs[-1] + missing, (index, kind)
    slides = ours.layer_kinds.count("sliding")
    assert ours.cache_bytes == sum(theirs) + (
        slides * kv_token_bytes(config, 4) if n >= WINDOW else 0
    )


def test_the_tiny_models_have_their_families_layer_patterns():
    kinds = {family: attention_costs(tiny_config(family), 8).layer_kinds for family in FAMILIES}
    assert kinds["llama"] == ("full",) * 2
    assert kinds["qwen3"] == ("full", "full", "sliding", "sliding")
    assert kinds["gemma3_text"] == ("sliding",) * 5 + ("full",)
    assert kinds["gpt_oss"] == ("sliding", "full") * 2
    assert kinds["deepseek_v3"] == ("latent",) * 2
    assert kinds["deepseek_v32"] == ("sparse latent",) * 2
    assert kinds["qwen3_next"] == ("linear",) * 3 + ("full",)
    assert kinds["kimi_linear"] == ("linear",) * 4 + ("latent",)


@pytest.mark.parametrize("family", ["qwen3_next", "kimi_linear"])
def test_bfloat16_models_keep_float32_states(family):
    """The defaults, bytes_per_element=2 and state_bytes_per_element=4, are what a bfloat16
    model's cache holds: transformers keeps the delta rule's state in float32."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(family)).eval()
    cache = run_prompt(model.to(torch.bfloat16), 9)
    held = [held_tensors(layer) for layer in cache.layers]
    linear = [tensors for tensors in held if "recurrent_states[0]" in tensors]
    assert linear and all(t["recurrent_states[0]"].dtype == torch.float32 for t in linear)
    assert all(t["conv_states[0]"].dtype == torch.bfloat16 for t in linear)
    total = sum(nbytes(t) for tensors in held for t in tensors.values())
    assert attention_costs(model.config, 9).cache_bytes == total


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3_text", "gpt_oss"])
@pytest.mark.parametrize("n", [3, 5, 9])
def test_hybrid_cache_bytes_counts_each_layers_tokens(family, n):
    config = tiny_config(family)
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * 2
    window = getattr(config, "sliding_window", None)
    tokens = sum(n if name == "full_attention" else min(n, window) for name in layer_types)
    expected = 3 * tokens * 2 * config.num_key_value_heads * config.head_dim * 2
    got = hybrid_cache_bytes(
        layer_types=layer_types,
        seq_len=n,
        window=window,
        num_kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        batch_size=3,
        bytes_per_element=2,
    )
    assert got == expected
    assert got == 3 * attention_costs(config, n).cache_bytes


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="allowed.*full_attention.*sliding_attention"):
        hybrid_cache_bytes(layer_types=["global"], seq_len=4, window=2, num_kv_heads=1, head_dim=4)
    with pytest.raises(ValueError, match="window"):
        hybrid_cache_bytes(
            layer_types=["sliding_attention"], seq_len=4, window=None, num_kv_heads=1, head_dim=4
        )
    with pytest.raises(ValueError, match="supported.*llama.*kimi_linear"):
        attention_costs(types.SimpleNamespace(model_type="bert"), 4)
    with pytest.raises(TypeError, match="config"):
        attention_costs({"model_type": "llama"}, 4)
    with pytest.raises(TypeError, match="config.head_dim"):
        attention_costs(
            types.SimpleNamespace(
                model_type="llama",
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=2.0,
            ),
            4,
        )
    with pytest.raises(ValueError, match="config.layer_types"):
        config = tiny_config("qwen3_next")
        config.layer_types = ["linear_attention", "sliding_attention"] * 2
        attention_costs(config, 4)


# ------------------------------------------------------------------------------ (b) FLOPs


def attention_modules(model):
    """{layer index: FlopCounterMode's name of that layer's attention module}."""
    prefix = type(model).__name__ + ".model.layers"
    return {
        index: f"{prefix}.{index}."
        + ("linear_attn" if hasattr(layer, "linear_attn") else "self_attn")
        for index, layer in enumerate(model.model.layers)
    }


def decode_flops(model, n):
    """FlopCounterMode's counts, {module name: {op: FLOPs}}, of decoding one token after a
    prompt of n cached tokens: the new token reads n + 1 keys."""
    ids = prompt(n + 1, seed=n)
    with torch.no_grad():
        cache = model(ids[:, :n], use_cache=True).past_key_values
        with FlopCounterMode(display=False) as counter:
            model(ids[:, n:], past_key_values=cache, use_cache=True)
    return counter.get_flop_counts()


def layer_totals(model, counts):
    return {index: sum(counts[name].values()) for index, name in attention_modules(model).items()}


def core_flops(model, counts, config, index):
    """The attention core of layer `index`, from FlopCounterMode: the bmm products (scores,
    weighted sums; the indexer's), plus the expansion of the latents (kv_b_proj) where
    transformers runs MLA explicitly; not the projections of the new token."""
    name = attention_modules(model)[index]
    core = counts[name].get(aten.bmm, 0)
    expansion = counts.get(name + ".kv_b_proj", {}).get(aten.mm, 0)
    return core + expansion


# cached tokens before the decoded one: below the window (and DSA's top-k), then above
SHORT, LONGER = (1, 3), (8, 12, 16)


@pytest.mark.parametrize("family", FAMILIES)
def test_flop_slopes_equal_transformers_decoding(family):
    """What grows with the context: FlopCounterMode's slope, layer by layer, equals the
    package's (MLA on the expanded path that transformers runs). Linear layers: slope 0."""
    model = tiny_model(family)
    config = model.config
    for contexts in (SHORT, LONGER):
        measured = [layer_totals(model, decode_flops(model, n)) for n in contexts]
        ours = [attention_costs(config, n + 1, mla_path="expanded").layer_flops for n in contexts]
        for step in range(len(contexts) - 1):
            cached = contexts[step + 1] - contexts[step]
            for index, kind in enumerate(attention_costs(config, 1).layer_kinds):
                slope = measured[step + 1][index] - measured[step][index]
                our_slope = ours[step + 1][index] - ours[step][index]
                if kind == "sparse latent" and contexts[step] + 1 >= TOP_K:
                    # transformers' eager DSA: dense MLA over every key, with a mask
                    dense = cached * expanded_mla_per_key(config)
                    assert slope == our_slope + dense, (index, contexts)
                    assert our_slope == cached * indexer_per_key(config)
                else:
                    assert slope == our_slope, (family, index, kind, contexts)
                if kind == "linear" or (kind == "sliding" and contexts is LONGER):
                    assert slope == 0


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("n", [3, 12])
def test_attention_core_equals_flop_counter_exactly(family, n):
    model = tiny_model(family)
    config = model.config
    counts = decode_flops(model, n)
    ours = attention_costs(config, n + 1, mla_path="expanded")
    for index, kind in enumerate(ours.layer_kinds):
        if kind == "linear":  # no matrix product: see the tests below
            assert core_flops(model, counts, config, index) == 0
            continue
        measured = core_flops(model, counts, config, index)
        if kind == "sparse latent":
            dense = (n + 1) * expanded_mla_per_key(config)
            selected = min(TOP_K, n + 1) * expanded_mla_per_key(config)
            assert measured == ours.layer_flops[index] - selected + dense
        else:
            assert measured == ours.layer_flops[index], (index, kind)


def expanded_mla_per_key(config):
    """transformers' explicit MLA per cached key: kv_b_proj expands the latent (d_c) into H
    keys (d_h) and values (d_v), then scores over d_h + d_R and the weighted sum over d_v."""
    heads, d_c = config.num_attention_heads, config.kv_lora_rank
    d_h, d_r, d_v = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
    return 2 * d_c * heads * (d_h + d_v) + 2 * heads * (d_h + d_r) + 2 * heads * d_v


def indexer_per_key(config):
    """DSA's lightning indexer per key: H_I heads' dot products over d_I, then the weighted
    sum of the H_I ReLU'd scores."""
    return 2 * config.index_n_heads * config.index_head_dim + 2 * config.index_n_heads


def absorbed_mla_per_key(config):
    """Absorbed MLA per key, derived here: each head's query, moved into the latent space,
    dots the latent and the shared RoPE key (d_c + d_R multiply-adds), and the weighted sum
    runs over the latents (d_c multiply-adds)."""
    return config.num_attention_heads * (
        2 * (config.kv_lora_rank + config.qk_rope_head_dim) + 2 * config.kv_lora_rank
    )


@pytest.mark.parametrize("family", ["deepseek_v3", "kimi_linear", "deepseek_v32"])
def test_absorbed_mla_count_against_a_formula(family):
    config = tiny_config(family)
    per_key = absorbed_mla_per_key(config)
    if family == "deepseek_v32":
        per_key += indexer_per_key(config)
    for n in (2, 5):
        first, second = (attention_costs(config, seq_len) for seq_len in (n, n + 1))
        for index, kind in enumerate(first.layer_kinds):
            if kind in ("latent", "sparse latent"):
                assert second.layer_flops[index] - first.layer_flops[index] == per_key
    if family == "deepseek_v32":  # past top-k keys only the indexer grows
        above = [attention_costs(config, seq_len).flops_per_token for seq_len in (30, 31)]
        assert above[1] - above[0] == config.num_hidden_layers * indexer_per_key(config)


def test_absorbed_count_equals_the_course_latent_layer_decoding():
    """FlopCounterMode on the course's MultiHeadLatentAttention(absorb=True) decoding one
    token after n cached ones: its slope is the package's absorbed count; absorb=False,
    which expands the latents every step as transformers does, is the expanded count."""
    config = tiny_config("deepseek_v3")
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(
        config.hidden_size,
        config.num_attention_heads,
        kv_rank=config.kv_lora_rank,
        q_rank=config.q_lora_rank,
        head_dim=config.qk_nope_head_dim,
        rope_dim=config.qk_rope_head_dim,
        value_dim=config.v_head_dim,
    )

    def decoding(n, absorb):
        x = torch.randn(1, n + 1, config.hidden_size, generator=torch.Generator().manual_seed(n))
        cache = LatentCache()
        with torch.no_grad():
            layer(x[:, :n], cache, absorb=absorb)
            with FlopCounterMode(display=False) as counter:
                layer(x[:, n:], cache, absorb=absorb)
        return counter.get_total_flops()

    for absorb, path in ((True, "absorbed"), (False, "expanded")):
        flops = [decoding(n, absorb) for n in (4, 9)]
        ours = [attention_costs(config, n + 1, mla_path=path).layer_flops[0] for n in (4, 9)]
        assert flops[1] - flops[0] == ours[1] - ours[0] > 0


class ArithmeticCounter(TorchDispatchMode):
    """Counts elementwise arithmetic on floating tensors: one FLOP per output number of add,
    sub, mul, div, and one per input number of a sum (a sum of m numbers as m additions, the
    convention of 2 FLOPs per multiply-add). exp, sqrt, rsqrt, copies: not counted."""

    ELEMENTWISE = {
        aten.add,
        aten.sub,
        aten.mul,
        aten.div,
        aten.add_,
        aten.sub_,
        aten.mul_,
        aten.div_,
    }

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func.overloadpacket
        if packet in self.ELEMENTWISE and out.dtype.is_floating_point:
            self.flops += out.numel()
        elif packet is aten.sum:
            self.flops += args[0].numel()
        elif packet in (aten.mm, aten.bmm, aten.addmm, aten.matmul):
            raise AssertionError(f"a matrix product: {func}")
        return out


def one_recurrent_step(family, heads, d_k, d_v, mode):
    """transformers' recurrent delta-rule function on one token with a state, as decoding
    calls it (q, k L2-normalised in the kernel), run under `mode`, which it returns."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(1, 1, *shape, generator=gen)

    q, k, v = rand(heads, d_k), rand(heads, d_k), rand(heads, d_v)
    beta = rand(heads).sigmoid()
    state = torch.randn(1, heads, d_k, d_v, generator=gen)
    if family == "qwen3_next":
        step, g = qwen3_next.torch_recurrent_gated_delta_rule, -rand(heads).abs()
    else:  # KDA: one decay per key channel
        step, g = kimi_linear.recurrent_kimi_delta_attention, -rand(heads, d_k).abs()
    with mode:
        step(
            q,
            k,
            v,
            g=g,
            beta=beta,
            initial_state=state,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )
    return mode


def package_linear_flops(family, heads, d_k, d_v):
    """attention_costs of one linear layer, from a config naming only what it reads."""
    if family == "qwen3_next":
        config = types.SimpleNamespace(
            model_type=family,
            num_hidden_layers=1,
            layer_types=["linear_attention"],
            linear_num_value_heads=heads,
            linear_num_key_heads=heads,
            linear_key_head_dim=d_k,
            linear_value_head_dim=d_v,
            linear_conv_kernel_dim=4,
        )
    else:
        assert d_k == d_v  # Kimi Linear's heads are square
        config = types.SimpleNamespace(
            model_type=family,
            num_hidden_layers=1,
            layer_types=["linear_attention"],
            linear_num_heads=heads,
            linear_head_dim=d_k,
            linear_conv_kernel_dim=4,
        )
    return attention_costs(config, 10).flops_per_token


@pytest.mark.parametrize("family", ["qwen3_next", "kimi_linear"])
def test_linear_layer_constant_against_transformers_recurrent_step(family):
    """FlopCounterMode sees no FLOPs in the recurrent step (elementwise work only), so its
    operations are counted one by one. The count is the package's H (7 d_k d_v + 2 d_v) plus
    the normalisations the package leaves out, derived from transformers' code: per head,
    q and k L2-normalised (x * x, its sum, + eps, and x * or / the norm: 3 d_k + 1 each) and q
    scaled by 1 / sqrt(d_k) (d_k): 7 d_k + 2, which does not depend on d_v."""
    heads = 3
    flop_counter = one_recurrent_step(family, heads, 4, 4, FlopCounterMode(display=False))
    assert flop_counter.get_total_flops() == 0
    shapes = [(4, 4), (6, 6), (8, 8)] + ([(4, 5), (6, 3), (8, 7)] if family == "qwen3_next" else [])
    for d_k, d_v in shapes:
        counted = one_recurrent_step(family, heads, d_k, d_v, ArithmeticCounter()).flops
        normalisations = heads * (2 * (3 * d_k + 1) + d_k)
        assert counted == package_linear_flops(family, heads, d_k, d_v) + normalisations


def test_linear_layer_cost_does_not_grow_with_the_context():
    config = tiny_config("qwen3_next")
    short, long = attention_costs(config, 10), attention_costs(config, 10_000)
    for kind, a, b, fa, fb in zip(
        short.layer_kinds,
        short.layer_cache_bytes,
        long.layer_cache_bytes,
        short.layer_flops,
        long.layer_flops,
    ):
        assert (a == b and fa == fb) == (kind == "linear")


# ------------------------------------------------------------------ (c) the released configs


def test_gpt_oss_alternates_sliding_and_full_layers_with_a_window_of_128():
    config = transformers.GptOssConfig()
    assert config.layer_types == ["sliding_attention", "full_attention"] * (
        config.num_hidden_layers // 2
    )
    assert config.sliding_window == 128
    costs = attention_costs(config, 100_000)
    assert costs.layer_kinds == ("sliding", "full") * (config.num_hidden_layers // 2)
    per_token = 2 * config.num_key_value_heads * config.head_dim * 2
    assert costs.layer_cache_bytes[0] == 128 * per_token
    assert costs.layer_cache_bytes[1] == 100_000 * per_token


def test_gemma3_has_five_sliding_layers_per_full_one():
    config = transformers.Gemma3TextConfig()
    kinds = attention_costs(config, 10).layer_kinds
    assert [index for index, kind in enumerate(kinds) if kind == "full"] == list(
        range(5, config.num_hidden_layers, 6)
    )
    assert [name == "full_attention" for name in config.layer_types] == [
        kind == "full" for kind in kinds
    ]


def test_qwen3_slides_only_when_asked_and_only_above_max_window_layers():
    assert set(attention_costs(transformers.Qwen3Config(), 10).layer_kinds) == {"full"}
    config = transformers.Qwen3Config(use_sliding_window=True)
    kinds = attention_costs(config, 10).layer_kinds
    assert kinds == tuple(
        "sliding" if index >= config.max_window_layers else "full"
        for index in range(config.num_hidden_layers)
    )


def test_deepseek_caches_a_latent_and_a_rope_key_per_token_and_layer():
    config = transformers.DeepseekV3Config()
    costs = attention_costs(config, 1000)
    assert costs.layer_kinds == ("latent",) * config.num_hidden_layers
    assert costs.cache_bytes == (
        1000 * config.num_hidden_layers * (config.kv_lora_rank + config.qk_rope_head_dim) * 2
    )


def test_deepseek_v32_indexer_and_top_k():
    config = transformers.DeepseekV32Config()
    assert set(config.layer_types) == {"indexed_attention"}
    top_k = config.index_topk
    costs = [attention_costs(config, n) for n in (top_k, top_k + 1, 4 * top_k)]
    indexer = config.num_hidden_layers * indexer_per_key(config)
    assert costs[1].flops_per_token - costs[0].flops_per_token == indexer
    assert costs[2].flops_per_token - costs[0].flops_per_token == 3 * top_k * indexer
    assert (
        costs[2].cache_bytes
        == 4
        * top_k
        * config.num_hidden_layers
        * (config.kv_lora_rank + config.qk_rope_head_dim + config.index_head_dim)
        * 2
    )


def test_hybrids_mix_linear_layers_with_attention():
    qwen = transformers.Qwen3NextConfig()
    kinds = attention_costs(qwen, 10).layer_kinds
    assert kinds == tuple(
        "full" if name == "full_attention" else "linear" for name in qwen.layer_types
    )
    assert kinds[:4] == ("linear", "linear", "linear", "full")
    kimi = transformers.KimiLinearConfig()
    kinds = attention_costs(kimi, 10).layer_kinds
    assert set(kinds) == {"linear", "latent"}
    assert [kind == "latent" for kind in kinds] == [
        name == "full_attention" for name in kimi.layer_types
    ]


def test_attention_costs_record():
    costs = attention_costs(tiny_config("gpt_oss"), 9)
    assert isinstance(costs, AttentionCosts)
    assert costs.cache_bytes == sum(costs.layer_cache_bytes)
    assert costs.flops_per_token == sum(costs.layer_flops)
    with pytest.raises(AttributeError):
        costs.seq_len = 10


def test_kimi_linear_with_the_released_layer_pattern():
    """The released Kimi-Linear-48B-A3B config.json lists its MLA layers (counted from 1) in
    linear_attn_config; KimiLinearConfig's default pattern differs (6 MLA layers, not 7), so
    chapter 17 passes the list: the costs must follow it layer by layer."""
    released = [4, 8, 12, 16, 20, 24, 27]
    kimi = transformers.KimiLinearConfig(
        linear_attn_config={
            "full_attn_layers": released,
            "kda_layers": [i for i in range(1, 28) if i not in released],
        }
    )
    costs = attention_costs(kimi, 1000)
    assert [i + 1 for i, kind in enumerate(costs.layer_kinds) if kind == "latent"] == released
    assert costs.layer_kinds.count("linear") == 20
    default = attention_costs(transformers.KimiLinearConfig(), 1000)
    assert default.layer_kinds.count("latent") == 6
    latent_layer = (kimi.kv_lora_rank + kimi.qk_rope_head_dim) * 1000 * 2
    assert (
        costs.cache_bytes - default.cache_bytes
        == latent_layer - (costs.layer_cache_bytes[costs.layer_kinds.index("linear")])
    )
