"""Figures: the right panels, one shared colour scale, clear errors."""

import matplotlib.pyplot as plt
import pytest
import torch

from attention_course import plot_attention, plot_attention_schematic, plot_regression


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
    assert {image.get_clim() for image in images} == {(0, 1.0)}  # weights are probabilities
    plt.close(fig)
    fig = plot_attention(weights, vmax=None)
    assert {ax.images[0].get_clim() for ax in fig.axes if ax.images} == {(0, weights.max().item())}
    plt.close(fig)


def test_schematic_draws_one_line_per_key_as_thick_as_its_weight():
    weights = torch.tensor([0.1, 0.6, 0.3])
    ax = plot_attention_schematic(weights)
    query_lines = [line for line in ax.get_lines() if line.get_xdata()[0] == 0.25]
    assert [line.get_linewidth() for line in query_lines] == pytest.approx(
        [0.5 + 8 * w for w in weights.tolist()]
    )
    texts = [t.get_text() for t in ax.texts]
    assert "$\\alpha_{2} = 0.60$" in texts and "$k_{3}$" in texts and "$v_{1}$" in texts
    plt.close(ax.figure)
    with pytest.raises(ValueError, match=r"weights \(2,\) must be non-negative and sum to 1"):
        plot_attention_schematic(torch.tensor([0.5, 0.6]))


def test_bad_heatmap_input_raises():
    with pytest.raises(
        ValueError, match=r"weights must have 2 or 3 or 4 dimensions, got shape \(5,\)"
    ):
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
