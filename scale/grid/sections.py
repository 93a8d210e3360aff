r"""The grid report's sections (``scale.grid.page`` puts them in report.md): for each experiment its table, and
the rows it adds to the verdict table, each verdict with its premise cell.

    section_e1, section_e2, section_e4 (E3 + E4), section_e5    an experiment's markdown, its verdict rows added
    premise_cell, add_verdict    the premise "the network learned" over the runs a verdict rests on
                                 (``scale.runs.premise``), and one verdict row gated by it
    mean_std, fmt                our numbers: mean +- std over seeds (over orbits where a single seed ran)
    run_status, finished_runs, geometry_of, final_metric    a run's record (``scale.grid.records``) as they read it

Tables carry the paper's reference figure (``docs/paper.md``; CIFAR-10, ResNet-18) next to ours, ours as
mean +- std over seeds (over orbits where a single seed ran, and then said so). Each claim gets a verdict computed
from our numbers only; the paper's figure is printed beside it and never enters a result.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mini import paper_numbers as paper
from scale.experiments.catalog import E1_HEADS
from scale.geometry.probes import E3_PROTOCOL, HEADLINE_PROTOCOL
from scale.runs.premise import DID_NOT_LEARN, NOT_DECIDED, recheck
from scale.runs.summary import CurvatureSummary, GeometrySummary, RunSummary, TrainingCheck

PAPER_COMPRESSION = f"{paper.E4['spread'].factor:.4g}x"
PAPER_COMPRESSION_UNTRAINED = f"{paper.COMPRESSION_UNTRAINED:.2f}x"


def _paper_e2(key: str) -> str:
    return f"rho_s {paper.E2_SPEARMAN[key]:.3f}; {paper.E2_NOTE[key]}" if key in paper.E2_SPEARMAN else "-"


def run_status(r: dict[str, Any]) -> str:
    return r["summary"].status if r["summary"] is not None else "not run"


def finished_runs(runs: list[dict[str, Any]], exp: str) -> list[dict[str, Any]]:
    return [r for r in runs if r["experiment"] == exp and run_status(r) == "finished"]


def mean_std(values: list[float]) -> tuple[float, float, int]:
    """Mean and sample std (ddof 1; 0 for one value) of the finite values."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if v.size == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def fmt(values: list[float], spec: str = ".3g", scale: float = 1.0, orbit_std: float | None = None,
        unit: str = "") -> str:
    """``mean +- std unit (n seeds)``; one seed: ``mean +- orbit_std unit (orbits)`` when ``orbit_std`` is
    given, else ``mean unit (1 seed)``."""
    m, s, n = mean_std([None if v is None else v * scale for v in values])
    if n == 0:
        return "-"
    if n == 1:
        if orbit_std is not None:
            return f"{m:{spec}} +- {orbit_std * scale:{spec}}{unit} (orbits)"
        return f"{m:{spec}}{unit} (1 seed)"
    return f"{m:{spec}} +- {s:{spec}}{unit} ({n} seeds)"


def geometry_of(r: dict[str, Any]) -> GeometrySummary | None:
    return r["summary"].geometry if r["summary"] is not None else None


def _probe(r: dict[str, Any], space: str, kind: str) -> float | None:
    """Test accuracy (percent) of ``kind``: "headline" (class labels) or E3's "linear" / "mlp" rotation probes."""
    s: RunSummary | None = r["summary"]
    if s is None:
        return None
    pair = (s.class_probe.accuracy if s.class_probe is not None else None) if kind == "headline" else (
        getattr(s.rotation_probes, kind) if s.rotation_probes is not None else None)
    return None if pair is None else getattr(pair, space)


def final_metric(r: dict[str, Any], key: str) -> float | None:
    return r["metrics"][-1].get(key) if r["metrics"] else None


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("holds here" if ok else "does not hold here")


def learned_check(r: dict[str, Any]) -> TrainingCheck | None:
    """A run's premise "the network learned", read again on its unit's numbers under today's definition
    (``scale.runs.premise.recheck``: units written before the premise or the kNN probe included)."""
    s: RunSummary | None = r["summary"]
    if s is None or s.training is None:
        return None
    return recheck(s.training, s.config.get("method", ""), s.class_probe)


def premise_cell(runs: list[dict[str, Any]]) -> tuple[str, bool | None]:
    """The premise over the runs a verdict rests on: the cell's text and whether every run learned (``None``:
    not decided in any: not measured, or without a class probe)."""
    checks = [(r["name"], learned_check(r)) for r in runs]
    measured = [(n, t) for n, t in checks if t is not None and t.learned is not None]
    if not measured:
        return NOT_DECIDED, None
    failed = [(n, t) for n, t in measured if not t.learned]
    if not failed:
        return f"learned ({len(measured)} of {len(checks)} runs decided)", True
    return (f"{DID_NOT_LEARN}: " + "; ".join(f"{n} ({t.findings[0]})" for n, t in failed[:3])
            + (f"; and {len(failed) - 3} more" if len(failed) > 3 else "")), False


def add_verdict(verdicts: list, claim: str, ours: str, paper_text: str, ok: bool | None, runs: list[dict[str, Any]],
                gated: bool = True, why_not: str = "") -> None:
    """One row of the verdict table with its premise: a claim about a trained network (``gated``) is decided only
    where every run it rests on learned, else "premise not met"; another (``why_not``: why the premise is not its
    premise) shows the premise beside its verdict."""
    cell, learned = premise_cell(runs)
    if not gated:
        cell = f"not this claim's premise ({why_not}); {cell}"
    verdict = _verdict(ok)
    if gated and learned is not True and ok is not None:
        verdict = f"premise not met ({'the network ' + DID_NOT_LEARN if learned is False else NOT_DECIDED}); " \
                  f"as measured: {verdict}"
    verdicts.append((claim, ours, paper_text, cell, verdict))


def section_e1(runs, verdicts) -> list[str]:
    e1 = [r for r in runs if r["experiment"] == "E1"]
    if not e1:
        return []
    L = ["## E1: collapse dynamics (SimSiam-style, pseudo-collapse initialisation)", "",
         "Final epoch, probe batch: `h std` = mean per-dimension std of the L2-normalised projector output "
         "(collapse: 0; a uniform spread over the sphere: 1/sqrt(k)); `h cond` = covariance condition number "
         "(lambda_min clamped at 1e-7). Mean +- std over seeds.", "",
         "| head | BatchNorm | lr | h std after epoch 1 | h std final | h cond final | non-finite |",
         "|---|---|---|---|---|---|---|"]
    heads = sorted({r["labels"]["head"] for r in e1}, key=lambda h: E1_HEADS.index(h) if h in E1_HEADS else 9)
    lrs = sorted({r["labels"]["lr"] for r in e1})
    final: dict[tuple[str, bool, float], float] = {}
    for head in heads:
        for bn in (False, True):
            for lr in lrs:
                g = [r for r in e1 if r["labels"] == dict(head=head, bn=bn, lr=lr)]
                ok = [r for r in g if run_status(r) == "finished"]
                first = [r["metrics"][0]["h_std"] for r in ok if r["metrics"]]
                last = [final_metric(r, "h_std") for r in ok]
                final[(head, bn, lr)] = mean_std(last)[0]
                L.append(f"| {head} | {'on' if bn else 'off'} | {lr:g} | {fmt(first, '.3g')} | {fmt(last, '.3g')} | "
                         f"{fmt([final_metric(r, 'h_cond') for r in ok], '.3g')} | "
                         f"{sum(run_status(r) == 'non-finite loss' for r in g)} of {len(g)} |")
    L += ["", "![E1 variance](e1_variance.png)", "", "![E1 condition number](e1_condition.png)", ""]

    def val(head, bn, lr):
        v = final.get((head, bn, lr))
        return None if v is None or not math.isfinite(v) else v

    lr0 = 0.05 if 0.05 in lrs else lrs[len(lrs) // 2]
    lin, smooth = val("linear", False, lr0), [val(h, False, lr0) for h in ("gelu2", "swish2")]
    ok = None if lin is None or None in smooth else all(s > lin for s in smooth)
    dynamics = "whether training leaves collapse is the claim itself"

    def runs_of(*keys):
        return [r for r in e1 if (r["labels"]["head"], r["labels"]["bn"], r["labels"]["lr"]) in keys]

    add_verdict(verdicts, "Thm 4.1: smooth heads (GELU, Swish) leave pseudo-collapse, a linear head does not "
                f"(E1, BN off, lr {lr0:g}: final h std)",
                f"linear {_n(lin)}; gelu {_n(smooth[0])}; swish {_n(smooth[1])}", "qualitative (no figure)", ok,
                runs_of(*((h, False, lr0) for h in ("linear", "gelu2", "swish2"))), gated=False, why_not=dynamics)
    lo = lrs[0]
    relu, lin_lo = val("relu2", False, lo), val("linear", False, lo)
    sm_lo = [val(h, False, lo) for h in ("gelu2", "swish2")]
    ok = None
    if relu is not None and lin_lo is not None and None not in sm_lo and relu > 0 and lin_lo > 0:
        ok = abs(math.log(relu / lin_lo)) < abs(math.log(relu / float(np.mean(sm_lo))))
    add_verdict(verdicts, f"ReLU gap: without BN and at the smallest step (lr {lo:g}) ReLU behaves like linear "
                "(final h std closer to linear's than to the smooth heads' mean, in log)",
                f"relu {_n(relu)}; linear {_n(lin_lo)}; "
                f"smooth mean {_n(float(np.mean(sm_lo)) if None not in sm_lo else None)}",
                "qualitative (no figure)", ok, runs_of(*((h, False, lo) for h in ("relu2", "linear", "gelu2",
                                                                                  "swish2"))),
                gated=False, why_not=dynamics)
    relu_bn = val("relu2", True, lo)
    add_verdict(verdicts, f"ReLU escapes through BatchNorm (lr {lo:g}: final h std with BN > without)",
                f"BN on {_n(relu_bn)}; off {_n(relu)}", "qualitative (no figure)",
                None if relu is None or relu_bn is None else relu_bn > relu,
                runs_of(("relu2", True, lo), ("relu2", False, lo)), gated=False, why_not=dynamics)
    return L


def _n(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.3g}"


def section_e2(runs, verdicts) -> list[str]:
    e2 = [r for r in runs if r["experiment"] == "E2"]
    if not e2:
        return []
    L = ["## E2: Hessian tracking (H_eff with respect to the backbone output)", "",
         "Once per epoch on a fixed probe batch (BatchNorm in eval mode); lambda_min and lambda_max by Lanczos in "
         "float64; `negative` = fraction of measurements with lambda_min < -1e-9 x the spectral scale; Spearman "
         "between representation variance and condition number over the measurements where H_eff was positive "
         "definite (the condition number exists only there).", "",
         "`|M|/|H|` and the negative counts of the last measurement: `H` = all negative eigenvalues of H_eff, `G` = "
         "those of the Gauss-Newton part alone (exact, per-sample blocks, where the objective allows).", "",
         "| run | measurements (probe rows) | negative lambda_min | last lambda_min | last lambda_max | "
         "last abs(M)/abs(H) | last negatives H / G | Spearman (points) | paper |",
         "|---|---|---|---|---|---|---|---|---|"]
    m_ratio: dict[str, float | None] = {}
    frac: dict[str, float | None] = {}
    for r in e2:
        key = f"{r['labels']['init']}-{r['labels']['head']}"
        cs: CurvatureSummary | None = r["curvature_summary"]
        cur = r["curvature"]
        frac[key] = cs.negative_lambda_min_fraction if cs else None
        rho = cs.spearman_zstd_condition if cs else None
        last = cur[-1] if cur else {}
        m_ratio[key] = last.get("M_over_H")
        L.append(f"| {r['labels']['init']}/{r['labels']['head']} ({run_status(r)}) | {len(cur)} "
                 f"({cs.probe_rows if cs else '-'}) | "
                 f"{'-' if frac[key] is None else f'{100 * frac[key]:.0f} %'} | {_n(last.get('lambda_min'))} | "
                 f"{_n(last.get('lambda_max'))} | {_n(m_ratio[key])} | "
                 f"{last.get('n_negative', '-')} / {last.get('n_negative_G', '-')} | "
                 f"{'-' if rho is None else f'{rho:.3f}'} "
                 f"({cs.spearman_points if cs else 0}) | {_paper_e2(key)} |")
    L += ["", "![E2 curvature](e2_curvature.png)", ""]
    sw = [frac.get("normal-swish2"), frac.get("collapsed-swish2")]
    re = frac.get("collapsed-relu2")
    ok = None if re is None or None in sw else min(sw) > re
    add_verdict(verdicts, "E2: Swish heads show negative lambda_min of H_eff more often than the collapsed ReLU "
                "head (fraction of measurements over training)",
                f"swish normal {_pct(sw[0])}, collapsed {_pct(sw[1])}; relu {_pct(re)}",
                "about 70 % (Swish); 0 after epoch 1 (ReLU)", ok, e2)
    mr = m_ratio.get("collapsed-relu2")
    add_verdict(verdicts, "Eq. (1) / ReLU gap: a ReLU head has no interaction term (abs(M)/abs(H) = 0 at the last "
                "measurement, E2 collapsed/ReLU)", _n(mr), "M = 0 (s'' = 0 a.e.)",
                None if mr is None else mr == 0.0,
                [r for r in e2 if (r["labels"]["init"], r["labels"]["head"]) == ("collapsed", "relu2")], gated=False,
                why_not="an identity of the head's form, at any state")
    L += ["Negative eigenvalues counted in `G` come from the loss Hessian: SimSiam's negative cosine has an "
          "indefinite Hessian (the paper's audit caveat), so `G = J^T (grad^2 L) J` need not be PSD and lambda_min "
          "< 0 does not by itself show the head's curvature at work; `|M|/|H|` separates the two.", ""]
    return L


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f} %"


def section_e4(e3, comparable: bool, verdicts) -> list[str]:
    if not e3:
        return []
    geos = [g for g in (geometry_of(r) for r in e3) if g]
    if not geos:
        return []
    single = len(geos) == 1
    paper_head = "paper (CIFAR-10)" if comparable else "paper (CIFAR-10; not comparable here)"
    s = geos[0].settings
    L = ["## E3 + E4: the guillotine (SimCLR): orbit geometry and probes", "",
         f"{s['n_orbits']} orbits ({s['classes']} classes x {s['per_class']} test images) x {s['points_per_orbit']} "
         f"{s['family']} values ({s['values'][0]:g} to {s['values'][-1]:g}); kappa on a {s['sweep_points']}-point "
         f"sweep ({s['sweep_values'][0]:g} to {s['sweep_values'][-1]:g}). "
         + ("One seed: +- is the std over orbits (class pairs for D_inter, sweeps for kappa)."
            if single else "+- is the std over seeds of the per-run means."), "",
         f"| quantity | {paper_head} z | h | factor | ours z | ours h | ours factor | untrained head (ours) |",
         "|---|---|---|---|---|---|---|---|"]
    factors = {"spread": "compression", "kappa": "kappa_factor", "d_intra": "d_intra_factor",
               "d_inter": "d_inter_factor", "ratio": "ratio_factor"}
    rows = (("spread", "orbit spread (x 1e-2)", 100.0), ("kappa", "curvature kappa", 1.0), ("d_intra", "D_intra", 1.0),
            ("d_inter", "D_inter", 1.0), ("ratio", "D_inter / D_intra", 1.0))
    for key, label, sc in rows:
        ref = paper.E4[key]
        pz, ph, pf = ref.cell("z", sc), ref.cell("h", sc), ref.factor_text()
        cells = []
        for space in ("z", "h", None, "h_untrained"):
            if space is None:
                cells.append(fmt([getattr(g, factors[key]) for g in geos], ".3g", unit="x"))
                continue
            vals = [getattr(getattr(g, space), key).mean for g in geos]
            cells.append(fmt(vals, ".3g", sc, orbit_std=getattr(getattr(geos[0], space), key).std if single else None))
        L.append(f"| {label} | {pz} | {ph} | {pf} | " + " | ".join(cells) + " |")
    comp = mean_std([g.compression for g in geos])[0]
    comp0 = mean_std([g.compression_untrained for g in geos])[0]
    comp_raw = mean_std([g.compression_raw_input for g in geos])[0]
    comp0b = mean_std([g.compression_untrained_nobias for g in geos])[0]
    L += ["", f"Compression: trained head {comp:.3g}x, untrained head {comp0:.3g}x (paper: {PAPER_COMPRESSION}, "
          f"{PAPER_COMPRESSION_UNTRAINED}). Beside the protocol: the untrained head without biases {_n(comp0b)}x "
          f"(on unit-norm z a default bias can outweigh the first layer's W z and pull all points together); the "
          f"trained head applied to the raw z it was trained on {comp_raw:.3g}x.", ""]
    L += [f"Probes: the rotation rows follow {E3_PROTOCOL}; the headline row is "
          f"this project's class-label probe ({HEADLINE_PROTOCOL}), which the paper does not report.", "",
          "| probe (test accuracy) | paper z | paper h | paper h - z | ours z | ours h | ours h - z |",
          "|---|---|---|---|---|---|---|"]
    diffs = {}
    for kind, label in (("linear", "rotation, linear (E3 protocol)"), ("mlp", "rotation, MLP (E3 protocol)"),
                        ("headline", "class labels, headline probe (not in the paper)")):
        z = [_probe(r, "z", kind) for r in e3]
        h = [_probe(r, "h", kind) for r in e3]
        d = [None if a is None or b is None else b - a for a, b in zip(z, h)]  # h - z, the paper's sign
        diffs[kind] = mean_std(d)[0]
        pz, ph, pd = paper.E3_PROBES[kind].cells() if kind in paper.E3_PROBES else ("-", "-", "-")
        L.append(f"| {label} | {pz} | {ph} | {pd} | {fmt(z, '.4g', unit=' %')} | {fmt(h, '.4g', unit=' %')} | "
                 f"{fmt(d, '+.3g', unit=' points')} |")
    L += ["", "![E4 orbits](e4_orbits.png)", "", "![compression](compression.png)", ""]
    kap = mean_std([g.kappa_factor for g in geos])[0]
    rat = mean_std([g.ratio_factor for g in geos])[0]
    for claim, ours, paper_text, ok in (
        ("E4: the trained head compresses rotation orbits (spread z / spread h > 1)", f"{comp:.3g}x",
         PAPER_COMPRESSION, comp > 1 if math.isfinite(comp) else None),
        ("E4: the compression is learned (trained head compresses more than an untrained one)",
         f"{comp:.3g}x vs {comp0:.3g}x", f"{PAPER_COMPRESSION} vs {PAPER_COMPRESSION_UNTRAINED}",
         comp > comp0 if math.isfinite(comp) and math.isfinite(comp0) else None),
        ("E4: the head raises the curvature kappa along the sweep (h / z > 1)", f"{kap:.3g}x",
         paper.E4["kappa"].factor_text(), kap > 1 if math.isfinite(kap) else None),
        ("E4: the head raises D_inter / D_intra (h / z > 1)", f"{rat:.3g}x", f"{paper.E4['ratio'].factor:.4g}x",
         rat > 1 if math.isfinite(rat) else None),
        ("E3: the rotation is harder to read from h than from z (linear probe, h - z < 0)",
         f"{diffs['linear']:+.3g} points", paper.E3_PROBES["linear"].cells()[2],
         diffs["linear"] < 0 if math.isfinite(diffs["linear"]) else None),
        ("E3: the same with the MLP probe", f"{diffs['mlp']:+.3g} points", paper.E3_PROBES["mlp"].cells()[2],
         diffs["mlp"] < 0 if math.isfinite(diffs["mlp"]) else None),
    ):
        add_verdict(verdicts, claim, ours, paper_text, ok, e3)
    return L


def section_e5(e5) -> list[str]:
    if not e5:
        return []
    L = ["## E5: head depth (SimCLR, Swish + BatchNorm head)", "",
         "The paper states no figure for E5; mean +- std over seeds (one seed: the value).", "",
         "| depth | head | final loss | compression | untrained | kappa h / z | rotation linear z / h | "
         "rotation MLP z / h | headline (class labels) z / h |", "|---|---|---|---|---|---|---|---|---|"]
    for d in sorted({r["labels"]["depth"] for r in e5}):
        g = [r for r in e5 if r["labels"]["depth"] == d]
        geos = [x for x in (geometry_of(r) for r in g) if x]

        def both(kind, rs=g):
            return (f"{fmt([_probe(r, 'z', kind) for r in rs], '.3g', unit=' %')} / "
                    f"{fmt([_probe(r, 'h', kind) for r in rs], '.3g', unit=' %')}")

        L.append(f"| {d} | {g[0]['labels']['head']} | {fmt([final_metric(r, 'loss') for r in g], '.4g')} | "
                 f"{fmt([x.compression for x in geos], unit='x')} | "
                 f"{fmt([x.compression_untrained for x in geos], unit='x')} | "
                 f"{fmt([x.kappa_factor for x in geos], unit='x')} | {both('linear')} | {both('mlp')} | "
                 f"{both('headline')} |")
    L.append("")
    return L
