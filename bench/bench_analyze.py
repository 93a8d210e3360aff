"""``scale.analyze`` on a ResNet-50-sized representation: wall time and peak memory, and its curvature products.

    python -m bench.bench_analyze [--quick] [--threads 2] [--products 3]

The model: ResNet-50 (``scale.engine.pretrained_models:ResNet50``, z of 2048) with a VICReg-style head of the
grammar, ``relu3`` 2048-8192-8192-8192 with BatchNorm (VICReg's projector widths), random weights, saved as a
checkpoint; the analysis: ``python -m scale.analyze CKPT --backbone scale.engine.pretrained_models:ResNet50
--head relu3 --head-width 8192 --head-out 8192 --head-bn --method vicreg`` with its defaults (digits at 16 px,
32 probe images = 64 rows of z, Lanczos on H, G and M, 5 x 3 orbits with controls, probes on 2000 images),
in a fresh process under ``/usr/bin/time -v`` (wall time, peak resident memory) at ``--threads`` torch threads.

Beside it, side by side in this process (interleaved, medians of ``--products``): one curvature product of H at
that probe through the two routes ``scale.analyze`` has, the closed form through the head's weights (a head of
the grammar, ``scale.curvature.closed_form.closed_form_operator``) and the autograd graphs
(``scale.curvature.operators.EffectiveHessian``, any other head), and what building each costs. Writes
``bench/results/analyze.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._util import interleaved_median, out_help, publish, result_path, run_header

OUT = Path(__file__).resolve().parent / "results" / "analyze.md"
ROOT = Path(__file__).resolve().parent.parent
BACKBONE = "scale.engine.pretrained_models:ResNet50"


def head_flags(width: int) -> list[str]:
    return ["--head", "relu3", "--head-width", str(width), "--head-out", str(width), "--head-bn"]


def build_checkpoint(path: Path, width: int) -> None:
    import torch

    from scale.engine.heads import build_head
    from scale.engine.pretrained_models import ResNet50

    torch.manual_seed(0)
    backbone = ResNet50()
    head = build_head("relu3", backbone.out_dim, width, width, batchnorm=True)
    torch.save(torch.nn.ModuleDict({"backbone": backbone, "projector": head}).state_dict(), path)


def products(width: int, rows: int, repeats: int) -> dict[str, float]:
    """Build and one H product of the two routes at ``rows`` rows of a 2048-wide z (VICReg's loss)."""
    import torch

    from scale.curvature.closed_form import closed_form_operator
    from scale.curvature.operators import EffectiveHessian
    from scale.curvature.tracking import probe_objective
    from scale.engine.config import TrainConfig
    from scale.engine.heads import build_head
    from scale.engine.model import SSLModel

    torch.manual_seed(0)
    head = build_head("relu3", 2048, width, width, batchnorm=True).eval()
    z = torch.randn(rows, 2048, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).abs()
    cfg = TrainConfig(method="vicreg")
    with torch.no_grad():
        h = head(z.float()).double()
    stand_in = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 2048))
    loss = probe_objective("vicreg", SSLModel(cfg, backbone=stand_in, head=head), h, None, config=cfg)
    ops: dict[str, object] = {}
    t = {}
    for name, build in (("closed", lambda: closed_form_operator(z, head, loss)[0]),
                        ("graphs", lambda: EffectiveHessian(z, head, loss, dtype=torch.float64).H)):
        t0 = time.perf_counter()
        ops[name] = build()
        t[f"build_{name}"] = time.perf_counter() - t0
    v = torch.randn(rows * 2048, dtype=torch.float64)
    t.update(interleaved_median({name: (lambda op=op: op.matvec(v)) for name, op in ops.items()}, repeats))
    a, b = ops["closed"].matvec(v), ops["graphs"].matvec(v)
    t["agreement"] = float((a - b).abs().max() / b.abs().max())
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_analyze", description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2, help="torch threads of both, fixed (default: 2)")
    p.add_argument("--products", type=int, default=3, help="interleaved products per route (default: 3)")
    p.add_argument("--quick", action="store_true", help="a 256-wide head, 8 images, no probes: checks that it runs")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    import torch

    torch.set_num_threads(args.threads)
    width = 256 if args.quick else 8192
    extra = ["--hessian-images", "8", "--lanczos-iter", "10", "--no-probes"] if args.quick else []
    header = run_header("bench.bench_analyze", argv if argv is not None else sys.argv[1:], args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "resnet50-vicreg.pt"
        build_checkpoint(ckpt, width)
        cmd = [sys.executable, "-m", "scale.analyze", str(ckpt), "--backbone", BACKBONE, *head_flags(width),
               "--method", "vicreg", "--out", str(Path(tmp) / "analysis"), *extra]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-v", *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"scale.analyze failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
        peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
        result = json.loads((Path(tmp) / "analysis" / "analysis.json").read_text())
    c = result.get("curvature", {})
    t = products(width, 2 * (8 if args.quick else 32), 1 if args.quick else args.products)
    shown = " ".join(cmd[3:]).replace(str(ckpt), "CKPT").replace(f" --out {Path(tmp) / 'analysis'}", "")
    lines = ["# scale.analyze on a ResNet-50-sized representation", "", header, "",
             f"`python -m scale.analyze {shown}` (CKPT: ResNet-50 + relu3 {width}-wide head with BatchNorm, random "
             f"weights), a fresh process, `OMP_NUM_THREADS={args.threads}`, torch's default threads there.", "",
             "| wall s | analysis s (its own clock) | peak resident memory | z rows x d | route of the products | "
             "H products | G products | M products |", "|---|---|---|---|---|---|---|---|",
             f"| {wall:.0f} | {result.get('seconds', float('nan')):.0f} | {peak_kb / 1024**2:.2f} GB | "
             f"{c.get('n', '-')} x {c.get('d', '-')} | {c.get('hvp_mode', '-')} | "
             + " | ".join(str(c.get(k, {}).get("n_products", "-")) for k in ("H", "G", "M")) + " |", "",
             f"One product of H at that probe ({2 * (8 if args.quick else 32)} rows of z, VICReg's loss), the two "
             f"routes of `scale.analyze` side by side, {args.threads} thread(s):", "",
             "| route | build s | product s | agreement with the other (max relative difference) |",
             "|---|---|---|---|",
             f"| closed form through the head's weights (a head of the grammar) | {t['build_closed']:.2f} | "
             f"{t['closed']:.2f} | {t['agreement']:.1e} |",
             f"| autograd graphs, built once (any other head; every head before) | {t['build_graphs']:.2f} | "
             f"{t['graphs']:.2f} | |", "",
             f"Closed form / graphs: product **{t['graphs'] / t['closed']:.1f}x** faster, build "
             f"{t['build_graphs'] / max(t['build_closed'], 1e-9):.1f}x."]
    return publish(args.out, lines)


if __name__ == "__main__":
    sys.exit(main())
