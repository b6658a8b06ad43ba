"""What every check shares: CheckFailed, calling the learner's function safely (stubs,
delegation to the package's own answer, exceptions), comparing, seeded inputs. Its public names
are the helpers that the chapter modules import."""

import contextlib
import functools
import sys

import torch

from .. import scoring


class CheckFailed(AssertionError):
    """Your answer does not match the reference yet; the message says where and how.
    Chapters 1-17 (every chapter's checks)."""


class NotAnswered(CheckFailed):
    """The answer is still the exercise's stub: it raises NotImplementedError.
    Chapters 1-17 (every chapter's checks)."""

    def __init__(self, name):
        super().__init__(
            f"{name} still raises NotImplementedError: replace the stub with your code"
        )
        self.name = name


class _Delegated(Exception):
    """Raised when a learner's answer calls one of the package's own answers."""


def passed(what, n_cases):
    """Print that every case of a check agrees with the reference.
    Chapters 1-17 (every chapter's checks)."""
    print(f"Correct: {what}.\nAll {n_cases} test cases agree with the reference.")


def self_check(check):
    """A public check: on a stub answer it prints "Not yet answered" and returns, so that a
    notebook runs from top to bottom before the learner has answered, unless `strict`.
    Chapters 1-17 (every chapter's checks)."""

    @functools.wraps(check)
    def run(*args, strict=False, **kwargs):
        __tracebackhide__ = True  # noqa: F841 (IPython and pytest show the message, not us)
        try:
            return check(*args, **kwargs)
        except NotAnswered as stub:
            if strict:
                raise NotAnswered(stub.name) from None
            print(
                f"Not yet answered: {stub.name} is still the stub.\n"
                "Write your answer in the cell above, run it, then run this check again."
            )
        except CheckFailed as failure:
            raise CheckFailed(str(failure)) from None  # the message without the check's insides

    return run


def tripwire(name):
    """A stand-in for a package function an answer may not call: it raises, naming `name`.
    Chapters 1-17 (every chapter's checks)."""

    def tripwire(*args, **kwargs):
        raise _Delegated(name)

    return tripwire


def _globals_of(learner):
    """The module namespace a learner's function reads; for a class (an autograd Function),
    that of its forward method."""
    if isinstance(learner, type):
        learner = getattr(learner, "forward", learner)
    return getattr(learner, "__globals__", {})


def _namespaces(fn, references):
    """Where a learner's function (or class) may find the forbidden functions: its globals, the
    package's modules, and the modules the functions come from."""
    package = sys.modules[__name__.split(".")[0]]
    modules = [
        package,
        torch.nn.functional,
        *(m for n, m in sys.modules.items() if n.startswith(package.__name__ + ".")),
        *(
            sys.modules[r.__module__]
            for r in references
            if getattr(r, "__module__", None) in sys.modules
        ),
    ]
    return [_globals_of(fn), scoring.SIMILARITIES, *{id(m): vars(m) for m in modules}.values()]


@contextlib.contextmanager
def _forbidden(fn, references):
    """While fn runs, each function in `references` raises _Delegated wherever fn could reach it
    (see _namespaces); restored afterwards."""
    by_id = {id(reference): reference.__name__ for reference in references}
    if id(fn) in by_id:
        raise _Delegated(by_id[id(fn)])
    patched = []
    for namespace in _namespaces(fn, references):
        for name, value in list(namespace.items()):
            if id(value) in by_id:
                patched.append((namespace, name, value))
                namespace[name] = tripwire(by_id[id(value)])
    try:
        yield
    finally:
        for namespace, name, value in reversed(patched):
            namespace[name] = value


def run(fn, args, case, kwargs=None, forbidden=(), learner=None):
    """Call the learner's function; turn any exception into a CheckFailed naming the case.
    `learner`: the learner's own function or class, when fn only calls it (torch.autograd.grad
    running a learner's backward): its names are the ones forbidden and reported.
    Chapters 1-17 (every chapter's checks)."""
    learner = fn if learner is None else learner
    try:
        with _forbidden(learner, forbidden):
            return fn(*args, **(kwargs or {}))
    except NotImplementedError:
        raise NotAnswered(f"`{getattr(learner, '__name__', 'your function')}`") from None
    except _Delegated as delegated:
        raise CheckFailed(
            f"case '{case}': your function calls `{delegated}`, which computes "
            "exactly what this exercise asks for; write the computation yourself "
            "with torch operations"
        ) from None
    except TypeError as error:
        hint = (
            "; the exercise's function takes " + ", ".join(f"{k}=..." for k in kwargs)
            if kwargs and "argument" in str(error)
            else ""
        )
        raise CheckFailed(f"case '{case}': your function raised TypeError: {error}{hint}") from None
    except Exception as error:  # the learner's bug, reported rather than crashing the check
        raise CheckFailed(
            f"case '{case}': your function raised {type(error).__name__}: {error}"
        ) from None


def _first_bad_row(bad_rows):
    return bad_rows.nonzero().flatten()[0].item()


def weights_problem(weights, atol=1e-5):
    """Why `weights` (..., n_k) are not attention weights, in plain words; None if they are.
    Chapters 1-17 (every chapter's checks)."""
    if not isinstance(weights, torch.Tensor):
        return f"expected a torch.Tensor, got {type(weights).__name__}"
    rows = weights.reshape(-1, weights.shape[-1]) if weights.dim() else weights.reshape(1, 1)
    if not torch.isfinite(rows).all():
        row = _first_bad_row(~torch.isfinite(rows).all(dim=-1))
        return f"row {row} contains NaN or inf: {rows[row].tolist()[:6]}"
    if (rows < 0).any():
        row = _first_bad_row((rows < 0).any(dim=-1))
        return f"row {row} has a negative weight ({rows[row].min().item():.3g}); weights are >= 0"
    sums = rows.sum(dim=-1)
    off = (sums - 1).abs() > atol
    if off.any():
        row = _first_bad_row(off)
        return f"row {row} sums to {sums[row].item():.4f}, not 1"
    return None


@self_check
def check_attention_weights(weights, atol=1e-5):
    """Check that every row of `weights` (..., n_k) is finite, non-negative and sums to 1.
    No one exercise's check: the chapter template's example (templates/chapter.ipynb).
    Chapters 1-17 (every chapter's checks)."""
    problem = weights_problem(weights, atol)
    if problem:
        raise CheckFailed(problem)
    print(
        f"Correct: all {weights.reshape(-1, weights.shape[-1]).shape[0]} rows are "
        "non-negative and sum to 1."
    )


def compare(got, expected, case, what="output", atol=1e-5, explain_nan=None):
    """Raise CheckFailed unless tensor `got` has `expected`'s shape and values; `explain_nan`
    (index -> str or None) says what produced a NaN or inf at that index.
    Chapters 1-17 (every chapter's checks)."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(
            f"case '{case}': your {what} is a {type(got).__name__}, expected a torch.Tensor"
        )
    got = got.detach().cpu()  # an answer computed on a GPU is compared all the same
    if got.shape != expected.shape:
        raise CheckFailed(
            f"case '{case}': your {what} has shape {tuple(got.shape)}, "
            f"expected {tuple(expected.shape)}"
        )
    if not torch.isfinite(got).all():
        index = tuple((~torch.isfinite(got)).nonzero()[0].tolist())
        cause = explain_nan(index) if explain_nan else None
        raise CheckFailed(
            f"case '{case}': your {what} holds {got[index].item()} at index "
            f"{index}" + (f": {cause}" if cause else "")
        )
    wrong = (got.double() - expected.double()).abs() > atol * (1 + expected.double().abs())
    if wrong.any():
        index = tuple(wrong.nonzero()[0].tolist())
        raise CheckFailed(
            f"case '{case}': your {what} at index {index} is "
            f"{got[index].item():.5f}, expected {expected[index].item():.5f}"
        )


def generator(seed, offset=0):
    """A torch.Generator for a check's cases: `seed` 0 gives the cases a chapter shows.
    Chapters 1-17 (every chapter's checks)."""
    return torch.Generator().manual_seed(1234 + 1000 * seed + offset)


def random(shape, seed, offset=0):
    """A standard normal tensor of `shape` from generator(seed, offset).
    Chapters 1-17 (every chapter's checks)."""
    return torch.randn(*shape, generator=generator(seed, offset))


def integers(seed, count, low, high, offset=0):
    """`count` integers drawn uniformly from [low, high). Chapters 1-17 (every chapter's checks)."""
    return torch.randint(low, high, (count,), generator=generator(seed, offset)).tolist()


def all_close(got, expected, atol):
    """Whether each tensor of `got` has the shape of, and is within `atol` of, the float64 one of
    `expected` at the same place. Chapter 12."""
    return all(
        isinstance(g, torch.Tensor)
        and g.shape == e.shape
        and torch.allclose(g.detach().double(), e, atol=atol, equal_nan=True)
        for g, e in zip(got, expected)
    )
