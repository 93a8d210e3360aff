r"""The ledger's views of one plan, rebuilt from its store: ``OUT/results.json`` (the registration, the amendments,
every unit's record, every row) and ``OUT/report.md`` (the paper's claims, the mechanism and the project's
questions in separate tables, alternatives, what was known, determinism, deviations, per-seed values, and, beside
them, the paper's own CIFAR data re-analysed: ``scale.ledger.released``, not in a --quick or v1 view).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from scale.engine.markdown import escape as md
from scale.experiments.catalog import E2_RUNS
from scale.geometry.e4_report import write_report as e4_report
from scale.ledger import store
from scale.ledger.baselines import raw_input_text
from scale.ledger.claims import CLAIMS, NOT_RUN
from scale.ledger.claims.base import CHECK, MECHANISM, PAPER, PROJECT, Results
from scale.ledger.evaluate import evaluate_all, seeds_of
from scale.ledger.figures import figure_e1, figure_e2, figure_e5
from scale.ledger.plan import expected_keys
from scale.ledger.readers import curvature
from scale.ledger.released.section import vendored_section
from scale.ledger.stats import SEEDS_CAP, cell, estimate
from scale.ledger.verdicts import CATEGORIES
from scale.runs.summary import Estimate

BANNER = "pipeline check: not evidence"
IN_PROGRESS = "in progress, not evidence yet"
TITLES = {PAPER: "The paper's claims", MECHANISM: "The mechanism: the paper's theory, measured",
          PROJECT: "The project's own questions (outside the paper's tally)",
          CHECK: "Checks: identities of the code (outside every tally)"}


def _cell(est: dict[str, Any]) -> str:
    return cell(Estimate(**est))


def scalar(v: Any) -> float:
    """A per-seed value as one number: a clustered fraction's ``(k, m)`` as k / m (NaN where not a number)."""
    if isinstance(v, (tuple, list)) and len(v) == 2:
        return v[0] / v[1] if v[1] else math.nan
    return float(v) if isinstance(v, (int, float)) else math.nan


def seed_cell(v: Any) -> str:
    x = scalar(v)
    if not math.isfinite(x):
        return "-"
    return f"{x:.3g}" + (f" ({v[0]}/{v[1]})" if isinstance(v, (tuple, list)) else "")


def premise_text(row: dict[str, Any]) -> str:
    """The row's premises: the theorem's hypotheses measured, and "the network learned" over its trainings."""
    parts = [f"{md(p['text'])}: {_cell(r['interval'])} ({r['outcome']})"
             for p, r in zip(row["premises"], row["premise_results"])]
    learn = row.get("learned_result")
    if learn is not None:
        if learn["outcome"] == "holds":
            parts.append(f"the network learned: all {learn['trainings']} trainings (holds)")
        elif learn["outcome"] == "fails":
            parts.append(f"the network learned: {len(learn['failed'])} of {learn['trainings']} trainings did not "
                         f"({md('; '.join(learn['failed'][:2]))}{'; ...' if len(learn['failed']) > 2 else ''}) "
                         "(fails)")
        else:
            parts.append(f"the network learned: not recorded for {len(learn['missing'])} trainings (open)")
    elif row.get("not_learned"):
        parts.append(f"the network learned: not this row's premise ({md(row['not_learned'])})")
    if raw := raw_input_text(row.get("raw_input")):
        parts.append(raw)
    return "; ".join(parts) or "-"


def twin_text(row: dict[str, Any]) -> str:
    t = row.get("twin_result")
    if t is None:
        return f"n/a: {md(row['no_twin'])}" if row.get("no_twin") else "-"
    return f"{md(t['label'])}: {_cell(t['interval'])} ({t['outcome']})"


def magnitude_text(row: dict[str, Any]) -> str:
    m, reg = row.get("magnitude_result"), row.get("magnitude")
    if m is None or reg is None:
        return f"n/a: {md(row['no_magnitude'])}" if row.get("no_magnitude") else "-"
    named = [(p, o) for p, o in m.get("by_protocol") or [] if p]
    under = f" ({'; '.join(f'{md(p)}: {o}' for p, o in named)})" if len(named) > 1 else ""
    one_run = "; the paper's value, one run: against one run's prediction interval" if m.get("runs") == 1 else ""
    return (f"paper {m['paper']:.4g} ({md(reg['source'])}); band [{m['band'][0]:.4g}, {m['band'][1]:.4g}] "
            f"({md(reg['how'])}{one_run}): {m['outcome']}{under}")


def row_cells(row: dict[str, Any]) -> str:
    ctrl = "; ".join(f"{md(c['label'])}{' (protocol)' if c['protocol'] else ''}: {_cell(c['interval'])}"
                     for c in row["control_results"]) or "-"
    verdict = row["label"]  # names the protocols that fail (verdicts.compose)
    if row["verdict"] == "not measurable":
        verdict += f" ({md(row['degenerate'] or 'no seed gave a value: the units lack this measurement')})"
    needed = "-" if row["sign"] != "inconclusive" else (
        f"{row['seeds_needed']}" if row["seeds_needed"] else f"> {SEEDS_CAP} (or no spread yet)")
    holm = "-" if not math.isfinite(row["p_holm"]) else f"{row['verdict_holm']} (p {row['p_holm']:.2g})"
    file, line, phrase = row["source"]
    return (f"| {row['id']} {md(row['claim'])} | {file}:{line} \"{md(phrase)}\" | {md(row['paper'])} | "
            f"{md(row['statistic'])} ({row['unit']}) | {_cell(row['interval'])} | {row['rule_text']} | "
            f"{twin_text(row)} | {magnitude_text(row)} | {premise_text(row)} | {ctrl} | {md(verdict)} | {holm} | "
            f"{row['stability']} | {needed} | {row['transfer'][0]}: {md(row['transfer'][1])} |")


TABLE_HEAD = ("| claim | tests | paper | statistic (unit) | ours: mean [95 % interval] (n) | rule (sign) | trained "
              "against untrained twin | magnitude against the paper | premises | controls | verdict | after Holm | "
              "leave-one-seed-out | seeds needed | transfer to CIFAR |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def tally(rows: list[dict[str, Any]], key: str = "verdict") -> str:
    counts = {v: sum(r[key] == v for r in rows) for v in CATEGORIES}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n)


def determinism(out: Path, settings: dict[str, Any], res: Results) -> list[str]:
    """Per claim, the differences of its per-seed value between this plan's units and the same units of a plan
    that differs only in threads, device or repeat (run-to-run and thread-to-thread spread)."""

    folder = out / "registrations"
    L: list[str] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        other = store.read_json(path)
        s = other.get("settings", {})
        if other.get("plan") == store.V1 or s == settings:
            continue
        diff = {k for k in set(s) | set(settings) if s.get(k) != settings.get(k)}
        if not diff or not diff <= {"threads", "device", "repeat"}:
            continue
        seeds = max(seeds_of(res), default=-1) + 1
        theirs, _ = store.load_units(out, other["plan"], expected_keys(s, seeds), s["device"], s["threads"])
        both = {k: v for k, v in res.items() if k in theirs}
        if not both:
            continue
        what = ", ".join(f"{k} {settings.get(k)} vs {s.get(k)}" for k in sorted(diff))
        for c in CLAIMS:
            d = [scalar(c.value(both, sd)) - scalar(c.value(theirs, sd)) for sd in seeds_of(both)]
            d = [x for x in d if math.isfinite(x)]
            if d:
                L.append(f"| {c.id} | {what} | {len(d)} | {max(abs(x) for x in d):.3g} | "
                         f"{', '.join(f'{x:+.3g}' for x in d)} |")
    return L


def verification_lines(out: Path, plan: str) -> list[str]:
    """One row per recorded ``--verify`` of this plan's units (``OUT/verifications/``): which commit computed the
    unit, which commit computed it again, and whether the numbers were the same."""
    found, left = store.verifications(out, plan)
    if not found and not left:
        return ["None recorded: `python -m scale.replicate --verify OUT/units/<unit file>` computes a unit again with "
                "the code now and records the result here."]
    L = ["| unit | computed at | verified at | result | values differing | largest difference | processor |",
         "|---|---|---|---|---|---|---|"]
    for r in found:
        big = r.get("largest")  # (path, absolute, relative), of the schema's types (store.verifications)
        rel = "stored 0" if big and big[2] is None else f"{big[2]:.3g} relative" if big else ""
        big = f"{md(big[0])}: {big[1]:.3g} ({rel})" if big else "-"
        L.append(f"| {md(r['unit'])} | {md(r['computed_at'][:12])} | {md(r['verified_at'][:12])} | {md(r['status'])} | "
                 f"{r['differences']} | {big} | {'the same kind' if r['same_machine'] else 'another kind'} |")
    return L + [f"- left out: {md(line)}" for line in left]


def deviations(settings: dict[str, Any], n_seeds: int, v1: bool = False) -> list[str]:
    ep = settings["epochs"]
    if settings["quick"]:
        sizes = ("--quick: digits, 64 training images, batch 32, ResNet-18 of base width 8, head 32 wide / 16 out, "
                 f"predictor 8; probes of {settings['probe_images']} images, curvature on {settings['probe_pairs']} "
                 "view pairs")
    elif settings["dataset"] == "digits":
        sizes = ("digits (1,347 training images, 16 x 16, ResNet-18 of base width 16, head 256 wide / 128 out, "
                 "predictor 64, batch 128) instead of CIFAR-10 at the paper's sizes")
    else:
        sizes = f"{settings['dataset']} at the paper's sizes"
    return [
        sizes + "; each run's settings against the paper's are listed per experiment below",
        f"epochs: E1 {ep['E1']} (paper 50), E2 {ep['E2']} (paper 100), E3/E4 {ep['E3E4']} (paper 50), E5 {ep['E5']} "
        f"(paper 50); None: the paper's",
        f"{n_seeds} seeds (the paper: 3 for E1, one run each for E2)",
        "E1's h std (and E2's z statistics) on the trainer's fixed unaugmented probe images at each epoch end; the "
        "official code averages them over the epoch's training batches",
        "E1's normal start only at BatchNorm off, lr 0.05 (the control of E1's premise and of Section 3)",
        "E1's pseudo-collapsed start (projector weights x 0.1, the paper's) is then collapsed in the measured "
        "statistic: the head's first layer reads z along its mean direction plus 1e-3 of the rest "
        "(scale.geometry.mechanism.collapsed_start_); x 0.1 alone leaves a bias-free head's normalised output, "
        "hence h std, unchanged" + (" (not so in v1's units, read here: they have the paper's start only)" if v1
                                     else ""),
        f"E2's curvature exactly (per-sample blocks, float64) on {settings['probe_pairs']} view pairs drawn before "
        "training, at the start and every epoch end; the paper's 20 + 20 power iterations (float32) run beside it",
        "E3's probes: every training image x 4 quarter turns for fitting, the test split for scoring; the class "
        "probe is this project's",
        "E5 measured under E4's protocols a-d (protocol e, a second training per depth, is cut)",
    ]


def _deviation_rows(res: Results) -> list[str]:
    rows: dict[tuple[str, str], tuple[str, set[str]]] = {}
    for r in res.values():
        for k, (p, o) in (r.get("deviations") or {}).items():
            exp = "E3/E4" if r["experiment"] == "E3E4" else r["experiment"]
            rows.setdefault((exp, k), (str(p), set()))[1].add(str(o))
    return [f"| {e} | {md(k)} | {md(p)} | {md(', '.join(sorted(o)))} |" for (e, k), (p, o) in sorted(rows.items())]


def _e2_table(res: Results) -> list[str]:
    L = ["| run | lambda_min(H) < 0 | lambda_min(G) < 0 | loss Hessian indefinite | power iteration < 0 | "
         "median abs(M)/abs(H) |", "|---|---|---|---|---|---|"]
    seeds = seeds_of(res)
    for init, head in E2_RUNS:
        recs = [curvature(res, f"E2-{init}-{head}-s{s}") for s in seeds]

        def frac(key, recs=recs):
            return cell(estimate("fraction", [sum(bool(c[key]) for c in cs) / len(cs) if cs else math.nan
                                              for cs in recs]))

        med = cell(estimate("nonnegative", [sorted(c["M_over_H"] for c in cs)[len(cs) // 2] if cs else math.nan
                                            for cs in recs]))
        L.append(f"| {init}/{head} | {frac('negative')} | {frac('negative_G')} | {frac('loss_indefinite')} | "
                 f"{frac('power_negative')} | {med} |")
    return L


def build(out: Path, reg: dict[str, Any], amendments: list[dict[str, Any]], res: Results, ignored: list[str],
          store_dir: Path | None = None, missing: dict[str, str] | None = None, rerun: str | None = None,
          planned: int | None = None) -> tuple[dict[str, Any], str]:
    """(results.json, report.md) of the plan registered as ``reg``, from its units ``res``; figures in ``out``,
    other plans (determinism) from ``store_dir`` (default ``out``). ``planned``: how many units the plan has at
    the seeds asked for; fewer stored puts the "in progress" banner first."""

    settings = reg["settings"]
    rows = evaluate_all(CLAIMS, res)
    seeds = seeds_of(res)
    quick = settings["quick"]
    if any(r["experiment"] in ("E1", "E2", "E5") for r in res.values()):
        out.mkdir(parents=True, exist_ok=True)
    figs = {name: fn(res, out / name) for name, fn in (("e1_std.png", figure_e1), ("e2_curvature.png", figure_e2),
                                                       ("e5_depth.png", figure_e5))} if res else {}
    commits = sorted({md(r["git_commit"]) for r in res.values()})
    seconds = sum(r["seconds"] for r in res.values())
    by_table = {t: [r for r in rows if r["table"] == t] for t in TITLES}
    registered = settings.get("seeds") or len(seeds)  # the plan's seeds (v1's registration has none: its units')
    stored = "" if len(seeds) == registered else f" (units of {len(seeds)} stored so far)"
    L = [f"# The paper's claims, replicated on {settings['dataset']}: {registered} seed{'s' * (registered != 1)}"
         f"{stored}", ""]
    if reg.get("v1"):
        L += ["> v1 data read under today's rules: these units ran under the first ledger's rules (`v1`, no hash "
              "recorded), and today's rules were written after seeing them. Not a registered test: a view of old "
              "data in the new categories. Rows that read a measurement v1 did not take (E1's start collapsed in "
              "h std, rho, M on null(G), parameter drift, protocols f and g, the size-free kappa, the tangent gain) "
              "are 'not measurable' here for that reason.", ""]
    if reg.get("reread"):  # a dry run of today's rules over a registered plan's units (scale.replicate --reread)
        L += [f"> {md(reg['reread'])}", ""]
    if planned is not None and len(res) < planned:
        L += [f"> {IN_PROGRESS}: {len(res)} of the plan's {planned} units are stored. The verdicts below are of "
              "those units only, not the registration's result; a row whose units have not run yet reads 'not "
              "measurable' or 'not measured'. Rerun the same command to go on (finished units are kept).", ""]
    if quick:
        L += [f"> {BANNER}. A --quick ledger runs tiny models for 1-4 epochs to check that every part works; its "
              "numbers are not comparable with the paper's and its verdicts are not findings.", ""]
    origin = (f"the first ledger's units, by `{reg['command']}`, read under today's rules" if reg.get("v1") else
              f"registered {reg['registered_at']} at code commit {reg['code_commit']} by `{reg['command']}`")
    L += [f"Plan `{reg['plan']}` (hash {reg['plan_hash'][:16]}), {origin}; rules hash `{reg['rules_hash'][:16]}` "
          "(the rules as data: "
          "`scale/ledger/claims/`; the full hash and the rules themselves in `results.json`). Units computed at "
          f"{', '.join(commits) or '-'}; {len(res)} units, {seconds:.0f} s summed ({seconds / 3600:.2f} h), on "
          f"{settings['device']} with {settings['threads']} thread{'s' * (settings['threads'] != 1)} each (units of "
          "any other device or thread count are never mixed in).", ""]
    if missing:  # units of this invocation's choice with no file (a failed, killed or running job): scale.launch
        L += [f"## Units missing ({len(missing)})", "", *(f"- {md(n)}: {md(why)}" for n, why in missing.items()), "",
              f"The one command that runs only them: `{md(rerun)}`", ""]
    L += ["## Amendments", ""]
    L += [f"- {a['number']}. {md(a['date'])}: {md(a['reason'])} (claims {', '.join(a['claims_changed']) or '-'}; rules "
          f"{a['from_hash'][:12]} -> {a['to_hash'][:12]})" for a in amendments] or [
        "None logged: a dry run reads the units under today's rules, not the registered ones (above)."
        if reg.get("reread") else "None: the rules are the registered ones."]
    L += ["", "## Verdicts", "", f"The paper's claims: {tally(by_table[PAPER]) or 'none evaluated'}; after Holm "
          f"across the paper's testable rows: {tally(by_table[PAPER], 'verdict_holm') or '-'}. The mechanism: "
          f"{tally(by_table[MECHANISM]) or '-'}. The project's questions: {tally(by_table[PROJECT]) or '-'}. "
          f"Checks (identities of the code): {tally(by_table[CHECK]) or '-'}. {len(NOT_RUN)} not run (E6).", "",
          "How a row is read (`scale/ledger/verdicts.py`, `scale/ledger/evaluate.py`, `scale/ledger/stats.py`): one "
          "statistic per seed; a Student t interval for unbounded statistics, Fisher z for correlations, a Wilson "
          "interval for fractions of seeds, and for fractions of epochs within seeds a beta-binomial profile-"
          "likelihood interval (epochs clustered within seeds; the per-seed Wilson view beside it); each inside its "
          "statistic's range. The premises first: the theorem's hypotheses, measured, and \"the network learned\" "
          "(`scale.runs.premise`) for every training a claim about a trained network rests on; a failed premise: "
          "the run is not a test. Then the sign (the rule), the trained network against its untrained twin under "
          "the same protocol (\"reproduced\" needs it to hold; otherwise \"sign only; not attributable to "
          "training\"), and the effect against the paper's value (\"reproduced in magnitude\" where the interval "
          "lies inside the registered band, \"the paper's value excluded\" where it lies outside the interval, or, "
          "for a paper's value from one run, outside the prediction interval of one run; tested under every "
          "protocol where the sign holds, and said on inconclusive and not reproduced rows too). A protocol "
          "control that fails the same rule makes a holding claim 'reproduced only under the paper's protocol' "
          "(the row under the paper's protocol) or 'reproduced, but not under the paper's protocol' (the paper's "
          "protocol fails), naming it; one that is open is named. 'After Holm': the verdict with Holm's step-down "
          "correction over the p-values (the smallest level at which its interval stays decisive) of the paper's "
          "rows that test their claim (not premise not met, not measurable or not measured); the mechanism's, the "
          "project's and the checks' rows are outside it ('-'). Leave-one-seed-out: "
          "whether dropping any one seed changes the verdict. Seeds needed: the fewest seeds at which the "
          "observed mean and spread would give a decisive interval. Transfer: whether the mechanism is "
          "scale-independent, and what a CIFAR run must show; every number here is digits, ResNet-18 at 1/4 width "
          "unless the plan says otherwise.", ""]
    for table, title in TITLES.items():
        L += [f"## {title}", "", *TABLE_HEAD, *(row_cells(r) for r in by_table[table])]
        if table == PAPER:
            L += [f"| {e} {c} | - | {p} | - | - | - | - | - | - | - | {why} | - | - | - | - |"
                  for e, (c, p, why) in NOT_RUN.items()]
        L.append("")
    L += ["## Alternatives considered (secondary rows, outside every tally)", "",
          "| claim | alternative | statistic | rule | ours | verdict |", "|---|---|---|---|---|---|"]
    L += [f"| {r['id']} | {md(a['label'])} | {md(a['statistic'])} | {a['rule']} | {_cell(a['interval'])} | "
          f"{a['verdict']} |" for r in rows for a in r["alternative_results"]]
    L += ["", "## What was known when each rule was written", ""]
    L += [f"- {md(k)}" for k in (reg.get("rules") or {}).get("known_before_registration", [])]
    released_plan = (reg.get("rules") or {}).get("released_plan")
    if released_plan:  # registered with the rules since v4
        L.append(f"- the last section's analysis plan, registered with these rules: `{released_plan['path']}` "
                 f"(SHA-256 {released_plan['sha256']})")
    L += ["", "| claim | known |", "|---|---|"]
    L += [f"| {r['id']} | {md(r['known']) or '-'} |" for r in rows]
    det = [] if reg.get("v1") else determinism(store_dir or out, settings, res)
    L += ["", "## Determinism: the same units at another thread count, device or repeat", ""]
    L += (["| claim | compared | seeds | largest difference | per seed |", "|---|---|---|---|---|", *det] if det else
          ["Not measured in this store: rerun a few units with `--threads 2` (thread to thread) or `--repeat 1` "
           "(run to run) into the same --out and rebuild the report."])
    L += ["", "## Verifications: stored units computed again by a later commit", "", *verification_lines(
        store_dir or out, reg["plan"])]
    if figs.get("e1_std.png"):
        L += ["", "## E1: h std per seed", "", "![E1 h std](e1_std.png)"]
    if figs.get("e2_curvature.png"):
        L += ["", "## E2: lambda_min of H_eff, G and M", "", "Fractions of the measurements (start and every epoch "
              "end), mean [Wilson interval] over seeds.", "", *_e2_table(res), "", "![E2 curvature](e2_curvature.png)"]
    if figs.get("e5_depth.png"):
        L += ["", "## E5: probes and compression against depth", "", "![E5 depth](e5_depth.png)"]
    devs = deviations(settings, len(seeds), bool(reg.get("v1")))
    L += ["", "## Deviations from the paper's set-up", "", *(f"- {d}" for d in devs), "",
          "| experiment | setting | paper | ours |", "|---|---|---|---|", *_deviation_rows(res), ""]
    L += ["## Per-seed values", "", "| claim | " + " | ".join(f"seed {s}" for s in seeds) + " |",
          "|---|" + "---|" * len(seeds)]
    L += [f"| {r['id']} | " + " | ".join(seed_cell(v) for v in r["values"]) + " |"
          for r in rows]
    if ignored:
        L += ["", f"## Unit files left out of this view ({len(ignored)})", "",
              *(f"- {md(line)}" for line in ignored[:50]), *([f"- ... and {len(ignored) - 50} more"]
                                                         if len(ignored) > 50 else [])]
    if not quick and not reg.get("v1"):
        L += ["", *vendored_section()]
    L.append("")
    partial = planned is not None and len(res) < planned
    view = {"format": 2, "plan": reg["plan"], "registration": reg, "amendments": amendments, "quick": quick,
            "banner": BANNER if quick else IN_PROGRESS if partial else None, "planned": planned, "claims": rows,
            "ignored": ignored, "units": res,
            "missing": missing or {}, "rerun": rerun}
    return view, "\n".join(L)


def write(out: Path, reg: dict[str, Any], amendments: list[dict[str, Any]], res: Results, ignored: list[str],
          with_report: bool = True, store_dir: Path | None = None, missing: dict[str, str] | None = None,
          rerun: str | None = None, planned: int | None = None) -> Path:
    """Replace the views; the E4 study's own report of the E3/E4 units in ``OUT/e4_study``. ``missing``: unit ->
    why it has no file, with ``rerun`` the command that runs only those; ``planned``: the plan's unit count."""
    view, text = build(out, reg, amendments, res, ignored, store_dir, missing, rerun, planned) if with_report else (
        {"format": 2, "plan": reg["plan"], "registration": reg, "amendments": amendments, "units": res,
         "ignored": ignored, "missing": missing or {}, "rerun": rerun}, "")
    store.replace_view(out / "results.json", json.dumps(view, indent=1, sort_keys=True, default=str))
    if with_report:
        store.replace_view(out / "report.md", text)
        e4 = sorted((r for r in res.values() if r["experiment"] == "E3E4"), key=lambda r: r["seed"])
        if e4:
            study = [{k: r[k] for k in ("seed", "config", "git_commit", "protocols", "seconds") if k in r} for r in e4]
            store.replace_view(out / "e4_study" / "results.json",
                               json.dumps({"dataset": reg["settings"]["dataset"], "seeds": study,
                                           "command": reg["command"]}, indent=1, default=str))
            e4_report(out / "e4_study", study, reg["command"] + "  (the ledger's E3/E4 units)")
    return out / "report.md"
