"""``python -m scale.run --config FILE.toml``: recipe files, flags over file, the resolved config saved,
and one clear line (exit 2, nothing written) for a bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scale import run as scale_run
from scale.engine.config import TrainConfig
from scale.runs.config_file import ConfigFileError, read_config_file

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(epochs=1, batch_size=16, backbone_width=4, head_width=16, head_out=8, pred_width=8, train_subset=64,
            probe_size=16, no_final_measure=True, quiet=True, threads=1, seed=3, lr=0.01, optimizer="sgd",
            head="swish2", method="simsiam", init="collapsed", head_bias=False)


def toml(values: dict) -> str:
    def value(v):
        return json.dumps(v)  # strings, numbers and booleans are spelled the same in TOML and JSON

    return "".join(f"{k.replace('_', '-')} = {value(v)}\n" for k, v in values.items())


def test_recipe_round_trips_into_config_json(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('dataset = "synthetic"\n' + toml(TINY))
    assert scale_run.main(["--config", str(recipe), "--out", str(tmp_path / "runs"), "--run-name", "a"]) == 0
    saved = json.loads((tmp_path / "runs" / "a" / "config.json").read_text())
    for key in ("epochs", "batch_size", "backbone_width", "head_width", "seed", "lr", "optimizer", "head", "method",
                "init", "head_bias", "train_subset"):
        assert saved[key] == TINY[key], key
    # the saved config, written back as a recipe, gives the same config again
    back = {k: v for k, v in saved.items() if k in TINY}
    recipe2 = tmp_path / "back.toml"
    recipe2.write_text('dataset = "synthetic"\n' + toml({**TINY, **back}))
    assert scale_run.main(["--config", str(recipe2), "--out", str(tmp_path / "runs"), "--run-name", "b"]) == 0
    again = json.loads((tmp_path / "runs" / "b" / "config.json").read_text())
    assert again == saved


def test_flags_override_the_file(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('dataset = "synthetic"\n' + toml(TINY))
    argv = ["--config", str(recipe), "--out", str(tmp_path / "runs"), "--run-name", "c", "--seed", "7", "--lr", "0.02",
            "--head-bias"]
    assert scale_run.main(argv) == 0
    saved = json.loads((tmp_path / "runs" / "c" / "config.json").read_text())
    assert (saved["seed"], saved["lr"], saved["head_bias"], saved["epochs"]) == (7, 0.02, True, 1)


@pytest.mark.parametrize("text, needle", [
    ("lrr = 0.1\n", "unknown key 'lrr' (did you mean lr?)"),
    ("epochs = 1.5\n", "expected an integer"),
    ('optimizer = "adamw"\n', "valid: sgd, adam, lars"),
    ('head-bn = "yes"\n', "expected true or false"),
    ('dataset = "imagenet"\n', "unknown dataset 'imagenet'"),
    ("[training]\nlr = 0.1\n", "[training] is a table"),
    ("lr = [0.1, 0.2]\n", "must be a single value"),
    ("lr = = 1\n", "not readable TOML"),
])
def test_a_bad_file_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, text, needle):
    recipe = tmp_path / "bad.toml"
    recipe.write_text(text)
    out = tmp_path / "runs"
    assert scale_run.main(["synthetic", "--config", str(recipe), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists()


def test_missing_file_and_resume_are_refused(tmp_path, capsys):
    assert scale_run.main(["--config", str(tmp_path / "nope.toml")]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "r.toml").write_text("epochs = 1\n")
    assert scale_run.main(["--config", str(tmp_path / "r.toml"), "--resume", str(tmp_path)]) == 2
    assert "--resume" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs").glob("*.toml")))
def test_shipped_recipes_resolve(name):
    """Every file under configs/ reads cleanly and resolves to a TrainConfig with the values it states."""
    parser = scale_run.build_parser()
    values = read_config_file(ROOT / "configs" / name, parser)
    parser.set_defaults(**values)
    args = parser.parse_args([])
    import torch

    cfg = scale_run.resolve_config(args, torch.device("cpu"))
    assert isinstance(cfg, TrainConfig)
    for key, v in values.items():
        if hasattr(cfg, key) and key != "dataset":
            assert getattr(cfg, key) == v, (name, key)


def test_paper_recipes_match_the_paper_settings():
    from scale.paper import PAPER_SETTINGS

    parser = scale_run.build_parser()
    for name, exp in (("e1_simsiam.toml", "E1"), ("e3_simclr.toml", "E3E4")):
        values = read_config_file(ROOT / "configs" / name, parser)
        for key, v in PAPER_SETTINGS[exp].items():
            if key in values:
                assert values[key] == v, (name, key)


def test_read_config_file_rejects_non_flags():
    with pytest.raises(ConfigFileError, match="unknown key 'log_every'"):
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as fh:
            fh.write("log_every = 3\n")
        read_config_file(fh.name, scale_run.build_parser())


def test_the_digits_recipe_is_the_main_job_and_runs_offline(tmp_path):
    parser = scale_run.build_parser()
    parser.set_defaults(**read_config_file(ROOT / "configs" / "digits.toml", parser))
    import torch

    from_file = scale_run.resolve_config(parser.parse_args([]), torch.device("cpu"))
    main_job = scale_run.resolve_config(scale_run.build_parser().parse_args(["digits", "--head", "gelu3"]),
                                        torch.device("cpu"))
    assert from_file == main_job
    quick = ["--epochs", "1", "--train-subset", "128", "--no-final-measure", "--quiet", "--threads", "1"]
    assert scale_run.main(["--config", str(ROOT / "configs" / "digits.toml"), *quick, "--out", str(tmp_path),
                           "--run-name", "d"]) == 0
    assert json.loads((tmp_path / "d" / "config.json").read_text())["backbone_width"] == 16


def test_a_dataset_on_the_command_line_overrides_the_file_s():
    parser = scale_run.build_parser()
    parser.set_defaults(**read_config_file(ROOT / "configs" / "folder.toml", parser))
    import torch

    cfg = scale_run.resolve_config(parser.parse_args(["folder:/data/mine"]), torch.device("cpu"))
    assert cfg.dataset == "folder:/data/mine" and cfg.image_size == 64
