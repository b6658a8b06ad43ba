"""Attention pooling with kernels: Nadaraya–Watson regression (chapter 1) and a
learnable bandwidth (chapter 2).

Notable: the weights are computed in log space, scores log K((x - x_i) / h)
normalised by a softmax, exactly as attention turns scores into weights; a
compact kernel that leaves a query with no key in reach raises ValueError
instead of returning 0/0; leave-one-out error picks h from the data alone.
Each public function checks its arguments once, then calls this module's
private, trusting helpers (`_kernel_scores`, `_normalise`, `_leave_one_out`).
"""

import math
import numbers

import torch
from torch import nn

from ._shapes import (
    HALF_PRECISION,
    require_finite,
    require_float,
    require_positive,
    require_rank,
    require_same_dtype,
    require_same_length,
    shape_of,
    type_name,
)


def gaussian_kernel(u):
    """Gaussian kernel exp(-u^2 / 2), up to its constant 1/sqrt(2 pi); any shape.
    Chapter 1."""
    require_float("u", u)
    return torch.exp(-(u**2) / 2)


def _boxcar(u):
    return (u.abs() <= 1).to(u.dtype)


def _epanechnikov(u):
    return (1 - u**2).clamp(min=0)


def boxcar_kernel(u):
    """Boxcar (uniform) kernel: 1 where |u| <= 1 and 0 elsewhere, up to its constant 1/2.
    Chapter 1."""
    require_float("u", u)
    return _boxcar(u)


def epanechnikov_kernel(u):
    """Epanechnikov kernel max(0, 1 - u^2), up to its constant 3/4. Chapter 1."""
    require_float("u", u)
    return _epanechnikov(u)


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
        return -(u**2) / 2  # exact, and never underflows to log(0)
    return torch.log(_boxcar(u) if kernel == "boxcar" else _epanechnikov(u))


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


def _check_pairs(keys, values):
    """keys (n,), values (n,): the training pairs, 1-D floats of one dtype and length."""
    _check_points(keys=keys, values=values)
    require_same_length("keys", keys, "values", values)


def _kernel_scores(queries, keys, bandwidth, kernel):
    # scaled distances u_qi = (x_q - x_i) / h: (n_q, n_k)
    scaled_distance = (queries[:, None] - keys[None, :]) / bandwidth
    # scores log K(u_qi); -inf where a compact kernel is zero
    return _log_kernel(scaled_distance, kernel)


def kernel_scores(queries, keys, bandwidth=1.0, kernel="gaussian"):
    """Attention scores log K((x_q - x_i) / h): queries (n_q,), keys (n_k,) -> (n_q, n_k).

    `bandwidth` is a number or a tensor of shape (n_k,) (one width per key). Chapter 1.
    """
    _check_points(queries=queries, keys=keys)
    _check_bandwidth(bandwidth, keys)
    _check_kernel(kernel)
    return _kernel_scores(queries, keys, bandwidth, kernel)


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
    # weights alpha_qi = exp(s_qi) / sum_j exp(s_qj); half precision computed in float32
    if scores.dtype in HALF_PRECISION:
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    return torch.softmax(scores, dim=-1)


def _exclude_self(scores):
    """Set the diagonal of a square (n, n) score matrix to -inf: key i may not answer query i."""
    diagonal = torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
    return scores.masked_fill(diagonal, float("-inf"))


def nadaraya_watson(queries, keys, values, bandwidth=1.0, kernel="gaussian"):
    """Nadaraya–Watson kernel regression as attention pooling.

    queries (n_q,), keys (n_k,), values (n_k,) or (n_k, d_v); bandwidth a number or (n_k,).
    Returns (predictions, weights): predictions (n_q,) or (n_q, d_v), weights (n_q, n_k) whose
    rows are non-negative and sum to 1. With a compact kernel ('boxcar', 'epanechnikov') a query
    with no key within one bandwidth raises ValueError rather than returning NaN. Chapter 1.
    """
    require_float("values", values, (1, 2))
    _check_points(queries=queries, keys=keys)
    require_same_dtype("keys", keys, "values", values)
    require_same_length("keys", keys, "values", values)
    _check_bandwidth(bandwidth, keys)
    _check_kernel(kernel)
    # weights alpha(x_q, x_i) = K(u_qi) / sum_j K(u_qj): a softmax of the log-kernel scores
    weights = _normalise(_kernel_scores(queries, keys, bandwidth, kernel), "nadaraya_watson")
    # prediction f(x_q) = sum_i alpha(x_q, x_i) y_i
    return weights @ values, weights


def _leave_one_out(keys, values, bandwidth, kernel):
    # every training point is a query; its own key is masked out (score -inf, weight 0)
    scores = _exclude_self(_kernel_scores(keys, keys, bandwidth, kernel))
    # predict y_i from the other pairs, then the mean of (prediction - y_i)^2
    predictions = _normalise(scores, "leave_one_out_mse") @ values
    return torch.mean((predictions - values) ** 2).item()


def leave_one_out_mse(keys, values, bandwidth=1.0, kernel="gaussian"):
    """Mean squared error of predicting each value y_i from all the other pairs: a float.

    keys (n,), values (n,). Each training point is a query whose own key is masked out, so a
    tiny bandwidth cannot cheat by copying y_i. This is the classic way to choose h from data
    alone (leave-one-out cross-validation). Chapter 1.
    """
    _check_pairs(keys, values)
    _check_bandwidth(bandwidth, keys)
    _check_kernel(kernel)
    return _leave_one_out(keys, values, bandwidth, kernel)


def select_bandwidth(keys, values, bandwidths, kernel="gaussian"):
    """Pick the bandwidth with the smallest leave-one-out error: returns (best, errors).

    keys (n,), values (n,), bandwidths: a sequence or 1-D tensor of candidates (n_h,).
    errors is a float64 tensor (n_h,); it holds inf where a compact kernel leaves some point
    with no other key in reach, so such a bandwidth is never chosen. Chapter 1.
    """
    _check_pairs(keys, values)
    _check_kernel(kernel)
    candidates = _bandwidth_candidates(bandwidths)
    errors = torch.full_like(candidates, float("inf"))
    for index, bandwidth in enumerate(candidates.tolist()):
        try:
            errors[index] = _leave_one_out(keys, values, bandwidth, kernel)
        except ValueError as error:
            if "no key within the kernel's reach" not in str(error):
                raise
    if torch.isinf(errors).all():
        raise ValueError(
            f"no bandwidth among {candidates.tolist()} reaches a neighbour "
            f"for every one of the {keys.shape[0]} keys"
        )
    return candidates[errors.argmin()].item(), errors


def _bandwidth_candidates(bandwidths):
    """bandwidths: a 1-D tensor or a sequence of positive numbers -> float64 tensor (n_h,)."""
    if isinstance(bandwidths, torch.Tensor):
        require_rank("bandwidths", bandwidths, 1)
        if bandwidths.dtype == torch.bool or bandwidths.dtype.is_complex:
            raise ValueError(
                f"bandwidths {shape_of(bandwidths)} must hold real numbers, got {bandwidths.dtype}"
            )
    elif (
        isinstance(bandwidths, (str, bytes))
        or not hasattr(bandwidths, "__iter__")
        or not all(isinstance(h, numbers.Real) and not isinstance(h, bool) for h in bandwidths)
    ):
        raise TypeError(
            f"bandwidths must be a 1-D tensor or a sequence of numbers, got {bandwidths!r}"
        )
    candidates = torch.as_tensor(bandwidths, dtype=torch.float64)  # 1-D: checked above
    if len(candidates) == 0 or not (candidates > 0).all():
        raise ValueError(
            f"bandwidths must be one or more positive numbers, got {candidates.tolist()}"
        )
    return candidates


class KernelRegression(nn.Module):
    """Gaussian Nadaraya–Watson regression with a bandwidth learned by gradient descent.

    keys (n_k,) and values (n_k,) are stored as buffers. The bandwidth is kept as its logarithm,
    so it stays positive whatever the optimiser does: one shared width by default, or one width
    per key with `per_key=True` (n_k parameters, the version that overfits; see chapter 2).
    Only the Gaussian kernel is offered: a boxcar's weights do not change under a small change
    of h, so its gradient is zero almost everywhere. Chapter 2.
    """

    def __init__(self, keys, values, bandwidth=1.0, per_key=False):
        super().__init__()
        _check_pairs(keys, values)
        require_finite("keys", keys)
        require_positive("bandwidth", bandwidth)
        if isinstance(bandwidth, torch.Tensor) and bandwidth.numel() != 1:
            raise ValueError(
                f"bandwidth {shape_of(bandwidth)} must be one number, the initial "
                "width of every key (per_key=True makes one width per key)"
            )
        self.register_buffer("keys", keys)
        self.register_buffer("values", values)
        shape = (keys.shape[0],) if per_key else ()
        self.log_bandwidth = nn.Parameter(
            torch.full(shape, math.log(bandwidth), dtype=keys.dtype, device=keys.device)
        )
        self.attention_weights = None

    @property
    def bandwidth(self):
        """The current bandwidth h = exp(log_bandwidth): shape () or (n_k,). Chapter 2."""
        return self.log_bandwidth.exp()

    def forward(self, queries, leave_one_out=False):
        """queries (n_q,) -> predictions (n_q,); keeps `.attention_weights` (n_q, n_k).

        With `leave_one_out=True` the queries must be the stored keys, and each query's own
        key is masked out: training on that loss cannot shrink h to copy the targets.
        Chapter 2.
        """
        _check_points(queries=queries, keys=self.keys)
        bandwidth = self.bandwidth
        require_positive("bandwidth", bandwidth)  # training can drive exp(log h) to 0
        scores = _kernel_scores(queries, self.keys, bandwidth, "gaussian")
        if leave_one_out:
            if queries.shape != self.keys.shape or not torch.equal(queries, self.keys):
                raise ValueError(
                    f"leave_one_out=True needs the queries to be the keys {shape_of(self.keys)}, "
                    f"got queries {shape_of(queries)}"
                )
            scores = _exclude_self(scores)
        # weights alpha(x_q, x_i), kept for plotting; prediction sum_i alpha(x_q, x_i) y_i
        self.attention_weights = _normalise(scores, "KernelRegression")
        return self.attention_weights @ self.values
