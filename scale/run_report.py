"""What a finished run leaves behind besides its metrics: summary.json, report.md and curves.png."""

from __future__ import annotations

import io
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from scale.checkpoint import atomic_write_bytes, atomic_write_json, atomic_write_text


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


def git_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10)
        if sha.returncode:
            return "unknown"
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def plot_curves(history: list[dict[str, float]]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [r["epoch"] for r in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    ax1.plot(epochs, [r["loss"] for r in history], marker="o")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("training loss")
    ax1.set_title("loss")
    ax2.plot(epochs, [r["h_std"] for r in history], marker="o", label="head h (projector output)")
    ax2.plot(epochs, [r["z_std"] for r in history], marker="s", label="backbone z")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("mean per-dim std of normalised rows")
    ax2.set_title("representation variance (probe batch)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_outputs(
    run_dir: Path, config: dict[str, Any], history: list[dict[str, float]], summary: dict[str, Any]
) -> None:
    atomic_write_json(run_dir / "summary.json", summary)
    if history:
        atomic_write_bytes(run_dir / "curves.png", plot_curves(history))
    last = history[-1] if history else {}
    probe = summary.get("linear_probe", {})
    lines = [
        f"# Run {run_dir.name}",
        "",
        f"`{summary.get('command', '')}`",
        "",
        f"{config['method']} on {config['dataset']}, backbone {config['backbone']}, head {config['head']} "
        f"({config['head_width']} wide, {config['head_out']} out, BN {config['head_bn']}), init {config['init']}, "
        f"{config['epochs']} epochs, batch {config['batch_size']}, {config['optimizer']} lr {config['lr']:g}, "
        f"augmentation {config['augment']}, {summary.get('device', '')}.",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| status | {summary.get('status')} |",
        f"| final loss | {last.get('loss', float('nan')):.4f} |",
        f"| h std (normalised, probe batch) | {last.get('h_std', float('nan')):.4f} |",
        f"| z std (normalised, probe batch) | {last.get('z_std', float('nan')):.4f} |",
        f"| linear probe on z (backbone), test accuracy | {probe.get('z', float('nan')):.4f} |",
        f"| linear probe on h (head), test accuracy | {probe.get('h', float('nan')):.4f} |",
        f"| wall time | {summary.get('wall_seconds', 0):.1f} s |",
        "",
        "![loss and variance](curves.png)",
        "",
        f"Versions: {summary.get('versions')}; commit {summary.get('git_commit')}.",
        "",
    ]
    atomic_write_text(run_dir / "report.md", "\n".join(lines))


def command_line() -> str:
    return " ".join([Path(sys.executable).name, "-m", "scale.run", *sys.argv[1:]])
