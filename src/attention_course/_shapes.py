"""Input validation shared by the package: every failure is a ValueError that names the shapes."""

import itertools

import torch


def shape_of(tensor):
    """The shape of a tensor as a plain tuple, for error messages."""
    return tuple(tensor.shape)


def require_tensor(name, value):
    """Raise ValueError unless `value` is a torch.Tensor."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")


def require_rank(name, tensor, ranks):
    """Raise ValueError unless `tensor.dim()` is one of `ranks` (an int or a tuple of ints)."""
    require_tensor(name, tensor)
    allowed = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    if tensor.dim() not in allowed:
        wanted = " or ".join(str(r) for r in allowed)
        raise ValueError(
            f"{name} must have {wanted} dimensions, got shape {shape_of(tensor)}"
        )


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
    """Raise ValueError unless every entry of `value` (a number or tensor) is > 0."""
    tensor = torch.as_tensor(value)
    if not (tensor > 0).all():
        raise ValueError(f"{name} must be positive, got {value}")


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
