"""Hypothesis profiles and strategies shared by the theory checks.

Profiles: ``ci`` is the default, everywhere: deterministic, with every field set explicitly, so the
README's test command gives the same examples on every machine and is exactly what CI runs.
``explore`` is opt-in: fresh random instances, ``THEORY_CHECKS_EXAMPLES`` of them per property
(default 100), shrinking on; ``python -m theory_checks.explore`` runs it over several seeds and counts
the examples, the discards and the failures. ``HYPOTHESIS_PROFILE`` selects a profile.

Strategies draw *instances*, never raw arrays of arbitrary floats: bounded finite floats, matrices
built from chosen spectra (so conditioning is controlled, not hoped for), head parameters from a
seeded generator, and collapsed / near-collapsed batches.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import strategies as st
from hypothesis.statistics import collector
from premises import (  # noqa: F401 (the checks' import point)
    OverBudget,
    boundary,
    gate,
    note_statistics,
    over_budget,
    premise,
    reset_counts,
)

from mini.heads import ACTIVATIONS, Head, init_head

settings.register_profile(
    "ci",
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    report_multiple_bugs=False,
    verbosity=Verbosity.normal,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    suppress_health_check=(HealthCheck.too_slow,),
    stateful_step_count=10,
)
settings.register_profile(
    "explore",
    parent=settings.get_profile("ci"),
    max_examples=int(os.environ.get("THEORY_CHECKS_EXAMPLES", "100")),
    derandomize=False,
)
# The mutation suite (theory_checks/mutants.py): the CI profile without shrinking, so that a check
# failing under a mutant reports at once instead of minimising the example.
settings.register_profile(
    "mutants", parent=settings.get_profile("ci"), phases=(Phase.explicit, Phase.reuse, Phase.generate)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item):
    """Every test's premises held to their budgets, and every draw hypothesis set aside one a premise set aside
    (``premises.over_budget``). ``trylast``: inside hypothesis's own wrapper, so that the statistics of every
    property the test runs reach ``note_statistics`` (and, through it, hypothesis's reporter)."""
    reset_counts()
    outer = collector.value

    def note(stats: dict) -> None:
        note_statistics(stats)
        if outer is not None:
            outer(stats)

    with collector.with_value(note):
        result = yield
    over = over_budget()
    if over:
        raise OverBudget("premise over its discard budget: " + "; ".join(over))
    return result


def kink_distance(head: Head, Z: np.ndarray) -> float:
    """The smallest ``|a|`` over a head's hidden pre-activations at ``Z`` (``inf`` without hidden layers):
    the value of the ``off_kink`` premise."""
    from mini.heads import preactivations

    return min((float(np.abs(a).min()) for a in preactivations(head, Z)), default=np.inf)


def examples(fraction: float) -> int:
    """A check's own example budget as a fraction of the profile's, for checks whose every example costs
    several of the others' (it then scales with the profile instead of being pinned)."""
    return max(1, round(fraction * settings.default.max_examples))

SMOOTH_ACTIVATIONS: tuple[str, ...] = tuple(a for a in ACTIVATIONS if a != "relu")
ALL_SPECS: tuple[str, ...] = ("linear", *(f"{a}{n}" for a in ACTIVATIONS for n in (2, 3)))
SMOOTH_SPECS: tuple[str, ...] = tuple(s for s in ALL_SPECS if s[:-1] in SMOOTH_ACTIVATIONS)


def head_specs(smooth: bool = False, piecewise_linear: bool = False, max_depth: int = 4) -> st.SearchStrategy[str]:
    """Specs of the grammar up to ``max_depth`` Linear layers (``linear`` is depth 1): every activation,
    only the smooth ones, or only the piecewise-linear ones (``linear`` and ReLU heads)."""
    acts = [a for a in ACTIVATIONS if (a != "relu" if smooth else a == "relu" if piecewise_linear else True)]
    specs = [f"{a}{n}" for a in acts for n in range(2, max_depth + 1)]
    return st.sampled_from(specs if smooth else ["linear", *specs])


def bounded_floats(lo: float = -3.0, hi: float = 3.0) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


seeds = st.integers(0, 2**32 - 1)
smooth_specs = st.sampled_from(SMOOTH_SPECS)


def matrix_with_spectrum(eigenvalues: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``Q diag(eigenvalues) Q^T`` with ``Q`` Haar-random orthogonal: a symmetric matrix whose
    spectrum (and so conditioning) is exactly the one chosen."""
    m = len(eigenvalues)
    Q, R = np.linalg.qr(rng.standard_normal((m, m)))
    Q = Q * np.sign(np.diag(R))
    return (Q * eigenvalues) @ Q.T


@st.composite
def spectra(draw, size: int, lo: float = 0.1, hi: float = 10.0, n_zero: int = 0) -> np.ndarray:
    """Eigenvalues in ``[lo, hi]`` (log-uniform), ``n_zero`` of them exactly zero."""
    logs = draw(st.lists(bounded_floats(np.log(lo), np.log(hi)), min_size=size - n_zero, max_size=size - n_zero))
    return np.sort(np.concatenate([np.exp(logs), np.zeros(n_zero)]))


@st.composite
def heads(draw, specs=ALL_SPECS, d=st.integers(2, 5), k=st.integers(2, 5), width=st.integers(2, 6)) -> Head:
    """A random head: spec, widths and seeded weights (LeCun-normal, so activations are curved)."""
    return init_head(draw(st.sampled_from(specs)), draw(d), draw(k), draw(width), draw(seeds))


@st.composite
def batches(draw, d: int, n=st.integers(2, 6), scale: float = 1.0) -> np.ndarray:
    """A batch ``Z`` (n, d) of bounded finite floats."""
    rng = np.random.default_rng(draw(seeds))
    return scale * rng.standard_normal((draw(n), d))


@st.composite
def collapsed_batches(draw, d: int, n=st.integers(2, 6), jitter: float = 0.0) -> np.ndarray:
    """All rows equal to one point ``z*`` (``jitter = 0``) or within ``jitter`` of it (near-collapse)."""
    rng = np.random.default_rng(draw(seeds))
    z_star = rng.standard_normal(d)
    size = draw(n)
    return np.tile(z_star, (size, 1)) + jitter * rng.standard_normal((size, d))
