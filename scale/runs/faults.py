"""Exit codes of the training CLI and the one place that turns a failure into one line and a code.

    0    finished
    1    an input file is missing, corrupt, unsafe or unreadable: dataset files (bad checksum, a pickle
         that would run code or corrupt NumPy's memory, a batch outside the official layout, a file or
         folder without read permission, an image of more than 50 megapixels), a run directory's
         checkpoint.pt or config.json that cannot be read, an image or checkpoint that is not a regular
         file (a FIFO put where a streamed image was: ``scale.engine.read``, never waited on)
    2    arguments or configuration refused: a bad flag or config value (from flags, a recipe or a saved
         config.json), a run needing more memory than its device has, an unusable recipe file, a folder
         dataset whose test split would be empty, an unsafe --run-name, a run directory that already holds
         a run (without --overwrite), holds anything a run does not write, or is locked by a live run, a
         ``.lock``, output or run directory that is a symlink, hard link or FIFO (``scale.engine.disk``:
         nothing is written through it), ``overwrite`` in a recipe, a
         --resume with nothing to resume, flags given with --resume that would change the run,
         config.json disagreeing with checkpoint.pt
    3    non-finite loss or model outputs (the last good checkpoint is kept)
    4    an output could not be written (disk full, read-only file system, permissions) or another I/O
         error; the last good checkpoint is intact (every write is atomic: temporary file + rename), and a
         run that could not start leaves no directory or lock behind
    5    a distributed peer stopped answering within --ddp-timeout, or died
    130  interrupted by SIGINT (Ctrl-C) or SIGTERM (schedulers): the step finishes, a checkpoint is saved,
         continue with --resume; a second signal stops at once, keeping the last checkpoint written (so does
         a first SIGINT outside the training loop, e.g. while a resume loads: named as such)

After ``kill -9`` (or the OOM killer) there is no code: ``--resume`` continues from the last checkpoint,
taking over the dead run's lock (``scale.runs.rundir.RunLock``), whose augmentation workers ended with it
(``scale.engine.workers``).

``guarded(prog)`` wraps a ``main`` so that every ``RunError`` and the known failures above print one
line on stderr (rank 0 only under torch.distributed) and return their code, never a traceback. Clean-ups
registered with ``on_exit`` (the run-directory lock) run however ``main`` ends. A reader of stdout or
stderr that goes away (``python -m scale.run ... | head``) does not stop the run: that stream is sent to
/dev/null from then on (``ClosedPipeSafe``) and the run finishes with its own exit code, its results in
its files.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import os
import signal
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from scale.engine.disk import NotOurs
from scale.engine.read import Unreadable

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_NONFINITE, EXIT_WRITE, EXIT_PEER, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 5, 130


class RunError(Exception):
    """A failure with a one-line message and an exit code (subclasses fix the code)."""

    code = EXIT_USAGE


class ConfigError(RunError):
    """A configuration value or a combination of flags is refused (exit 2)."""

    code = EXIT_USAGE


class CorruptFile(RunError):
    """A file the run must read is missing, corrupt or unsafe (exit 1)."""

    code = EXIT_INPUT


class Terminated(KeyboardInterrupt):
    """SIGTERM outside the training loop (inside it, SIGTERM finishes the step and saves, as Ctrl-C does)."""


class _Guard:
    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.stack = ExitStack()
        self.run_dir: Path | None = None  # set once known: messages then name the last good checkpoint


_current: contextvars.ContextVar[_Guard | None] = contextvars.ContextVar("scale_faults_guard", default=None)


def on_exit(callback: Callable[[], Any]) -> None:
    """Run ``callback`` when the guarded ``main`` returns or fails (at interpreter exit outside one)."""
    guard = _current.get()
    if guard is None:
        import atexit

        atexit.register(callback)
    else:
        guard.stack.callback(callback)


def set_run_dir(run_dir: Path) -> None:
    guard = _current.get()
    if guard is not None:
        guard.run_dir = Path(run_dir)


def _rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:
        return 0


def last_checkpoint(run_dir: Path | None) -> str:
    """``the last good checkpoint (PATH, epoch E step S) is intact`` or why there is none."""
    if run_dir is None or not (run_dir / "checkpoint.pt").is_file():
        return "no checkpoint had been written yet"
    path = run_dir / "checkpoint.pt"
    try:
        import torch

        ck = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        where = f", epoch {int(ck['epoch'])} step {int(ck['step'])}"
    except Exception:
        where = ""
    return f"the last good checkpoint ({path}{where}) is intact"


def is_peer_failure(exc: BaseException) -> bool:
    """A collective that timed out or lost its peer (gloo/NCCL raise RuntimeError subclasses)."""
    if not isinstance(exc, RuntimeError):
        return False
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return False
        if isinstance(exc, getattr(dist, "DistBackendError", ())):
            return True
    except Exception:
        return False
    text = str(exc).lower()
    return any(s in text for s in ("timed out", "timeout", "connection closed", "connection reset", "peer"))


def describe(exc: BaseException, guard: _Guard) -> tuple[int, str]:
    """``(exit code, one line)`` for a failure that escaped ``main``; ``(-1, '')`` when it is a bug."""

    kept = last_checkpoint(guard.run_dir)
    if isinstance(exc, (RunError, NotOurs, Unreadable)):  # refused by the disk's owner or its reader: one line
        return exc.code, f"error: {exc}"
    if isinstance(exc, KeyboardInterrupt):
        # str(exc): SecondSignal names itself; a bare KeyboardInterrupt is the first SIGINT, arriving before the
        # training loop took over the signals (a resume loading its checkpoint) or after it gave them back
        what = "SIGTERM" if isinstance(exc, Terminated) else (str(exc) or "SIGINT (Ctrl-C) outside the training loop")
        return EXIT_INTERRUPTED, f"stopped at once by {what} without saving; {kept}"
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        reason = exc.strerror or os.strerror(exc.errno) if exc.errno else str(exc)
        hint = {errno.ENOSPC: "free some space", errno.EROFS: "choose a writable --out",
                errno.EACCES: "check the folder's permissions", errno.EDQUOT: "free some quota"}.get(exc.errno, "")
        # inputs that cannot be read are CorruptFile or DataError (exit 1) before they get here: what is left are
        # the outputs (the run directory, its lock, its files)
        writes = (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM)
        verb = "cannot write" if exc.errno in writes else "I/O error on"
        return EXIT_WRITE, (f"{verb}{where}: {reason}; {kept}" + (f"; {hint} and continue with --resume "
                            f"{guard.run_dir}" if hint and guard.run_dir is not None else ""))
    if is_peer_failure(exc):
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        return EXIT_PEER, (f"a distributed peer stopped answering or died ({first}); this process stops; {kept}; "
                           "continue with --resume once every rank is healthy")
    return -1, ""


class ClosedPipeSafe:
    """A text stream that survives its reader: on a closed pipe (EPIPE) its descriptor is pointed at
    /dev/null and the text is dropped, instead of a ``BrokenPipeError`` ending the run."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _silence(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._silence()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._silence()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def closed_pipes_tolerated() -> Any:
    """``sys.stdout`` and ``sys.stderr`` wrapped in ``ClosedPipeSafe`` within the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ClosedPipeSafe(sys.stdout), ClosedPipeSafe(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated("SIGTERM")


def guarded(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Decorator: known failures become ``prog: error: ...`` on stderr and their exit code (module doc)."""

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(*args: Any, **kwargs: Any) -> int:
            guard = _Guard(prog)
            token = _current.set(guard)
            previous = None
            try:
                previous = signal.signal(signal.SIGTERM, _raise_terminated)
            except ValueError:  # not the main thread
                pass
            try:
                with closed_pipes_tolerated(), guard.stack:
                    return main(*args, **kwargs)
            except (RunError, KeyboardInterrupt, OSError, RuntimeError, ValueError) as exc:
                code, line = describe(exc, guard)
                if code < 0:
                    raise
                if _rank() == 0:
                    with closed_pipes_tolerated():
                        print(f"{prog}: {line}", file=sys.stderr, flush=True)
                return code
            finally:
                if previous is not None:
                    signal.signal(signal.SIGTERM, previous)
                _current.reset(token)

        return run

    return wrap
