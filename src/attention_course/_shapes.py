"""Input validation shared by the package: the helpers that keep the contract for bad input,
NaN and fully masked rows stated in the package's docstring (`help(attention_course)`).

Checks here cost attribute reads and comparisons of Python values, never a pass over a tensor's
data (except where a range must be checked: ids, lengths), so they can sit on hot paths.
"""

import itertools
import math
import numbers

import torch


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
        raise ValueError(
            f"{name} must have {wanted} dimensions, got shape {shape_of(tensor)}"
        )


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
        return                                        # the common case, without a generator
    if any(tensor.dtype != first for tensor in tensors[1:]):
        listed = ", ".join(f"{name} {shape_of(tensor)} {tensor.dtype}"
                           for name, tensor in zip(named[::2], tensors))
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
        positive = value > 0                                  # False for NaN
    else:
        raise TypeError(f"{name} must be a number or a tensor, got {value!r} "
                        f"({type_name(value)})")
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
