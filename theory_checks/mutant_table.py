"""The mutation suite's table, as data: each mistake (``mutants_mini``, ``mutants_metrics``, ``mutants_scale``,
``mutants_checks``) with the theory checks that must fail when it is made (pytest node ids).
"""

from __future__ import annotations

from theory_checks import mutants_checks as in_checks
from theory_checks import mutants_metrics as in_metrics
from theory_checks import mutants_mini as in_mini
from theory_checks import mutants_scale as in_scale
from theory_checks.mutation import CHECKS, Mutant

T = CHECKS
EQ1 = f"{T}/test_eq1_decomposition.py::test_decomposition_every_head_and_objective"
EQ1_SQUARE = f"{T}/test_eq1_decomposition.py::test_decomposition_square_head"
RELU_CLOSED = f"{T}/test_relu_gap.py::test_closed_form_interaction_vanishes"
RELU_TORCH = f"{T}/test_relu_gap.py::test_scale_torch_head_is_minis_head"
TORCH = f"{T}/test_independent_torch.py::test_mini_routes_match_the_published_formulas"
SIMCLR, VICREG, BARLOW = f"{TORCH}[simclr]", f"{TORCH}[vicreg]", f"{TORCH}[barlow]"
FLOOR = f"{T}/test_negative_floor.py::test_floor_counts_minus_1e6_and_not_minus_1e12"
FLOOR_SIGN = f"{T}/test_negative_floor.py::test_scale_is_the_largest_magnitude_of_either_sign"
LEMMA = f"{T}/test_thm4_1_collapse.py::test_part2_lemma_on_null_space_of_G"
LEMMA_UNITS = f"{T}/test_thm4_1_collapse.py::test_part2_lemma_is_unit_free"
CRITICAL = f"{T}/test_thm4_1_collapse.py::test_critical_states_are_jointly_critical_with_nonzero_rho"
WHITEN = f"{T}/test_thm3_1_whitening.py::test_whitening_head_makes_H_eff_the_identity_on_S"
WHITEN_REAL = f"{T}/test_thm3_1_whitening.py::test_whitening_real_objectives"
GN = f"{T}/test_prop3_4_capacity.py::test_gauss_newton_bound_is_attained"
COROLLARY = f"{T}/test_prop3_4_capacity.py::test_corollary_threshold_is_sharp_and_negative_control_past_it"
FISHER_VALUES = f"{T}/test_thm5_3_fisher_rank.py::test_fisher_information_is_the_expected_outer_product_of_the_score"
FISHER_RANK = f"{T}/test_thm5_3_fisher_rank.py::test_fisher_rank_drops_by_one_on_toy_manifolds"
PULLBACK = f"{T}/test_prop5_2_metric_singularity.py::test_invariant_head_metric_vanishes_on_toy_orbits"
FLOW = f"{T}/test_collapse_dynamics.py::test_strict_saddle_grows_at_rate_minus_lambda_min"
WILSON = f"{T}/test_thm4_1_collapse.py::test_wilson_interval_matches_scipy_at_every_count"
PROP52 = f"{T}/test_prop5_2_metric_singularity.py"
GAIN = f"{PROP52}::test_orbit_gain_is_one_for_an_isotropic_metric_and_lambda_over_mean_on_a_diagonal"
LINEAR_ORBIT = f"{PROP52}::test_measuring_functions_on_a_linear_head_along_a_rotation_orbit"
LEAK = f"{PROP52}::test_approximately_invariant_head_metric_scales_with_delta_squared"
SC = f"{T}/test_scale_curvature.py"
NTXENT_CLOSED = f"{SC}::test_nt_xent_loss_curvature_in_closed_form"
PREDICTOR_CLOSED = f"{SC}::test_predictor_cosine_curvature_in_closed_form"
SCALE_ROUTES = f"{SC}::test_scale_routes_are_equation_1"
LANCZOS = f"{SC}::test_lanczos_ends_are_the_spectrum_ends"
EM = f"{T}/test_e1_e4_metrics.py"
E1_DEF = f"{EM}::test_collapse_statistics_are_their_definition"
E1_CLOSED = f"{EM}::test_collapse_statistics_of_isotropic_and_planar_batches"
E4_DEF = f"{EM}::test_orbit_metrics_are_their_definition"
E4_CLOSED = f"{EM}::test_orbit_metrics_of_regular_polygons_circles_and_parabolas"
E4_COMPRESSION = f"{EM}::test_compression_is_the_ratio_of_mean_spreads"
E4_FEATURES = f"{EM}::test_e4_features_are_normalised_before_and_after_the_head"
PREMISE_TESTS = f"{T}/test_premises.py::test_a_premise_failing_on_a_fixed_instance_is_a_failure"
BOUNDARY = {
    "off_kink": f"{T}/test_relu_gap.py::test_off_kink_boundary_instance",
    "flow_off_kink": f"{T}/test_collapse_dynamics.py::test_flow_off_kink_boundary_instance",
    "alive_units": f"{T}/test_thm5_3_fisher_rank.py::test_alive_units_boundary_instance",
    "rho_material": f"{T}/test_relu_gap.py::test_rho_material_boundary_instance",
    "material_leak": f"{PROP52}::test_material_leak_boundary_instance",
}
RELU_ANY = f"{T}/test_relu_gap.py::test_interaction_vanishes_for_any_residual"
FISHER_629 = f"{T}/test_thm5_3_fisher_rank.py::test_pinned_saturated_raw_head_is_decided_by_certificate"
LANCZOS_CONTRACT = f"{T}/test_lanczos_contract.py::test_converged_means_within_tol_of_the_scale"
BLOCKWISE_CONTRACT = f"{T}/test_lanczos_contract.py::test_blockwise_converged_means_within_tol_of_the_scale"
LEDGER_RULES = f"{T}/test_ledger_registration.py::test_every_rule_is_the_registered_one"
CERT = f"{T}/test_certify.py"
TWINS = f"{T}/test_certified_twins.py"
FISHER_BOUNDARY = f"{T}/test_thm5_3_fisher_rank.py::test_structural_zero_level_boundary_instance"
LANCZOS_ALLOWANCE = f"{T}/test_lanczos_contract.py::test_negative_control_a_pair_three_roundoffs_past_tol_is_flagged"
SYMBOLIC = f"{T}/test_eq1_symbolic.py"
HOOK_HALF = f"{T}/test_premises.py::test_hook_control_a_premise_discarding_half_its_draws_is_over_budget"
HOOK_ALIAS = f"{T}/test_premises.py::test_hook_control_a_discard_by_an_aliased_assume_is_counted"
LEDGER_HISTORY = f"{T}/test_ledger_registration.py::test_registration_is_the_one_committed_before_its_units"
MUTANTS: tuple[Mutant, ...] = (
    Mutant("closed_form_without_M", "closed-form H_eff = G only (M dropped)", (EQ1,), in_mini.closed_form_without_M),
    Mutant("M_wrong_sign", "M added with the wrong sign", (EQ1,), in_mini.M_wrong_sign),
    Mutant("G_as_J_A_JT", "G_i = J A J^T instead of J^T A J", (EQ1_SQUARE,), in_mini.G_as_J_A_JT),
    Mutant("interaction_drops_s1", "recursion g_{l-1} = W_l^T g_l without s'(a_l)", (EQ1,),
           in_mini.interaction_drops_s1),
    Mutant("gelu_s2_sign", "GELU s'' with the wrong sign", (EQ1,), in_mini.gelu_s2_sign),
    Mutant("gelu_tanh_approx_s1", "GELU s' from the tanh approximation, s exact", (EQ1,), in_mini.gelu_tanh_approx_s1),
    Mutant("swish_s2_factor", "Swish s'' with 1 + a(1-2 sig) instead of 2 + ...", (EQ1,), in_mini.swish_s2_factor),
    Mutant("tanh_s2_factor", "tanh s'' = -t(1-t^2) (factor 2 lost)", (EQ1,), in_mini.tanh_s2_factor),
    Mutant("softplus_s1_shift", "softplus s' = sigma(-a)", (EQ1,), in_mini.softplus_s1_shift),
    Mutant("relu_s2_nonzero", "ReLU s'' a smoothed delta instead of 0", (RELU_CLOSED,), in_mini.relu_s2_nonzero),
    Mutant("torch_gelu_tanh", "scale's torch GELU module in the tanh approximation, mini's s exact",
           (RELU_TORCH,), in_mini.torch_gelu_tanh),
    Mutant("loss_hessian_blocks_x2", "per-sample loss Hessian blocks off by a factor 2", (EQ1,),
           in_mini.loss_hessian_blocks_times_two),
    Mutant("coupled_loss_hessian_x2", "coupled loss Hessian off by a factor 2", (EQ1,),
           in_mini.coupled_loss_hessian_times_two),
    Mutant("nt_xent_no_positive", "NT-Xent denominator without the positive pair", (SIMCLR,),
           in_mini.nt_xent_no_positive),
    Mutant("vicreg_variance_wrong_axis", "VICReg variance hinge over features, not over the batch", (VICREG,),
           in_mini.vicreg_variance_wrong_axis),
    Mutant("barlow_lambda_on_diagonal", "Barlow Twins' lambda applied to the invariance term too", (BARLOW,),
           in_mini.barlow_lambda_on_diagonal),
    Mutant("floor_1e-3", "negative-curvature floor 1e-3 instead of 1e-9", (FLOOR,), in_mini.floor_1e3),
    Mutant("floor_absolute", "negative-curvature floor absolute instead of relative", (FLOOR,), in_mini.floor_absolute),
    Mutant("spectrum_scale_from_max", "spectral scale max(lambda) instead of max |lambda|", (FLOOR, FLOOR_SIGN),
           in_mini.spectrum_scale_from_max),
    Mutant("restricted_min_returns_max", "restricted minimum returns the maximum", (LEMMA,),
           in_mini.restricted_min_returns_max),
    Mutant("null_space_absolute", "null(G) with an absolute tolerance", (LEMMA_UNITS,), in_mini.null_space_absolute),
    Mutant("collapsed_not_collapsed", "a collapsed batch whose rows differ by 1e-3", (CRITICAL,),
           in_mini.collapsed_not_collapsed),
    Mutant("whitening_inverse", "whitening head built with A^{-1} instead of A^{-1/2}", (WHITEN,),
           in_mini.whitening_inverse),
    Mutant("restricted_transposed", "U H U^T instead of U^T H U", (WHITEN, WHITEN_REAL), in_mini.restricted_transposed),
    Mutant("orthonormal_basis_raw", "the subspace's columns used without orthonormalising", (WHITEN,),
           in_mini.orthonormal_basis_raw),
    Mutant("gn_bound_without_square", "Prop. 3.4 bound without the M eps^2 term", (GN,),
           in_mini.gn_bound_without_square),
    Mutant("threshold_first_order", "Cor. 3.5 threshold lambda_min / (2 L M) instead of the exact root",
           (COROLLARY,), in_mini.threshold_first_order),
    Mutant("spectral_norm_frobenius", "Frobenius norm where the spectral norm is meant", (GN,),
           in_mini.spectral_norm_frobenius),
    Mutant("fisher_JJt", "Fisher information J J^T instead of J^T J", (FISHER_VALUES,), in_mini.fisher_JJt),
    Mutant("fisher_rank_absolute", "Fisher rank with an absolute tolerance", (FISHER_RANK,),
           in_mini.fisher_rank_absolute),
    Mutant("pullback_JJt", "pullback metric J J^T instead of J^T J", (PULLBACK,), in_mini.pullback_JJt),
    Mutant("flow_ascends", "gradient flow integrated with the wrong sign", (FLOW,), in_mini.flow_ascends),
    Mutant("nt_xent_fixed_temperature", "NT-Xent ignores its temperature (always 0.1)", (SIMCLR,),
           in_mini.nt_xent_fixed_temperature),
    Mutant("vicreg_coefficients_swapped", "VICReg's invariance and variance coefficients swapped", (VICREG,),
           in_mini.vicreg_coefficients_swapped),
    Mutant("barlow_lambda_ignored", "Barlow Twins' lambda fixed at 5e-3 whatever is given", (BARLOW,),
           in_mini.barlow_lambda_ignored),
    Mutant("wilson_wald", "the Wald interval where the Wilson score interval is meant", (WILSON,), in_mini.wilson_wald),
    Mutant("wilson_by_subtraction", "the Wilson ends by subtraction, rounding off the exact 0 and 1 at the edges",
           (WILSON,), in_mini.wilson_by_subtraction),
    Mutant("orbit_gain_unnormalised", "orbit gain v^T G v / |v|^2 without dividing by tr G / d", (GAIN,),
           in_mini.orbit_gain_unnormalised),
    Mutant("orbit_displacement_from_centroid", "orbit displacement from the orbit's centroid, not from h(z)",
           (LINEAR_ORBIT,), in_mini.orbit_displacement_from_centroid),
    Mutant("leak_quadratic", "the approximately invariant head leaks delta^2 P z, not delta P z", (LEAK,),
           in_mini.leak_quadratic),
    Mutant("nt_xent_hessian_no_positive", "closed-form NT-Xent curvature without the positive pair", (NTXENT_CLOSED,),
           in_scale.nt_xent_hessian_no_positive),
    Mutant("normalization_hessian_factor", "Hessian of <g, h / norm(h)> with its 3 <g,u> u <u,v> term counted once",
           (PREDICTOR_CLOSED,), in_scale.normalization_hessian_factor),
    Mutant("predictor_targets_not_swapped", "scale's SimSiam/BYOL curvature pulls each row to its own view's target",
           (SCALE_ROUTES,), in_scale.predictor_targets_not_swapped),
    Mutant("gauss_newton_cross_blocks_transposed", "G assembled with each cross-sample loss-Hessian block transposed",
           (SCALE_ROUTES,), in_scale.gauss_newton_cross_blocks_transposed),
    Mutant("operator_M_wrong_sign", "scale's matrix-free M v with the wrong sign", (SCALE_ROUTES,),
           in_scale.operator_M_wrong_sign),
    Mutant("scale_interaction_sign", "scale's closed-form interaction blocks M_i with the wrong sign", (SCALE_ROUTES,),
           in_scale.scale_interaction_sign),
    Mutant("lanczos_no_reorthogonalisation", "Lanczos without reorthogonalisation (three-term recurrence only)",
           (LANCZOS,), in_scale.lanczos_no_reorthogonalisation),
    Mutant("spread_about_origin", "E4 orbit spread about the origin, not the orbit's centroid", (E4_CLOSED, E4_DEF),
           in_metrics.spread_about_origin),
    Mutant("d_intra_with_diagonal", "E4 D_intra averaged over P^2 pairs, p = q included", (E4_CLOSED, E4_DEF),
           in_metrics.d_intra_with_diagonal),
    Mutant("class_centroid_sum", "E4 class centroid as the sum of its orbits' centroids", (E4_CLOSED, E4_DEF),
           in_metrics.class_centroid_sum),
    Mutant("d_inter_with_diagonal", "E4 D_inter over all n_c^2 class pairs, a = b included", (E4_CLOSED, E4_DEF),
           in_metrics.d_inter_with_diagonal),
    Mutant("ratio_inverted", "E4 ratio D_intra / D_inter instead of D_inter / D_intra", (E4_CLOSED, E4_DEF),
           in_metrics.ratio_inverted),
    Mutant("kappa_first_difference", "E4 kappa from first differences r_{i+1} - r_i", (E4_CLOSED, E4_DEF),
           in_metrics.kappa_first_difference),
    Mutant("compression_inverted", "E4 compression spread(h) / spread(z)", (E4_COMPRESSION,),
           in_metrics.compression_inverted),
    Mutant("std_population", "E1 std with ddof 0 instead of 1", (E1_CLOSED, E1_DEF), in_metrics.std_population),
    Mutant("std_unnormalised", "E1 std of the raw rows, not the L2-normalised ones", (E1_CLOSED, E1_DEF),
           in_metrics.std_unnormalised),
    Mutant("cond_without_floor", "E1 condition number without the 1e-7 clamp of lambda_min", (E1_CLOSED, E1_DEF),
           in_metrics.cond_without_floor),
    Mutant("cond_of_raw_rows", "E1 condition number of the raw rows' covariance", (E1_CLOSED, E1_DEF),
           in_metrics.cond_of_raw_rows),
    Mutant("head_on_raw_z", "E4 head applied to the raw z instead of z / norm(z)", (E4_FEATURES,),
           in_metrics.head_on_raw_z),
    *(Mutant(f"premise_{name}_x10", f"premise {name} widened 10x", (killer,), in_checks._widen(name))
      for name, killer in BOUNDARY.items()),
    Mutant("premise_noop", "premise() never sets an instance aside nor fails a fixed one", (PREMISE_TESTS,),
           in_checks.premise_noop),
    Mutant("premise_fixed_instance_silent", "premise() returns quietly on a fixed instance outside it",
           (PREMISE_TESTS,), in_checks.premise_fixed_instance_silent),
    Mutant("premise_discards_most", "premise() sets four instances in five aside", (RELU_ANY,),
           in_checks.premise_discards_most),
    Mutant("fisher_rank_rtol_1e-4", "fisher_rank's threshold 1e-4 of lambda_max, not the eigensolver's round-off",
           (FISHER_629,), in_checks.fisher_rank_rtol_loose),
    Mutant("ledger_band_widened", "a registered band of the ledger widened after the fact", (LEDGER_RULES,),
           in_scale.ledger_band_widened),
    Mutant("lanczos_converged_100x", "Lanczos' converged flag on 100 tol while reporting tol", (LANCZOS_CONTRACT,),
           in_checks.lanczos_converged_loose(100.0)),
    # Issue 51: certificates that can fail, a symbolic proof of mini's code, budgets no alias can evade.
    Mutant("minor_radius_dropped", "rank certificate on the minor's midpoint (its radius dropped)",
           (f"{CERT}::test_rank_refuses_a_singular_ball_matrix_whose_midpoint_is_not_zero",),
           in_checks.minor_radius_dropped),
    Mutant("rank_undecided_read_as_decided", "a minor still containing 0 at the last precision read as decided",
           (f"{CERT}::test_rank_refuses_a_singular_ball_matrix_whose_midpoint_is_not_zero",),
           in_checks.rank_undecided_read_as_decided),
    Mutant("below_on_midpoints", "Rayleigh certificate comparing the quotient's midpoint with t",
           (f"{CERT}::test_below_refuses_a_near_miss",), in_checks.below_on_midpoints),
    Mutant("below_denominator_unchecked", "Rayleigh certificate without v^T v > 0",
           (f"{CERT}::test_below_refuses_a_denominator_that_is_not_positive",), in_checks.below_denominator_unchecked),
    Mutant("taylor_half_lost", "Taylor chain rule without the 1/2 of f'' c1^2 (a wrong certified v^T H v)",
           (f"{TWINS}::test_ball_quadratic_form_is_minis_float64_form",), in_checks.taylor_half_lost),
    Mutant("off_kinks_vacuous", "off-kink certificate issued without looking at the balls",
           (f"{CERT}::test_off_kinks_refuses_a_ball_at_a_kink",), in_checks.off_kinks_vacuous),
    Mutant("above_last_pivot_unchecked", "LDL^T certificate without the pivots' signs (a negative last pivot)",
           (f"{CERT}::test_above_refuses_a_negative_last_pivot",), in_checks.above_last_pivot_unchecked),
    Mutant("above_lower_triangle_only", "LDL^T certificate reading the lower triangle of a non-symmetric matrix",
           (f"{CERT}::test_above_refuses_a_matrix_that_is_not_symmetric",), in_checks.above_lower_triangle_only),
    Mutant("bounded_rounded_to_nearest", "|x| <= b compared as float(upper(|x|)), rounded to nearest",
           (f"{CERT}::test_bounded_refuses_a_value_past_the_bound_that_rounds_onto_it",),
           in_checks.bounded_rounded_to_nearest),
    Mutant("bounded_max_drops_nan", "|x| <= b on Python's max of the upper ends (a NaN after a number dropped)",
           (f"{CERT}::test_bounded_fails_closed_on_non_finite_balls",
            f"{CERT}::test_bounded_refuses_the_nan_column_of_sqrt_x_squared_at_zero"), in_checks.bounded_max_drops_nan),
    Mutant("vanishes_max_drops_nan", "identity certificate on Python's max, NaN balls taken as containing 0",
           (f"{CERT}::test_vanishes_fails_closed_on_non_finite_balls",), in_checks.vanishes_max_drops_nan),
    Mutant("vanishes_scale_unchecked", "identity certificate with a NaN or infinite scale (a float comparison)",
           (f"{CERT}::test_vanishes_refuses_a_scale_that_is_not_finite_and_positive",),
           in_checks.vanishes_scale_unchecked),
    Mutant("structural_zero_10x", "the rank's structural-zero level 10x looser", (FISHER_BOUNDARY,),
           in_checks.structural_zero_10x),
    Mutant("lanczos_roundoff_10x", "Lanczos contract's round-off allowance 10x looser", (LANCZOS_ALLOWANCE,),
           in_checks.lanczos_roundoff_10x),
    Mutant("lanczos_converged_10x", "Lanczos' residual stop and flag on 10 tol while reporting tol (10x optimistic)",
           (LANCZOS_CONTRACT,), in_checks.lanczos_converged_loose(10.0)),
    Mutant("blockwise_converged_on_gap_estimate", "blockwise Lanczos' stop and flag on r^2 / gap, its gap read off "
           "Ritz values (the estimate, not a bound)", (BLOCKWISE_CONTRACT,),
           in_scale.blockwise_converged_on_gap_estimate),
    Mutant("M_wrong_sign_symbolic", "mini's M with the wrong sign, against the symbolic proof",
           (f"{SYMBOLIC}::test_equation_1_is_an_identity_of_minis_closed_form_for_every_loss[2]",),
           in_mini.M_wrong_sign),
    Mutant("symbolic_reference_tautology", "the symbolic proof's reference H taken from mini's own G + M",
           (f"{SYMBOLIC}::test_negative_control_minis_M_with_the_wrong_sign_leaves_a_residual",),
           in_checks.symbolic_reference_tautology),
    Mutant("raw_assume_alias", "a check discarding 4 draws in 5 by an assume under no name",
           (RELU_ANY,), in_checks.raw_assume_alias),
    Mutant("discards_counted_by_name", "discards counted from premise() calls only, not hypothesis's count",
           (HOOK_ALIAS,), in_checks.discards_counted_by_name),
    Mutant("budget_hook_disabled", "conftest's over-budget hook never fails a test", (HOOK_HALF, HOOK_ALIAS),
           in_checks.budget_hook_disabled),
    Mutant("pinned_example_skipped", "premise() in a pinned @example assumes (hypothesis skips it silently)",
           (f"{T}/test_premises.py::test_a_pinned_example_outside_its_premise_fails",),
           in_checks.pinned_example_skipped),
    Mutant("torus_domain_narrowed", "Theorem 5.3's torus strategy narrowed to d = 3, g = 1 (nothing discarded)",
           (f"{T}/test_domains.py::test_torus_strategy_covers_its_domain",), in_checks.torus_domain_narrowed),
    Mutant("ledger_rewritten_consistently", "the ledger's rules and every registration rewritten together",
           (LEDGER_HISTORY,), in_scale.ledger_rewritten_consistently),
    # Issue 60: exact inputs, non-unit scales and non-dyadic thresholds, pinned twins, the proof over mini's table
    Mutant("exact_through_float", "exact() of an int past 2^53, an int64 array, a long double rounded by float()",
           (f"{CERT}::test_exact_holds_the_number_given", f"{CERT}::test_exact_holds_a_long_double_and_an_int64_array"),
           in_checks.exact_through_float),
    Mutant("threshold_through_float", "thresholds, bounds and scales rounded by float() (an int, a Decimal)",
           (f"{CERT}::test_thresholds_are_the_numbers_given",), in_checks.threshold_through_float),
    Mutant("vanishes_radius_over_scale", "identity certificate's radius 2^-150 divided by the scale, not multiplied",
           (f"{CERT}::test_vanishes_reads_its_radius_relative_to_a_non_unit_scale",),
           in_checks.vanishes_radius_over_scale),
    Mutant("above_threshold_decimal_string", "LDL^T certificate's threshold read through its decimal string",
           (f"{CERT}::test_above_compares_with_the_float64_threshold_itself_not_its_decimal_reading",),
           in_checks.above_threshold_decimal_string),
    Mutant("above_overlap_intersected", "LDL^T certificate intersecting overlapping unequal balls as if symmetric",
           (f"{CERT}::test_above_refuses_balls_that_overlap_but_differ",), in_checks.above_overlap_intersected),
    Mutant("twins_tolerance_1000x", "the twins' float64 allowance 4 -> 4000",
           (f"{TWINS}::test_negative_control_one_entry_three_allowances_off_fails_the_jacobian_twin",),
           in_checks.twins_tolerance_1000x),
    Mutant("jacobian_gap_smallest_entry", "the Jacobian twin's gap read from its smallest entry, not its largest",
           (f"{TWINS}::test_negative_control_one_entry_three_allowances_off_fails_the_jacobian_twin",),
           in_checks.jacobian_gap_smallest_entry),
    Mutant("tanh_s2_sign_table", "tanh s'' with its sign flipped, against the proof of mini's table",
           (f"{SYMBOLIC}::test_every_table_entry_is_its_sympy_expression[tanh]",), in_mini.tanh_s2_sign),
    Mutant("symbolic_depths_cut", "the symbolic proof's depths cut to (1, 2)",
           (f"{SYMBOLIC}::test_the_depths_proven_see_the_recursion_through_two_hidden_layers",),
           in_checks.symbolic_depths_cut),
    Mutant("symbolic_main_reference_mini", "the main identity checked against mini's own G + M",
           (f"{SYMBOLIC}::test_equation_1_is_an_identity_of_minis_closed_form_for_every_loss",),
           in_checks.symbolic_main_reference_mini),
    Mutant("other_routes_hidden_by_premises", "discards by other routes reported only when no premise discarded",
           (f"{T}/test_premises.py::test_discards_by_another_route_are_reported_beside_a_premise_s",
            f"{T}/test_premises.py::test_hook_control_an_aliased_assume_beside_a_premise_is_counted"),
           in_checks.other_routes_hidden_by_premises),
    Mutant("anchor_any_registration", "a plan's registration anchored by any earlier one, whatever its rules",
           (f"{T}/test_ledger_registration.py::"
            "test_negative_control_a_widened_plan_registered_with_its_units_is_reported",),
           in_checks.anchor_any_registration),
)
