"""What a finished run leaves behind besides its metrics: summary.json, curves.png and report.md, the
report built once, here, from the run's typed summary (``scale.runs.summary.RunSummary``).

Sections of report.md: the run (config, status, final collapse statistics, the headline probe), the
end-of-run orbit geometry (E4) and probes (headline and E3), the curvature of ``H_eff`` when it was
tracked (E2), and the versions. Accuracies in percent, each probe named by its protocol.
"""

from __future__ import annotations

import math
import platform
import subprocess
import sys
from pathlib import Path

import torch

from mini.collapse import wilson_interval
from mini.invariance import Stat
from scale.engine.checkpoint import atomic_write_bytes, atomic_write_json, atomic_write_text
from scale.engine.markdown import escape as md
from scale.engine.modules import OWN, describe
from scale.engine.plots import png, pyplot
from scale.runs.premise import DID_NOT_LEARN, LEARNED_MARGIN, NOT_DECIDED, learned_word
from scale.runs.summary import (
    ClassProbe,
    CurvatureSummary,
    Estimate,
    GeometrySummary,
    ProbePair,
    RotationProbes,
    RunSummary,
    TrainingCheck,
    Verdict,
)


def versions() -> dict[str, str]:
    import kornia
    import numpy

    out = {"python": platform.python_version(), "torch": torch.__version__, "kornia": kornia.__version__,
           "numpy": numpy.__version__}
    try:
        import sklearn

        out["scikit-learn"] = sklearn.__version__
    except ImportError:
        pass
    return out


# The code that produces the project's numbers: a change there (or a new file) makes the commit "+dirty"; docs, tests
# and the benchmarks' own result files (which a sequence of benchmarks rewrites as it goes) do not.
CODE_PATHS = ("mini", "scale", "bench", "pyproject.toml", ":(exclude)bench/results")


def git_commit(short: bool = False) -> str:
    """The project's one reading of its commit: HEAD (its first 12 digits with ``short``), with ``+dirty`` when the
    code (``CODE_PATHS``) differs from it; ``unknown`` outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *CODE_PATHS], cwd=root, capture_output=True,
                               text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if sha.returncode or dirty.returncode:
        return "unknown"
    head = sha.stdout.strip()
    return (head[:12] if short else head) + ("+dirty" if dirty.stdout.strip() else "")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def plot_curves(history: list[dict[str, float]]) -> bytes:
    plt = pyplot()

    epochs = [r["epoch"] for r in history]
    knn = all("knn_z" in r for r in history)  # the online monitor's (scale.monitor.online; runs before it had none)
    fig, axes = plt.subplots(1, 3 if knn else 2, figsize=(13.5 if knn else 9, 3.4))
    ax1, ax2 = axes[:2]
    ax1.plot(epochs, [r["loss"] for r in history], marker="o")
    if all("loss_chance" in r for r in history):
        ax1.plot(epochs, [r["loss_chance"] for r in history], ls="--", color="grey", label="chance")
        ax1.legend(fontsize=8)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("training loss")
    ax1.set_title("loss")
    if knn:
        axes[2].plot(epochs, [r["knn_z"] for r in history], marker="o", label="z, during training")
        if "knn_z_initial" in history[0]:
            axes[2].axhline(history[0]["knn_z_initial"], ls="--", color="grey", label="z at initialisation")
        axes[2].set_xlabel("epoch")
        axes[2].set_ylabel("accuracy (%)")
        axes[2].set_title("kNN of z on held-out images")
        axes[2].legend(fontsize=8)
    ax2.plot(epochs, [r["h_std"] for r in history], marker="o", label="head h (projector output)")
    ax2.plot(epochs, [r["z_std"] for r in history], marker="s", label="backbone z")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("mean per-dim std of normalised rows")
    ax2.set_title("representation variance (probe batch)")
    ax2.legend(fontsize=8)
    return png(fig, dpi=110)


def _pct(v: float) -> str:
    return f"{v:.2f} %"


# --------------------------------------------------------------------------------------------
# Probe accuracies with their intervals, and the verdict: the same words in every report
# --------------------------------------------------------------------------------------------

SMALL_TEST = 100  # below this many test samples one sample is worth more than a point: the report warns


def accuracy_text(percent: float, n: int) -> str:
    """``84.00 % [80.3, 87.3]``: a test accuracy with its Wilson 95 % interval over ``n`` test samples."""
    if n < 1:
        return _pct(percent)
    lo, hi = wilson_interval(round(percent / 100 * n), n)
    return f"{percent:.2f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def small_test_warning(n: int, what: str = "test images") -> str | None:
    """A warning when ``n`` test samples make one sample worth more than a percentage point."""
    if n >= SMALL_TEST:
        return None
    return (f"only {n} {what}: one is worth {100 / max(n, 1):.1f} points; read the accuracies with their "
            "Wilson 95 % intervals")


def gap_text(gap: Estimate | None, value: float) -> str:
    """``-14.22 points [-18.1, -10.3]``: a gap in percentage points with its paired 95 % interval (the value
    alone for summaries written before the interval was measured)."""
    if gap is None:
        return f"{value:+.2f} points"
    return f"{gap.value:+.2f} points" + ("" if math.isnan(gap.low) else f" [{gap.low:+.1f}, {gap.high:+.1f}]")


def _pair_line(accuracy: ProbePair, gap: Estimate | None, initial_z: float | None, initial_gain: Estimate | None,
               n: int, raw_input: float | None = None, raw_gain: Estimate | None = None) -> str:
    """One probe's z and h, h minus z with its paired interval, and beside each other the backbone at
    initialisation and the raw input where probed."""
    line = (f"backbone z {accuracy_text(accuracy.z, n)}  head h {accuracy_text(accuracy.h, n)}  "
            f"(h minus z: {gap_text(gap, accuracy.gap)})")
    if initial_z is not None:
        line += (f"; z at initialisation {accuracy_text(initial_z, n)} (training added "
                 f"{gap_text(initial_gain, accuracy.z - initial_z)})")
    if raw_input is not None:
        line += f"; {raw_input_text(accuracy.z, raw_input, raw_gain, n)}"
    return line


def raw_input_text(z: float, raw_input: float, raw_gain: Estimate | None, n: int) -> str:
    """The raw-input baseline beside z: the same probe of the flattened pixels and z minus it, paired."""
    return f"the raw input (pixels) {accuracy_text(raw_input, n)} (z minus it {gap_text(raw_gain, z - raw_input)})"


def probe_line(c: ClassProbe) -> str:
    """The headline probe on one line, h minus z (the sign of every report) with its paired interval,
    intervals beside; the backbone at initialisation and the raw input where they were probed."""
    return _pair_line(c.accuracy, c.gap, c.initial_z, c.initial_gain, c.test_images, c.raw_input, c.raw_input_gain)


def knn_line(c: ClassProbe) -> str:
    """The kNN probe beside the headline, on one line (where it was measured)."""
    k = c.knn
    return "" if k is None else _pair_line(k.accuracy, k.gap, k.initial_z, k.initial_gain, c.test_images,
                                           k.raw_input, k.raw_input_gain)


def baselines_cell(c: ClassProbe | None) -> str:
    """z's class probes beside their two baselines, for a table cell: "z / at initialisation / raw input" in
    percent, linear then kNN ("-" for what was not measured)."""
    if c is None:
        return "-"

    def three(z: float, z0: float | None, raw: float | None) -> str:
        return " / ".join("-" if v is None else f"{v:.1f}" for v in (z, z0, raw))

    cell = "linear " + three(c.accuracy.z, c.initial_z, c.raw_input)
    return cell + ("" if c.knn is None else "; kNN " + three(c.knn.accuracy.z, c.knn.initial_z, c.knn.raw_input))


UNTRAINED_LABEL = "of a network that did not learn"  # every verdict of a run that failed the premise says so
# what such a verdict does not say: whether training made the effect (its premise failed)
NOT_ATTRIBUTED = "whether training made this effect is not said: the network did not learn"


def premise_word(t: TrainingCheck | None) -> str:
    """The premise in a word or two, for tables: "learned", "did not learn", or "not decided"."""
    return learned_word(None if t is None else t.learned)


# what "learned" says and what it does not (scale.runs.premise), beside every premise a report prints
LEARNED_MEANS = ("learned means its pretext task, against the same backbone at initialisation; it does not mean a "
                 "representation better than the input (the raw input's probes are beside)")


def training_lines(t: TrainingCheck | None) -> list[str]:
    """The premise "the network learned" (``scale.runs.premise``), printed before anything else of
    a run's results: a warning where it fails, "not decided" where a part it needs was not measured, then what
    was checked."""
    if t is None:
        return []
    lines = []
    if t.learned is False:
        lines.append(f"WARNING: the network {DID_NOT_LEARN}: " + "; ".join(t.findings) + ". The probes and the "
                     "verdict below describe a network that did not learn.")
    elif t.learned:
        lines.append(f"the network learned (the premise of every verdict below: {t.premise}; {LEARNED_MEANS})")
    else:
        lines.append(f"the premise is {NOT_DECIDED}: {t.premise}. The loss alone never says the network learned; the "
                     "verdicts below are not those of a network known to have learned.")
    lines += [f"note: {f}" for f in t.notes]
    checked = []
    if t.final_loss is not None:
        base = [f"first step {t.initial_loss:.4f}" if t.initial_loss is not None else None,
                f"chance {t.chance_loss:.4f}, premise below {t.chance_loss - LEARNED_MARGIN:.4f}"
                if t.chance_loss is not None else None]
        base_text = ", ".join(b for b in base if b)
        checked.append(f"loss {t.final_loss:.4f}" + (f" ({base_text})" if base_text else ""))
    spreads = [f"{name} {v:.2f}" for name, v in (("h", t.h_spread), ("z", t.z_spread)) if v is not None]
    if spreads:
        checked.append("spread " + ", ".join(spreads) + " (1: spread evenly over the sphere, 0: one point)")
    if t.weight_shift is not None:
        checked.append(f"backbone weights moved {t.weight_shift:.2g} of their norm from initialisation")
    return lines + (["training check: " + "; ".join(checked)] if checked else [])


def ratio_text(est: Estimate) -> str:
    """A ratio estimate with its interval, or why it is undefined."""
    if est.n == 0:
        return (f"undefined (all {est.excluded} orbits degenerate: the family does not move these images, e.g. hue "
                "or saturation on grey images)")
    return est.fmt() + (f" ({est.excluded} degenerate orbits left out)" if est.excluded else "")


_EFFECT = {"compressor": "compresses", "expander": "expands"}


def control_text(v: Verdict) -> str:
    """The head against its untrained control, as a comparison with both collapse ratios and the paired ratio
    R / R_0: "as much" only where R / R_0's interval contains 1 (``scale.geometry.verdict.comparison``)."""
    r, r0 = ratio_text(v.collapse_ratio), ratio_text(v.collapse_ratio_untrained)
    ours = "also a " + v.verdict_untrained if v.verdict_untrained == v.verdict and v.verdict != "neither" else \
        v.verdict_untrained
    head = f"untrained head: {ours}, collapse ratio {r0}"
    est = v.versus_untrained
    cmp = None if est is None or est.n == 0 or math.isnan(est.low) else (
        "more" if est.low > 1.0 else "less" if est.high < 1.0 else "as much")
    if cmp is None:
        return head + (f" against {r}" if est is None else "")
    paired = f"trained / untrained {ratio_text(est)}"
    if cmp == "as much":
        said = "the trained head's collapse ratio is that of the untrained head (the interval contains 1)"
    else:
        said = (f"the trained head's collapse ratio is {'higher' if cmp == 'more' else 'lower'} than the untrained "
                f"head's ({v.collapse_ratio.value:.3g} vs {v.collapse_ratio_untrained.value:.3g})")
    return f"{head}; {paired}: {said}"


def verdict_line(v: Verdict, untrained: bool = False) -> str:
    """The verdict on one line (stdout of ``scale.run`` and ``scale.analyze``); ``untrained``: the run did not
    train, and the verdict says so."""
    label = f"verdict ({UNTRAINED_LABEL})" if untrained else "verdict"
    said = f"; {NOT_ATTRIBUTED}" if untrained else learned_text(v, short=True)
    return f"{label}: {v.verdict} (collapse ratio {ratio_text(v.collapse_ratio)}); {control_text(v)}{said}"


def learned_text(v: Verdict, short: bool = False) -> str:
    """Whether the head's verdict is learned, read against its untrained control."""
    if v.verdict == "neither":
        return "" if short else "Neither: the collapse ratio's interval contains 1."
    effect = _EFFECT[v.verdict]
    if v.verdict_untrained == v.verdict:
        est = v.versus_untrained
        more = est is not None and est.n > 0 and not math.isnan(est.low) and (
            est.low > 1.0 if v.verdict == "compressor" else est.high < 1.0)
        if more:
            return ("; the effect is there untrained, training strengthened it" if short else
                    f"The untrained control is also a {v.verdict}: the effect is there before training, and the "
                    f"trained head {effect} more than its control (the ratio of the two excludes 1).")
        return ("; not learned: the untrained head already " + effect + (" as much or more" if est is None else "")
                if short else
                f"The untrained control is also a {v.verdict} and {effect} at least as much: at this state the "
                "effect is not learned by the head (the bias-free control and the head on the raw z in the orbit "
                "table below separate out the biases' share).")
    return (f"; the untrained head is {v.verdict_untrained}: learned" if short else
            f"The untrained control is {v.verdict_untrained}: the {v.verdict} effect comes with training.")


def verdict_section(v: Verdict, untrained: bool = False) -> list[str]:
    """The verdict paragraph of a report (``scale.run``'s and ``scale.analyze``'s)."""
    label = f" ({UNTRAINED_LABEL})" if untrained else ""
    paired = "" if v.versus_untrained is None else (
        f" Trained against untrained on the same orbits, R / R_0 = {ratio_text(v.versus_untrained)} (paired over "
        "orbits, 95 % t interval; the two are called the same only where it contains 1).")
    return [f"**Verdict{label}: {v.verdict}.** Collapse ratio spread(z) / spread(h) = {ratio_text(v.collapse_ratio)} "
            f"(geometric mean over orbits, 95 % t interval); the untrained head of the same architecture: "
            f"{ratio_text(v.collapse_ratio_untrained)} ({v.verdict_untrained}).{paired} Curvature ratio kappa(h) / "
            f"kappa(z) = {ratio_text(v.curvature_ratio)}; alignment gain (mean cosine to the unaugmented image, h "
            f"minus z) = {v.alignment_gain.fmt('+.3f')}.", "",
            f"{NOT_ATTRIBUTED[0].upper()}{NOT_ATTRIBUTED[1:]}." if untrained else learned_text(v), ""]


def parts_text(c: dict) -> str:
    """The backbone and head of a run's config in words: the project's by name, or your own modules."""
    own = c.get("modules") or {}
    backbone = f"your backbone {describe(own['backbone'])}" if c["backbone"] == OWN and "backbone" in own \
        else f"backbone {c['backbone']}"
    if c["head"] == OWN and "head" in own:
        head = f"your head {describe(own['head'])}, {c['head_out']} out"
    else:
        head = f"head {c['head']} ({c['head_width']} wide, {c['head_out']} out, BN {c['head_bn']})"
    return f"{backbone}, {head}"


def _run_section(run_dir: Path, s: RunSummary) -> list[str]:
    c, last = s.config, s.final or {}
    warning = [li for li in training_lines(s.training) if li.startswith("WARNING")]
    lines = [
        f"# Run {run_dir.name}", "", *(f"**{w}**" for w in warning), *([""] if warning else []), f"`{s.command}`", "",
        f"{c['method']} on {c['dataset']}, {parts_text(c)}, init {c['init']}, {c['epochs']} epochs, batch "
        f"{c['batch_size']}, {c['optimizer']} lr {c['lr']:g}, augmentation {c['augment']}, {s.device}.", "",
        "| quantity | value |", "|---|---|",
        f"| status | {s.status} |",
        f"| final loss | {last.get('loss', float('nan')):.4f} |",
        f"| h std (normalised, probe batch) | {last.get('h_std', float('nan')):.4f} |",
        f"| z std (normalised, probe batch) | {last.get('z_std', float('nan')):.4f} |",
    ]
    if s.class_probe is not None:
        a, n = s.class_probe.accuracy, s.class_probe.test_images
        lines += [f"| headline probe on z (backbone), test accuracy [Wilson 95 %] | {accuracy_text(a.z, n)} |",
                  f"| headline probe on h (head), test accuracy [Wilson 95 %] | {accuracy_text(a.h, n)} |",
                  f"| h minus z [paired bootstrap 95 %] | {gap_text(s.class_probe.gap, a.gap)} |"]
        if s.class_probe.initial_z is not None:
            lines += [f"| headline probe on z at initialisation | {accuracy_text(s.class_probe.initial_z, n)} |",
                      f"| z trained minus z at initialisation | "
                      f"{gap_text(s.class_probe.initial_gain, a.z - s.class_probe.initial_z)} |"]
        if (raw := s.class_probe.raw_input) is not None:
            lines += [f"| headline probe on the raw input (flattened pixels) | {accuracy_text(raw, n)} |",
                      f"| z trained minus the raw input | {gap_text(s.class_probe.raw_input_gain, a.z - raw)} |"]
        if (k := s.class_probe.knn) is not None:
            lines += [f"| kNN probe on z, on h [Wilson 95 %] | {accuracy_text(k.accuracy.z, n)}; "
                      f"{accuracy_text(k.accuracy.h, n)} |",
                      f"| kNN: h minus z [paired bootstrap 95 %] | {gap_text(k.gap, k.accuracy.gap)} |"]
            if k.initial_z is not None:
                lines += [f"| kNN probe on z at initialisation | {accuracy_text(k.initial_z, n)} |",
                          f"| kNN: z trained minus z at initialisation | "
                          f"{gap_text(k.initial_gain, k.accuracy.z - k.initial_z)} |"]
            if k.raw_input is not None:
                lines += [f"| kNN probe on the raw input (flattened pixels) | {accuracy_text(k.raw_input, n)} |",
                          f"| kNN: z trained minus the raw input | "
                          f"{gap_text(k.raw_input_gain, k.accuracy.z - k.raw_input)} |"]
    lines += [f"| wall time | {s.wall_seconds:.1f} s |"]
    if s.end_of_run_seconds is not None:
        lines += [f"| of which the end-of-run measurement | {s.end_of_run_seconds:.1f} s |"]
    lines += [""]
    if s.class_probe is not None:
        lines += [f"Headline probe: {s.class_probe.protocol}, {s.class_probe.train_images} training and "
                  f"{s.class_probe.test_images} test images"
                  + (f"; beside it the kNN probe: {s.class_probe.knn.protocol}." if s.class_probe.knn else "."), ""]
    if s.training is not None:
        lines += [*training_section(s.training), ""]
    lines += [f"Note: {note}" for note in s.notes] + ([""] if s.notes else [])
    if s.geometry is not None and s.geometry.verdict is not None:
        lines += verdict_section(s.geometry.verdict, untrained=s.training is not None and s.training.learned is False)
    return [*lines, "![loss and variance](curves.png)", ""]


def training_section(t: TrainingCheck) -> list[str]:
    """The premise paragraph of a report: did the network learn (``scale.runs.premise``), what that means, and
    the raw input beside the initialisation baseline."""
    verdict = {True: "the network learned", False: f"**the network {DID_NOT_LEARN}**",
               None: f"**{NOT_DECIDED}**"}[t.learned]
    text = [f"The premise of every verdict below: {verdict}" + (f" (resting on {t.premise})." if t.premise else ".")]
    if t.learned is None:
        text.append("The loss alone never says the network learned: without a class probe the premise is not "
                    "decided.")
    text += [f"{f[0].upper()}{f[1:]}." for f in (*t.findings, *t.notes)]
    checked = [li.removeprefix("training check: ") for li in training_lines(t) if li.startswith("training check: ")]
    text += [f"Checked: {c}." for c in checked]
    if t.initialisation:
        text.append(f"The backbone at initialisation: {t.initialisation}.")
    text.append(f"What the premise says: {LEARNED_MEANS}.")
    return [" ".join(text)]


def geometry_section(g: GeometrySummary) -> list[str]:
    """The E4 table of one model (mean +- population std over orbits); also ``scale.analyze``'s."""
    def cell(st: Stat | None, scale: float = 1.0) -> str:
        return "-" if st is None else f"{st.mean * scale:.4g} +- {st.std * scale:.3g}"

    s = g.settings
    lines = [
        f"### Orbit geometry (E4): {s['n_orbits']} orbits ({s['classes']} classes x {s['per_class']} images, "
        f"{s['split']} split) x {s['points_per_orbit']} {s['family']} values {s['values'][0]:g} to "
        f"{s['values'][-1]:g}; kappa on a {s['sweep_points']}-point sweep {s['sweep_values'][0]:g} to "
        f"{s['sweep_values'][-1]:g}",
        "", "| quantity | backbone z | head h(z) | untrained head (control) |", "|---|---|---|---|",
    ]
    rows = (("spread", "orbit spread (x 1e-2)", 100.0), ("kappa", "curvature kappa", 1.0), ("d_intra", "D_intra", 1.0),
            ("d_inter", "D_inter", 1.0), ("ratio", "D_inter / D_intra", 1.0))
    for key, label, sc in rows:
        cells = " | ".join(cell(getattr(space, key), sc) for space in (g.z, g.h, g.h_untrained))
        lines.append(f"| {label} | {cells} |")
    return [*lines, "",
            f"Compression (mean spread z / mean spread h): **{g.compression:.3g}x**; untrained control "
            f"{g.compression_untrained:.3g}x (without biases {g.compression_untrained_nobias:.3g}x); the head on "
            f"the raw (unnormalised) z it was trained on: {g.compression_raw_input:.3g}x. Mean +- population std "
            "over orbits (class pairs for D_inter, sweeps for kappa). Head applied to the L2-normalised z; "
            f"BatchNorm: {s.get('bn_mode', 'eval (running statistics)')}.", ""]


def probe_section(class_probe: ClassProbe | None, r: RotationProbes | None, baselines: bool = False) -> list[str]:
    """The probe table (headline and E3) of one model, each accuracy with its Wilson 95 % interval over the
    test samples; also ``scale.analyze``'s, which puts the class probes' baselines below it (``baselines``: the
    run report has them in its first table)."""
    rows = []
    if class_probe is not None:
        rows.append((f"headline: {class_probe.protocol}", class_probe.accuracy, class_probe.test_images,
                     class_probe.gap))
    if r is not None:
        n, gaps = r.settings["rotation_samples"]["test"], r.gaps or {}
        rows += [(f"rotation, linear ({r.settings['protocol']}; seed {r.settings.get('seed', 0)})", r.linear, n,
                  gaps.get("linear")),
                 (f"rotation, MLP (hidden {r.settings['hidden_z']} on z, {r.settings['hidden_h']} on h; same protocol)",
                  r.mlp, n, gaps.get("mlp"))]
    if not rows:
        return []
    title = "### Probes on frozen features (headline; E3)"
    if r is not None:
        title += (f": rotation 4-way on {r.settings['rotation_samples']['train']} train / "
                  f"{r.settings['rotation_samples']['test']} test rotated images")
    lines = [title, "", "| probe (test accuracy [Wilson 95 %]) | backbone z | head h | h minus z [paired 95 %] |",
             "|---|---|---|---|"]
    lines += [f"| {label} | {accuracy_text(a.z, n)} | {accuracy_text(a.h, n)} | {gap_text(gap, a.gap)} |"
              for label, a, n, gap in rows]
    lines += ["", "Gaps: the percentile interval of a paired bootstrap over the test images (2,000 draws; the four "
              "quarter turns of an image drawn together), so both probes are read on the same images."]
    c = class_probe
    if baselines and c is not None and (c.initial_z is not None or c.raw_input is not None):
        lines += ["", f"The class probes beside their baselines, the backbone at initialisation and the raw input "
                  f"(flattened pixels): linear: {probe_line(class_probe)}"
                  + (f"; kNN: {knn_line(class_probe)}." if class_probe.knn is not None else ".")]
    warnings = {w for _, _, n, _ in rows if (w := small_test_warning(n, "test samples")) is not None}
    return [*lines, "", *(f"Warning: {w}." for w in sorted(warnings)), *([""] if warnings else [])]


def _curvature_section(c: CurvatureSummary) -> list[str]:
    r = c.last
    if r is None:
        return []

    def how(residual: str) -> str:
        v = r.get(residual)
        return r.get("lambda_is", "Lanczos") if v is None else f"Lanczos residual {v:.1e}"

    cond = "-" if r["condition"] is None else f"{r['condition']:.4g}"
    rho = c.spearman_zstd_condition
    return [
        "## Curvature of H_eff (probe batch)", "",
        f"{c.n_measurements} measurements (cadence: {c.cadence}), probe of {c.probe_rows} rows, products in "
        f"{c.dtype}, BatchNorm mode {c.bn_mode}, tracking time {c.tracking_seconds:.1f} s.",
        "", "| quantity (last measurement) | value |", "|---|---|",
        f"| lambda_min ({how('residual_min')}) | {r['lambda_min']:.6g} |",
        f"| lambda_max ({how('residual_max')}) | {r['lambda_max']:.6g} |",
        f"| negative eigenvalues ({r['n_negative_is']}) | {r['n_negative']} of {r['N']} |",
        f"| M/H ({r['M_over_H_is']}) | {r['M_over_H']:.4g} |",
        f"| condition number (only when positive definite) | {cond} |",
        f"| measurements with lambda_min < 0 | {100 * c.negative_lambda_min_fraction:.0f} % |",
        f"| Spearman(z std, condition) | {'-' if rho is None else f'{rho:.3f}'} "
        f"({c.spearman_points} positive-definite points) |",
        "", "![curvature](curvature.png)", "",
    ]


def versions_table(versions: dict[str, str], commit: str) -> list[str]:
    return ["| package | version |", "|---|---|", *(f"| {md(k)} | {md(v)} |" for k, v in sorted(versions.items())),
            f"| git commit | {md(commit)} |", ""]


def build_report(run_dir: Path, s: RunSummary) -> str:
    """report.md of one run, from its summary alone."""
    lines = _run_section(run_dir, s)
    if s.geometry is not None or s.rotation_probes is not None:
        lines += ["## End-of-run measurement", ""]
        lines += geometry_section(s.geometry) if s.geometry is not None else [
            "(no orbit geometry: fewer than 2 classes in the test split)", ""]
    lines += probe_section(s.class_probe, s.rotation_probes)
    if s.curvature is not None:
        lines += _curvature_section(s.curvature)
    lines += ["## Versions", "", *versions_table(s.versions, s.git_commit)]
    return "\n".join(lines)


def write_outputs(run_dir: Path, summary: RunSummary, history: list[dict[str, float]]) -> None:
    """summary.json, curves.png (when an epoch finished) and report.md of a run."""
    atomic_write_json(run_dir / "summary.json", summary.to_dict())
    if history:
        atomic_write_bytes(run_dir / "curves.png", plot_curves(history))
    atomic_write_text(run_dir / "report.md", build_report(run_dir, summary))


def command_line() -> str:
    return " ".join([Path(sys.executable).name, "-m", "scale.run", *sys.argv[1:]])
