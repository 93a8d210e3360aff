"""The strategies' domains are the declared ones: the draws cover every declared value of ``d``, ``g``, ``k``,
the widths and the heads.

A discard budget sees a premise that sets draws aside, not a strategy that never draws them: narrowing the
torus of Theorem 5.3 to ``d = 3, g = 1`` discards nothing and checks a fraction of the statement. So each
strategy that carries a check's shapes is drawn here ``DRAWS`` times (deterministically: ``derandomize``) and
the draws must cover the domain its check's docstring declares, value by value for the integer parameters,
both ends for the continuous ones. The declarations below are copied from those docstrings, not computed from
the strategies; a strategy that no longer reaches a declared value fails here, naming it.

Negative control: a strategy narrowed to one value (``test_negative_control_a_narrowed_domain_is_named``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import test_collapse_dynamics as dynamics
import test_prop5_2_metric_singularity as prop52
import test_thm4_1_collapse as thm41
import test_thm5_3_fisher_rank as thm53
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from instances import instance_shapes

from conftest import SMOOTH_ACTIVATIONS
from mini.manifolds import MANIFOLDS

DRAWS = 300  # per strategy, derandomized; every value required below has probability >= 1/30 per uniform draw, so
# 300 draws miss one with probability < 1e-4 whatever the seed (the draws differ between sessions)


def draw_many(strategy: st.SearchStrategy, n: int = DRAWS) -> list[Any]:
    """``n`` deterministic draws of ``strategy`` (no check run: drawing only)."""
    out: list[Any] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(x=strategy)
    def collect(x: Any) -> None:
        out.append(x)

    collect()
    return out


def missing(draws: list[Any], declared: dict[str, set], read: dict[str, Callable[[Any], Any]]) -> list[str]:
    """The declared values of each parameter that no draw took."""
    return [f"{name}: {sorted(want - {read[name](x) for x in draws})} never drawn (declared {sorted(want)})"
            for name, want in declared.items() if want - {read[name](x) for x in draws}]


def ends(draws: list[Any], read: Callable[[Any], float], lo: float, hi: float, within: float = 0.05) -> list[str]:
    """A continuous parameter reaches both ends of ``[lo, hi]`` (to ``within`` of its width)."""
    values = [read(x) for x in draws]
    near = within * (hi - lo)
    ok = min(values) <= lo + near and max(values) >= hi - near and lo <= min(values) and max(values) <= hi
    return [] if ok else [f"drawn over [{min(values):.3g}, {max(values):.3g}], declared [{lo:g}, {hi:g}]"]


def head_shape_readers(prefix: Callable[[Any], dict], a: Callable[[Any], int]) -> dict[str, Callable[[Any], Any]]:
    """Theorem 5.3's heads: activation, depth, ``k - a`` and every hidden width minus ``a``."""
    return {"activation": lambda x: prefix(x)["spec"][:-1], "depth": lambda x: int(prefix(x)["spec"][-1]),
            "k - a": lambda x: prefix(x)["k"] - a(x),
            "width - a": lambda x: prefix(x)["widths"][-1] - a(x)}


THM53_HEADS = {"activation": set(SMOOTH_ACTIVATIONS), "depth": {2, 3, 4}, "k - a": {0, 1, 2},
               "width - a": {0, 1, 2, 3}}


def torus_missing(draws: list[dict]) -> list[str]:
    """Theorem 5.3 on the torus: ``d`` in [3, 9], ``1 <= g <= d // 2`` (every g up to 4), ``f`` fixed planes in
    [0, min(g - 1, d - g - 1)] (0 to 2 required; 3, at d = 9 and g = 4 only, is drawn about once in 112 and is
    not), ``a`` from 1 up to ``d - g - f`` (both ends), the heads, ``spread`` in [0, 2]."""
    declared = {"d": set(range(3, 10)), "g": set(range(1, 5)), "fixed": set(range(3)), "a at 1": {True},
                "a at d - g - f": {True}, "g at d // 2": {True}, **THM53_HEADS}
    read = {"d": lambda x: x["d"], "g": lambda x: x["g"], "fixed": lambda x: x["fixed"],
            "a at 1": lambda x: x["a"] == 1, "a at d - g - f": lambda x: x["a"] == x["d"] - x["g"] - x["fixed"],
            "g at d // 2": lambda x: x["g"] == x["d"] // 2,
            **head_shape_readers(lambda x: x["head"], lambda x: x["a"])}
    return missing(draws, declared, read) + ends(draws, lambda x: x["spread"], 0.0, 2.0)


def test_torus_strategy_covers_its_domain() -> None:
    assert not (gaps := torus_missing(draw_many(thm53.torus_instances()))), gaps


def test_toy_manifold_strategy_covers_its_domain() -> None:
    """Theorem 5.3 on the toy manifolds: every manifold, ``a`` in [1, 3], the heads, ``spread`` in [0, 2]."""
    draws = draw_many(thm53.toy_instances())
    read = {"manifold": lambda x: x["name"], "a": lambda x: x["a"],
            **head_shape_readers(lambda x: x["head"], lambda x: x["a"])}
    gaps = missing(draws, {"manifold": set(MANIFOLDS), "a": {1, 2, 3}, **THM53_HEADS}, read)
    assert not (gaps := gaps + ends(draws, lambda x: x["spread"], 0.0, 2.0)), gaps


@pytest.mark.parametrize("objective", ("mse", "simclr", "barlow"))
def test_instance_shapes_cover_their_domain(objective: str) -> None:
    """Equation (1) and the ReLU gap (``instances.instance_shapes``): ``m`` from the objective's minimum (3
    Barlow Twins, 2 NT-Xent and VICReg, else 1) to 4, ``d`` in [1, 5], ``k`` from 2 (normalising objectives)
    or 1 to 5, hidden width in [1, 6]."""
    m_min, k_min = {"barlow": 3, "simclr": 2}.get(objective, 1), 2 if objective == "simclr" else 1
    declared = {"m": set(range(m_min, 5)), "d": set(range(1, 6)), "k": set(range(k_min, 6)),
                "width": set(range(1, 7))}
    read = {key: (lambda x, key=key: x[key]) for key in declared}
    gaps = missing(draw_many(instance_shapes(objective)), declared, read)
    assert not gaps, gaps


@pytest.mark.parametrize("bottleneck_k", (False, True))
def test_collapsed_shapes_cover_their_domain(bottleneck_k: bool) -> None:
    """Theorem 4.1: ``n`` in [2, 5], ``d`` in [1, 6] (part 1) or [2, 6] (part 2), ``k`` in [1, 6] (part 1) or
    [1, d - 1] (part 2: up to 5, and at ``d - 1``), widths from 1 (part 1) or ``k`` (part 2, at ``k`` too) to 8."""
    draws = draw_many(thm41.collapsed_shapes(bottleneck_k=bottleneck_k))
    declared: dict[str, set] = {"n": set(range(2, 6)), "d": set(range(2 if bottleneck_k else 1, 7)),
                                "k": set(range(1, 6 if bottleneck_k else 7)), "width": set(range(1, 9))}
    read: dict[str, Callable[[Any], Any]] = {key: (lambda x, key=key: x[key]) for key in declared}
    if bottleneck_k:
        declared |= {"k at d - 1": {True}, "width at k": {True}}
        read |= {"k at d - 1": lambda x: x["k"] == x["d"] - 1, "width at k": lambda x: x["width"] == x["k"]}
    assert not (gaps := missing(draws, declared, read)), gaps


def test_prop5_2_head_shapes_cover_their_domain() -> None:
    """Proposition 5.2's heads: every smooth activation, depth 2-4, ``k`` in [2, 6], hidden widths in [2, 8]."""
    draws = draw_many(prop52.head_shapes())
    declared = {"activation": set(SMOOTH_ACTIVATIONS), "depth": {2, 3, 4}, "k": set(range(2, 7)),
                "width": set(range(2, 9))}
    read = {"activation": lambda x: x["spec"][:-1], "depth": lambda x: int(x["spec"][-1]), "k": lambda x: x["k"],
            "width": lambda x: x["widths"][0]}
    assert not (gaps := missing(draws, declared, read)), gaps


@pytest.mark.parametrize("expanding", (False, True))
def test_collapse_dynamics_shapes_cover_their_domain(expanding: bool) -> None:
    """The flow at collapsed critical points: ``d`` in [1, 3], ``extra_k`` in [1, 3], ``n`` in [2, 4], hidden
    width ``d + extra_w`` with ``extra_w`` in [1, 3] (expanding) or [1 - d, 3] (any width >= 1)."""
    draws = draw_many(dynamics.shapes(expanding=expanding))
    declared = {"d": {1, 2, 3}, "extra_k": {1, 2, 3}, "n": {2, 3, 4},
                "extra_w": set(range(1, 4)) if expanding else set(range(-1, 4))}
    read = {"d": lambda x: x["d"], "extra_k": lambda x: x["extra_k"], "n": lambda x: x["n"],
            "extra_w": lambda x: x["width"] - x["d"]}
    assert not (gaps := missing(draws, declared, read)), gaps


def test_negative_control_a_narrowed_domain_is_named() -> None:
    """The torus drawn at ``d = 3, g = 1`` only (discarding nothing) is named for every value it never reaches."""
    narrowed = st.fixed_dictionaries({"d": st.just(3), "g": st.just(1), "fixed": st.just(0), "a": st.integers(1, 2),
                                      "head": thm53.head_shapes(1), "spread": st.floats(0.0, 2.0)})
    gaps = torus_missing(draw_many(narrowed, 50))
    assert any(g.startswith("d: [4, 5, 6, 7, 8, 9]") for g in gaps) and any(g.startswith("g: [2, 3, 4]") for g in gaps)
