"""The monitor's records as one figure (``scale.engine.plots``): curvature, |M|/|H|, spread, orbit compression and
kNN accuracy against the step, each panel drawn only where the records hold its numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scale.engine import plots

PANELS = (  # title, (key, label, style) per line
    ("H_eff extremes", (("lambda_min", "lambda_min", "o-"), ("lambda_max", "lambda_max", "s-"))),
    ("|M| / |H|", (("M_over_H", "|M|/|H|", "o-"),)),
    ("spread (std of normalised rows)", (("z_spread", "z", "o-"), ("h_spread", "h", "s-"))),
    ("orbit compression spread(z)/spread(h)", (("compression", "trained head", "o-"),
                                               ("compression_control", "untrained head", "s--"))),
    ("kNN accuracy (%)", (("knn_z", "z", "o-"), ("knn_input", "raw input", "--"))),
)


def plot_records(records: Sequence[dict[str, Any]]) -> bytes:
    """PNG bytes of the records' curves against ``step``."""
    if not records:
        raise ValueError("no records to plot: the monitor has not measured yet")
    panels = [(t, [ln for ln in lines if any(r.get(ln[0]) is not None for r in records)]) for t, lines in PANELS]
    panels = [(t, lines) for t, lines in panels if lines]
    plt = plots.pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels), 3.0), squeeze=False)
    for ax, (title, lines) in zip(axes[0], panels):
        for key, label, style in lines:
            pts = [(r["step"], r[key]) for r in records if r.get(key) is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label, markersize=4)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
        if len(lines) > 1:
            ax.legend(fontsize=7)
    return plots.png(fig, dpi=90)
