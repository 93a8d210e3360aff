"""The paper's sign and equality claims, certified in ball arithmetic on the tour's collapsed states.

The tour (``docs/tour/04_collapse.py``) shows Theorem 4.1 on ``toy_state(spec, "collapsed", "mse", seed=0)``:
``n = 4`` copies of ``z*`` in ``R^6``, a head to ``R^3`` of width 8, MSE to fixed random targets. Its headline
statements there, with a certificate each (``certify``: balls that contain the exact real values):

- smooth heads (GELU, Swish, tanh): ``lambda_min(H_eff) < 0`` at the collapsed state (Theorem 4.1, part 2):
  a Rayleigh quotient ``v^T H_eff v / v^T v`` whose ball lies below 0, ``v`` the float64 eigenvector (taken
  as exact), ``v^T H_eff v`` the second derivative of ``t -> L(h(Z + t v))`` in Taylor arithmetic over
  balls, from the exact float64 weights, batch and targets;
- ReLU and linear heads: ``M = 0`` (the ReLU gap): every hidden pre-activation's ball excludes 0 (so the
  head is affine on a neighbourhood of ``Z`` and ``grad^2 h = 0`` there, hence ``M = 0`` exactly), and the
  interaction's quadratic form ``v^T M v`` (the ``t^2`` coefficient of ``<rho, h(Z + t v)>``, ``rho`` fixed)
  is a ball containing only 0 along every coordinate direction.

    python -m theory_checks.certified_claims                          # print the certificates
    python -m theory_checks.certified_claims --write docs/theory_checks.md

``test_certified_claims.py`` runs the same functions in the suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import certify

from mini.collapse import collapsed_batch, toy_state
from mini.heads import init_head
from mini.hessian import decompose_closed_form, effective_hessian
from mini.reports.docs import fill_block

TOUR = {"seed": 0, "n": 4, "d": 6, "k": 3, "width": 8}  # toy_state's defaults, as the tour calls it
SMOOTH_CLAIMS = ("gelu2", "swish2", "tanh2")
GAP_CLAIMS = ("linear", "relu2")
COMMAND = "python -m theory_checks.certified_claims"


def tour_state(spec: str):
    """The tour's state and its MSE targets ``T``, replayed from ``toy_state``'s generator (and checked: the
    replayed objective is the one ``toy_state`` built, to the last bit)."""
    head, objective, Z = toy_state(spec, "collapsed", "mse", TOUR["seed"])
    rng = np.random.default_rng(TOUR["seed"])
    replay = init_head(spec, TOUR["d"], TOUR["k"], TOUR["width"], rng)
    Z_replay = collapsed_batch(rng.standard_normal(TOUR["d"]), TOUR["n"])
    T = rng.standard_normal((TOUR["n"], TOUR["k"]))
    Hb = head(Z)
    assert np.array_equal(Z, Z_replay) and all(
        np.array_equal(a[key], b[key]) for a, b in zip(head.layers, replay.layers) for key in a)
    assert objective.fn(Hb) == 0.5 * np.sum((Hb - T) ** 2) / TOUR["n"], "the replayed targets are not toy_state's"
    return head, objective, Z, T


def ball_loss(head, Z_flat, T: np.ndarray):
    """``L = |h(Z) - T|^2 / 2n`` on an object array of Taylor numbers (the exact MSE, in balls)."""
    n, d = T.shape[0], head.d
    Hb = certify.ball_head(head, np.reshape(Z_flat, (n, d)))
    R = Hb - certify.exact(T)
    return sum(R.ravel() * R.ravel()) / (2 * n)


def negative_curvature(spec: str) -> certify.Certificate:
    """``lambda_min(H_eff) < 0`` at the tour's collapsed state of ``spec``."""
    head, objective, Z, T = tour_state(spec)
    _, V = np.linalg.eigh(effective_hessian(head, objective, Z))
    v = V[:, 0]

    def compute():
        return certify.quadratic_form(lambda x: ball_loss(head, x, T), Z.ravel(), v), sum(
            certify.exact(v) * certify.exact(v))

    return certify.below(compute, 0.0, f"H_eff at the tour's collapsed {spec} state")


def interaction_vanishes(spec: str) -> tuple[certify.Certificate, certify.Certificate]:
    """``M = 0`` at the tour's collapsed state of ``spec`` (piecewise linear): the kinks avoided, and the
    interaction's quadratic form 0 along every coordinate direction."""
    head, objective, Z, _ = tour_state(spec)
    rho = np.asarray(decompose_closed_form(head, objective, Z).rho)
    n, d = Z.shape

    def pre_activations() -> list:
        pre: list = []
        certify.ball_head(head, certify.taylor_array(Z), pre)
        return [a.c0 for layer in pre for a in np.ravel(layer)]

    off = certify.off_kinks(pre_activations, f"every hidden pre-activation of {spec}")

    def forms():
        def interaction(x):
            return sum(certify.exact(rho).ravel() * certify.ball_head(head, np.reshape(x, (n, d))).ravel())

        return np.array([certify.quadratic_form(interaction, Z.ravel(), e) for e in np.eye(n * d)], dtype=object)

    zero = certify.vanishes(forms, float(np.abs(rho).max()), f"e_j^T M e_j of {spec}, every j")
    return off, zero


def report() -> str:
    lines = ["| claim at the tour's collapsed state | certificate |", "|---|---|"]
    for spec in SMOOTH_CLAIMS:
        c = negative_curvature(spec)
        lines.append(f"| {spec}: `{c.claim}` | {c.evidence}; {c.bits} bits, {c.seconds * 1e3:.0f} ms |")
    for spec in GAP_CLAIMS:
        for c in interaction_vanishes(spec):
            lines.append(f"| {spec}: `{c.claim}` | {c.evidence}; {c.bits} bits, {c.seconds * 1e3:.0f} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, metavar="DOC", help="fill the certificates block of DOC")
    args = parser.parse_args(argv)
    text = report()
    print(text)
    if args.write:
        fill_block(args.write, COMMAND, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
