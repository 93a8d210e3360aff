"""Test-session settings shared by ``theory_checks/`` and ``tests/``.

Under pytest-xdist (the README's test command runs ``-n auto``) each worker process is pinned to a core of its own
before anything imports torch, so torch's default threads in a worker (and in the processes its tests start, which
inherit the affinity) fit that core; a test that sets other threads (``--threads 2`` through ``scale.run``) has
them reset after it, so that it does not oversubscribe the core for the worker's later tests. Without the pinning
every worker takes torch's default of all the cores and they oversubscribe them; and setting fewer threads instead
left the cores shared, which made a run's ``auto`` augmentation path follow the other workers' load
(``scale.engine.augment.resolve_augment_path`` counts the free cores): the resume tests compare two fresh runs,
which must take the same path. On one core of its own a worker's runs resolve ``auto`` the same way every time. A
run with one worker is left as it is.
"""

from __future__ import annotations

import os

import pytest

_PINNED: dict[str, int] = {}  # in a pinned worker: torch's default threads there ("threads")


def pytest_configure(config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... in a worker process
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if worker.startswith("gw") and int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 and len(cores) > 1:
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})
        import torch  # after the pinning: its default threads are the one core's

        _PINNED["threads"] = torch.get_num_threads()


@pytest.fixture(autouse=True)
def _pinned_threads_restored():
    """In a pinned worker, torch's threads back to the worker's default after every test."""
    yield
    if _PINNED:
        import torch

        if torch.get_num_threads() != _PINNED["threads"]:
            torch.set_num_threads(_PINNED["threads"])
