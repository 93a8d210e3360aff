"""A pytest plugin for ``python -m theory_checks.explore``: counts, per check, the examples hypothesis
generated, the draws it discarded (an ``assume`` that failed, a filter), the failures, and the certificates
issued in ball arithmetic (``certify.LOG``: how many, how long, and how many on drawn instances: those a
generated test case issued), and keeps each falsifying instance with its reproduction. Loaded with
``-p theory_checks._explore_plugin``; writes JSON to the path in ``THEORY_CHECKS_EXPLORE_OUT`` when the session
ends.

Counts come from hypothesis's observability hook: one observation per test case, with its status
(``passed`` / ``failed`` / ``gave_up``) and how it was made (explicit ``@example``, generated, shrunk).
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis.internal import observability

try:  # hypothesis >= 6.131
    from hypothesis.internal.observability import add_observability_callback as _add_callback
except ImportError:  # older releases: the callback list itself
    _add_callback = observability.TESTCASE_CALLBACKS.append

# Line coverage per test case is what observability collects by default; it is not needed here and
# would slow every example by tracing.
observability.OBSERVABILITY_COLLECT_COVERAGE = False

OUT_VARIABLE = "THEORY_CHECKS_EXPLORE_OUT"


def _field(obs, name: str):
    return obs.get(name) if isinstance(obs, dict) else getattr(obs, name, None)


class Explorer:
    def __init__(self) -> None:
        # nodeid -> {"generated", "explicit", "discarded", "failed"} counts (shrink steps not counted)
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.failures: dict[str, str] = {}
        self.reasons: dict[str, set[str]] = defaultdict(set)
        self.outcomes: dict[str, str] = {}
        self.logged = 0  # certify.LOG's length when the last test case (or test) ended

    def _new_certificates(self) -> int:
        """Certificates issued since the last call (``certify.LOG`` grows by one per certificate)."""
        n = len(getattr(sys.modules.get("certify"), "LOG", []))
        new, self.logged = n - self.logged, n
        return new

    @pytest.hookimpl
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._new_certificates()  # a test case's certificates are counted from its own test's start

    def observe(self, obs) -> None:
        if _field(obs, "type") != "test_case":
            return
        node = _field(obs, "property") or "?"
        issued = self._new_certificates()  # issued by this test case (observations come as each case ends)
        if "::" not in node or "test_premises.py::" in node:
            return  # the premise machinery's own properties (they discard on purpose), not checks
        how = str(_field(obs, "how_generated") or "")
        status = _field(obs, "status")
        if "shrink" in how or "minimal failing example" in how:
            return  # the shrinker's re-runs of a failure are not fresh examples
        kind = "explicit" if "explicit" in how else "generated"
        if kind == "generated" and issued:
            self.counts[node]["certificates_drawn"] += issued  # decided by certificate on a drawn instance
        if status == "gave_up":
            reason = str(_field(obs, "status_reason") or "")
            # a premise of the check (assume, or a strategy's filter) against hypothesis's own limits
            self.counts[node]["discarded" if "assum" in reason or "filter" in reason else "overrun"] += 1
            self.reasons[node].add(reason[:120])
        else:
            self.counts[node][kind] += 1
            if status == "failed":
                self.counts[node]["failed"] += 1

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.failed:
            self.outcomes[report.nodeid] = report.outcome
        if report.failed:
            text = str(report.longrepr)
            keep = [ln for ln in text.splitlines() if ln.startswith(("E ", "Falsifying", "@reproduce_failure"))
                    or "reproduce_failure" in ln or ln.lstrip().startswith(("case=", "seed=", "spec="))]
            self.failures[report.nodeid] = "\n".join(keep[-40:]) or text[-4000:]

    def certificates(self) -> dict[str, list[float]]:
        """Per test node: ``[certificates issued, seconds]`` from ``certify.LOG`` (ball arithmetic where
        float64 fell in a band, and the fixed certified instances)."""
        certify = sys.modules.get("certify")
        out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for node, cert in getattr(certify, "LOG", []):
            out[node][0] += 1
            out[node][1] += cert.seconds
        return dict(out)

    def dump(self, path: Path) -> None:
        data = {"counts": {k: dict(v) for k, v in self.counts.items()}, "failures": self.failures,
                "outcomes": self.outcomes, "reasons": {k: sorted(v) for k, v in self.reasons.items()},
                "certificates": self.certificates()}
        path.write_text(json.dumps(data, indent=1, sort_keys=True))


_EXPLORER = Explorer()


def pytest_configure(config: pytest.Config) -> None:
    _add_callback(_EXPLORER.observe)
    config.pluginmanager.register(_EXPLORER, "theory-checks-explorer")


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(OUT_VARIABLE)
    if out:
        _EXPLORER.dump(Path(out))
