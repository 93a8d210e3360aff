"""The mistakes in the checks' own machinery: the premise registry and its budgets, the certificates in ball
arithmetic (``certify``), the tolerances the checks derive, the strategies' domains, the symbolic proof's
reference. Most are source edits (``mutation.edit``: the file's text as the mistake would leave it, as data);
the premise registry is patched in place (it is kept across the checks' re-imports).
"""

from __future__ import annotations

from theory_checks.mutation import edit, premises_module, swap

CERTIFY = "theory_checks/certify.py"
PREMISES = "theory_checks/premises.py"




def _widen(name: str):
    """A premise's threshold raised tenfold: it sets aside instances its statement covers."""

    def apply(mp):
        import dataclasses

        P = premises_module()
        mp.setitem(P.PREMISES, name, dataclasses.replace(P.PREMISES[name], threshold=10 * P.PREMISES[name].threshold))

    return apply


def premise_noop(mp):
    """``premise`` that never sets an instance aside nor fails a fixed one."""
    mp.setattr(premises_module(), "premise", lambda name, value, what: True)


def premise_fixed_instance_silent(mp):
    """``premise`` without its failure on a fixed instance: there it returns quietly."""
    P = premises_module()
    original = P.premise

    def premise(name, value, what):
        if P.currently_in_test_context():
            return original(name, value, what)
        return bool(value > P.PREMISES[name].threshold)

    mp.setattr(P, "premise", premise)


def premise_discards_most(mp):
    """``premise`` setting four instances in five aside, whatever they measure."""
    P = premises_module()
    original = P.premise
    calls = [0]

    def premise(name, value, what):
        calls[0] += 1
        if P.currently_in_test_context() and calls[0] % 5:
            P._count(name, False)
            P.assume(False)
        return original(name, value, what)

    mp.setattr(P, "premise", premise)


def fisher_rank_rtol_loose(mp):
    """``fisher_rank``'s relative threshold 1e-4 instead of the eigensolver's round-off ``p eps``."""
    import mini.invariance as Inv

    original = Inv.fisher_rank
    swap(mp, Inv, "fisher_rank", lambda I, rtol=None: original(I, 1e-4 if rtol is None else rtol))


def lanczos_converged_loose(factor: float):
    """Lanczos' ``converged`` flag (and its stop) on ``factor x tol``, the result still reporting ``tol``: the residual
    bound taken ``factor`` times optimistic."""

    def apply(mp):
        import dataclasses

        import scale.curvature.lanczos as Lz

        original = Lz.lanczos

        def lanczos(op, k=1, *, tol=None, **kwargs):
            t = 1e-10 if tol is None else float(tol)
            return dataclasses.replace(original(op, k, tol=factor * t, **kwargs), tol=t)

        swap(mp, Lz, "lanczos", lanczos)

    return apply



# ------------------------------------------------------------------------------------------------
# Budgets that see every discard
# ------------------------------------------------------------------------------------------------

# A check discarding four draws in five by ``assume`` under no name at all (the route the grep cannot see).
raw_assume_alias = edit("theory_checks/test_relu_gap.py", (
    "    d, k, n, width = shape\n",
    "    d, k, n, width = shape\n    __import__(\"hypothesis\").assume(seed % 5 == 0)\n"))
# The over-budget hook in conftest made a no-op.
budget_hook_disabled = edit("theory_checks/conftest.py", ("    if over:\n", "    if over and False:\n"))
# Discards counted from named calls only: the hypothesis-side count ignored.
discards_counted_by_name = edit(PREMISES, ("    if invalid > by_premises:\n", "    if False:\n"))
# Other routes' discards reported only when no premise discarded (3 by a premise hide 3 by an aliased assume).
other_routes_hidden_by_premises = edit(PREMISES, ("    if invalid > by_premises:\n",
                                                  "    if invalid and not by_premises:\n"))
# The registration anchored by any earlier registration commit, whatever rules it recorded.
anchor_any_registration = edit("theory_checks/test_ledger_registration.py", (
    '        return any(blob_json(repo, b).get("rules_hash") == committed["rules_hash"] for b in c.added.values())',
    "        return bool(c.added)"))
# ``premise`` in a pinned ``@example`` assuming (hypothesis then skips the example silently), not failing.
pinned_example_skipped = edit(PREMISES, ("    if _generated():\n", "    if currently_in_test_context():\n"))
# The torus of Theorem 5.3 narrowed to d = 3 (so g = 1): nothing is discarded.
torus_domain_narrowed = edit("theory_checks/test_thm5_3_fisher_rank.py", (
    'd = draw(st.integers(3, 9), label="d")', 'd = draw(st.integers(3, 3), label="d")'))

# ------------------------------------------------------------------------------------------------
# Pinned tolerances
# ------------------------------------------------------------------------------------------------

structural_zero_10x = edit("theory_checks/test_thm5_3_fisher_rank.py", (
    "STRUCTURAL_ROUNDOFF = 32.0", "STRUCTURAL_ROUNDOFF = 320.0"))
lanczos_roundoff_10x = edit("theory_checks/test_lanczos_contract.py", (
    "ROUNDOFF_FACTOR = 4.0", "ROUNDOFF_FACTOR = 40.0"))

# ------------------------------------------------------------------------------------------------
# The symbolic proof's reference
# ------------------------------------------------------------------------------------------------

symbolic_depths_cut = edit("theory_checks/test_eq1_symbolic.py", ("DEPTHS = (1, 2, 3)", "DEPTHS = (1, 2)"))
symbolic_main_reference_mini = edit("theory_checks/test_eq1_symbolic.py", (
    "    check_identity(depth)\n", '    check_identity(depth, reference="mini")\n'))
symbolic_reference_tautology = edit("theory_checks/test_eq1_symbolic.py", (
    '        H_ref = reference_hessian(head, objective, Z) if reference == "sympy" else sp.Matrix(dec.G + dec.M)',
    "        H_ref = sp.Matrix(dec.G + dec.M)"))

# ------------------------------------------------------------------------------------------------
# The certificates (``certify``): each decided on something other than the balls, or its contract ignored
# ------------------------------------------------------------------------------------------------

minor_radius_dropped = edit(CERTIFY, (
    "    return arb_mat([[A[i, j] for j in cols] for i in rows]).det()",
    "    return arb(arb_mat([[A[i, j] for j in cols] for i in rows]).det().mid())"))
rank_undecided_read_as_decided = edit(CERTIFY, (
    "        if m.contains(0):\n            return None\n",
    "        if m.contains(0) and ctx.prec < PRECISIONS[-1]:\n            return None\n"))
below_on_midpoints = edit(CERTIFY, ("        if not rq < t_ball:", "        if not arb(rq.mid()) < t_ball:"))
below_denominator_unchecked = edit(CERTIFY, ("        if vv <= 0:  #", "        if False:  #"),
                                   ("        if not vv > 0:\n            return None\n", ""))
taylor_half_lost = edit(CERTIFY, ("f1 * self.c2 + f2 * self.c1 * self.c1 / 2)",
                                  "f1 * self.c2 + f2 * self.c1 * self.c1)"))
off_kinks_vacuous = edit(CERTIFY, (
    "        if not finite(values) or any(x.contains(0) for x in values):\n            return None\n", ""))
above_last_pivot_unchecked = edit(CERTIFY, (
    "        if len(D) < A.shape[0] or not all(d > 0 for d in D):", "        if len(D) < A.shape[0]:"))
above_lower_triangle_only = edit(CERTIFY, (
    "        A = symmetric_balls(compute(), claim)", "        A = np.array(compute(), dtype=object)"))
bounded_rounded_to_nearest = edit(CERTIFY, (
    "        if not finite(values) or not all(abs(x) <= b for x in values):",
    "        if not finite(values) or not all(upper(abs(x)) <= bound for x in values):"))
bounded_max_drops_nan = edit(CERTIFY, (
    "        if not finite(values) or not all(abs(x) <= b for x in values):",
    "        if max(upper(abs(x)) for x in values) > bound:"))
vanishes_max_drops_nan = edit(CERTIFY, ("        if not finite(values):\n            return None\n        excluding",
                                        "        excluding"),
                              ("        if not all(abs(b) <= radius for b in values):",
                               "        if max(upper(abs(b)) for b in values) > float(radius):"))
vanishes_scale_unchecked = edit(CERTIFY, (
    '    s = _threshold(scale, f"{what} = 0: scale", "positive")', "    s = scale"), (
    "        radius = arb(IDENTITY_RADIUS) * _arb(s)", "        radius = IDENTITY_RADIUS * s"), (
    "        if not all(abs(b) <= radius for b in values):", "        if any(upper(abs(b)) > radius for b in values):"))

# Issue 60: inputs that are not float64, scales and thresholds that are not 1 or dyadic, overlapping balls
exact_through_float = edit(CERTIFY, (
    "        return _ball_of(x.item() if isinstance(x, np.ndarray) else x)", "        return arb(float(x))"), (
    "    a = np.asarray(x)\n", "    a = np.asarray(x, dtype=float)\n"))
threshold_through_float = edit(CERTIFY, (
    '    q = _rational(x, f"{what}: the bound")', '    q = _rational(float(x), f"{what}: the bound")'))
vanishes_radius_over_scale = edit(CERTIFY, (
    "        radius = arb(IDENTITY_RADIUS) * _arb(s)", "        radius = arb(IDENTITY_RADIUS) / _arb(s)"))
above_threshold_decimal_string = edit(CERTIFY, ("        shift = _arb(tq)", "        shift = arb(repr(float(tq)))"))
above_overlap_intersected = edit(CERTIFY, (
    "            if a.is_finite() and b.is_finite() and not (a.mid() == b.mid() and a.rad() == b.rad()):",
    "            if a.is_finite() and b.is_finite() and not a.overlaps(b):"), (
    '                raise Refused(f"{what}: not symmetric at ({i}, {j}): {a} and {b}")\n',
    '                raise Refused(f"{what}: not symmetric at ({i}, {j}): {a} and {b}")\n'
    "            if a.is_finite() and b.is_finite():\n                A[i, j] = A[j, i] = a.intersection(b)\n"))
twins_tolerance_1000x = edit("theory_checks/test_certified_twins.py", (
    "FLOAT64_ERROR = 4.0  #", "FLOAT64_ERROR = 4000.0  #"))
jacobian_gap_smallest_entry = edit("theory_checks/test_certified_twins.py", (
    "np.abs(certify.midpoints(J_ball) - J).max()", "np.abs(certify.midpoints(J_ball) - J).min()"))
