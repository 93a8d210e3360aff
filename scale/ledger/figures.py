r"""The ledger's figures, drawn from unit records: E1's h std per seed, E2's lambda_min of H_eff, G and M,
E5's probes and compression against depth. Each returns False (and draws nothing) without its units."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mini import paper_numbers as paper
from scale.engine.plots import pyplot
from scale.experiments.catalog import E1_HEADS
from scale.ledger.claims.base import Results


def _save(fig, path: Path) -> bool:
    """Lay out, write and close ``fig``."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)
    return True


def figure_e1(res: Results, path: Path) -> bool:
    """Per-seed curves of E1's h std (epoch 0: before training): rows BatchNorm off/on, columns lr; solid
    pseudo-collapsed start, dashed normal start."""
    e1 = [r for r in res.values() if r["experiment"] == "E1" and r.get("history")]
    if not e1:
        return False
    plt = pyplot()
    lrs = sorted({r["labels"]["lr"] for r in e1})
    heads = [h for h in E1_HEADS if any(r["labels"]["head"] == h for r in e1)]
    fig, axes = plt.subplots(2, len(lrs), figsize=(4.2 * len(lrs), 7), squeeze=False, sharex=True)
    for i, bn in enumerate((False, True)):
        for j, lr in enumerate(lrs):
            ax = axes[i][j]
            for c, head in enumerate(heads):
                for r in e1:
                    lab = r["labels"]
                    if (lab["head"], lab["bn"], lab["lr"]) != (head, bn, lr):
                        continue
                    ys = [r["start"]["h_std"]] + [h["h_std"] for h in r["history"]]
                    ax.plot(range(len(ys)), ys, color=f"C{c}", lw=0.9, alpha=0.75,
                            ls="-" if lab["init"] == "collapsed" else "--",
                            label=head if lab["init"] == "collapsed" and r["seed"] == 0 else None)
            ax.set_yscale("log")
            ax.set_title(f"BatchNorm {'on' if bn else 'off'}, lr {lr:g}", fontsize=9)
            ax.set_xlabel("epoch (0: before training)")
            if j == 0:
                ax.set_ylabel("h std (normalised projector output)")
    axes[0][0].legend(fontsize=7, title="solid: pseudo-collapsed\ndashed: normal start", title_fontsize=7)
    fig.suptitle("E1: per-seed h std (one line per seed)", fontsize=10)
    return _save(fig, path)


def figure_e2(res: Results, path: Path) -> bool:
    """E2's per-seed traces of lambda_min of H_eff, of G and of M (relative to H_eff's scale, symlog), with the
    paper's power-iteration estimate as points, one panel per run."""
    runs = [("normal", "swish2"), ("collapsed", "swish2"), ("collapsed", "relu2")]
    e2 = [r for r in res.values() if r["experiment"] == "E2" and r.get("curvature")]
    if not e2:
        return False
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), squeeze=False)
    for ax, (init, head) in zip(axes[0], runs):
        for r in e2:
            if (r["labels"]["init"], r["labels"]["head"]) != (init, head):
                continue
            cs = r["curvature"]
            ep = [c["epoch"] for c in cs]
            for key, color, lab in (("lambda_min", "C3", "H_eff"), ("lambda_min_G", "C0", "G"),
                                    ("lambda_min_M", "C2", "M")):
                ax.plot(ep, [c[key] / c["scale"] for c in cs], color=color, lw=0.8, alpha=0.7,
                        label=lab if r["seed"] == 0 else None)
            ax.plot(ep, [c["power_lambda_min"] / c["scale"] for c in cs], "x", color="k", ms=3, alpha=0.5,
                    label="power iteration (paper)" if r["seed"] == 0 else None)
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_yscale("symlog", linthresh=1e-4)
        ax.set_title(f"{init}/{head}", fontsize=10)
        ax.set_xlabel("epoch (0: before training)")
        ax.set_ylabel("lambda_min / max|lambda(H_eff)|")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("E2: lambda_min of H_eff = G + M, of G and of M, per seed (exact blocks, float64)", fontsize=10)
    return _save(fig, path)


def figure_e5(res: Results, path: Path) -> bool:
    """E5: rotation probes (linear) on z and h and the compression against depth, per seed and the mean."""

    e5 = [r for r in res.values() if r["experiment"] == "E5" and r.get("status") == "finished"]
    if not e5:
        return False
    plt = pyplot()
    depths = sorted({r["labels"]["depth"] for r in e5})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, color, lab in (("rot_linear_z", "C0", "z (backbone)"), ("rot_linear_h", "C3", "h (head)")):
        for d in depths:
            v = [100 * r["protocols"]["b_raw"][key] for r in e5 if r["labels"]["depth"] == d]
            ax1.plot([d] * len(v), v, "o", color=color, alpha=0.4, ms=4)
        means = [np.mean([100 * r["protocols"]["b_raw"][key] for r in e5 if r["labels"]["depth"] == d])
                 for d in depths]
        ax1.plot(depths, means, "-", color=color, label=f"ours, {lab}")
    ax1.plot(list(paper.E5_PROBES), [p.z for p in paper.E5_PROBES.values()], ":", color="C0", label="paper z")
    ax1.plot(list(paper.E5_PROBES), [p.h for p in paper.E5_PROBES.values()], ":", color="C3", label="paper h")
    ax1.set_xlabel("head depth (Linear layers)")
    ax1.set_ylabel("rotation probe, linear (test %)")
    ax1.legend(fontsize=7)
    for proto, color in (("a_paper", "C1"), ("b_raw", "C4"), ("d_untrained_nobias", "C7")):
        for d in depths:
            v = [r["protocols"][proto]["compression"] for r in e5 if r["labels"]["depth"] == d]
            ax2.plot([d] * len(v), v, "o", color=color, alpha=0.4, ms=4)
        ax2.plot(depths, [np.exp(np.mean(np.log([r["protocols"][proto]["compression"] for r in e5
                                                 if r["labels"]["depth"] == d]))) for d in depths],
                 "-", color=color, label=proto)
    ax2.plot(list(paper.E5_COMPRESSION), list(paper.E5_COMPRESSION.values()), ":", color="C1", label="paper")
    ax2.set_yscale("log")
    ax2.axhline(1.0, color="grey", lw=0.5)
    ax2.set_xlabel("head depth (Linear layers)")
    ax2.set_ylabel("orbit compression spread(z) / spread(h)")
    ax2.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.set_xticks(depths)
    fig.suptitle("E5: Swish + BatchNorm heads by depth (points: seeds; lines: mean, geometric for compression)",
                 fontsize=10)
    return _save(fig, path)

