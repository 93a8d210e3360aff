"""scale.curvature.eq1_terms, scale.geometry.mechanism and the E4 protocol measurements the ledger's mechanism
rows read: each statistic against a closed form or a hand computation on a tiny instance, each with a negative
control.

Tolerances are relative to the object's own scale (named below).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from scale.curvature import eq1_terms as cm
from scale.engine.config import TrainConfig
from scale.engine.model import SSLModel
from scale.geometry import mechanism as gm

ROUNDOFF = 1e-12  # float64 identities, relative to the scale of the object compared
SMOOTH_M = 1e-3  # a smooth head's |M| / |H_eff| at a random state is far above round-off (measured ~0.1)


def simsiam(head: str, k: int = 8, predictor: str | None = None) -> tuple[SSLModel, TrainConfig]:
    """A tiny bias-free SimSiam model (d = 32: ResNet-18 of base width 4) with a ``head`` projector."""
    cfg = TrainConfig(method="simsiam", head=head, head_width=16, head_out=k, predictor=predictor, pred_width=k,
                      backbone_width=4, image_size=8, head_bias=False, head_style="paper")
    torch.manual_seed(0)
    return SSLModel(cfg).eval(), cfg


def views(n: int = 8, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2 * n, 3, 8, 8, generator=g)


# --------------------------------------------------------------------------------------------
# Eq. (1): M = 0 for ReLU heads; G's inertia; M on null(G)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", ["relu2", "linear"])
def test_relu_and_linear_heads_have_M_exactly_zero_and_smooth_heads_do_not(head):
    model, cfg = simsiam(head)
    rec = cm.curvature_mechanism(model, cfg, views())
    assert rec["M_over_H"] <= ROUNDOFF and rec["M_norm"] <= ROUNDOFF * rec["H_scale"]
    assert rec["lambda_min_M_null"] == 0.0 and rec["negative_M_null"] == 0.0  # M = 0 on null(G) too
    smooth, cfg_s = simsiam(head.replace("relu", "gelu") if head != "linear" else "swish2")  # negative control
    rec_s = cm.curvature_mechanism(smooth, cfg_s, views())
    assert rec_s["M_over_H"] > SMOOTH_M


def test_linear_head_G_is_J_transpose_loss_hessian_J_by_hand():
    """A (paper-style, two-layer) linear head has J = W2 W1 at every z, so G_i = J^T (grad^2_{h_i} L) J: its
    inertia and extremes from the loss blocks by autograd (an independent route: the record uses the closed
    form through predictor and cosine) must match the record's."""
    from scale.curvature.blocks import loss_blocks
    from scale.curvature.tracking import probe_objective

    model, cfg = simsiam("linear")
    x = views()
    rec = cm.curvature_mechanism(model, cfg, x)
    W1, W2 = (lin.weight.detach().double() for lin in model.projector.layers)
    with torch.no_grad():
        z, h32, _ = model(x)
        h = z.double() @ W1.T @ W2.T  # in float64, as the record evaluates the head
    # the stop-gradient targets are bound at the model's own output, as in the record
    _, HL, _ = loss_blocks(probe_objective(cfg.method, model, h32.double(), None, config=cfg), h)
    J = W2 @ W1  # (k, d)
    G = J.T @ HL @ J  # (n, d, d)
    eig = torch.linalg.eigvalsh(0.5 * (G + G.transpose(1, 2)))
    by_hand = cm.inertia(eig)
    scale = by_hand["scale"]
    assert abs(rec["lambda_min_G_rel"] - by_hand["min_rel"]) <= 1e-9
    assert abs(rec["lambda_max_G_rel"] - by_hand["max_rel"]) <= 1e-9
    assert (rec["G_negative"], rec["G_positive"]) == (by_hand["negative"], by_hand["positive"])
    # rank J <= k = 8 < d = 32: every block has a null space of dimension >= d - k
    assert rec["null_dim_G"] >= 32 - 8 and rec["null_samples"] == 1.0
    # SimSiam's cosine makes G indefinite (E2.1-E2.3); the record says so, and so does the hand computation
    assert rec["G_indefinite"] == 1.0 and by_hand["negative"] > 0 and float(eig.min()) < -1e-6 * scale


def test_inertia_and_null_restriction_on_hand_built_blocks():
    G = torch.diag(torch.tensor([3.0, -1.0, 0.0, 0.0], dtype=torch.float64))[None]
    M = torch.tensor([[5.0, 1.0, 0.0, 2.0], [1.0, 5.0, 0.5, 0.0], [0.0, 0.5, -2.0, 1.0], [2.0, 0.0, 1.0, 1.0]],
                     dtype=torch.float64)[None]
    i = cm.inertia(torch.linalg.eigvalsh(G))
    assert (i["negative"], i["zero"], i["positive"], i["min_rel"], i["max_rel"]) == (1.0, 2.0, 1.0, -1 / 3, 1.0)
    dims, mins, resid = cm.null_restricted(G, M, G + M, scale_G=3.0)
    # null(G) = span(e3, e4): M restricted there is [[-2, 1], [1, 1]], lambda_min = (-1 - sqrt(13)) / 2
    assert dims[0] == 2 and mins[0] == pytest.approx((-1 - math.sqrt(13)) / 2, rel=ROUNDOFF)
    assert resid[0] <= ROUNDOFF
    # negative control: a nonsingular G has no null space, so nothing is restricted
    dims, mins, _ = cm.null_restricted(G + torch.diag(torch.tensor([0.0, 0.0, 1.0, 1.0]))[None].double(), M, M,
                                         scale_G=3.0)
    assert dims[0] == 0 and mins[0] == math.inf


# --------------------------------------------------------------------------------------------
# rho at collapse, and E1's collapsed start
# --------------------------------------------------------------------------------------------


def test_rho_vanishes_at_simsiams_trivial_minimum_and_not_elsewhere():
    """Identical views and an identity predictor: p(h) = h = target, L = -1 exactly and rho = 0 (the cosine is
    stationary at its maximum). Negative control: the model's own random predictor, rho != 0."""
    model, cfg = simsiam("gelu2", k=8, predictor="linear")
    x = views(n=6)
    same = torch.cat([x[:6], x[:6]])  # view 2 = view 1
    rec = cm.residual_record(model, cfg, same)
    assert rec["rho_nonzero"] == 1.0 and rec["rho_rel"] > 100 * cm.RHO_FLOOR
    with torch.no_grad():
        for lin in model.predictor.layers:
            lin.weight.copy_(torch.eye(8))
            if lin.bias is not None:
                lin.bias.zero_()
    rec = cm.residual_record(model, cfg, same)
    assert rec["loss"] == pytest.approx(-1.0, abs=ROUNDOFF)
    assert rec["rho_rel"] <= 1e-6 and rec["rho_nonzero"] == 0.0


def test_rho_rel_is_the_loss_sensitivity_by_hand():
    from scale.curvature.tracking import probe_objective

    model, cfg = simsiam("swish2")
    x = views()
    rec = cm.residual_record(model, cfg, x)
    with torch.no_grad():
        _, h, _ = model(x)
    H = h.double().requires_grad_(True)
    value = probe_objective(cfg.method, model, h.double(), None, config=cfg)(H)
    (rho,) = torch.autograd.grad(value, H)
    L, H = float(value.detach()), H.detach()
    by_hand = sum(float(rho[i].norm() * H[i].norm()) for i in range(len(H))) / abs(L)
    assert rec["rho_rel"] == pytest.approx(by_hand, rel=ROUNDOFF) and rec["loss"] == pytest.approx(L)


def test_collapsed_start_collapses_h_std_where_pseudo_collapse_does_not():
    """Closed form: with eps = 0 a bias-free linear head sees only u.z > 0, so every normalised h is the same
    unit vector and h std is 0 to round-off; W1 u is kept and the rest scaled by eps. Negative control: the
    paper's pseudo-collapse (weights x 0.1) leaves a bias-free homogeneous head's h std unchanged."""
    from scale.engine.heads import collapse_init_

    x = views(n=16)
    model, cfg = simsiam("linear")
    normal = cm.residual_record(model, cfg, x)["h_std"]
    pseudo, _ = simsiam("linear")
    collapse_init_(pseudo.projector)
    assert cm.residual_record(pseudo, cfg, x)["h_std"] == pytest.approx(normal, rel=1e-5)

    W = model.projector.layers[0].weight.detach().clone()
    with torch.no_grad():
        z, _, _ = model(x)
    u = z.mean(0) / z.mean(0).norm()
    out = gm.collapsed_start_(model, x, eps=0.0, factor=1.0)
    assert 0 < out["u_share"] <= 1
    assert cm.residual_record(model, cfg, x)["h_std"] <= 1e-6 * normal
    W_new = model.projector.layers[0].weight.detach()
    assert torch.allclose(W_new @ u, W @ u, atol=1e-6 * float(W.norm()))

    eps_model, _ = simsiam("relu2")
    gm.collapsed_start_(eps_model, x, eps=0.1, factor=0.5)
    w = torch.randn(z.shape[1])
    w = w - (w @ u) * u  # orthogonal to u
    W0 = simsiam("relu2")[0].projector.layers[0].weight.detach()
    W_eps = eps_model.projector.layers[0].weight.detach()
    assert torch.allclose(W_eps @ w, 0.5 * 0.1 * (W0 @ w), atol=1e-5)  # eps off u, then the factor
    assert torch.allclose(W_eps @ u, 0.5 * (W0 @ u), atol=1e-5)
    assert torch.equal(eps_model.projector.layers[1].weight, 0.5 * simsiam("relu2")[0].projector.layers[1].weight)
    start = gm.start_record({"h_std": 0.1, "rho_rel": 1.0, "rho_nonzero": 1.0},
                              {"h_std": 0.001, "rho_rel": 0.5, "rho_nonzero": 1.0})
    assert start["log10_std_ratio"] == pytest.approx(-2.0) and start["rho_nonzero_collapsed"] == 1.0
    assert start["start_collapsed"] == 1.0
    assert gm.start_record({"h_std": 0.1}, {"h_std": 0.05, "rho_rel": 1.0, "rho_nonzero": 1.0})["start_collapsed"] == 0
    with pytest.raises(ValueError, match="eps must be in"):
        gm.collapsed_start_(model, x, eps=1.0)
    with pytest.raises(ValueError, match="factor must be in"):
        gm.collapsed_start_(model, x, factor=0.0)


# --------------------------------------------------------------------------------------------
# Timescale separation
# --------------------------------------------------------------------------------------------


def test_parameter_drift_and_timescale_by_hand():
    class State:
        pass

    model = nn.Module()
    model.projector = nn.Linear(3, 2, bias=False).double()
    model.backbone = nn.Linear(4, 3, bias=False).double()
    with torch.no_grad():
        model.projector.weight.fill_(1.0)  # |w| = sqrt(6)
        model.backbone.weight.fill_(2.0)  # |w| = sqrt(48)
    state = State()
    state.model, state.history = model, []
    hook = gm.ParameterDrift()
    hook.on_fit_start(state)
    with torch.no_grad():
        model.projector.weight[0, 0] += 0.6
        model.backbone.weight[0, 0] += 0.3
    state.history.append({"epoch": 1})
    hook.on_epoch_end(state)
    rec = state.history[-1]
    assert rec["drift_head"] == pytest.approx(0.6 / math.sqrt(6), rel=ROUNDOFF)
    assert rec["drift_backbone"] == pytest.approx(0.3 / math.sqrt(48), rel=ROUNDOFF)

    history = [{"drift_head": 0.1, "drift_backbone": 0.01, "rel_update_head": 1.0, "rel_update_backbone": 1.0},
               {"drift_head": 0.1, "drift_backbone": 0.001},
               {"drift_head": 0.001, "drift_backbone": 0.01}]
    ts = gm.timescale_record(history)
    assert ts["log10_drift_ratio"] == pytest.approx(1.0) and ts["head_faster"] == pytest.approx(2 / 3)
    assert ts["log10_update_ratio"] == 0.0
    assert all(math.isnan(v) for v in gm.timescale_record([{"loss": 1.0}]).values())  # negative control


# --------------------------------------------------------------------------------------------
# Proposition 5.2: the tangent gain
# --------------------------------------------------------------------------------------------


class RadialHead(nn.Module):
    """h(z) = (z0^2 + z1^2, z2, z3, 1): invariant to rotations of the (z0, z1) plane."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.stack([z[:, 0] ** 2 + z[:, 1] ** 2, z[:, 2], z[:, 3], torch.ones_like(z[:, 0])], dim=1)


def test_rotation_tangent_of_an_invariant_head_has_zero_gain():
    g = torch.Generator().manual_seed(0)
    Z = torch.randn(5, 4, generator=g, dtype=torch.float64)
    V = torch.stack([-Z[:, 1], Z[:, 0], torch.zeros(5, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)], 1)
    f = gm.head_map(RadialHead(), "raw")
    gains = gm.tangent_gains(f, Z, V)
    assert np.all(np.abs(gains) <= ROUNDOFF)
    # negative control: a linear head A, gain = (v^T A^T A v / |v|^2) / (tr A^T A / d) by hand (h unnormalised)
    A = torch.randn(3, 4, generator=g, dtype=torch.float64)
    lin = lambda z: A @ z  # noqa: E731
    G = A.T @ A
    by_hand = [float(v @ G @ v / (v @ v)) / float(torch.trace(G) / 4) for v in V]
    assert gm.tangent_gains(lin, Z, V) == pytest.approx(by_hand, rel=ROUNDOFF)
    assert min(by_hand) > 1e-3


def test_image_and_feature_tangents_of_a_rotation_by_hand():
    """A linear ramp I(p) = a . p is reproduced exactly by bilinear interpolation, so d/dt I(R_t p) = a . (R' p)
    at interior pixels: +-(a_x (-y) + a_y x) about the centre (the sign is kornia's angle convention). A linear
    backbone A gives the feature tangent A dx exactly (forward mode through the float64 copy)."""
    S = 16
    c = (S - 1) / 2
    yy, xx = torch.meshgrid(torch.arange(S, dtype=torch.float64) - c, torch.arange(S, dtype=torch.float64) - c,
                            indexing="ij")
    a = (0.02, -0.03)
    ramp = (0.5 + a[0] * xx + a[1] * yy).float()
    images = ramp[None, None].repeat(1, 3, 1, 1)
    dx = gm.image_tangent(images, 0.5)[0, 0].double()
    inner = (xx**2 + yy**2) < (S / 2 - 2) ** 2  # away from the zero padding the rotation brings in at the corners
    expected = a[0] * (-yy) + a[1] * xx
    sign = 1.0 if float((dx[inner] * expected[inner]).sum()) > 0 else -1.0
    assert torch.allclose(dx[inner], sign * expected[inner], atol=1e-4 * float(expected.abs().max()) + 1e-5)
    # negative control: the tangent of a translation-like field (a constant shift of the ramp) is not this one
    assert not torch.allclose(dx[inner], sign * torch.full_like(expected[inner], a[0]), atol=1e-3)

    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Flatten(), nn.Linear(3 * S * S, 5, bias=True))
    identity = lambda x: x  # noqa: E731
    z, v, dxi = gm.rotation_tangents(backbone, images, identity, 0.5)
    A = backbone[1].weight.detach().double()
    assert torch.allclose(v, dxi.flatten(1) @ A.T, rtol=1e-9, atol=1e-12)
    assert torch.allclose(z, images.double().flatten(1) @ A.T + backbone[1].bias.detach().double(), atol=1e-5)


def test_tangent_gain_record_on_a_tiny_model():
    from scale.geometry.measure import standardize

    cfg = TrainConfig(method="simclr", head="relu2", head_width=16, head_out=8, backbone_width=4, image_size=16,
                      head_bn=True, head_out_bn=True, head_bias=False, head_style="paper")
    torch.manual_seed(0)
    model = SSLModel(cfg).eval()
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 16), torch.linspace(-1, 1, 16), indexing="ij")
    blob = torch.exp(-((xx - 0.3) ** 2 + (yy + 0.2) ** 2) / 0.2)  # a smooth off-centre image
    images = torch.stack([blob, blob.T, 1 - blob])[None].repeat(2, 1, 1, 1)
    rec = gm.tangent_gain_record(model.backbone, model.projector, images, standardize([0.5] * 3, [0.25] * 3, "cpu"))
    assert set(rec) == {"tangent_gain", "log10_tangent_gain", "tangent_below_random", "tangent_rel", "fd_error"}
    assert rec["tangent_gain"] > 0 and rec["tangent_rel"] > 0 and 0 <= rec["fd_error"] < 1
    with pytest.raises(ValueError, match="head_input"):
        gm.head_map(model.projector, "other")


# --------------------------------------------------------------------------------------------
# E5: the trend over depths
# --------------------------------------------------------------------------------------------


def test_depth_trend_against_least_squares():
    ys = {1: 2.0, 2: 7.0, 3: 3.0}
    rec = gm.depth_trend(ys)
    assert rec["slope"] == pytest.approx(np.polyfit([1, 2, 3], [2, 7, 3], 1)[0], rel=ROUNDOFF)
    assert rec["slope"] == pytest.approx((3.0 - 2.0) / 2) and rec["second_difference"] == -9.0
    assert rec["monotone"] == 0.0
    assert gm.depth_trend({1: 3.0, 2: 2.0, 3: -1.0})["monotone"] == -1.0
    two = gm.depth_trend({1: 1.0, 3: 2.0})  # depth 2 missing: a slope, no second difference
    assert two["slope"] == pytest.approx(0.5) and math.isnan(two["second_difference"]) and two["monotone"] == 1.0
    assert math.isnan(gm.depth_trend({1: 1.0, 2: math.nan})["slope"])  # one finite value: no trend


# --------------------------------------------------------------------------------------------
# E4: a size-free curvature, and the consistent protocol's pieces
# --------------------------------------------------------------------------------------------


def test_sweep_step_makes_kappa_free_of_the_orbit_size():
    from mini.invariance import sweep_curvature, sweep_step

    t = torch.linspace(0, 1, 10, dtype=torch.float64)
    arc = torch.stack([torch.cos(t), torch.sin(t), 0 * t], dim=1)[None]  # (1, 10, 3): an arc of the unit circle
    step = float(torch.linalg.vector_norm(arc[0, 1] - arc[0, 0]))
    assert float(sweep_step(arc)[0]) == pytest.approx(step, rel=ROUNDOFF)  # equal chords: 2 sin(dt / 2)
    assert float(sweep_step(arc.numpy())[0]) == pytest.approx(step, rel=ROUNDOFF)  # the array API: NumPy too
    rel = float(sweep_curvature(arc)[0] / sweep_step(arc)[0])
    for c in (0.01, 7.0):  # scaling the sweep scales kappa (negative control) but not kappa / step
        assert float(sweep_curvature(c * arc)[0]) == pytest.approx(c * float(sweep_curvature(arc)[0]), rel=1e-9)
        assert float(sweep_curvature(c * arc)[0] / sweep_step(c * arc)[0]) == pytest.approx(rel, rel=1e-9)
    # on a circle the second difference over the chord is 2 sin(dt / 2): the turning per step
    assert rel == pytest.approx(2 * math.sin(float(t[1]) / 2), rel=1e-9)


def test_orbit_record_by_hand():
    from scale.geometry.mechanism import orbit_record

    base = {"compression": 1.0, "d_intra_factor": 10.0, "d_inter_factor": 0.1, "kappa_factor": 4.0,
            "kappa_rel_factor": 2.0, "step_factor": 2.0}
    protocols = {"a_paper": base, "b_raw": dict(base, compression=0.1), "c_bn_renorm": dict(base, compression=0.01),
                 "f_untrained_bn_renorm": dict(base, compression=1.0), "g_untrained_raw_renorm": dict(base),
                 "d_untrained_nobias": dict(base, compression=100.0)}
    rec = orbit_record(protocols)
    assert rec["learned_compression_c_f"] == pytest.approx(-2.0) and rec["learned_compression_b_g"] == pytest.approx(-1)
    assert rec["untrained_compression_f"] == 0.0 and rec["untrained_compression_d"] == pytest.approx(2.0)
    assert rec["d_intra_factor_a"] == pytest.approx(1.0) and rec["d_inter_factor_c"] == pytest.approx(-1.0)
    assert rec["kappa_factor_b"] == pytest.approx(rec["kappa_rel_factor_b"] + rec["step_factor_b"])
    assert math.isnan(orbit_record({"a_paper": base})["learned_compression_c_f"])  # absent protocols: NaN


def test_untrained_twin_of_protocol_b_takes_its_statistics_from_raw_z():
    from mini.invariance import l2_normalize
    from scale.engine.heads import build_head
    from scale.geometry.protocols import renormalized_bn

    torch.manual_seed(0)
    head = build_head("relu2", 6, 4, 10, batchnorm=True, style="paper")
    z = 7.0 * torch.randn(512, 6)
    raw = renormalized_bn(head, z, normalized=False)
    with torch.no_grad():
        a_raw, a_norm = z @ head.layers[0].weight.T, l2_normalize(z) @ head.layers[0].weight.T
    assert torch.allclose(raw.norms[0].running_mean, a_raw.mean(0), atol=1e-5)
    assert not torch.allclose(raw.norms[0].running_mean, a_norm.mean(0), atol=1e-2)  # negative control
