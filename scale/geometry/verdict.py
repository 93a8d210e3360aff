"""Compressor or expander: the collapse-ratio statistics of every report (``python -m scale.run``'s end-of-run
measurement, ``scale.analyze``, and so E6, ``scale.pretrained``).

Per orbit (or trajectory) ``t`` with backbone spread ``v_t(z)`` and head spread ``v_t(h)``:

    collapse ratio   R = exp(mean_t log(v_t(z) / v_t(h)))      geometric mean over orbits

with the Student-t ``CONFIDENCE`` interval of the mean log ratio, exponentiated. Verdict: "compressor" where
R's interval lies above 1, "expander" where it lies below 1, "neither" otherwise. Orbits whose spread is
below ``DEGENERATE_FLOOR`` (an orbit that did not move) have no log ratio; they are counted as ``excluded``
and left out. Several orbit families of the same images pool per image (``pooled_ratio_estimate``): the
mean over families of each image's log ratio, so that the pooled values stay independent.

The head against its untrained control, on the same orbits (``Verdict.versus_untrained``):

    R / R_0 = exp(mean_t log(v_t(h_0) / v_t(h)))      paired over orbits, the same t interval

"as much as the untrained head" only where that interval contains 1; otherwise "more" or "less", with
both ratios and this one printed.

Gaps between two probes on the same test samples (h minus z, trained minus initial backbone):
``paired_gap``, the difference of accuracies in percentage points with the percentile interval of a
seeded paired bootstrap over test units (an image, or a base image with its four quarter turns: samples
of one image are not independent, so they are resampled together).
"""

from __future__ import annotations

import math

import numpy as np

from scale.runs.summary import Estimate, Verdict

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000  # paired bootstrap of a probe gap: the percentile interval's 2.5 % tail holds 50
BOOTSTRAP_SEED = 0  # a fixed generator: the same predictions always give the same interval
# Orbit variances of unit vectors lie in [0, 1] and kappas in [0, 4]; below this floor an orbit has not
# moved at all (e.g. hue on a grey image) and its log ratio is undefined: such trajectories are counted
# and left out.
DEGENERATE_FLOOR = 1e-12


def t_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Mean and Student-t interval of i.i.d. values (NaN interval below two values)."""
    from scipy.stats import t as student_t

    values = np.asarray(values, dtype=np.float64)
    n, mean = len(values), float(np.mean(values)) if len(values) else math.nan
    if n < 2:
        return mean, math.nan, math.nan
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1) * np.std(values, ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half


def log_ratios(num: np.ndarray, den: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``log(num / den)`` per trajectory and the mask of trajectories where both are non-degenerate."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    ok = (num > DEGENERATE_FLOOR) & (den > DEGENERATE_FLOOR)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, np.log(num) - np.log(den), np.nan), ok


def exp_estimate(logs: np.ndarray, ok: np.ndarray, confidence: float) -> Estimate:
    """``exp`` of the mean log and of its t interval, over the entries where ``ok``."""
    mean, low, high = t_interval(logs[ok], confidence)
    value = math.exp(mean) if ok.any() else math.nan
    return Estimate(value, math.exp(low), math.exp(high), int(ok.sum()), int((~ok).sum()))


def ratio_estimate(num: np.ndarray, den: np.ndarray, confidence: float = CONFIDENCE) -> Estimate:
    """Geometric-mean ratio ``exp(mean log(num/den))`` with the exponentiated t interval."""
    r, ok = log_ratios(num, den)
    return exp_estimate(r, ok, confidence)


def pooled_ratio_estimate(pairs: list[tuple[np.ndarray, np.ndarray]], confidence: float = CONFIDENCE) -> Estimate:
    """``ratio_estimate`` pooled over several families of the same images: ``pairs`` holds one ``(num, den)``
    per family, each ``(n_images,)`` in the same image order; per image the mean over families of its log
    ratio (an image with a degenerate orbit in any family drops out)."""
    per_image = np.mean([log_ratios(num, den)[0] for num, den in pairs], axis=0)
    return exp_estimate(per_image, np.isfinite(per_image), confidence)


def mean_estimate(values: np.ndarray, confidence: float = CONFIDENCE) -> Estimate:
    mean, low, high = t_interval(values, confidence)
    return Estimate(mean, low, high, len(values))


VERDICTS = ("compressor", "expander", "neither")


def verdict(collapse: Estimate) -> str:
    """Compressor / expander only where the interval of the collapse ratio excludes 1 (one of ``VERDICTS``)."""
    if math.isnan(collapse.low):
        return "neither"
    if collapse.low > 1.0:
        return "compressor"
    if collapse.high < 1.0:
        return "expander"
    return "neither"


def orbit_verdict(per_orbit: dict[str, dict[str, np.ndarray]]) -> Verdict:
    """From the per-orbit values of ``scale.geometry.measure`` (float64, one per orbit): the collapse ratio
    spread_z / spread_h (geometric mean, t interval) of the head and of the untrained control with their
    verdicts, the head against the control on the same orbits (R / R_0 = spread_h0 / spread_h, paired), the
    curvature ratio kappa_h / kappa_z and the alignment gain (h minus z)."""
    z, h, h0 = (per_orbit[k] for k in ("z", "h", "h_untrained"))
    trained, control = ratio_estimate(z["spread"], h["spread"]), ratio_estimate(z["spread"], h0["spread"])
    gain = mean_estimate(np.asarray(h["alignment"]) - np.asarray(z["alignment"]))
    return Verdict(trained, control, verdict(trained), verdict(control), ratio_estimate(h["kappa"], z["kappa"]),
                   gain, versus_untrained=ratio_estimate(h0["spread"], h["spread"]))


def comparison(est: Estimate | None) -> str | None:
    """"more", "less" or "as much": the head's collapse ratio against its control's, from the interval of
    their ratio ``R / R_0`` (``None`` where it was not measured or is undefined)."""
    if est is None or est.n == 0 or math.isnan(est.low):
        return None
    return "more" if est.low > 1.0 else "less" if est.high < 1.0 else "as much"


def paired_gap(first: np.ndarray, second: np.ndarray, units: np.ndarray | None = None,
               resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE,
               seed: int = BOOTSTRAP_SEED) -> Estimate:
    """``second`` minus ``first`` accuracy in percentage points, paired over the same test samples:
    ``first``, ``second`` ``(n,)`` booleans (sample correct under each probe), ``units`` ``(n,)`` the test
    unit of each sample (samples of one unit are resampled together; default: each its own). The interval
    is the percentile interval of ``resamples`` paired bootstrap draws of the units (a NaN interval below two
    units); ``n`` counts the units."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired_gap needs two (n,) arrays of the same samples, got {a.shape} and {b.shape}")
    units = np.arange(len(a)) if units is None else np.asarray(units)
    _, unit = np.unique(units, return_inverse=True)
    n_units = int(unit.max()) + 1 if len(unit) else 0
    size = np.bincount(unit, minlength=n_units).astype(np.float64)  # samples per unit
    diff = np.bincount(unit, weights=b - a, minlength=n_units)  # per unit: sum of (second - first)
    value = 100.0 * diff.sum() / max(size.sum(), 1.0)
    if n_units < 2:
        return Estimate(value, math.nan, math.nan, n_units)
    draws = np.random.default_rng(seed).integers(0, n_units, size=(resamples, n_units))  # (resamples, units)
    boot = 100.0 * diff[draws].sum(1) / size[draws].sum(1)
    low, high = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Estimate(value, float(low), float(high), n_units)
