"""Input validation: the checks every public function and layer makes once, at the door,
keeping the contract for bad input stated in the package's docstring (`help(attention_course)`).

`require_*` check one argument; `check_*` check the arguments that several layers take alike
(queries, keys and values; a sequence of embeddings; head counts; positions; a window).
Checks cost attribute reads and comparisons of Python values, never a pass over a tensor's
data (except where a range must be checked: ids, lengths), so they can sit on hot paths.
"""

import itertools
import math
import numbers

import torch

HALF_PRECISION = (torch.float16, torch.bfloat16)  # computed in float32
TOKEN_ID_DTYPES = (torch.int64, torch.int32)  # what nn.Embedding reads
RANKS = tuple(range(2, 8))  # (L, E) to (b1, ..., b5, L, E)


def shape_of(tensor):
    """The shape of a tensor as a plain tuple, for error messages."""
    return tuple(tensor.shape)


def type_name(value):
    """What a value is, for error messages: its type's name."""
    return type(value).__name__


def require_tensor(name, value):
    """Raise TypeError unless `value` is a torch.Tensor."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type_name(value)}")


def require_rank(name, tensor, ranks):
    """Raise ValueError unless `tensor.dim()` is one of `ranks` (an int or a tuple of ints)."""
    require_tensor(name, tensor)
    allowed = (ranks,) if isinstance(ranks, int) else ranks
    if tensor.dim() not in allowed:
        wanted = " or ".join(str(r) for r in allowed)
        raise ValueError(f"{name} must have {wanted} dimensions, got shape {shape_of(tensor)}")


def require_float(name, tensor, ranks=None):
    """A tensor of floating-point numbers (any float dtype), of one of `ranks` if given."""
    if ranks is None:
        require_tensor(name, tensor)
    else:
        require_rank(name, tensor, ranks)
    if not tensor.dtype.is_floating_point:
        raise ValueError(
            f"{name} {shape_of(tensor)} must hold floating-point numbers (float64, float32, "
            f"float16 or bfloat16), got {tensor.dtype}"
        )


def is_integer_dtype(dtype):
    """True for the integer dtypes (int8 ... int64, uint8 ...), False for bool, float, complex."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def require_integer(name, tensor, ranks=None, what="integers"):
    """A tensor of integers (not bool), of one of `ranks` if given."""
    if ranks is None:
        require_tensor(name, tensor)
    else:
        require_rank(name, tensor, ranks)
    if not is_integer_dtype(tensor.dtype):
        raise ValueError(f"{name} {shape_of(tensor)} must hold {what}, got {tensor.dtype}")


def require_same_dtype(*named):
    """Raise ValueError unless the tensors (given as name, tensor, name, tensor, ...) share a
    dtype: PyTorch's products refuse mixed float dtypes."""
    tensors = named[1::2]
    first = tensors[0].dtype
    if len(tensors) == 3 and tensors[1].dtype == first and tensors[2].dtype == first:
        return  # the common case, without a generator
    if any(tensor.dtype != first for tensor in tensors[1:]):
        listed = ", ".join(
            f"{name} {shape_of(tensor)} {tensor.dtype}" for name, tensor in zip(named[::2], tensors)
        )
        raise ValueError(f"{listed} must share a dtype: convert them with .to(dtype)")


def require_dtype_of(name, tensor, dtype, owner):
    """Raise ValueError unless `tensor` has `dtype`, the dtype of `owner` (e.g. "the layer's
    weights"): a module computes in its own weights' dtype."""
    if tensor.dtype != dtype:
        raise ValueError(
            f"{name} {shape_of(tensor)} is {tensor.dtype} but {owner} are {dtype}: convert "
            f"one of them (tensor.to(dtype) or module.to(dtype))"
        )


def is_integer(value):
    """True for a Python or NumPy integer, False for a bool, a float or anything else."""
    return type(value) is int or (
        isinstance(value, numbers.Integral) and not isinstance(value, bool)
    )


def require_int(name, value, minimum=None, message=None):
    """An integer (not a bool): TypeError otherwise; ValueError if below `minimum`.
    `message`, if given, is the ValueError's text (for messages the course already shows)."""
    if not is_integer(value):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type_name(value)})")
    if minimum is not None and value < minimum:
        raise ValueError(message or f"{name} must be an integer >= {minimum}, got {value!r}")


def require_number(name, value, minimum=None, *, strict=False, maximum=None):
    """A real number (int or float, not a bool), finite: TypeError if not a number, ValueError
    if NaN, infinite, below `minimum` (or equal to it when `strict`) or above `maximum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type_name(value)})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and (value < minimum or (strict and value == minimum)):
        bound = f"> {minimum}" if strict else f">= {minimum}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value!r}")


def require_same_length(name_a, a, name_b, b, dim_a=0, dim_b=0):
    """Raise ValueError unless `a.shape[dim_a] == b.shape[dim_b]`."""
    if a.shape[dim_a] != b.shape[dim_b]:
        raise ValueError(
            f"{name_a} {shape_of(a)} and {name_b} {shape_of(b)} disagree on size: "
            f"dimension {dim_a} is {a.shape[dim_a]}, dimension {dim_b} is {b.shape[dim_b]}"
        )


def require_finite(name, tensor):
    """Raise ValueError if `tensor` holds a NaN or an infinity."""
    if not torch.isfinite(tensor).all():
        raise ValueError(f"{name} of shape {shape_of(tensor)} holds NaN or infinite values")


def require_positive(name, value):
    """Raise ValueError unless every entry of `value` (a number or a tensor of numbers) is > 0
    (NaN is not); TypeError if it is neither a number nor a tensor of numbers."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or value.dtype.is_complex:
            raise ValueError(f"{name} {shape_of(value)} must hold real numbers, got {value.dtype}")
        positive = bool((value > 0).all())
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        positive = value > 0  # False for NaN
    else:
        raise TypeError(f"{name} must be a number or a tensor, got {value!r} ({type_name(value)})")
    if not positive:
        raise ValueError(f"{name} must be positive, got {value}")


def require_instance(name, value, kind, what=None):
    """Raise TypeError unless `value` is an instance of `kind` (a class or a tuple of them);
    `what` names the expected kind in the message (default: the class's name)."""
    if not isinstance(value, kind):
        what = what or getattr(kind, "__name__", str(kind))
        raise TypeError(f"{name} must be {what}, got {type_name(value)}")


def require_floating_dtype(name, dtype):
    """None or a floating torch.dtype: TypeError if not a dtype, ValueError if not floating."""
    if dtype is None:
        return
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {dtype!r} ({type_name(dtype)})")
    if not dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating-point dtype, got {dtype}")


def broadcast_shape(*shapes):
    """The shape that `shapes` broadcast to, or None where they do not (PyTorch's rule: sizes
    compared from the right, equal or 1). A plain-Python torch.broadcast_shapes, which costs
    tens of microseconds a call: too much for every step of a decoder."""
    result = []
    for sizes in itertools.zip_longest(*(reversed(tuple(s)) for s in shapes), fillvalue=1):
        distinct = {size for size in sizes if size != 1}
        if len(distinct) > 1:
            return None
        result.append(distinct.pop() if distinct else 1)
    return tuple(reversed(result))


# ---------------------------------------------------------------- arguments several layers take


def check_qkv(query, key, value):
    """query (..., L, E), key (..., S, E), value (..., S, Ev): floats of one dtype, batch
    dimensions that broadcast, E >= 1."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        require_float(name, tensor, RANKS)
    require_same_dtype("query", query, "key", key, "value", value)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query {shape_of(query)} and key {shape_of(key)} must share the "
            "feature size E (last dimension)"
        )
    if query.shape[-1] == 0:
        raise ValueError(
            f"query {shape_of(query)} and key {shape_of(key)} have no features "
            "(E = 0): the scale 1/sqrt(E) needs E >= 1"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key {shape_of(key)} and value {shape_of(value)} must have the same "
            "number of keys S (second-to-last dimension)"
        )
    if broadcast_shape(query.shape[:-2], key.shape[:-2], value.shape[:-2]) is None:
        raise ValueError(
            f"the batch dimensions of query {shape_of(query)}, key {shape_of(key)} "
            f"and value {shape_of(value)} do not broadcast"
        )


def check_scale(scale, query):
    """None (-> 1 / sqrt(E), E = query's last dimension) or a finite number -> the scale."""
    if scale is None:
        return 1 / math.sqrt(query.shape[-1])
    require_number("scale", scale)
    return scale


def check_attn_mask(attn_mask, is_causal, scores_shape):
    """attn_mask None, or bool/float broadcastable to the scores (..., L, S); not both it and
    is_causal (as in PyTorch)."""
    if is_causal and attn_mask is not None:
        raise ValueError("pass either attn_mask or is_causal=True, not both (as in PyTorch)")
    if attn_mask is None:
        return
    require_tensor("attn_mask", attn_mask)
    if broadcast_shape(attn_mask.shape, scores_shape) != tuple(scores_shape):
        raise ValueError(
            f"attn_mask {shape_of(attn_mask)} does not broadcast to the scores "
            f"(..., L, S) = {tuple(scores_shape)}"
        )
    if attn_mask.dtype != torch.bool and not attn_mask.dtype.is_floating_point:
        raise ValueError(
            f"attn_mask {shape_of(attn_mask)} must be bool or floating point, got {attn_mask.dtype}"
        )


def check_heads(embed_dim, num_heads):
    """num_heads >= 1 divides embed_dim."""
    require_int("embed_dim", embed_dim)
    require_int("num_heads", num_heads)
    if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
        raise ValueError(f"num_heads={num_heads} must be >= 1 and divide embed_dim={embed_dim}")


def check_kv_heads(num_heads, num_kv_heads):
    """num_kv_heads >= 1 divides num_heads."""
    require_int("num_kv_heads", num_kv_heads)
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")


def check_sequence(name, x, embed_dim, dtype):
    """x (batch, seq, embed_dim) in the dtype of the layer's weights."""
    require_float(name, x, 3)
    if x.shape[-1] != embed_dim:
        raise ValueError(f"{name} {shape_of(x)} must be (batch, seq, embed_dim={embed_dim})")
    require_dtype_of(name, x, dtype, "the layer's weights")


def check_grouped(q, k, v, names=("q", "k", "v")):
    """q (batch, H, L, d), k (batch, H_kv, S, d), v (batch, H_kv, S, d_v) with H a multiple
    of H_kv; `names`: the caller's argument names."""
    q_name, k_name, v_name = names
    for name, tensor in zip(names, (q, k, v)):
        require_float(name, tensor, 4)
    require_same_dtype(q_name, q, k_name, k, v_name, v)
    if (
        q.shape[0] != k.shape[0]
        or k.shape[:3] != v.shape[:3]
        or k.shape[1] < 1
        or q.shape[1] % k.shape[1]
        or q.shape[-1] != k.shape[-1]
        or q.shape[-1] < 1
    ):
        raise ValueError(
            f"{q_name} {shape_of(q)}, {k_name} {shape_of(k)} and {v_name} "
            f"{shape_of(v)} must be (batch, H, L, d), (batch, H_kv, S, d) and "
            "(batch, H_kv, S, d_v) with H a multiple of H_kv and d >= 1"
        )


def check_positions(positions, seq, device):
    """None (-> 0 .. seq - 1) or integer positions (seq,) -> positions on `device`."""
    if positions is None:
        return torch.arange(seq, device=device)
    require_tensor("positions", positions)
    if positions.shape != (seq,):
        raise ValueError(
            f"positions {shape_of(positions)} must be (seq,) = ({seq},), one position per token"
        )
    require_integer("positions", positions)
    return positions.to(device)


def check_window(window, sinks):
    """window None or >= 1; sinks >= 0, and only with a window."""
    if window is not None:
        require_int("window", window, 1)
    require_int("sinks", sinks, 0)
    if sinks and window is None:
        raise ValueError("sinks need a window: without one every token is kept")


def check_rope_head_dim(head_dim, name="head_dim"):
    """RoPE turns pairs of dimensions: an even head size >= 2."""
    require_int(name, head_dim)
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"{name} must be even and >= 2 for RoPE, got {head_dim}")
