"""``bench_curvature --states``: the names of the states, the run each needs, and bad names refused before training."""

from __future__ import annotations

import pytest

from bench.bench_curvature import CROWDED, EPOCHS, main, resolve_states


def test_state_names_give_the_run_to_train():
    """``init`` and ``epoch E`` up to ``EPOCHS`` need the default run; ``epoch E`` beyond it a run that long;
    ``crowded`` is ``CROWDED`` of the default run (so it cannot be asked with a longer one)."""
    assert resolve_states(["init", "epoch 1", "crowded"]) == (EPOCHS, ["init", "epoch 1", "crowded"])
    assert resolve_states(["epoch 12", "init"])[0] == 12
    assert int(CROWDED.split()[1]) <= EPOCHS
    for bad in (["epoch 0"], ["epoch x"], ["epoch"], ["mid"], ["crowded", "epoch 9"]):
        with pytest.raises(ValueError):
            resolve_states(bad)


def test_a_bad_state_exits_2_before_training(tmp_path, monkeypatch, capsys):
    """One line naming the valid forms, exit 2, and nothing trained or written (an empty cache, no results file)."""
    monkeypatch.setenv("BENCH_STATE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.md"
    assert main(["--states", "epoch 3", "mid-training", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'mid-training'" in err[0] and "'crowded'" in err[0]
    assert not out.exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("argv", [["--state", "epoch 9"], ["--state", "warm"], ["--rows", "0"], ["--probes", "-1"],
                                  ["--probes", "64"], ["--probe", "-1"], ["--probe", "32"]])
def test_curvature_parts_refuses_a_bad_state_before_training(argv, tmp_path, monkeypatch, capsys):
    """``bench_curvature_parts``: a state outside the 5-epoch run, no rows, probes or a probe below 0 or past 256
    pairs: exit 2 with one line naming the valid choices, before any training (the trainer is replaced by one that
    fails) and with no results file written."""
    from bench.bench_curvature_parts import main as parts

    _refused_before_training(parts, argv, tmp_path, monkeypatch, capsys, "valid: 'crowded'", "'epoch 5'")


def _refused_before_training(bench_main, argv, tmp_path, monkeypatch, capsys, *valid: str) -> None:
    """``bench_main(argv)`` exits 2 with one line naming the valid choices (every string of ``valid`` in it), the
    trainer replaced by one that fails, and writes no results file."""
    import bench._states

    monkeypatch.setattr(bench._states, "training_states", lambda *a, **k: pytest.fail("trained"))
    out = tmp_path / "out.md"
    assert bench_main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(v in err[0] for v in valid), err
    assert not out.exists()


@pytest.mark.parametrize("argv", [["--state", "epoch 9"], ["--state", "crowded"], ["--repeats", "0"],
                                  ["--threads", "0"]])
def test_layout_bench_refuses_bad_input_before_training(argv, tmp_path, monkeypatch, capsys):
    """``bench_layout``: a state outside the 5-epoch run, no rounds or no threads: exit 2 with one line naming the
    valid choices, before any training (the trainer replaced by one that fails) and with no results file written."""
    from bench.bench_layout import main as layout

    _refused_before_training(layout, argv, tmp_path, monkeypatch, capsys, "valid: 'init'", "'epoch 5'")


def test_layout_bench_quick_runs_without_training(tmp_path, monkeypatch, capsys):
    """``bench_layout --quick``: the untrained model on random rows, nothing trained (the trainer replaced by one that
    fails), its table written with a row per row count, both ratios and a decision in each."""
    import bench._states
    from bench.bench_layout import main as layout

    monkeypatch.setattr(bench._states, "training_states", lambda *a, **k: pytest.fail("trained"))
    out = tmp_path / "layout.md"
    assert layout(["--quick", "--out", str(out)]) == 0
    table = [line for line in out.read_text().splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(table) == 2
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 10 and cells[8] in ("views", "copies") and float(cells[3]) > 0 and float(cells[6]) > 0


@pytest.mark.parametrize("argv", [["--rows", "0"], ["--probes", "0"], ["--threads", "0"], ["--rows", "64"],
                                  ["--rows", "8", "--probes", "33"]])
def test_warm_crossing_bench_refuses_bad_input_before_training(argv, tmp_path, monkeypatch, capsys):
    """``bench_warm_crossing``: no rows, probes or threads, or more pairs than the cached probe holds: exit 2 with one
    line naming the valid ranges, before any training, no results file written."""
    from bench.bench_warm_crossing import main as crossing

    _refused_before_training(crossing, argv, tmp_path, monkeypatch, capsys, "valid: rows, probes, threads >= 1")
