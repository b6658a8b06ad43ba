"""attention_course: the tested helper package shared by every chapter of the course."""

from . import checks, data, plotting, pooling
from .data import load_mcycle, make_synthetic_regression, target_function
from .plotting import plot_attention, plot_regression
from .pooling import (
    KernelRegression,
    kernel_scores,
    leave_one_out_mse,
    nadaraya_watson,
    select_bandwidth,
)

__version__ = "0.1.0"

__all__ = [
    "KernelRegression",
    "checks",
    "data",
    "kernel_scores",
    "leave_one_out_mse",
    "load_mcycle",
    "make_synthetic_regression",
    "nadaraya_watson",
    "plot_attention",
    "plot_regression",
    "plotting",
    "pooling",
    "select_bandwidth",
    "target_function",
]
