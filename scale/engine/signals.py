"""SIGINT and SIGTERM during training: finish the step, save a checkpoint, stop (exit 130).

Ctrl-C sends SIGINT; schedulers (Slurm, Kubernetes) and torchrun's agent send SIGTERM before killing a
job. Both mean "stop soon": the first one only raises a flag that the training loop reads after the
current step (the loop then saves a mid-epoch checkpoint and raises ``Interrupted``). A second signal
means "stop now": ``SecondSignal`` is raised where the program is; the atomic writer then removes its
temporary file, so the last checkpoint written stays intact. A second signal within
``DUPLICATE_WINDOW_S`` of the first counts as the same request: Ctrl-C under torchrun reaches each
worker twice (from the terminal, and forwarded by torchrun's agent a few milliseconds later).
Under torch.distributed the ranks agree on the flag (``any_rank``) so they all stop after the same
step, whichever of them got the signal.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[str] = []  # names of the signals received by the innermost ``stop_on_signals``
DUPLICATE_WINDOW_S = 1.0


class SecondSignal(KeyboardInterrupt):
    """A second SIGINT/SIGTERM: stop at once, without another save."""


def received() -> str | None:
    """The name of the first stop signal received (``'SIGINT'``, ``'SIGTERM'``), or None."""
    return _received[0] if _received else None


@contextmanager
def stop_on_signals(request_stop: Callable[[], None]) -> Iterator[None]:
    """Within the block, the first SIGINT/SIGTERM calls ``request_stop``; the second raises ``SecondSignal``.

    Outside the main thread no handler can be installed and the block runs unchanged.
    """
    _received.clear()
    first_at = [0.0]

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if _received:
            if time.monotonic() - first_at[0] < DUPLICATE_WINDOW_S:
                return  # the same request delivered twice (terminal + launcher)
            raise SecondSignal(f"a second stop signal ({name})")
        _received.append(name)
        first_at[0] = time.monotonic()
        request_stop()

    previous: dict[int, Any] = {}
    try:
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def any_rank(flag: bool, device: Any) -> bool:
    """``flag`` OR-ed over the ranks of torch.distributed (the flag itself when single-process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)
