r"""The grid report's figures, from the runs as ``scale.grid.records`` reads them (their unit files):

    figure_e1           E1: a per-epoch statistic of the projector output (h std, h cond), mean and std over
                        seeds, one panel per (BatchNorm, lr), one line per head
    figure_e2           E2: lambda_min and lambda_max of H_eff per epoch, one line per run
    figure_orbits       E4: each space's rotation orbits on its own first two principal axes
    figure_compression  E4/E5: the compression factor (spread z / spread h) of the trained and the untrained heads,
                        one group of bars per group of runs, mean and std over seeds

Each returns PNG bytes, or None when nothing of it was measured; ``scale.grid.page`` names them and
``scale.paper_report`` writes them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scale.engine.plots import png, pyplot
from scale.grid.sections import PAPER_COMPRESSION, PAPER_COMPRESSION_UNTRAINED, geometry_of, mean_std


def _curve(runs: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Epochs, mean and std over runs of ``key`` (runs cut to the shortest history)."""
    series = [[m.get(key, math.nan) for m in r["metrics"]] for r in runs if r["metrics"]]
    if not series:
        return None
    n = min(len(s) for s in series)
    a = np.asarray([s[:n] for s in series], dtype=float)
    return np.arange(1, n + 1), np.nanmean(a, axis=0), np.nanstd(a, axis=0)


def figure_e1(runs: list[dict[str, Any]], key: str, ylabel: str) -> bytes | None:
    e1 = [r for r in runs if r["experiment"] == "E1" and r["metrics"]]
    if not e1:
        return None
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    lrs = sorted({r["labels"]["lr"] for r in e1})
    fig, axes = plt.subplots(2, len(lrs), figsize=(3.6 * len(lrs), 6), squeeze=False, sharex=True)
    for i, bn in enumerate((False, True)):
        for j, lr in enumerate(lrs):
            ax = axes[i][j]
            for head in sorted({r["labels"]["head"] for r in e1}):
                group = [r for r in e1 if r["labels"] == dict(head=head, bn=bn, lr=lr)]
                c = _curve(group, key)
                if c is None:
                    continue
                ep, m, s = c
                ax.plot(ep, m, marker="o", ms=3, label=head)
                ax.fill_between(ep, np.maximum(m - s, 1e-12), m + s, alpha=0.2)
            ax.set_yscale("log")
            ax.set_title(f"BatchNorm {'on' if bn else 'off'}, lr {lr:g}", fontsize=9)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("epoch")
            if j == 0:
                ax.set_ylabel(ylabel)
    axes[0][0].legend(fontsize=7)
    return png(fig)


def figure_e2(runs: list[dict[str, Any]]) -> bytes | None:
    e2 = [r for r in runs if r["experiment"] == "E2" and r["curvature"]]
    if not e2:
        return None
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for r in e2:
        label = f"{r['labels']['init']}/{r['labels']['head']}"
        ep = [c["epoch"] for c in r["curvature"]]
        ax1.plot(ep, [c["lambda_max"] for c in r["curvature"]], marker="o", ms=3, label=label)
        ax2.plot(ep, [c["lambda_min"] for c in r["curvature"]], marker="o", ms=3, label=label)
    scale = max(abs(c["lambda_max"]) for r in e2 for c in r["curvature"]) or 1.0
    ax1.set_yscale("log")
    ax1.set_title("lambda_max of H_eff", fontsize=9)
    ax2.set_yscale("symlog", linthresh=max(1e-12, 1e-6 * scale))
    ax2.axhline(0.0, color="grey", lw=0.5)
    ax2.set_title("lambda_min of H_eff (symlog)", fontsize=9)
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.legend(fontsize=7)
    return png(fig)


def figure_orbits(orbits: dict[str, np.ndarray] | None) -> bytes | None:
    """E4's orbits from a unit file's figure data (each space's own 2-D PCA,
    ``scale.grid.unit_files.orbit_projection``)."""
    if orbits is None:
        return None
    plt = pyplot()
    spaces = [("z", "backbone z"), ("h", "head h(z)"), ("h_untrained", "untrained head (control)")]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    labels = orbits["labels"]
    classes = sorted(set(labels.tolist()))
    cmap = plt.get_cmap("tab10")
    for ax, (key, title) in zip(axes, spaces):
        Y = orbits[key]  # (n_orbits, P, 2)
        for o in range(len(Y)):
            col = cmap(classes.index(int(labels[o])) % 10)
            loop = np.concatenate([Y[o], Y[o][:1]])
            ax.plot(loop[:, 0], loop[:, 1], "-", color=col, lw=0.8, alpha=0.7)
            ax.scatter(Y[o][:, 0], Y[o][:, 1], color=col, s=10)
        ax.set_title(f"{title}: PCA of its own points", fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
    fig.suptitle("E4 rotation orbits (one loop per image, colour = class)", fontsize=10)
    return png(fig)


def figure_compression(groups: list[tuple[str, list[dict[str, Any]]]]) -> bytes | None:
    rows = [(name, [g for g in (geometry_of(r) for r in rs) if g]) for name, rs in groups]
    rows = [(n, g) for n, g in rows if g]
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(rows), 3.6))
    x = np.arange(len(rows))
    bars = ((-0.27, "compression", "trained head"), (0.0, "compression_untrained", "untrained head"),
            (0.27, "compression_untrained_nobias", "untrained head, no biases"))
    for off, key, label in bars:
        ms = [mean_std([getattr(g, key) for g in gs]) for _, gs in rows]
        ax.bar(x + off, [m for m, _, _ in ms], 0.27, yerr=[s for _, s, _ in ms], label=label, capsize=3)
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.set_xticks(x, [n for n, _ in rows], fontsize=8)
    ax.set_ylabel("spread z / spread h")
    ax.set_yscale("log")
    ax.set_title(f"orbit compression (paper, CIFAR-10: {PAPER_COMPRESSION} trained, "
                 f"{PAPER_COMPRESSION_UNTRAINED} untrained)", fontsize=9)
    ax.legend(fontsize=7)
    return png(fig)
