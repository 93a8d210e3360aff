"""scale.run's command line: bad arguments give one clear line and exit code 2; --help lists the defaults."""

from __future__ import annotations

import pytest
import torch

from scale.run import main


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--head", "gelu3"], "DATASET is required"),
        (["synthetic", "--head", "gelu1"], "valid forms"),
        (["synthetic", "--head", "mish3"], "unknown activation"),
        (["synthetic", "--batch-size", "100000"], "larger than the"),
        (["synthetic", "--lr", "-1"], "--lr must be a positive"),
        (["synthetic", "--epochs", "0"], "--epochs must be a positive"),
        (["synthetic", "--predictor", "foo"], "valid forms"),
        (["synthetic", "--augment-workers", "0"], "--augment-workers must be a positive"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, needle, capsys, tmp_path):
    code = main([*argv, "--out", str(tmp_path), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_no_cuda_exits_2(capsys, tmp_path):
    assert main(["synthetic", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["imagenet"], ["synthetic", "--method", "moco"], ["synthetic", "--epochs", "two"],
                                  ["synthetic", "--augment-path", "sideways"]])
def test_argparse_errors_are_one_line_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and any(m in lines[0] for m in ("invalid choice", "invalid int", "unknown dataset")), lines


def test_help_lists_method_defaults(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for text in ("the paper, E1", "the paper, E3", "solo-learn", "digits:", "--head-bn", "--resume", "sgd lr 0.05"):
        assert text in out, text


@pytest.mark.parametrize("path", ["batched", "workers"])
def test_augment_path_flag_reaches_the_config(path):
    """``--augment-path`` is a flag like the others: it lands in the resolved (and saved) config."""
    from scale.run import build_parser, resolve_config

    args = build_parser().parse_args(["synthetic", "--augment-path", path, "--augment-workers", "2"])
    cfg = resolve_config(args, torch.device("cpu"))
    assert (cfg.augment_path, cfg.augment_workers) == (path, 2)
