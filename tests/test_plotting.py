"""Figures: the right panels, one shared colour scale, clear errors."""

import matplotlib.pyplot as plt
import pytest
import torch

from attention_course import plot_attention, plot_regression


def test_single_heatmap_has_one_panel_and_a_colour_bar():
    fig = plot_attention(torch.softmax(torch.randn(4, 6), dim=-1), titles=["one"])
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 1 and panels[0].get_title() == "one"
    assert len(fig.axes) == 2  # the panel and its colour bar
    assert panels[0].images[0].get_array().shape == (4, 6)
    plt.close(fig)


def test_grid_shares_one_colour_scale():
    weights = torch.softmax(torch.randn(2, 3, 4, 5), dim=-1)
    fig = plot_attention(weights, titles=[str(i) for i in range(6)])
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 6
    assert {image.get_clim() for image in images} == {(0, weights.max().item())}
    plt.close(fig)


def test_bad_heatmap_input_raises():
    with pytest.raises(ValueError, match=r"weights must have 2 or 3 or 4 dimensions, got shape \(5,\)"):
        plot_attention(torch.ones(5))
    with pytest.raises(ValueError, match=r"2 titles for 3 panels"):
        plot_attention(torch.ones(3, 2, 2), titles=["a", "b"])


def test_regression_plot_draws_each_curve():
    x = torch.linspace(0, 1, 10)
    ax = plot_regression(x, x, x, {"a": x, "b": 2 * x}, truth=x)
    assert [line.get_label() for line in ax.get_lines()] == ["true function", "a", "b"]
    plt.close(ax.figure)
    with pytest.raises(ValueError, match=r"prediction 'a' has shape \(3,\), x_test has \(10,\)"):
        plot_regression(x, x, x, {"a": torch.ones(3)})
