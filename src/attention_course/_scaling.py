"""RoPE scaling's rules (chapter 10), shared by `rotary` and by every layer of a TinyDecoder
(`config`, `decoding`): checking a scaling dict, the rescaled frequencies, YaRN's attention
factor, and rotation with them. The public functions are in `rotary`."""

import math
from collections.abc import Mapping

import torch

from . import _kernels
from ._shapes import require_instance, require_int, require_number

# rope_type -> (required keys, optional keys) of a scaling dict
_SCALING_KEYS = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ("original_max_position_embeddings",)),
    "llama3": (
        ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
        (),
    ),
    "yarn": (
        ("factor", "original_max_position_embeddings"),
        ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
    ),
}


def _rope_type(scaling):
    if scaling is None:
        return "default"
    return scaling.get("rope_type", scaling.get("type"))


def _check_scaling(scaling, base=None, context=None, frequencies=True, name="scaling"):
    """None, or a mapping like a config's rope_parameters -> a dict; a
    "dynamic" one gets its C from context when it has none (needed only
    for its frequencies). name: the argument's name in messages."""
    if context is not None:
        require_int("context", context, 1)
    if scaling is None:
        return None
    require_instance(name, scaling, Mapping, "a dict (a config's rope_parameters) or None")
    scaling = dict(scaling)
    kind = _rope_type(scaling)
    if kind not in _SCALING_KEYS:
        raise ValueError(
            f"{name}['rope_type'] must be one of {sorted(_SCALING_KEYS)}, got {kind!r}"
        )
    required, optional = _SCALING_KEYS[kind]
    known = {"rope_type", "type", "rope_theta", *required, *optional}
    unknown = sorted(set(scaling) - known)
    missing = [key for key in required if scaling.get(key) is None]
    if unknown or missing:
        raise ValueError(
            f"{name} of rope_type {kind!r} needs {list(required)}"
            f" and may hold {sorted(known - set(required))}; "
            f"missing {missing}, unknown {unknown}"
        )
    _check_scaling_values(scaling, name)
    theta = scaling.get("rope_theta")
    if base is not None and theta is not None and theta != base:
        raise ValueError(f"{name}['rope_theta'] = {theta!r} disagrees with base = {base!r}")
    if kind == "dynamic" and frequencies:
        _dynamic_context(scaling, context, name)
    return scaling


def _dynamic_context(scaling, context, name="scaling"):
    """Put C into a "dynamic" dict: its own key, else context (transformers
    takes the config's max_position_embeddings)."""
    key = "original_max_position_embeddings"
    own = scaling.get(key)
    if own is None and context is None:
        raise ValueError(
            f"{name} of rope_type 'dynamic' needs C, the context it stretches: pass "
            "context= (the config's max_position_embeddings, as transformers uses; "
            f"a DecoderConfig's context_length) or {name}['{key}']"
        )
    if own is not None and context is not None and own != context:
        raise ValueError(f"context = {context!r} disagrees with {name}['{key}'] = {own!r}")
    scaling[key] = own if own is not None else context


def _check_scaling_values(scaling, name="scaling"):
    def number(key, minimum=None, strict=False):
        if scaling.get(key) is not None:
            require_number(f"{name}['{key}']", scaling[key], minimum, strict=strict)

    number("factor", 1)
    number("attention_factor", 0, strict=True)
    number("mscale")
    number("mscale_all_dim")
    for low, high in (("low_freq_factor", "high_freq_factor"), ("beta_slow", "beta_fast")):
        number(low, 0, strict=True)
        number(high, 0, strict=True)
        if (
            scaling.get(low) is not None
            and scaling.get(high) is not None
            and scaling[low] >= scaling[high]
        ):
            raise ValueError(
                f"{name}['{low}'] = {scaling[low]!r} must be "
                f"below {name}['{high}'] = {scaling[high]!r}"
            )
    if "original_max_position_embeddings" in scaling:
        require_int(
            f"{name}['original_max_position_embeddings']",
            scaling["original_max_position_embeddings"],
            1,
        )
    if "truncate" in scaling:
        require_instance(f"{name}['truncate']", scaling["truncate"], bool)
    mscale, all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and all_dim and _yarn_mscale(scaling["factor"], all_dim) == 0:
        raise ValueError(
            f"{name}['mscale_all_dim'] = {all_dim!r} makes YaRN's attention "
            f"factor 0.1 * {all_dim!r} * ln(factor) + 1 zero at factor = "
            f"{scaling['factor']!r}: the attention factor divides by it"
        )


def _frequencies(head_dim, base, device, dtype, scaling=None, seq_len=None):
    """theta_i = base^(-2i / d), rescaled: "linear" (Position Interpolation, Chen et al. 2023)
    divides by factor; "dynamic", "llama3", "yarn" as their functions below say. C is
    "original_max_position_embeddings", r_i = C theta_i / 2 pi the turns pair i makes over C."""
    kind = _rope_type(scaling)
    if kind == "dynamic":
        base = _dynamic_base(head_dim, base, scaling, seq_len)
    exponents = torch.arange(0, head_dim, 2, device=device, dtype=dtype)
    theta = base ** (-exponents / head_dim)
    if kind == "linear":
        return theta / scaling["factor"]
    if kind == "llama3":
        return _llama3(theta, scaling)
    if kind == "yarn":
        return _yarn(theta, head_dim, base, scaling)
    return theta


def _dynamic_base(head_dim, base, scaling, seq_len):
    """The NTK-aware base for the current length n: base * a^(d / (d - 2)),
    a = factor * n / C - (factor - 1), and a = 1 while n <= C."""
    factor = scaling["factor"]
    context = scaling["original_max_position_embeddings"]
    length = max(seq_len or context, context)
    stretch = factor * length / context - (factor - 1)
    if head_dim == 2:  # one pair, theta_0 = 1 whatever the base
        return base
    return base * stretch ** (head_dim / (head_dim - 2))


def _llama3(theta, scaling):
    """Llama 3.1: keep pairs turning more than high_freq_factor times over C,
    divide those turning fewer than low_freq_factor times, blend between."""
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    turns = scaling["original_max_position_embeddings"] * theta / (2 * math.pi)
    kept = ((turns - low) / (high - low)).clamp(0, 1)  # 1 kept, 0 divided
    return theta * (kept + (1 - kept) / scaling["factor"])


def _yarn(theta, head_dim, base, scaling):
    """YaRN: divide pair i by factor with the weight ramp_i, 0 for pairs
    turning more than beta_fast times over C, 1 below beta_slow turns, linear
    in i between (the pair indices of those turns, rounded outwards)."""
    context = scaling["original_max_position_embeddings"]

    def pair_turning(turns):  # i where C / wavelength_i = turns
        return head_dim * math.log(context / (2 * math.pi * turns)) / (2 * math.log(base))

    first = pair_turning(scaling.get("beta_fast") or 32)
    last = pair_turning(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        first, last = math.floor(first), math.ceil(last)
    first, last = max(first, 0), min(last, head_dim - 1)
    if first == last:
        last += 0.001
    pairs = torch.arange(len(theta), device=theta.device, dtype=theta.dtype)
    ramp = ((pairs - first) / (last - first)).clamp(0, 1)
    return theta * (1 - ramp + ramp / scaling["factor"])


def _yarn_mscale(factor, weight=1.0):
    return 1.0 if factor <= 1 else 0.1 * weight * math.log(factor) + 1.0


def _attention_factor(scaling):
    if _rope_type(scaling) != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = scaling["factor"]
    mscale = scaling.get("mscale")
    mscale_all_dim = scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    return _yarn_mscale(factor)


def _rotate(x, positions, base, scaling):
    """apply_rotary on checked arguments (a checked scaling dict or None);
    also every layer of a TinyDecoder (chapters 11, 14)."""
    if scaling is None:
        return _kernels.rotate(x, positions, base)
    # rescaled frequencies (in the angles' dtype) and YaRN's factor; the
    # length of "dynamic" is max(positions) + 1, as transformers takes it
    wide, _ = _kernels.compute_dtypes(x)
    length = None
    if _rope_type(scaling) == "dynamic" and positions.numel():
        length = int(positions.max()) + 1
    theta = _frequencies(x.shape[-1], base, x.device, wide, scaling, length)
    return _kernels.rotate(x, positions, theta=theta, factor=_attention_factor(scaling))


check_scaling = _check_scaling
frequencies = _frequencies
attention_factor = _attention_factor
rotate = _rotate
