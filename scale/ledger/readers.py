r"""Per-seed statistics read from unit records: the numbers the claims are made of.

``Results`` maps a unit name to its record (``scale.ledger.unit_record``); each reader returns one float for one
seed, NaN where the unit is absent, did not finish, or the statistic is degenerate there.
"""

from __future__ import annotations

import math
from typing import Any

from mini.collapse_metrics import COND_FLOOR
from scale.curvature.tracking import spearman
from scale.ledger.stats import fraction, log10_ratio

Results = dict[str, dict[str, Any]]  # unit name -> its record


def _unit(res: Results, name: str) -> dict[str, Any] | None:
    r = res.get(name)
    return r if r is not None and r.get("status") == "finished" else None


def _seeds(res: Results) -> list[int]:
    return sorted({int(r["seed"]) for r in res.values()})


def e1_name(head: str, bn: bool, lr: float, init: str, seed: int) -> str:
    return f"E1-{head}-bn{int(bn)}-lr{lr:g}-{init}-s{seed}"


def h_std_final(res: Results, name: str) -> float:
    r = _unit(res, name)
    return r["history"][-1]["h_std"] if r and r["history"] else math.nan


def escape(res: Results, name: str) -> float:
    """E1: ``log10(h std at the end / h std before training)`` (> 0: the head left where it started)."""
    r = _unit(res, name)
    return log10_ratio(h_std_final(res, name), r["start"]["h_std"]) if r else math.nan


def relu_like_linear(res: Results, bn: bool, lr: float, seed: int, init: str = "collapsed") -> float:
    """E1's ReLU gap: ``|log10(relu / smooth)| - |log10(relu / linear)|`` of the final h std, smooth = geometric
    mean of the GELU and Swish heads (> 0: ReLU ends nearer the linear head than the smooth heads)."""
    f = {h: h_std_final(res, e1_name(h, bn, lr, init, seed)) for h in ("relu2", "linear", "gelu2", "swish2")}
    smooth = math.sqrt(f["gelu2"] * f["swish2"]) if f["gelu2"] > 0 and f["swish2"] > 0 else math.nan
    return abs(log10_ratio(f["relu2"], smooth)) - abs(log10_ratio(f["relu2"], f["linear"]))


def final_level(res: Results, head: str, ref: str, bn: bool, lr: float, init: str, seed: int) -> float:
    """E1.2 / E1.3: ``log10(final h std of head / of ref)`` from the same start kind (> 0: ``head`` ends above
    ``ref``). Every head without BatchNorm ends near SimSiam's trivial minimum, whatever its start's depth, so the
    final levels compare the heads; the end/start ratio (``escape``) reports where each started."""
    return log10_ratio(h_std_final(res, e1_name(head, bn, lr, init, seed)),
                       h_std_final(res, e1_name(ref, bn, lr, init, seed)))


def start_level(res: Results, head: str, ref: str, lr: float, init: str, seed: int) -> float:
    """E1: ``log10(h std before training of head / of ref)``, BN off: how far apart two heads start."""
    return log10_ratio(start_h_std(res, e1_name(head, False, lr, init, seed)),
                       start_h_std(res, e1_name(ref, False, lr, init, seed)))


def relu_nearer_linear(res: Results, bn: bool, lr: float, seed: int, init: str = "collapsed") -> float:
    """E1.4: ``|log10(smooth / linear)| - |log10(relu / linear)|`` of the final h std, smooth = geometric mean of
    the GELU and Swish heads (> 0: ReLU ends nearer the linear head than the smooth heads do, both measured from
    the linear head). ReLU's own level enters whichever side of the others it ends on, unlike
    ``relu_like_linear``, which equals ``log10(smooth / linear)`` whenever ReLU ends below both."""
    f = {h: h_std_final(res, e1_name(h, bn, lr, init, seed)) for h in ("relu2", "linear", "gelu2", "swish2")}
    smooth = math.sqrt(f["gelu2"] * f["swish2"]) if f["gelu2"] > 0 and f["swish2"] > 0 else math.nan
    return abs(log10_ratio(smooth, f["linear"])) - abs(log10_ratio(f["relu2"], f["linear"]))


def curvature(res: Results, name: str) -> list[dict[str, Any]]:
    r = _unit(res, name)
    return r["curvature"] if r else []


def negative_fraction(res: Results, name: str, key: str = "negative", first_epoch: int = 1) -> float:
    """E2: the fraction of epoch-end measurements from ``first_epoch`` on with ``key`` true (``negative``:
    lambda_min(H_eff) below -1e-9 of its scale; ``negative_G``: the same for G; ``power_negative``: by the
    paper's power iteration; ``loss_indefinite``: the loss Hessian's)."""
    recs = [c for c in curvature(res, name) if c["epoch"] >= first_epoch]
    return fraction([bool(c[key]) for c in recs]) if recs else math.nan


def spearman_e2(res: Results, name: str, clamped: bool = True) -> float:
    """E2: Spearman between the std of normalised z and its covariance condition number over epochs 2.. (the
    official plot drops epoch 1); ``clamped=False``: the condition number with the unclamped lambda_min.
    Degenerate (NaN): fewer than three epochs, a constant series, or (clamped) every epoch at the 1e-7 clamp,
    where the condition number is lambda_max / 1e-7, a variance correlated with a std by construction."""

    r = _unit(res, name)
    if not r:
        return math.nan
    hist = [h for h in r["history"] if h["epoch"] >= 2]
    if clamped:
        if clamp_fraction(res, name) == 1.0:
            return math.nan
        cond = [h["z_cond"] for h in hist]
    else:
        by_epoch = {c["epoch"]: c for c in r["curvature"]}
        cond = [by_epoch[h["epoch"]]["z_cov_max"] / by_epoch[h["epoch"]]["z_cov_min"]
                if by_epoch[h["epoch"]]["z_cov_min"] > 0 else math.nan for h in hist]
        if not all(math.isfinite(c) for c in cond):
            return math.nan
    rho = spearman([h["z_std"] for h in hist], cond)
    return math.nan if rho is None else rho


def clamp_fraction(res: Results, name: str) -> float:
    """E2: the fraction of epochs 2.. where the covariance's lambda_min lies below the paper's 1e-7 clamp (there
    the condition number is lambda_max / 1e-7, a variance)."""

    recs = [c for c in curvature(res, name) if c["epoch"] >= 2]
    return fraction([c["z_cov_min"] < COND_FLOOR for c in recs]) if recs else math.nan


def conditioning(res: Results, name: str, at: str = "end") -> float:
    """Section 3: the median over the probe's samples of ``log10 kappa(H_i) - log10 kappa(grad^2_{h_i} L)``
    (``range_condition``) at the end of training or at its start (< 0: H_eff in z better conditioned than the
    loss Hessian in h, the head whitens)."""
    recs = curvature(res, name)
    if not recs:
        return math.nan
    rec = recs[0] if at == "start" else recs[-1]
    return rec["cond_log_ratio"] if at == "start" or rec["epoch"] > 0 else math.nan


def protocol(res: Results, name: str, proto: str, key: str) -> float:
    """A unit's measurement ``key`` under E4's protocol ``proto``; NaN where the unit or the value is absent (a unit
    measured before the key existed)."""
    r = _unit(res, name)
    v = (r.get("protocols") or {}).get(proto, {}).get(key) if r else None
    return float(v) if isinstance(v, (int, float)) else math.nan


def gap(res: Results, name: str, proto: str, probe: str) -> float:
    """E3 / E5: probe accuracy on h minus on z, in points (the project's sign; ``probe``: rot_linear, rot_mlp,
    class). The paper's "drop" of 14.72 points is a gap of -14.72."""
    return 100 * (protocol(res, name, proto, f"{probe}_h") - protocol(res, name, proto, f"{probe}_z"))


def log10_of(res: Results, name: str, proto: str, key: str) -> float:
    v = protocol(res, name, proto, key)
    return math.log10(v) if v > 0 else math.nan




def depth_slope(res: Results, seed: int, value) -> float:
    """E5 as a trend: the least-squares slope over depths 1, 2, 3 of ``value(name)`` for ``E5-depth{d}-s{seed}``
    (per depth; NaN unless all three are finite). With x = (1, 2, 3), slope = (y3 - y1) / 2 exactly."""
    ys = [value(f"E5-depth{d}-s{seed}") for d in (1, 2, 3)]
    if not all(math.isfinite(y) for y in ys):
        return math.nan
    xs = (1.0, 2.0, 3.0)
    mx, my = sum(xs) / 3, sum(ys) / 3
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def timescale(res: Results, name: str) -> float:
    """The head/backbone timescale separation of a run: log10 of the median over epochs of the head's relative
    parameter update over the backbone's (``rel_update_head / rel_update_backbone``, recorded per epoch)."""
    r = _unit(res, name)
    if not r:
        return math.nan
    ratios = [h["rel_update_head"] / h["rel_update_backbone"] for h in r["history"]
              if h.get("rel_update_head") and h.get("rel_update_backbone")]
    if not ratios:
        return math.nan
    ratios.sort()
    mid = len(ratios) // 2
    med = ratios[mid] if len(ratios) % 2 else math.sqrt(ratios[mid - 1] * ratios[mid])
    return math.log10(med) if med > 0 else math.nan


def largest(res: Results, name: str, key: str, first_epoch: int = 0) -> float:
    """The largest ``key`` over a run's curvature records from ``first_epoch`` on (NaN without records)."""
    recs = [c[key] for c in curvature(res, name) if c["epoch"] >= first_epoch and c.get(key) is not None]
    return max(recs) if recs else math.nan


def record_key(res: Results, name: str, key: str) -> float:
    """A unit's top-level measurement ``key`` (the mechanism measurements), NaN where absent."""
    r = _unit(res, name)
    v = None if r is None else r.get(key)
    return float(v) if isinstance(v, (int, float)) else math.nan


def start_h_std(res: Results, name: str) -> float:
    """E1: the h std before training (the start's collapse in the measured statistic)."""
    r = _unit(res, name)
    return r["start"]["h_std"] if r else math.nan


def section(res: Results, name: str, part: str, key: str) -> float:
    """``record[part][key]`` of a unit (``part``: start, timescale, tangent, tangent_untrained), NaN if absent."""
    r = _unit(res, name)
    v = ((r or {}).get(part) or {}).get(key)
    return float(v) if isinstance(v, (int, float)) else math.nan


def mechanism_at(res: Results, name: str, key: str, at: str = "start") -> float:
    """``scale.curvature.eq1_terms``'s ``key`` at the start (epoch 0) or the end (the last record) of a run."""
    recs = [c for c in curvature(res, name) if c.get("mechanism")]
    if not recs:
        return math.nan
    rec = recs[0] if at == "start" else recs[-1]
    if at == "end" and rec["epoch"] == 0:
        return math.nan
    v = rec["mechanism"].get(key)
    return float(v) if isinstance(v, (int, float)) else math.nan


def loss_psd_at_start(res: Results, name: str) -> float:
    """1 if the loss Hessian in h was positive semi-definite at the run's first measurement (epoch 0), 0 if
    indefinite (``loss_indefinite``), NaN without it."""
    recs = curvature(res, name)
    if not recs or recs[0]["epoch"] != 0 or "loss_indefinite" not in recs[0]:
        return math.nan
    return 0.0 if recs[0]["loss_indefinite"] else 1.0


def negative_count(res: Results, name: str, key: str = "negative", first_epoch: int = 1) -> tuple[int, int] | float:
    """E2: ``(k, m)``, k of the m epoch-end measurements from ``first_epoch`` on with ``key`` true: a clustered
    fraction's per-seed counts (``scale.ledger.stats``, kind ``clustered``); NaN without measurements."""
    recs = [c for c in curvature(res, name) if c["epoch"] >= first_epoch]
    return (sum(bool(c[key]) for c in recs), len(recs)) if recs else math.nan


def premise_part(res: Results, name: str, training: str, part: str) -> dict[str, Any]:
    """One part (``training``: the check, ``class_probe``: z's probes and their baselines) of the premise record a
    finished unit holds for its training ``training`` (raw, normalized; ``scale.geometry.e4_seed.premise_record``);
    ``{}`` where not recorded."""
    r = _unit(res, name)
    got = (((r or {}).get("premise") or {}).get(training) or {}).get(part)
    return got if isinstance(got, dict) else {}


def learned(res: Results, name: str, training: str) -> bool | None:
    """Whether a unit's training ``training`` (raw, normalized) passed the premise "the network learned"
    (``scale.runs.premise``, recorded in the unit's ``premise``); ``None`` where not recorded."""
    v = premise_part(res, name, training, "training").get("learned")
    return v if isinstance(v, bool) else None


def learned_findings(res: Results, name: str, training: str) -> list[str]:
    return [str(f) for f in premise_part(res, name, training, "training").get("findings") or []]


def start_z_spread(res: Results, name: str) -> float:
    """E1: the spread of z at the collapsed start's measurement (``mechanism``'s z std times sqrt(d), d from its
    G's eigenvalue count over the probe's rows): 1 for rows spread over the sphere, 0 for one point."""
    recs = [c for c in curvature(res, name) if c.get("mechanism")]
    if not recs or recs[0]["epoch"] != 0:
        return math.nan
    m = recs[0]["mechanism"]
    rows = recs[0].get("probe_rows")
    if not rows or not m.get("G_eigenvalues") or not isinstance(m.get("z_std"), (int, float)):
        return math.nan
    return float(m["z_std"]) * math.sqrt(float(m["G_eigenvalues"]) / float(rows))


def log10_of_value(v: float) -> float:
    return math.log10(v) if math.isfinite(v) and v > 0 else math.nan
