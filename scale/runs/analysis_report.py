"""The report of ``python -m scale.analyze`` (``scale.analysis.analyze_model``'s result): report.md and its figures
(``spectrum.png``, ``orbits.png``), built from the JSON-ready result alone with the run report's words
(``scale.runs.run_report``): the training check first, the verdict, the curvature, the orbit and probe tables.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from scale.engine import disk, read
from scale.engine.checkpoint import atomic_write_bytes, atomic_write_json, atomic_write_text
from scale.engine.plots import pyplot
from scale.runs.run_report import geometry_section, probe_section, training_section, verdict_section, versions_table
from scale.runs.summary import RotationProbes, RunSummary, TrainingCheck, Verdict


def num(v: float | None, spec: str = ".4g") -> str:
    """A number as the report prints it, "-" where it is missing or NaN."""
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:{spec}}"


def _figures(result: dict[str, Any]) -> dict[str, bytes]:
    plt = pyplot()

    figs = {}
    if "curvature" in result:
        c = result["curvature"]
        fig, ax = plt.subplots(figsize=(6, 3))
        for row, name in enumerate(("H", "G", "M")):
            vals = np.asarray(c[name]["ritz_values"])
            ax.scatter(vals, np.full(len(vals), row), s=8)
        ax.axvline(0.0, color="k", lw=0.5)
        ax.set_yticks([0, 1, 2], ["H_eff", "G", "M"])
        ax.set_xlabel("Ritz values (Lanczos)")
        ax.set_title(f"Spectra at the probe batch (n={c['n']}, d={c['d']})")
        fig.tight_layout()
        figs["spectrum.png"] = _png(fig, plt)
    if "per_orbit" in result:
        sp = result["per_orbit"]
        fig, ax = plt.subplots(figsize=(6, 3))
        x = np.arange(len(sp["z"]["spread"]))
        for key, label in (("z", "backbone z"), ("h", "head h"), ("h_untrained", "untrained head")):
            ax.plot(x, sp[key]["spread"], "o-", ms=3, label=label)
        ax.set_yscale("log")
        ax.set_xlabel("orbit")
        ax.set_ylabel("orbit spread")
        ax.legend(fontsize=8)
        fig.tight_layout()
        figs["orbits.png"] = _png(fig, plt)
    return figs


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def render_report(result: dict[str, Any], source: str) -> str:
    method = result["config"]["method"]
    L = [f"# Analysis of {source}", "",
         f"Dataset `{result['dataset']}`, method `{method}` "
         f"{'(its loss defines H_eff)' if 'curvature' in result else '(H_eff not measured)'}, device "
         f"{result['device']}, {result['seconds']:.1f} s. Measured at the state given; nothing trained.", ""]
    training = TrainingCheck.from_dict(result["training"]) if result.get("training") else None
    if training is not None:
        L += [*training_section(training), ""]
    if "verdict" in result:
        L += verdict_section(Verdict.from_dict(result["verdict"]), untrained=training is not None and
                             training.learned is False)
    L += [f"Note: {note}" for note in result.get("notes", [])] + ([""] if result.get("notes") else [])
    if "curvature" in result:
        L += _curvature_section(result["curvature"])
    # The tables of scale.runs.run_report, from the typed summaries of what was measured here.
    p = result.get("probes")
    typed = RunSummary.from_dict({"geometry": result.get("geometry"), "class_probe": p and p["headline"]})
    if typed.geometry is not None:
        L += [*geometry_section(typed.geometry), "![orbit spread](orbits.png)", ""]
    if p is not None:
        r = p["rotation"]
        rot = RotationProbes.from_dict({"settings": p["rotation_settings"], "gaps": p.get("rotation_gaps"),
                                        **{k: {"z": r["z"][k], "h": r["h"][k]} for k in ("linear", "mlp")}})
        L += probe_section(typed.class_probe, rot, baselines=True)
    L += ["## Provenance", "", *versions_table(result["versions"], result["git_commit"])]
    return "\n".join(L)


def _curvature_section(c: dict[str, Any]) -> list[str]:
    s = c["split_at_lambda_min"]
    L = ["## Curvature: H_eff = G + M at the probe batch", "",
          f"n = {c['n']} rows (view pairs), d = {c['d']}, k = {c['k']}; BatchNorm {c['bn_mode']}; products "
          f"{c['hvp_mode']}, {c['dtype']}.", "",
          "| operator | lambda_min | lambda_max | residual (min, max) | Lanczos steps |", "|---|---|---|---|---|"]
    for name, label in (("H", "H_eff"), ("G", "G (Gauss-Newton)"), ("M", "M (interaction)")):
        r = c[name]
        L.append(f"| {label} | {num(r['lambda_min'])} | {num(r['lambda_max'])} | {num(r['residual_min'], '.1e')}, "
                 f"{num(r['residual_max'], '.1e')} | {r['n_iter']} |")
    L += ["", f"Along the lowest Ritz vector v of H_eff: v^T H v = {num(s['vHv'])} = v^T G v ({num(s['vGv'])}) + "
          f"v^T M v ({num(s['vMv'])}). Share of the negative curvature: G {num(s['share_G'], '.1%')}, "
          f"M {num(s['share_M'], '.1%')} (shares are max(-v^T X v, 0) over their sum; '-' where neither is "
          f"negative). |M|_F / |H|_F = {num(c['M_over_H_frobenius'])} (Hutchinson, 8 probes).", "",
          "![spectra](spectrum.png)", ""]
    return L


ANALYSIS_FILES = ("analysis.json", "report.md", "spectrum.png", "orbits.png")  # what write_report puts in out


def is_analysis(path: Path) -> bool:
    """Whether ``path`` is an analysis.json this command wrote (a JSON object naming its ``source``)."""

    try:
        return "source" in read.read_json(path, dict)
    except read.Unreadable:
        return False


def check_analysis_out(out: str | Path) -> None:
    """Refuse (``disk.NotOurs``) an ``out`` holding a user's file of one of this report's names: run before the work."""

    disk.check_outputs_ours(Path(out), ANALYSIS_FILES, "analysis.json", is_analysis)


def write_report(result: dict[str, Any], out: str | Path, source: str) -> Path:
    """analysis.json, report.md and the figures into ``out`` (each file written atomically; a user's file of
    one of these names is refused, never replaced)."""

    out = Path(out)
    check_analysis_out(out)
    figures = _figures(result)
    text = render_report(result, source)
    disk.make_dirs(out)
    for name, data in figures.items():
        atomic_write_bytes(out / name, data)
    atomic_write_json(out / "analysis.json", {**result, "source": source})  # "source": the record of this writer
    atomic_write_text(out / "report.md", text)
    return out / "report.md"
