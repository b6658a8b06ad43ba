"""Kernel regression against brute-force loops and closed forms, written independently of src/."""

import math

import pytest
import torch

from attention_course import KernelRegression, leave_one_out_mse, nadaraya_watson, select_bandwidth
from attention_course.pooling import KERNELS, kernel_scores

CLOSED_FORMS = {
    "gaussian": lambda u: math.exp(-u * u / 2),
    "boxcar": lambda u: 1.0 if abs(u) <= 1 else 0.0,
    "epanechnikov": lambda u: max(0.0, 1 - u * u),
}


def brute_force_nw(queries, keys, values, bandwidths, kernel):
    """Nadaraya–Watson with Python loops and the textbook kernel formulas."""
    predictions, weights = [], []
    for q in queries.tolist():
        k_values = [CLOSED_FORMS[kernel]((q - k) / h) for k, h in zip(keys.tolist(), bandwidths)]
        total = sum(k_values)
        row = [kv / total for kv in k_values]
        weights.append(row)
        predictions.append(sum(w * v for w, v in zip(row, values.tolist())))
    return torch.tensor(predictions, dtype=torch.float64), torch.tensor(
        weights, dtype=torch.float64
    )


def random_problem(seed, n_q=7, n_k=15):
    g = torch.Generator().manual_seed(seed)
    keys = torch.rand(n_k, generator=g, dtype=torch.float64) * 6
    values = torch.randn(n_k, generator=g, dtype=torch.float64)
    queries = torch.rand(n_q, generator=g, dtype=torch.float64) * 6
    return queries, keys, values


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force(kernel, seed):
    queries, keys, values = random_problem(seed)
    got, weights = nadaraya_watson(queries, keys, values, 2.5, kernel)
    expected, expected_weights = brute_force_nw(queries, keys, values, [2.5] * 15, kernel)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(weights, expected_weights)


def test_per_key_bandwidth_matches_brute_force():
    queries, keys, values = random_problem(3)
    bandwidths = torch.linspace(0.5, 3.0, 15, dtype=torch.float64)
    got, _ = nadaraya_watson(queries, keys, values, bandwidths)
    expected, _ = brute_force_nw(queries, keys, values, bandwidths.tolist(), "gaussian")
    torch.testing.assert_close(got, expected)


def test_kernel_functions_match_closed_forms():
    u = torch.linspace(-2, 2, 41, dtype=torch.float64)
    for name, fn in KERNELS.items():
        expected = torch.tensor([CLOSED_FORMS[name](x) for x in u.tolist()], dtype=torch.float64)
        torch.testing.assert_close(fn(u), expected)


def test_vector_values_pool_each_column():
    queries, keys, values = random_problem(4)
    matrix = torch.stack([values, 2 * values + 1], dim=1)  # (n_k, 2)
    got, _ = nadaraya_watson(queries, keys, matrix, 1.0)
    first, _ = nadaraya_watson(queries, keys, values, 1.0)
    torch.testing.assert_close(got, torch.stack([first, 2 * first + 1], dim=1))


def test_infinite_bandwidth_is_average_pooling():
    queries, keys, values = random_problem(5)
    got, weights = nadaraya_watson(queries, keys, values, float("inf"))
    torch.testing.assert_close(got, values.mean().expand(7))
    torch.testing.assert_close(weights, torch.full((7, 15), 1 / 15, dtype=torch.float64))


def test_tiny_bandwidth_is_nearest_neighbour():
    queries, keys, values = random_problem(6)
    got, _ = nadaraya_watson(queries, keys, values, 1e-4)
    nearest = torch.tensor(
        [min(range(15), key=lambda j: abs(q - keys[j].item())) for q in queries.tolist()]
    )
    torch.testing.assert_close(got, values[nearest])


def test_gaussian_far_query_does_not_underflow_to_nan():
    keys = torch.tensor([0.0, 1.0, 2.0])
    values = torch.tensor([1.0, 2.0, 3.0])
    got, weights = nadaraya_watson(torch.tensor([100.0]), keys, values, 0.5)
    assert torch.isfinite(weights).all()
    torch.testing.assert_close(got, torch.tensor([3.0]))  # all weight on the nearest key


@pytest.mark.parametrize("kernel", ["boxcar", "epanechnikov"])
def test_compact_kernel_out_of_reach_raises(kernel):
    with pytest.raises(ValueError, match=r"no key within the kernel's reach"):
        nadaraya_watson(
            torch.tensor([0.5, 50.0]),
            torch.tensor([0.0, 1.0]),
            torch.tensor([1.0, 2.0]),
            1.0,
            kernel,
        )


def brute_force_loo(keys, values, bandwidth):
    errors = []
    for i in range(len(keys)):
        rest = [j for j in range(len(keys)) if j != i]
        prediction, _ = brute_force_nw(
            keys[i : i + 1], keys[rest], values[rest], [bandwidth] * len(rest), "gaussian"
        )
        errors.append((prediction.item() - values[i].item()) ** 2)
    return sum(errors) / len(errors)


@pytest.mark.parametrize("bandwidth", [0.2, 1.0, 4.0])
def test_leave_one_out_matches_refitting_without_each_point(bandwidth):
    _, keys, values = random_problem(7)
    assert leave_one_out_mse(keys, values, bandwidth) == pytest.approx(
        brute_force_loo(keys, values, bandwidth), rel=1e-9
    )


def test_module_forward_equals_function():
    queries, keys, values = random_problem(8)
    model = KernelRegression(keys, values, bandwidth=0.8)
    expected, weights = nadaraya_watson(queries, keys, values, 0.8)
    torch.testing.assert_close(model(queries), expected)
    torch.testing.assert_close(model.attention_weights, weights)
    assert model.bandwidth.item() == pytest.approx(0.8)


def test_module_gradient_matches_finite_differences():
    queries, keys, values = random_problem(9)
    for per_key in (False, True):
        model = KernelRegression(keys, values, bandwidth=0.9, per_key=per_key)

        def loss(log_h):
            predictions, _ = nadaraya_watson(queries, keys, values, log_h.exp())
            return ((predictions - 1.0) ** 2).sum()

        torch.autograd.gradcheck(loss, (model.log_bandwidth.detach().clone().requires_grad_(),))
        model_loss = ((model(queries) - 1.0) ** 2).sum()
        (grad,) = torch.autograd.grad(model_loss, model.log_bandwidth)
        log_h = model.log_bandwidth.detach().clone().requires_grad_()
        (expected,) = torch.autograd.grad(loss(log_h), log_h)
        torch.testing.assert_close(grad, expected)


def test_per_key_has_one_parameter_per_key():
    _, keys, values = random_problem(10)
    assert KernelRegression(keys, values).log_bandwidth.numel() == 1
    assert KernelRegression(keys, values, per_key=True).log_bandwidth.numel() == 15


def test_training_on_leave_one_out_loss_finds_the_grid_minimum():
    g = torch.Generator().manual_seed(11)
    keys = torch.sort(torch.rand(80, generator=g, dtype=torch.float64) * 6).values
    values = torch.sin(2 * keys) + 0.3 * torch.randn(80, generator=g, dtype=torch.float64)
    grid = torch.exp(torch.linspace(math.log(0.02), math.log(3), 400, dtype=torch.float64))
    grid_best = grid[torch.tensor([leave_one_out_mse(keys, values, h) for h in grid]).argmin()]
    model = KernelRegression(keys, values, bandwidth=1.0)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(400):
        optimiser.zero_grad()
        loss = torch.mean((model(keys, leave_one_out=True) - values) ** 2)
        loss.backward()
        optimiser.step()
    assert model.bandwidth.item() == pytest.approx(grid_best.item(), rel=0.03)


def test_in_sample_training_without_leave_one_out_shrinks_the_width():
    _, keys, values = random_problem(12)
    model = KernelRegression(keys, values, bandwidth=1.0)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(200):
        optimiser.zero_grad()
        torch.mean((model(keys) - values) ** 2).backward()
        optimiser.step()
    assert model.bandwidth.item() < 0.05  # each point ends up copying its own value


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: nadaraya_watson(torch.ones(2, 2), torch.ones(3), torch.ones(3)),
            r"queries must have 1 dimensions, got shape \(2, 2\)",
        ),
        (
            lambda: nadaraya_watson(torch.ones(2), torch.ones(3, 1), torch.ones(3)),
            r"keys must have 1 dimensions, got shape \(3, 1\)",
        ),
        (
            lambda: nadaraya_watson(torch.ones(2), torch.ones(3), torch.ones(4)),
            r"keys \(3,\) and values \(4,\)",
        ),
        (
            lambda: nadaraya_watson(torch.ones(2), torch.ones(3), torch.ones(3, 1, 1)),
            r"values must have 1 or 2 dimensions, got shape \(3, 1, 1\)",
        ),
        (
            lambda: nadaraya_watson(torch.ones(2), torch.ones(3), torch.ones(3), 0.0),
            r"bandwidth must be positive",
        ),
        (
            lambda: nadaraya_watson(torch.ones(2), torch.ones(3), torch.ones(3), -1.0),
            r"bandwidth must be positive",
        ),
        (
            lambda: nadaraya_watson(torch.ones(2), torch.ones(3), torch.ones(3), torch.ones(4)),
            r"per-key bandwidth must have shape \(3,\).*got \(4,\)",
        ),
        (
            lambda: nadaraya_watson(torch.ones(2), torch.ones(3), torch.ones(3), 1.0, "cosine"),
            r"unknown kernel 'cosine'",
        ),
        (lambda: leave_one_out_mse(torch.ones(3), torch.ones(2)), r"keys \(3,\) and values \(2,\)"),
        (lambda: KernelRegression(torch.ones(3), torch.ones(2)), r"keys \(3,\) and values \(2,\)"),
        (
            lambda: KernelRegression(torch.tensor([0.0, float("nan")]), torch.ones(2)),
            r"keys of shape \(2,\) holds NaN",
        ),
        (
            lambda: KernelRegression(torch.ones(3), torch.ones(3))(
                torch.zeros(3), leave_one_out=True
            ),
            r"leave_one_out=True needs the queries to be the keys",
        ),
    ],
)
def test_bad_input_raises_value_error_naming_shapes(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_kernel_scores_are_log_kernel_values():
    queries, keys, _ = random_problem(13)
    scores = kernel_scores(queries, keys, 1.5, "epanechnikov")
    u = (queries[:, None] - keys[None, :]) / 1.5
    inside = u.abs() < 1
    torch.testing.assert_close(scores[inside], torch.log(1 - u[inside] ** 2))
    assert torch.isneginf(scores[~inside]).all()


def test_select_bandwidth_picks_the_smallest_brute_force_error():
    _, keys, values = random_problem(14, n_k=25)
    candidates = [0.1, 0.3, 0.6, 1.2, 2.4]
    best, errors = select_bandwidth(keys, values, candidates)
    expected = [brute_force_loo(keys, values, h) for h in candidates]
    torch.testing.assert_close(errors, torch.tensor(expected, dtype=torch.float64))
    assert best == candidates[expected.index(min(expected))]


def test_select_bandwidth_skips_widths_that_leave_a_point_alone():
    keys = torch.tensor([0.0, 0.1, 0.2, 5.0, 5.1], dtype=torch.float64)
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    best, errors = select_bandwidth(keys, values, [0.05, 0.15, 10.0], "boxcar")
    assert torch.isinf(errors[0]) and torch.isfinite(errors[1:]).all()
    assert best in (0.15, 10.0)
    with pytest.raises(ValueError, match="no bandwidth among"):
        select_bandwidth(keys, values, [0.01, 0.05], "boxcar")
