"""Attention pooling with kernels: Nadaraya–Watson regression and a learnable bandwidth.

Notation (chapter 1): keys x_i and values y_i are the n_k training pairs, a query x asks for a
prediction, the bandwidth h > 0 sets the kernel's width and u = (x - x_i) / h is the scaled distance.
The attention weight of key i is alpha(x, x_i) = K(u_i) / sum_j K(u_j); the prediction is
sum_i alpha(x, x_i) y_i. Everything is computed in log space, log K(u), and normalised with a
softmax, which is exactly how attention turns scores into weights.
"""

import math
import numbers

import torch
from torch import nn

from ._shapes import (
    require_finite,
    require_float,
    require_positive,
    require_rank,
    require_same_dtype,
    require_same_length,
    shape_of,
    type_name,
)
from .masking import softmax


def gaussian_kernel(u):
    """Gaussian kernel exp(-u^2 / 2), up to its constant 1/sqrt(2 pi); any shape."""
    require_float("u", u)
    return torch.exp(-u**2 / 2)


def boxcar_kernel(u):
    """Boxcar (uniform) kernel: 1 where |u| <= 1 and 0 elsewhere, up to its constant 1/2."""
    require_float("u", u)
    return (u.abs() <= 1).to(u.dtype)


def epanechnikov_kernel(u):
    """Epanechnikov kernel max(0, 1 - u^2), up to its constant 3/4."""
    require_float("u", u)
    return (1 - u**2).clamp(min=0)


KERNELS = {
    "gaussian": gaussian_kernel,
    "boxcar": boxcar_kernel,
    "epanechnikov": epanechnikov_kernel,
}


def _check_kernel(kernel):
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a kernel's name (a str), got {type_name(kernel)}")
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {sorted(KERNELS)}")


def _log_kernel(u, kernel):
    """log K(u) for a kernel name; -inf where a compact kernel is zero."""
    if kernel == "gaussian":
        return -u**2 / 2  # exact, and never underflows to log(0)
    return torch.log(KERNELS[kernel](u))


def _check_bandwidth(bandwidth, keys):
    """A bandwidth is a positive number or a positive tensor of shape () or (n_keys,); a per-key
    bandwidth has the keys' dtype."""
    if isinstance(bandwidth, torch.Tensor) and bandwidth.dim() > 0:
        if bandwidth.shape != (keys.shape[0],):
            raise ValueError(
                f"a per-key bandwidth must have shape ({keys.shape[0]},) like the keys, "
                f"got {shape_of(bandwidth)}"
            )
        require_same_dtype("keys", keys, "bandwidth", bandwidth)
    require_positive("bandwidth", bandwidth)


def _check_points(**named):
    """1-D float tensors of one dtype (queries, keys, values of the regression)."""
    for name, tensor in named.items():
        require_float(name, tensor, 1)
    require_same_dtype(*(item for pair in named.items() for item in pair))


def kernel_scores(queries, keys, bandwidth=1.0, kernel="gaussian"):
    """Attention scores log K((x_q - x_i) / h): queries (n_q,), keys (n_k,) -> (n_q, n_k).

    `bandwidth` is a number or a tensor of shape (n_k,) (one width per key).
    """
    _check_points(queries=queries, keys=keys)
    _check_bandwidth(bandwidth, keys)
    _check_kernel(kernel)
    scaled_distance = (queries[:, None] - keys[None, :]) / bandwidth  # (n_q, n_k)
    return _log_kernel(scaled_distance, kernel)


def _normalise(scores, what):
    """Softmax over keys; a query whose every score is -inf has no key in reach: ValueError."""
    unreachable = torch.isneginf(scores).all(dim=-1)
    if unreachable.any():
        rows = unreachable.nonzero().flatten().tolist()
        raise ValueError(
            f"{what}: query rows {rows[:5]} of scores {shape_of(scores)} have no key within "
            "the kernel's reach (every weight would be 0/0); use a wider bandwidth or a "
            "kernel with unbounded support such as 'gaussian'"
        )
    return softmax(scores)


def _exclude_self(scores):
    """Set the diagonal of a square (n, n) score matrix to -inf: key i may not answer query i."""
    if scores.shape[0] != scores.shape[1]:
        raise ValueError(
            f"leave-one-out needs the queries to be the keys, got scores {shape_of(scores)}"
        )
    diagonal = torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
    return scores.masked_fill(diagonal, float("-inf"))


def _pool(weights, values):
    """Weighted average of values: weights (n_q, n_k), values (n_k,) or (n_k, d_v)."""
    require_float("values", values, (1, 2))
    require_same_length("weights", weights, "values", values, dim_a=1, dim_b=0)
    return weights @ values


def nadaraya_watson(queries, keys, values, bandwidth=1.0, kernel="gaussian"):
    """Nadaraya–Watson kernel regression as attention pooling.

    queries (n_q,), keys (n_k,), values (n_k,) or (n_k, d_v); bandwidth a number or (n_k,).
    Returns (predictions, weights): predictions (n_q,) or (n_q, d_v), weights (n_q, n_k) whose
    rows are non-negative and sum to 1. With a compact kernel ('boxcar', 'epanechnikov') a query
    with no key within one bandwidth raises ValueError rather than returning NaN.
    """
    require_float("values", values, (1, 2))
    _check_points(queries=queries, keys=keys)
    require_same_dtype("keys", keys, "values", values)
    require_same_length("keys", keys, "values", values)
    weights = _normalise(kernel_scores(queries, keys, bandwidth, kernel), "nadaraya_watson")
    return _pool(weights, values), weights


def leave_one_out_mse(keys, values, bandwidth=1.0, kernel="gaussian"):
    """Mean squared error of predicting each value y_i from all the other pairs: a float.

    keys (n,), values (n,). Each training point is a query whose own key is masked out, so a
    tiny bandwidth cannot cheat by copying y_i. This is the classic way to choose h from data
    alone (leave-one-out cross-validation).
    """
    _check_points(keys=keys, values=values)
    require_same_length("keys", keys, "values", values)
    scores = _exclude_self(kernel_scores(keys, keys, bandwidth, kernel))
    predictions = _pool(_normalise(scores, "leave_one_out_mse"), values)
    return torch.mean((predictions - values) ** 2).item()


def select_bandwidth(keys, values, bandwidths, kernel="gaussian"):
    """Pick the bandwidth with the smallest leave-one-out error: returns (best, errors).

    keys (n,), values (n,), bandwidths: a sequence or 1-D tensor of candidates (n_h,).
    errors is a float64 tensor (n_h,); it holds inf where a compact kernel leaves some point
    with no other key in reach, so such a bandwidth is never chosen.
    """
    _check_points(keys=keys, values=values)
    require_same_length("keys", keys, "values", values)
    _check_kernel(kernel)
    candidates = _bandwidth_candidates(bandwidths)
    errors = torch.full_like(candidates, float("inf"))
    for index, bandwidth in enumerate(candidates.tolist()):
        try:
            errors[index] = leave_one_out_mse(keys, values, bandwidth, kernel)
        except ValueError as error:
            if "no key within the kernel's reach" not in str(error):
                raise
    if torch.isinf(errors).all():
        raise ValueError(f"no bandwidth among {candidates.tolist()} reaches a neighbour "
                         f"for every one of the {keys.shape[0]} keys")
    return candidates[errors.argmin()].item(), errors


def _bandwidth_candidates(bandwidths):
    """bandwidths: a 1-D tensor or a sequence of positive numbers -> float64 tensor (n_h,)."""
    if isinstance(bandwidths, torch.Tensor):
        require_rank("bandwidths", bandwidths, 1)
        if bandwidths.dtype == torch.bool or bandwidths.dtype.is_complex:
            raise ValueError(f"bandwidths {shape_of(bandwidths)} must hold real numbers, got "
                             f"{bandwidths.dtype}")
    elif isinstance(bandwidths, (str, bytes)) or not hasattr(bandwidths, "__iter__") or not all(
            isinstance(h, numbers.Real) and not isinstance(h, bool) for h in bandwidths):
        raise TypeError(f"bandwidths must be a 1-D tensor or a sequence of numbers, got "
                        f"{bandwidths!r}")
    candidates = torch.as_tensor(bandwidths, dtype=torch.float64)
    require_rank("bandwidths", candidates, 1)
    if len(candidates) == 0 or not (candidates > 0).all():
        raise ValueError(f"bandwidths must be one or more positive numbers, got "
                         f"{candidates.tolist()}")
    return candidates


class KernelRegression(nn.Module):
    """Gaussian Nadaraya–Watson regression with a bandwidth learned by gradient descent.

    keys (n_k,) and values (n_k,) are stored as buffers. The bandwidth is kept as its logarithm,
    so it stays positive whatever the optimiser does: one shared width by default, or one width
    per key with `per_key=True` (n_k parameters, the version that overfits; see chapter 2).
    Only the Gaussian kernel is offered: a boxcar's weights do not change under a small change
    of h, so its gradient is zero almost everywhere.
    """

    def __init__(self, keys, values, bandwidth=1.0, per_key=False):
        super().__init__()
        _check_points(keys=keys, values=values)
        require_same_length("keys", keys, "values", values)
        require_finite("keys", keys)
        require_positive("bandwidth", bandwidth)
        if isinstance(bandwidth, torch.Tensor) and bandwidth.numel() != 1:
            raise ValueError(f"bandwidth {shape_of(bandwidth)} must be one number, the initial "
                             "width of every key (per_key=True makes one width per key)")
        self.register_buffer("keys", keys)
        self.register_buffer("values", values)
        shape = (keys.shape[0],) if per_key else ()
        self.log_bandwidth = nn.Parameter(
            torch.full(shape, math.log(bandwidth), dtype=keys.dtype, device=keys.device)
        )
        self.attention_weights = None

    @property
    def bandwidth(self):
        """The current bandwidth h = exp(log_bandwidth): shape () or (n_k,)."""
        return self.log_bandwidth.exp()

    def forward(self, queries, leave_one_out=False):
        """queries (n_q,) -> predictions (n_q,); keeps `.attention_weights` (n_q, n_k).

        With `leave_one_out=True` the queries must be the stored keys, and each query's own
        key is masked out: training on that loss cannot shrink h to copy the targets.
        """
        _check_points(queries=queries, keys=self.keys)
        scores = kernel_scores(queries, self.keys, self.bandwidth)
        if leave_one_out:
            if queries.shape != self.keys.shape or not torch.equal(queries, self.keys):
                raise ValueError(
                    f"leave_one_out=True needs the queries to be the keys {shape_of(self.keys)}, "
                    f"got queries {shape_of(queries)}"
                )
            scores = _exclude_self(scores)
        self.attention_weights = _normalise(scores, "KernelRegression")
        return self.attention_weights @ self.values
