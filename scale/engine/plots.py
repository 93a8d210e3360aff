"""matplotlib for the project's figures, loaded on first use and on the file backend (no display needed).

Importing ``matplotlib.pyplot`` takes 1.4 s (``python -X importtime -c "import matplotlib.pyplot"``, 2026-12-05, a
2-core AMD EPYC), longer than ``python -m scale.run --help`` as a whole, and most commands draw nothing: so no module
imports it at its top, and every figure gets it here.
"""

from __future__ import annotations

import io
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend."""
    import matplotlib  # first use only: the module docstring's measured import time

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig: Any, dpi: int = 100) -> bytes:
    """The figure laid out as PNG bytes; the figure is closed."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    return buf.getvalue()
