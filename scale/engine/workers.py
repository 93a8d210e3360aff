"""Worker processes that live and die with the run that forked them.

A forked child inherits every open descriptor, the standard streams and the Python signal handlers. For
the per-image augmentation workers (``scale.engine.augment.WorkerAugment``) each inheritance is a fault
once the parent is gone (``kill -9``, OOM killer):

    the run-directory lock   an ``flock`` lasts while any descriptor of its open file lives: a worker
                             holding a copy keeps the directory locked for a dead run
    stdout, stderr           ``python -m scale.run ... | tee log`` waits until every writer of the pipe
                             has closed it
    signal handlers          the parent's SIGINT/SIGTERM handler (finish the step, save) does nothing in
                             a worker, so a worker ignored both and lived on as an orphan

Hence: a descriptor registered with ``private_descriptor`` is closed in every forked child right after
the fork (``os.register_at_fork``), before any other code runs there; the workers of ``process_pool``
ignore SIGINT and SIGTERM (the parent decides when to stop, then closes the pool), read and write
``/dev/null`` instead of the standard streams, and end when their parent dies: at once through Linux's
``PR_SET_PDEATHSIG``, and on any POSIX system through a watchdog thread that sees their parent change.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

_PRIVATE: set[int] = set()  # descriptors no forked child may keep (the run-directory lock)
PARENT_POLL_S = 0.2  # how often a worker's watchdog checks that its parent is alive
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def private_descriptor(fd: int) -> None:
    """Close ``fd`` in every child forked from now on (until ``release_descriptor``)."""
    _PRIVATE.add(fd)


def release_descriptor(fd: int) -> None:
    _PRIVATE.discard(fd)


def _close_private() -> None:
    for fd in tuple(_PRIVATE):
        try:
            os.close(fd)
        except OSError:
            pass
    _PRIVATE.clear()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_close_private)


def _die_with(parent: int) -> None:
    """End this process when ``parent`` ends (the kernel's signal on Linux; a watchdog thread everywhere)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _detach(parent: int) -> None:
    """A pool worker's first act (module docstring): no stop signals, no standard streams, no life of its own."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    os.close(null)
    _die_with(parent)


def process_pool(workers: int) -> ProcessPoolExecutor:
    """``workers`` forked processes (they start on the first ``submit``), detached as the module docstring says."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_detach,
                               initargs=(os.getpid(),))
