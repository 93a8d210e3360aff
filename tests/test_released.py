"""The paper's released arrays (``scale.ledger.released``, ``python -m scale.released``).

Each recomputed figure is pinned to a hand computation on a small synthetic array of the released schema, with a
negative control (a tampered array changes the figure); the reader refuses every hostile file (a pickle naming
another global, a truncated file, a wrong shape, NaN, a file over the size bound, a SHA-256 mismatch) with one line
and exit code 1, in-process and through the command; nothing in a released file is executed.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scale import released as command
from scale.ledger.released import claims, figures, reader, schema, section
from scale.ledger.released import plan as released_plan
from scale.ledger.released.reader import ReleasedError, read_all, read_file
from scale.ledger.verdicts import INCONCLUSIVE, NOT_MEASURED, REPRODUCED, SIGN_ONLY
from scale.runs.faults import EXIT_INPUT, EXIT_USAGE

ROOT = Path(__file__).resolve().parent.parent
SPEC = {(s.run, s.role): s for s in schema.FILES}


# ----------------------------------------------------------------------------- synthetic arrays of the schema


def circle_orbits(radii: np.ndarray, centres: np.ndarray, dim: int) -> np.ndarray:
    """15 orbits of 12 equally spaced points on circles (radius r_o about centre c_o, in the first two axes),
    laid out as the released files do: 180 rows, orbit by orbit."""
    t = 2 * np.pi * np.arange(schema.ROTATIONS) / schema.ROTATIONS
    rows = []
    for r, c in zip(radii, centres, strict=True):
        pts = np.zeros((schema.ROTATIONS, dim))
        pts[:, 0], pts[:, 1] = r * np.cos(t), r * np.sin(t)
        rows.append(pts + c)
    return np.concatenate(rows).astype(np.float32)


def orbit_file(z: np.ndarray, h: np.ndarray) -> dict:
    ids = np.repeat(np.arange(schema.ORBITS), schema.ROTATIONS).astype(np.int64)
    return {"orbits_z": z, "orbits_h": h, "orbit_ids": ids, "orbit_labels": (ids // 3).astype(np.int64),
            "orbit_angles": np.tile(np.arange(0.0, 360.0, 30.0), schema.ORBITS)}


RADII = np.linspace(0.1, 0.3, schema.ORBITS)
CENTRES = np.stack([np.eye(4)[o % 4] * (1 + o // 3) for o in range(schema.ORBITS)]) * 2.0


def test_orbit_figures_by_hand():
    """Spread of 12 equally spaced points on a circle of radius r: r^2; D_intra: the mean chord
    (1/66) sum_{i<j} 2 r sin(pi |i - j| / 12); the head shrinking every orbit 10x about its own centroid: compression
    100 per orbit, and against the whole space's spread exactly 100 x total_h / total_z."""
    z = circle_orbits(RADII, CENTRES, 4)
    h = circle_orbits(RADII / 10, CENTRES, 4)
    data = orbit_file(z, h)
    vals = figures.e4_values(data)
    assert vals["orbit spread z (x 1e-2)"] == pytest.approx(100 * np.mean(RADII ** 2), rel=1e-6)
    assert vals["compression (x)"] == pytest.approx(100.0, rel=1e-5)
    chord = sum(2 * math.sin(math.pi * (j - i) / 12) for i in range(12) for j in range(i + 1, 12)) / 66
    assert vals["D_intra z"] == pytest.approx(chord * np.mean(RADII), rel=1e-6)
    st = claims.orbit_statistics(data)
    assert st["compression"] == pytest.approx(np.full(15, 2.0), abs=1e-5)

    def total(F):
        return np.mean(np.sum((F - F.mean(axis=0)) ** 2, axis=1))
    expected = math.log10(100 * total(h.astype(float)) / total(z.astype(float)))
    assert st["relative"] == pytest.approx(np.full(15, expected), abs=1e-5)
    # negative control: one orbit of h tampered (twice as wide) changes the compression and its row
    tampered = h.copy()
    tampered[:12] = circle_orbits(RADII / 5, CENTRES, 4)[:12]
    assert figures.e4_values(orbit_file(z, tampered))["compression (x)"] < 99.0


def test_a_whole_space_shrinking_is_not_invariance():
    """h = z / 10: every orbit 100x smaller, and so is everything else; E4.1 holds, its scale-invariant control
    E4.2 (exactly 0) does not, so the row is 'sign only', the control named (the issue's point)."""
    z = circle_orbits(RADII + np.linspace(0, 0.01, 15), CENTRES, 4)
    files = {"orbits": orbit_file(z, z / 10), "curvature": {"curvatures_z_per_seed": [0.1, 0.11, 0.12],
                                                            "curvatures_h_per_seed": [0.2, 0.22, 0.24]}}
    rows = {r.id: r.evaluate() for r in claims.e4_rows("R18-C10", files)}
    assert rows["E4.2"]["estimate"].value == pytest.approx(0.0, abs=1e-5)
    assert rows["E4.1"]["category"] == SIGN_ONLY and "E4.2" in rows["E4.1"]["label"]
    assert rows["E4.2"]["category"] != REPRODUCED
    # kappa: log10 of h / z = log10 2 in each sampling seed: a zero-width interval above 0, in the 1.93x band
    assert rows["E4.4"]["estimate"].value == pytest.approx(math.log10(2))
    # positive control: shrinking each orbit about its own centroid is more than a shrinking of the space
    h = circle_orbits((RADII + np.linspace(0, 0.01, 15)) / 10, CENTRES, 4)
    rows = {r.id: r.evaluate() for r in claims.e4_rows("R18-C10", {**files, "orbits": orbit_file(z, h)})}
    assert rows["E4.2"]["category"] == REPRODUCED and "control not holding" not in rows["E4.1"]["label"]
    assert "the paper's value excluded" in rows["E4.1"]["label"]  # 100x lies outside [21.85 / 2, 21.85 x 2]


def test_e1_statistics_by_hand():
    """log10(end / first epoch) per seed; the BatchNorm contrast log10(final with / without); a tampered seed moves
    the interval."""
    def cfg(end):
        raw = np.ones((3, 20))
        raw[:, -1] = end
        return {"raw": raw, "mean": raw.mean(0), "std": raw.std(0)}
    col = {"linear": cfg([0.5, 0.4, 0.6]), "relu": cfg([1.0, 2.0, 3.0]), "gelu": cfg([10.0, 20.0, 30.0]),
           "swish": cfg([100.0, 100.0, 100.0])}
    rows = {r.id: r for r in claims.e1_rows("R18-C100", col)}
    assert rows["E1.1"].values == pytest.approx([math.log10(v) for v in (0.5, 0.4, 0.6)])
    assert rows["E1.2"].controls[0][1] == pytest.approx([math.log10(20), math.log10(50), math.log10(50)])
    # E1.4: |log10(relu / sqrt(gelu swish))| - |log10(relu / linear)|, seed 0: |log10(1 / sqrt(1000))| - |log10 2|
    assert rows["E1.4"].values[0] == pytest.approx(1.5 - math.log10(2))
    assert not rows["E1.5"].ran and "no BatchNorm run" in rows["E1.5"].missing[0]  # R18-C100 has none
    assert figures.e1_consistency(col["relu"]) == 0.0
    col["relu"]["mean"] = col["relu"]["mean"] + 1e-3  # tampered summary: the consistency check sees it
    assert figures.e1_consistency(col["relu"]) == pytest.approx(1e-3)


def test_e2_statistics_by_hand():
    """Spearman of a monotone pair over epochs 2..: 1; a reversed pair: -1 (the first epoch is left out, so a
    first epoch that would break monotonicity changes nothing); certified negatives against the rounding floor."""
    var = np.arange(100, dtype=float)
    cond = 1e6 * (1 + var)
    cond[0] = 1e9
    t = {"variances": var, "condition_numbers": cond, "min_eigenvalues": np.zeros(100), "epochs": np.arange(100)}
    assert figures.tracker_rho(t) == pytest.approx(1.0)
    falling = 1e6 * (100 - var)
    falling[0] = 1.0  # off the pattern, but the first epoch is not read
    assert figures.tracker_rho({**t, "condition_numbers": falling}) == pytest.approx(-1.0)
    lam = np.array([-1.0, -1e-7, 0.0, 0.5])
    assert claims.certified(lam) == (1, 3, 4)  # -1e-7 is under 1e-6 x max|lam|: undecided
    lam70 = np.where(np.arange(100) < 70, -0.01, 0.02)
    rows = {r.id: r.evaluate() for r in claims.e2_rows("R18-C10", {f"tracker:{k}": {**t, "min_eigenvalues": lam70}
                                                                   for k in schema.TRACKER_RUNS})}
    assert rows["E2.2"]["estimate"].value == pytest.approx(0.70)
    assert rows["E2.2"]["category"] == INCONCLUSIVE  # one training seed: no interval
    assert "70 of 100 epochs certified negative" in rows["E2.2"]["note"]
    none = {r.id: r.evaluate() for r in claims.e2_rows("ViT-C10", {})}
    assert none["E2.2"]["category"] == NOT_MEASURED and "no Hessian tracker" in none["E2.2"]["missing"][0]


def test_e5_slopes_and_probe_gaps_by_hand():
    assert figures.slope([40.0, 42.0, 44.0]) == pytest.approx(2.0)
    assert figures.slope([47.40, 39.70, 35.61]) == pytest.approx((35.61 - 47.40) / 2)  # 3 points: (y3 - y1) / 2
    g = {"backbone_acc_linear": 0.5, "head_acc_linear": 0.4, "backbone_acc_mlp": 0.6, "head_acc_mlp": 0.55}
    rows = {r.id: r for r in claims.e3_rows("R18-C10", g)}
    assert rows["E3.1"].values == pytest.approx([-10.0]) and rows["E3.2"].values == pytest.approx([-5.0])


def test_agreement_with_a_printed_figure_is_rounding_to_its_decimals():
    f = figures.Figure("R", "E4", "x", 4.76, 2, "s", 4.7649)
    assert f.agrees
    assert not figures.Figure("R", "E4", "x", 4.76, 2, "s", 4.7661).agrees
    assert figures.Figure("R", "E2", "x", 70.0, 0, "s", 75.0, tolerance=5.0).agrees
    assert figures.Figure("R", "E1", "x", None, None, "s", 1.0).agrees is None


# ----------------------------------------------------------------------------- the released files themselves


def test_the_vendored_arrays_are_the_upstream_commits_and_recompute_the_printed_figures():
    """Every vendored file passes size, schema and SHA-256; the NOTICE lists the same digests as the schema; the
    plan is the registered one; the paper's printed reference figures are recomputed."""
    arrays = read_all()
    assert set(arrays) == set(schema.RUNS)
    notice = (reader.VENDORED / "NOTICE").read_text()
    for spec in schema.FILES:
        assert f"{spec.sha256}  {spec.size}  {spec.path}" in notice
    assert "Copyright (c) 2026 Faris Chaudhry" in notice and schema.UPSTREAM_COMMIT in notice
    assert released_plan.plan_ok(ROOT) is True
    figs = {(f.run, f.quantity, f.source): f for f in figures.recompute(arrays)}
    assert figs[("R18-C10", "compression (x)", figures.PAPER_TABLE)].agrees
    rho = "normal_swish: Spearman(variance, condition number), epochs 2..100"
    assert figs[("R18-C10", rho, figures.E2_TEXT)].agrees
    assert figs[("R18-C10", "h - z linear (points)", figures.PAPER_TABLE)].agrees


def test_the_section_names_what_the_arrays_cannot_decide():
    text = "\n".join(section.vendored_section())
    assert text.startswith(section.TITLE)
    assert "no untrained head's orbits were saved" in text
    assert ("| E4.1 the trained head compresses rotation orbits | R18-C100 | - | - | interval above 0 | not measured"
            in text)


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "official"
    shutil.copytree(reader.VENDORED / "results", root / "results")
    return root


def _npy_of(obj) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array(obj, dtype=object) if not isinstance(obj, dict) else obj, allow_pickle=True)
    return buf.getvalue()


def _global_pickle(marker: Path) -> bytes:
    """A .npy header of a 0-d object array followed by a pickle that would call os.system."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|O", "fortran_order": False, "shape": ()})
    return header.getvalue() + b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


GUILLOTINE = SPEC[("R18-C10", "guillotine")]
TRACKER = SPEC[("R18-C10", "tracker:normal_swish")]
COLLAPSE = SPEC[("R18-C100", "collapse")]


def _hostile(kind: str, root: Path, marker: Path) -> tuple[Path, str]:
    """Damage one file of ``root`` as ``kind`` says; the path changed and a phrase its refusal must hold."""
    g = read_file(reader.VENDORED, GUILLOTINE)
    if kind == "global":
        path = root / GUILLOTINE.path
        path.write_bytes(_global_pickle(marker))
        return path, "os.system"
    if kind == "truncated":
        path = root / SPEC[("R18-C10", "curvature")].path
        path.write_bytes(path.read_bytes()[:300])
        return path, "not in the released layout"
    if kind == "wrong shape":
        col = read_file(reader.VENDORED, COLLAPSE)
        col["relu"]["raw"] = col["relu"]["raw"][:, :19].copy()
        path = root / COLLAPSE.path
        path.write_bytes(_npy_of(col))
        return path, "relu.raw is float64 (3, 19), expected float64 (3, 20)"
    if kind == "nan":
        path = root / GUILLOTINE.path
        path.write_bytes(_npy_of({**g, "head_acc_linear": float("nan")}))
        return path, "head_acc_linear"
    if kind == "npz wrong shape":
        t = dict(read_file(reader.VENDORED, TRACKER))
        t["variances"] = t["variances"][:99]
        path = root / TRACKER.path
        path.write_bytes(_npz_bytes(t))
        return path, "variances is float64 (99,), expected float64 (100,)"
    if kind == "over size":
        path = root / TRACKER.path
        with open(path, "r+b") as fh:
            fh.truncate(schema.MAX_BYTES + 1)  # sparse: nothing of it is read
        return path, "over the bound"
    if kind == "sha":
        t = dict(read_file(reader.VENDORED, TRACKER))
        t["min_eigenvalues"] = t["min_eigenvalues"].copy()
        t["min_eigenvalues"][5] *= -1.0  # one value changed, the layout intact
        path = root / TRACKER.path
        path.write_bytes(_npz_bytes(t))
        return path, "SHA-256"
    raise AssertionError(kind)


HOSTILE = ("global", "truncated", "wrong shape", "nan", "npz wrong shape", "over size", "sha")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_file_is_refused_with_one_line_and_exit_1(tmp_path, capsys, kind):
    root = _tree(tmp_path)
    marker = tmp_path / "executed"
    path, phrase = _hostile(kind, root, marker)
    spec = next(s for s in schema.FILES if root / s.path == path)
    with pytest.raises(ReleasedError, match="refused") as info:
        read_file(root, spec)
    assert phrase in str(info.value) and spec.path in str(info.value)
    assert command.main(["--official", str(root)]) == EXIT_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and phrase in err[0] and "Traceback" not in err[0], err
    assert not marker.exists()  # nothing from the file ran


@pytest.mark.parametrize("kind", ("global", "sha"))
def test_the_command_refuses_a_hostile_file_in_its_own_process(tmp_path, kind):
    root = _tree(tmp_path)
    marker = tmp_path / "executed"
    _, phrase = _hostile(kind, root, marker)
    proc = subprocess.run([sys.executable, "-m", "scale.released", "--official", str(root)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == EXIT_INPUT, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and phrase in lines[0] and proc.stdout == ""
    assert not marker.exists()


def test_an_official_checkout_reads_like_the_vendored_copy_and_a_missing_dir_is_a_usage_error(tmp_path, capsys):
    root = _tree(tmp_path)
    assert command.main(["--official", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(section.TITLE) and out.strip() == "\n".join(section.vendored_section()).strip()
    assert command.main(["--official", str(tmp_path / "nowhere")]) == EXIT_USAGE
    assert "not a directory" in capsys.readouterr().err
    (root / GUILLOTINE.path).unlink()
    assert command.main(["--official", str(root)]) == EXIT_INPUT
    assert "missing" in capsys.readouterr().err


def test_a_changed_plan_is_refused(tmp_path):
    (tmp_path / released_plan.PLAN).parent.mkdir(parents=True)
    (tmp_path / released_plan.PLAN).write_text("another plan\n")
    assert released_plan.plan_ok(tmp_path) is False
    assert released_plan.plan_ok(tmp_path / "empty") is None
    assert hashlib.sha256((ROOT / released_plan.PLAN).read_bytes()).hexdigest() == released_plan.PLAN_SHA256


def test_the_object_shell_is_admitted_only_where_asked_and_only_as_np_save_writes_it():
    """The CIFAR reader keeps refusing object dtypes; the released reader admits the 0-d shell around one object and
    refuses an object array of any other shape (whose payload NumPy would trust)."""
    from scale.engine.safe_pickle import UnsafePickleError, safe_loads
    blob = pickle.dumps(np.array({"a": np.arange(3.0)}, dtype=object))
    with pytest.raises(UnsafePickleError):
        safe_loads(blob)
    assert safe_loads(blob, object_shell=True).item()["a"].tolist() == [0.0, 1.0, 2.0]
    two = np.empty(2, dtype=object)
    two[0], two[1] = {"a": 1}, {"b": 2}
    with pytest.raises(UnsafePickleError, match="0-d shell"):
        safe_loads(pickle.dumps(two), object_shell=True)


def test_the_committed_report_carries_the_section_this_code_computes():
    """docs/replication/report.md (the ledger in force) ends with the section as the vendored arrays give it
    today: a section edited by hand, or code that now computes something else, fails here (a changed array is
    refused on load: above)."""
    text = (ROOT / "docs" / "replication" / "report.md").read_text()
    committed = text[text.index(section.TITLE):].strip()
    assert committed == "\n".join(section.vendored_section()).strip()


def test_a_fifo_in_place_of_a_file_is_refused_without_blocking(tmp_path, capsys):
    root = _tree(tmp_path)
    path = root / GUILLOTINE.path
    path.unlink()
    os.mkfifo(path)
    assert command.main(["--official", str(root)]) == EXIT_INPUT
    assert "not a regular file" in capsys.readouterr().err


def test_the_command_writes_nothing(tmp_path, capsys):
    """scale.released only prints: the tree it reads is byte for byte the same afterwards, and nothing is added."""
    root = _tree(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert command.main(["--official", str(root)]) == 0
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    capsys.readouterr()


def test_d_inter_kappa_and_probe_figures_by_hand_and_a_tampered_value_disagrees():
    """D_inter: the mean of the 10 distances between class centroids, each centroid the mean of its 3 orbits' centres
    (a circle's points average to its centre); kappa: mean and population std over the 3 sampling seeds and the
    mean of their ratios; a probe value moved by 1 point in memory no longer agrees with the printed one."""
    z = circle_orbits(RADII, CENTRES, 4)
    vals = figures.e4_values(orbit_file(z, z / 3))
    cls = [CENTRES[3 * a:3 * a + 3].mean(axis=0) for a in range(5)]
    pairs = [float(np.sqrt(np.sum((cls[a] - cls[b]) ** 2))) for a in range(5) for b in range(a + 1, 5)]
    assert vals["D_inter z"] == pytest.approx(sum(pairs) / 10, rel=1e-6)
    assert vals["D_inter z std"] == pytest.approx(float(np.std(pairs)), rel=1e-5)
    assert vals["D_inter / D_intra h / z (x)"] == pytest.approx(1.0, rel=1e-5)  # a uniform scaling leaves it at 1
    m, s = vals["D_inter / D_intra z"], vals["D_inter / D_intra z +-"]
    assert s == pytest.approx(m * math.hypot(np.std(pairs) / np.mean(pairs),
                                             vals["D_intra z std"] / vals["D_intra z"]), rel=1e-5)
    arrays = read_all()
    kappa = {f.quantity: f.recomputed for f in figures.recompute(arrays) if f.run == "ViT-C10"}
    c = arrays["ViT-C10"]["curvature"]
    kz, kh = np.asarray(c["curvatures_z_per_seed"], float), np.asarray(c["curvatures_h_per_seed"], float)
    assert kappa["kappa z mean"] == pytest.approx(kz.sum() / 3) and kappa["kappa h std"] == pytest.approx(
        math.sqrt(sum((k - kh.mean()) ** 2 for k in kh) / 3))
    assert kappa["kappa ratio mean"] == pytest.approx(float(np.mean(np.asarray(c["ratios_per_seed"], float))))
    arrays["R18-C100"]["guillotine"]["head_acc_linear"] += 0.01
    probe = [f for f in figures.recompute(arrays) if f.run == "R18-C100" and f.quantity == "h linear probe (%)"]
    assert probe and not probe[0].agrees and probe[0].recomputed == pytest.approx(31.19 + 1.0, abs=0.006)
