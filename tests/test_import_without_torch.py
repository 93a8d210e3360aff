"""``mini`` must import and run with torch absent (DESIGN.md: imports point one way)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK_TORCH = textwrap.dedent(
    """
    import sys

    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch.") or name.startswith("scale"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, _NoTorch())
    """
)


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + code], capture_output=True, text=True, timeout=120)


def test_the_blocker_blocks_torch() -> None:
    """Control: the harness really makes ``import torch`` fail."""
    result = run("import torch")
    assert result.returncode != 0 and "blocked" in result.stderr


def test_mini_imports_and_computes_without_torch() -> None:
    code = textwrap.dedent(
        """
        import pkgutil, importlib, numpy as np
        import mini
        for info in pkgutil.iter_modules(mini.__path__):
            importlib.import_module(f"mini.{info.name}")
        from mini import init_head, make_objective, decompose_closed_form
        head = init_head("gelu3", 4, 3, 5, 0)
        Z = np.random.default_rng(0).standard_normal((4, 4))
        dec = decompose_closed_form(head, make_objective("simclr"), Z)
        assert np.isfinite(dec.H).all()
        assert "torch" not in sys.modules
        print("ok")
        """
    )
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
