"""What a model's attention costs per generated token (chapter 17): the memory
its caches hold for one sequence and the arithmetic of one decoding step.

Notable:
- `attention_costs(config, seq_len)` reads a `transformers` config (duck-typed
  by `config.model_type`; the package does not import transformers) and
  returns an `AttentionCosts` record, layer by layer, for five layer kinds:
  full and sliding softmax attention, MLA ("latent"), DeepSeek Sparse
  Attention ("sparse latent") and gated delta rule layers ("linear"), and
  Gemma 3n's layers that reuse another layer's keys and values ("shared
  full", "shared sliding": no cache of their own); each size is checked
  once, when it is first read from the config;
- `hybrid_cache_bytes` counts the KV cache of full and sliding-window layers;
- `kv_sharing` says which layer's keys and values each layer reads under
  cross-layer KV sharing, by Gemma 3n's rule;
- FLOPs count the attention core of one new token (2 per multiply-add),
  projections excluded. Every term and convention, with its source:
  tests/test_costs.py, which checks them against transformers itself.
"""

import dataclasses

from ._shapes import require_int, type_name
from .multihead import kv_cache_bytes

LAYER_KINDS = (
    "full",
    "sliding",
    "latent",
    "sparse latent",
    "linear",
    "shared full",
    "shared sliding",
)
MLA_PATHS = ("absorbed", "expanded")
# transformers' names of attention layers in `config.layer_types`
HYBRID_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}
SUPPORTED_MODEL_TYPES = (
    "llama",
    "qwen3",
    "gemma3_text",
    "gemma3n_text",
    "gpt_oss",
    "deepseek_v3",
    "deepseek_v32",
    "qwen3_next",
    "kimi_linear",
)


@dataclasses.dataclass(frozen=True)
class AttentionCosts:
    """attention_costs' answer for one sequence of `seq_len` tokens: per layer
    its kind (LAYER_KINDS), cache bytes and FLOPs of one decoding step; and
    their sums, `cache_bytes` and `flops_per_token`. Chapter 17."""

    model_type: str
    seq_len: int
    layer_kinds: tuple
    layer_cache_bytes: tuple
    layer_flops: tuple
    cache_bytes: int = dataclasses.field(init=False)
    flops_per_token: int = dataclasses.field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "cache_bytes", sum(self.layer_cache_bytes))
        object.__setattr__(self, "flops_per_token", sum(self.layer_flops))


def hybrid_cache_bytes(
    *, layer_types, seq_len, window, num_kv_heads, head_dim, batch_size=1, bytes_per_element=2
):
    """Bytes of the KV caches of a stack of layers named as transformers'
    `config.layer_types` ("full_attention", "sliding_attention"): a full layer
    holds seq_len tokens, a sliding one min(seq_len, window); each token a key
    and a value of num_kv_heads * head_dim numbers. window may be None when no
    layer slides. Chapter 17."""
    kinds = _hybrid_kinds(layer_types)
    # kv_cache_bytes checks the other sizes; it is called once, below
    require_int(
        "seq_len", seq_len, 1, message=f"seq_len must be a positive integer, got {seq_len!r}"
    )
    if window is None and "sliding" in kinds:
        raise ValueError(
            "window must be a positive integer when layer_types has sliding layers, got None"
        )
    if window is not None:
        require_int(
            "window", window, 1, message=f"window must be a positive integer, got {window!r}"
        )
    tokens = sum(seq_len if kind == "full" else min(seq_len, window) for kind in kinds)
    return (
        kv_cache_bytes(
            batch_size=batch_size,
            seq_len=1,
            num_layers=1,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            bytes_per_element=bytes_per_element,
        )
        * tokens
    )


def kv_sharing(layer_types, num_kv_shared_layers):
    """Which layer's keys and values each layer of a stack attends to under
    cross-layer KV sharing, by Gemma 3n's rule (transformers'
    Gemma3nTextAttention): the layers are named as transformers'
    `config.layer_types` ("full_attention", "sliding_attention"); the last
    num_kv_shared_layers of them compute no keys or values and keep no cache,
    each reading those of the last earlier layer of its own type that keeps
    its own. -> tuple, entry i the index of the layer whose keys and values
    layer i reads (i itself where it keeps its own). Chapter 17."""
    kinds = _hybrid_kinds(layer_types)
    require_int("num_kv_shared_layers", num_kv_shared_layers, 0)
    if num_kv_shared_layers >= len(kinds):
        raise ValueError(
            f"num_kv_shared_layers must leave at least one layer that keeps its own keys and "
            f"values: got {num_kv_shared_layers} of {len(kinds)} layers"
        )
    return tuple(_kv_sources(kinds, num_kv_shared_layers))


def _kv_sources(kinds, num_shared):
    """kv_sharing for checked kinds ("full"/"sliding") and a checked count."""
    first_shared = len(kinds) - num_shared
    # the last layer of each kind before sharing starts keeps the K/V to share
    last_own = {kind: index for index, kind in enumerate(kinds[:first_shared])}
    sources = list(range(first_shared))
    for index in range(first_shared, len(kinds)):
        if kinds[index] not in last_own:
            raise ValueError(
                f"layer_types: shared layer {index} is {kinds[index]!r}, but no layer before "
                f"layer {first_shared} (where sharing starts) is of that type to share with"
            )
        sources.append(last_own[kinds[index]])
    return sources


def attention_costs(
    config, seq_len, *, bytes_per_element=2, state_bytes_per_element=4, mla_path="absorbed"
):
    """AttentionCosts of the model a transformers `config` describes, for one
    sequence of seq_len tokens: each layer's kind, the bytes its cache holds
    (b = bytes_per_element; b_s = state_bytes_per_element for linear layers'
    states) and the FLOPs of one new token's attention (MLA on `mla_path`,
    "absorbed" or "expanded"); config.layer_types, where the model has them,
    must list config.num_hidden_layers layers. Chapter 17."""
    model_type = _model_type(config)
    for name, value in (
        ("seq_len", seq_len),
        ("bytes_per_element", bytes_per_element),
        ("state_bytes_per_element", state_bytes_per_element),
    ):
        require_int(name, value, 1, message=f"{name} must be a positive integer, got {value!r}")
    if not isinstance(mla_path, str):
        raise TypeError(f"mla_path must be a str, got {type_name(mla_path)}")
    if mla_path not in MLA_PATHS:
        raise ValueError(f"mla_path must be one of {MLA_PATHS}, got {mla_path!r}")
    sizes = dict(
        seq_len=seq_len, b=bytes_per_element, b_state=state_bytes_per_element, mla_path=mla_path
    )
    config = _Sizes(config)
    kinds = _layer_kinds(config, model_type)
    # every layer of one kind costs the same: each kind is counted once
    per_kind = {kind: _LAYER_COSTS[kind](config, **sizes) for kind in dict.fromkeys(kinds)}
    costs = [per_kind[kind] for kind in kinds]
    return AttentionCosts(
        model_type,
        seq_len,
        tuple(kinds),
        tuple(cost[0] for cost in costs),
        tuple(cost[1] for cost in costs),
    )


# ------------------------------------------------------------ reading configs


def _model_type(config):
    model_type = getattr(config, "model_type", None)
    if not isinstance(model_type, str):
        raise TypeError(
            "config must be a transformers config (an object "
            f"with a model_type), got {type_name(config)}"
        )
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"config.model_type {model_type!r} is not supported: "
            f"supported are {SUPPORTED_MODEL_TYPES}"
        )
    return model_type


class _Sizes:
    """A config whose sizes are checked (positive integers) the first time
    they are read: sizes("head_dim") is config.head_dim; other attributes
    read through."""

    def __init__(self, config):
        self.config, self.checked = config, {}

    def __call__(self, name):
        if name not in self.checked:
            value = getattr(self.config, name, None)
            require_int(f"config.{name}", value, 1)
            self.checked[name] = value
        return self.checked[name]

    def __getattr__(self, name):
        return getattr(self.config, name)


def _hybrid_kinds(layer_types, name="layer_types"):
    """transformers' full/sliding layer names -> "full"/"sliding"."""
    if isinstance(layer_types, str) or not isinstance(layer_types, (list, tuple)):
        raise TypeError(
            f"{name} must be a list or tuple of layer names, got {type_name(layer_types)}"
        )
    if not layer_types:
        raise ValueError(f"{name} must name at least one layer, got []")
    for layer_type in layer_types:
        if not isinstance(layer_type, str):
            raise TypeError(f"{name} must hold str names, got {type_name(layer_type)}")
        if layer_type not in HYBRID_LAYER_TYPES:
            raise ValueError(
                f"{name}: unknown layer type {layer_type!r}, allowed: {tuple(HYBRID_LAYER_TYPES)}"
            )
    return [HYBRID_LAYER_TYPES[layer_type] for layer_type in layer_types]


# config.layer_types of the linear hybrids -> the kinds of this module
_HYBRIDS = {
    "qwen3_next": {"linear_attention": "linear", "full_attention": "full"},
    "kimi_linear": {"linear_attention": "linear", "full_attention": "latent"},
}


def _layer_kinds(config, model_type):
    layers = config("num_hidden_layers")
    if model_type == "deepseek_v3":
        return ["latent"] * layers
    if model_type == "deepseek_v32":
        return ["sparse latent"] * layers
    layer_types = getattr(config, "layer_types", None)
    if model_type in _HYBRIDS:
        names = _HYBRIDS[model_type]
        if not isinstance(layer_types, (list, tuple)) or any(
            name not in names for name in layer_types
        ):
            raise ValueError(
                f"config.layer_types must list {tuple(names)} for {model_type}, got {layer_types!r}"
            )
        kinds = [names[name] for name in layer_types]
    elif layer_types is None:  # Llama: every layer is full
        return ["full"] * layers
    else:
        kinds = _hybrid_kinds(layer_types, "config.layer_types")
    if model_type == "gemma3n_text":
        kinds = _shared_kinds(config, kinds)
    if len(kinds) != layers:  # as transformers' configs check
        raise ValueError(
            f"config.layer_types names {len(kinds)} layers, "
            f"config.num_hidden_layers is {layers}: they must "
            "agree"
        )
    return kinds


def _shared_kinds(config, kinds):
    """Gemma 3n: its last config.num_kv_shared_layers layers read the keys and
    values of an earlier layer and keep none: "shared full", "shared sliding"."""
    num_shared = getattr(config, "num_kv_shared_layers", None)
    require_int("config.num_kv_shared_layers", num_shared, 0)
    if num_shared >= len(kinds):  # transformers then shares nothing; refuse it
        raise ValueError(
            f"config.num_kv_shared_layers must be below the {len(kinds)} layers of "
            f"config.layer_types, got {num_shared}"
        )
    sources = _kv_sources(kinds, num_shared)
    return [
        kind if source == index else f"shared {kind}"
        for index, (kind, source) in enumerate(zip(kinds, sources))
    ]


# ------------------------------------------------------- one layer's costs


def _head_dim(config):
    if getattr(config, "head_dim", None) is None:  # older Llama configs
        return config("hidden_size") // config("num_attention_heads")
    return config("head_dim")


def _softmax_layer(config, keys, b):
    """(bytes, FLOPs) of a GQA layer holding and reading `keys` tokens."""
    heads, head_dim = config("num_attention_heads"), _head_dim(config)
    # a key and a value of H_kv * d_h numbers for each of `keys` tokens
    cache = 2 * keys * config("num_key_value_heads") * head_dim * b
    # scores q . k and the weighted sum of values: a multiply-add per number
    return cache, 2 * keys * heads * (head_dim + head_dim)


def _full(config, *, seq_len, b, **_):
    return _softmax_layer(config, seq_len, b)


def _sliding(config, *, seq_len, b, **_):
    return _softmax_layer(config, min(seq_len, config("sliding_window")), b)


def _mla_flops(config, keys, mla_path):
    """FLOPs of one MLA query reading `keys` latents, on `mla_path`."""
    heads = config("num_attention_heads")
    d_c, d_r = config("kv_lora_rank"), config("qk_rope_head_dim")
    if mla_path == "absorbed":
        return 2 * keys * heads * ((d_c + d_r) + d_c)
    d_h, d_v = config("qk_nope_head_dim"), config("v_head_dim")
    expand = 2 * keys * d_c * heads * (d_h + d_v)
    return expand + 2 * keys * heads * ((d_h + d_r) + d_v)


def _latent(config, *, seq_len, b, mla_path, **_):
    # each token: its latent (d_c numbers) and its shared RoPE key (d_r)
    cache = (config("kv_lora_rank") + config("qk_rope_head_dim")) * seq_len * b
    return cache, _mla_flops(config, seq_len, mla_path)


def _sparse_latent(config, *, seq_len, b, mla_path, **_):
    latent_bytes, _ = _latent(config, seq_len=seq_len, b=b, mla_path=mla_path)
    index_heads = config("index_n_heads")
    index_dim = config("index_head_dim")
    indexer = 2 * seq_len * index_heads * index_dim + 2 * seq_len * index_heads
    selected = min(config("index_topk"), seq_len)
    return (
        latent_bytes + seq_len * index_dim * b,
        indexer + _mla_flops(config, selected, mla_path),
    )


def _linear_shapes(config):
    """(heads, d_k, d_v, convolution channels) of a linear layer."""
    if config.model_type == "kimi_linear":
        heads, dim = config("linear_num_heads"), config("linear_head_dim")
        return heads, dim, dim, 3 * heads * dim
    heads = config("linear_num_value_heads")
    d_k = config("linear_key_head_dim")
    d_v = config("linear_value_head_dim")
    channels = 2 * config("linear_num_key_heads") * d_k + heads * d_v
    return heads, d_k, d_v, channels


def _linear(config, *, b, b_state, **_):
    heads, d_k, d_v, channels = _linear_shapes(config)
    window = config("linear_conv_kernel_dim") * channels
    per_head = (
        d_k * d_v  # decay: S <- gamma S
        + 2 * d_k * d_v  # state read: S^T k
        + 2 * d_v  # delta correction: beta (v - S^T k)
        + 2 * d_k * d_v  # state update: S + k delta^T
        + 2 * d_k * d_v
    )  # output read: S^T q
    return heads * d_k * d_v * b_state + window * b, heads * per_head


def _shared(own_kind):
    """A layer that reads another layer's keys and values: it keeps no cache
    and does the attention arithmetic of its kind."""

    def cost(config, **sizes):
        return 0, _LAYER_COSTS[own_kind](config, **sizes)[1]

    return cost


_LAYER_COSTS = {
    "full": _full,
    "sliding": _sliding,
    "latent": _latent,
    "sparse latent": _sparse_latent,
    "linear": _linear,
    "shared full": _shared("full"),
    "shared sliding": _shared("sliding"),
}
