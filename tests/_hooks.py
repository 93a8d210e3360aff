"""Trainer hooks shared by the tests (pytest puts this folder on the import path)."""

from __future__ import annotations

from scale.engine.hooks import Hook


class Crash(Hook):
    """Simulates a killed process: raises after a chosen global step, before any save."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step

    def on_step_end(self, state):
        if state.global_step == self.at_step:
            raise RuntimeError("simulated kill")
