"""What ``bench.gpu_suite --device cpu --tiny`` must have written: every section's rows, with numbers where it measures
and the checks it runs passed. The run itself is ``tests/test_bench_checks.py``'s check of ``gpu_suite`` (in a clean
clone, as a process), which hands its result file here: the suite's tiny run is run once."""

from __future__ import annotations

import re

NUMBER = r"[0-9]+(\.[0-9]+)?"


def assert_every_section_wrote_its_rows(text: str) -> None:
    assert "Failed sections: none." in text and "skipped" not in text.replace("skipped (CuPy not installed)", "")

    def row(label: str) -> list[str]:  # the cells of the table row starting with ``label``
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {label}"))
        return [c.strip() for c in line.strip("|").split("|")]

    assert "| torch | ok |" in text and "| kornia | ok |" in text  # imports
    assert re.fullmatch(NUMBER, row("paper's (per image, workers)")[2])  # the paper's pipeline, epoch 2 seconds
    for label in ("fp32 |", "bf16 |", "bf16, channels_last off", "bf16 + torch.compile"):  # the trainer's rows
        assert all(re.fullmatch(NUMBER, c) for c in row(label)[1:4]), row(label)
    assert row("bf16 + torch.compile")[0].endswith("(tiny: dynamo, eager backend)")
    # tracking: epoch 1's and the timed epoch's measurement, the path, the epoch, the share and the mean's share
    assert re.search(rf"\| {NUMBER} \| {NUMBER} \| [a-z-]+ \| {NUMBER} \| \*\*{NUMBER} %\*\* \| {NUMBER} % \|", text)
    parts = ("batch", "augmentation (2 views)", "forward and loss", "backward", "optimizer")  # the step's split
    ms = [float(row(p + " |")[1]) for p in parts]
    summed = float(row("the parts' sum")[1])
    assert all(t > 0 for t in ms[1:]) and abs(summed - sum(ms)) <= 0.3 + 1e-9, ms  # six roundings to 0.1 ms
    for op in ("RandomResizedCrop", "RandomHorizontalFlip", "RandomRotation", "ColorJitter"):  # e3's ops, one view
        assert float(row(op)[1]) > 0
    for label in ("exact blocks", "Lanczos per block", "Lanczos on the whole factored operator, float64"):
        assert float(row(label)[5]) <= 1e-8 and float(row(label)[6]) <= 1e-8  # errors against the exact blocks
    assert "closed form on CuPy against mini" in text and "whole cross-check PASS" in text
    for model in ("dino_vits16", "vicreg_resnet50"):  # E6 on stand-in widths, with the arguments it accepts
        assert float(row(model)[3]) > 0
    assert "--trajectories 2" in text and "(exit 0)" in text and "Stand-in widths" in text
    for label in ("the paper's pipeline", "the project's batched", "the same in bf16", "the same with torch.compile"):
        assert re.fullmatch(NUMBER, row(label)[1])  # the headline: one change at a time
    assert re.fullmatch(r"\*\*" + NUMBER + r"x\*\*", row("the same in bf16")[3])
    for exp, seeds in (("E3E4", 2), ("E2", 1)):  # the ledger's subset, planned for CUDA with --dry-run
        assert re.search(rf"\| `python -m scale.replicate --dataset digits --device cuda --seeds {seeds} --experiments "
                         rf"{exp} --epochs {exp}=10 --out \S+ --dry-run` \| 0 \| {NUMBER} \|", text), exp
