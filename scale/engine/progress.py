"""Progress of a long measurement: each phase announced with its size, timed when it ends, and an estimate
of the rest (the end-of-run measurement of ``scale.train``, ``python -m scale.analyze``).

    phases = Phases("end-of-run measurement", log)
    phases.plan("class probe", 1797, "images")          # declared up front, in the order they run
    phases.plan("rotation probes", 7188, "images")
    with phases.run("class probe", "features and two L-BFGS fits"):
        ...

prints, through ``log``:

    end-of-run measurement: 2 phases (class probe: 1797 images; rotation probes: 7188 images)
      [1/2] class probe: features and two L-BFGS fits ...
      [1/2] class probe: 3.1 s; about 12 s left by the speed so far

The estimate of the rest is the remaining phases' sizes at the speed measured so far on the same unit
(seconds per image, per Hessian-vector product, per fit of a kind): a phase of a unit not yet timed is
named as such rather than guessed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class _Phase:
    name: str
    size: float
    unit: str
    seconds: float | None = None


class Phases:
    """Announce, time and estimate the phases of one measurement (module docstring). ``log=None``: silent."""

    def __init__(self, title: str, log: Callable[[str], None] | None) -> None:
        self.title, self.log = title, log
        self.phases: list[_Phase] = []
        self.started = False
        self.t0 = time.perf_counter()

    def plan(self, name: str, size: float, unit: str) -> None:
        """Declare a phase (before the first ``run``): ``size`` in ``unit`` s (images, products, ...)."""
        self.phases.append(_Phase(name, float(size), unit))

    def _say(self, text: str) -> None:
        if self.log is not None:
            self.log(text)

    def rate(self, unit: str) -> float | None:
        """Seconds per ``unit`` over the finished phases of that unit (``None`` before one has finished)."""
        done = [p for p in self.phases if p.unit == unit and p.seconds is not None and p.size > 0]
        size = sum(p.size for p in done)
        return sum(p.seconds for p in done) / size if size else None

    def estimate(self) -> tuple[float, list[str]]:
        """Seconds left by the speed so far, and the remaining phases that cannot be estimated yet."""
        left, unknown = 0.0, []
        for p in self.phases:
            if p.seconds is None:
                r = self.rate(p.unit)
                if r is None:
                    unknown.append(p.name)
                else:
                    left += r * p.size
        return left, unknown

    def _start(self) -> None:
        if not self.started:
            self.started = True
            listing = "; ".join(f"{p.name}: {p.size:,.0f} {p.unit}" for p in self.phases)
            self._say(f"{self.title}: {len(self.phases)} phases ({listing})")

    def _index(self, name: str) -> int:
        self._start()
        return next(j for j, p in enumerate(self.phases) if p.name == name and p.seconds is None)

    @contextmanager
    def run(self, name: str, detail: str = "") -> Iterator[_Phase]:
        """Time the planned phase ``name``; announce it, then its time and the estimate of the rest."""
        i = self._index(name)
        phase, tag = self.phases[i], f"  [{i + 1}/{len(self.phases)}] {name}"
        self._say(f"{tag}: {detail} ..." if detail else f"{tag} ...")
        t0 = time.perf_counter()
        yield phase
        phase.seconds = time.perf_counter() - t0
        left, unknown = self.estimate()
        rest = [p for p in self.phases if p.seconds is None]
        if not rest:
            tail = f"all done in {self.elapsed():.1f} s"
        else:
            estimated = [p for p in rest if p.name not in unknown]
            tail = (f"about {left:.0f} s" if left >= 10 else f"about {left:.1f} s") + " left by the speed so far" \
                if estimated else ""
            if unknown:
                tail += (", and " if tail else "") + f"{', '.join(unknown)} not yet timed"
        self._say(f"{tag}: {phase.seconds:.1f} s; {tail}")

    def skip(self, name: str, why: str) -> None:
        """A planned phase that will not run, with the reason."""
        i = self._index(name)
        self.phases[i].seconds, self.phases[i].size = 0.0, 0.0
        self._say(f"  [{i + 1}/{len(self.phases)}] {name}: skipped ({why})")

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0
