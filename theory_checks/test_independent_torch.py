"""Equation (1) by an independent route: every objective rebuilt in torch from its published formula.

Statement checked: for each objective of ``mini.losses`` (MSE to targets, MSE between views, NT-Xent,
SimSiam, BYOL, VICReg, Barlow Twins) and heads of the grammar, ``H_eff``, ``G`` and ``M`` from
mini's two routes (``decompose_autograd`` and ``decompose_closed_form``) equal the same objects
computed here in float64 with ``torch.func`` (``hessian``, ``jacrev``, ``grad``):

    H_eff = hessian(Z -> L(h(Z))),   G = J^T hessian(L) J with J = jacrev(Z -> h(Z)),
    M = hessian(Z -> <stopgrad(rho), h(Z)>),  rho = grad(L) at h(Z),

to ``REL_TOL`` of the spectral scale ``max |lambda(H_eff)|`` (entrywise maximum error). The head's
forward pass and the losses below are written afresh from the papers; this file imports nothing from
``mini`` or ``scale`` for them (mini is imported only to be compared, and to draw the weights).

Conventions matched to ``mini.losses`` (each is a choice the papers leave open or fix as stated):
two views stacked as rows ``[view1; view2]`` (``n = 2m``, row ``i`` pairs with row ``i + m``); NT-Xent
with temperature ``tau``, averaged over all ``2m`` anchors (Chen et al. 2020); SimSiam's
``D(p, z) = -cos(p, stopgrad z)``, symmetrised as ``D(p1, z2)/2 + D(p2, z1)/2`` (Chen and He 2021);
BYOL's ``|q/|q| - z'/|z'||^2 = 2 - 2 cos`` per direction, the two directions averaged (Grill et al.
2020, who sum them: a factor 2); stop-gradient targets and the predictor are held fixed; VICReg with
coefficients ``(lambda, mu, nu)``, ``sqrt(var + 1e-4)`` with the unbiased variance, covariance divided
by ``m - 1``, off-diagonal squares divided by ``k`` (Bardes et al. 2022); Barlow Twins with weight
``lambda`` and batch standardisation (biased variance, ``eps = 1e-5``, no affine), ``C`` divided by
``m`` (Zbontar et al. 2021).

The hyperparameters are drawn, not left at their defaults (a route that ignored one would agree with
the formula at the default): ``tau`` in [0.05, 2], VICReg's three coefficients each in [0.1, 50]
(``nu`` in [0.1, 10]), Barlow's ``lambda`` in [1e-4, 1], the predictor's depth (1-3) and hidden width
(2-8); and the instance's shapes: every head of the grammar up to depth 3, hidden width 2-6, ``d``
2-5, ``k`` 2-4, ``m`` 2-4 pairs (3-4 for Barlow Twins, whose standardisation makes ``m = 2`` locally
constant). Nothing is discarded: the tolerance is ``REL_TOL`` of the scale plus ``ROUNDOFF_REL`` of the size
of the terms ``H_eff`` is summed from, ``|J|^2 |grad^2 L| + |M|`` and, for NT-Xent, the terms its loss
Hessian cancels (``instances.nt_xent_term_scale``): the accuracy float64 has. (A ReLU head dead on the
whole batch, or on a whole view under Barlow Twins, has ``H_eff = 0`` exactly, which float64 computes as
1e-30 against summands of 1e5, exploration: relu2, m = 3, d = k = width = 2, seed 0; a saturated NT-Xent
batch, tanh2, tau = 0.0625, residue 5e-10, has routes 1e-7 of the scale apart. Earlier premises discarded
both; now both are compared to the precision their evaluation has.)

Negative controls: three plausible slips in the torch formulas (NT-Xent without the positive pair in
its denominator, VICReg's variance taken over the wrong axis, the MSE loss doubled) differ from mini
by more than ``MATERIAL_REL`` of the scale: the comparison can fail. Skipped cleanly without torch.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from instances import ROUNDOFF_REL, nt_xent_term_scale  # noqa: E402
from torch.func import grad, hessian, jacrev  # noqa: E402

from conftest import examples, seeds  # noqa: E402
from mini import losses  # noqa: E402
from mini.heads import init_head  # noqa: E402  (weights only; the forward pass is rewritten here)
from mini.hessian import decompose_autograd, decompose_closed_form  # noqa: E402
from mini.losses import make_objective  # noqa: E402

REL_TOL = 1e-9
MATERIAL_REL = 1e-3
SPECS = ("linear", *(f"{a}{n}" for a in ("relu", "gelu", "swish", "tanh", "softplus") for n in (2, 3)))
OBJECTIVES = ("mse", "mse_views", "simclr", "simsiam", "byol", "vicreg", "barlow")
VICREG_EPS, BN_EPS = 1e-4, 1e-5
DEFAULTS = {"tau": 0.1, "vicreg": (25.0, 25.0, 1.0), "barlow_lambda": 5e-3, "predictor_depth": 2,
            "predictor_width": 5}
SHAPE_DEFAULTS = {"d": 4, "k": 3, "m": 3, "width": 5}

# ----------------------------------------------------------------------------------------------
# The head, from its definition: a_l = x_{l-1} W_l^T + b_l, x_l = s(a_l), h = a_L
# ----------------------------------------------------------------------------------------------

ACTIVATIONS = {
    None: lambda a: a,
    "relu": lambda a: torch.clamp(a, min=0.0),
    "gelu": lambda a: 0.5 * a * (1.0 + torch.erf(a / math.sqrt(2.0))),  # x Phi(x), Hendrycks and Gimpel
    "swish": lambda a: a * torch.sigmoid(a),  # Ramachandran et al.
    "tanh": torch.tanh,
    "softplus": lambda a: torch.log1p(torch.exp(a)),
}


def mlp(weights: list[tuple[torch.Tensor, torch.Tensor]], activation: str | None, x: torch.Tensor) -> torch.Tensor:
    s = ACTIVATIONS[activation]
    for l, (W, b) in enumerate(weights):
        x = x @ W.T + b
        if l < len(weights) - 1:
            x = s(x)
    return x


# ----------------------------------------------------------------------------------------------
# The objectives, from their papers (Hb: (2m, k), rows [view1; view2])
# ----------------------------------------------------------------------------------------------


def _views(Hb):
    m = Hb.shape[0] // 2
    return Hb[:m], Hb[m:]


def _cos(a, b):
    return (a * b).sum(dim=1) / (a.norm(dim=1) * b.norm(dim=1))


def mse_to_targets(T, factor: float = 1.0):
    return lambda Hb: factor * 0.5 * ((Hb - T) ** 2).sum() / Hb.shape[0]


def mse_between_views(Hb):
    A, B = _views(Hb)
    return 0.5 * ((A - B) ** 2).sum() / A.shape[0]


def nt_xent(Hb, tau: float, with_positive_in_denominator: bool = True):
    n = Hb.shape[0]
    m = n // 2
    U = Hb / Hb.norm(dim=1, keepdim=True)
    S = U @ U.T / tau
    partner = torch.cat([torch.arange(m, n), torch.arange(0, m)])
    keep = ~torch.eye(n, dtype=torch.bool)
    if not with_positive_in_denominator:  # the slip of the negative control
        keep[torch.arange(n), partner] = False
    logits = S.masked_fill(~keep, -math.inf)
    return (torch.logsumexp(logits, dim=1) - S[torch.arange(n), partner]).mean()


def simsiam(predictor, T):
    def loss(Hb):
        P1, P2 = _views(predictor(Hb))
        T1, T2 = _views(T)
        return 0.5 * (-_cos(P1, T2).mean()) + 0.5 * (-_cos(P2, T1).mean())
    return loss


def byol(predictor, T):
    def loss(Hb):
        Q1, Q2 = _views(predictor(Hb))
        T1, T2 = _views(T)
        forward, backward = (2 - 2 * _cos(Q1, T2)).mean(), (2 - 2 * _cos(Q2, T1)).mean()
        return 0.5 * (forward + backward)
    return loss


def _off_diagonal(C):
    return C - torch.diag(torch.diag(C))


def vicreg(Hb, coeffs: tuple[float, float, float], variance_dim: int = 0):
    lam, mu, nu = coeffs
    x, y = _views(Hb)
    m, k = x.shape
    invariance = ((x - y) ** 2).mean()
    x, y = x - x.mean(dim=0), y - y.mean(dim=0)
    std_x = torch.sqrt(x.var(dim=variance_dim) + VICREG_EPS)  # unbiased
    std_y = torch.sqrt(y.var(dim=variance_dim) + VICREG_EPS)
    variance = torch.relu(1 - std_x).mean() / 2 + torch.relu(1 - std_y).mean() / 2
    cov_x, cov_y = x.T @ x / (m - 1), y.T @ y / (m - 1)
    covariance = (_off_diagonal(cov_x) ** 2).sum() / k + (_off_diagonal(cov_y) ** 2).sum() / k
    return lam * invariance + mu * variance + nu * covariance


def barlow(Hb, lambd: float):
    a, b = _views(Hb)
    m = a.shape[0]

    def bn(x):  # BatchNorm1d(affine=False) in training mode
        x = x - x.mean(dim=0)
        return x / torch.sqrt((x * x).mean(dim=0) + BN_EPS)

    C = bn(a).T @ bn(b) / m
    return ((torch.diag(C) - 1) ** 2).sum() + lambd * (_off_diagonal(C) ** 2).sum()


# ----------------------------------------------------------------------------------------------
# Instances and the torch route
# ----------------------------------------------------------------------------------------------


def instance(spec: str, objective: str, seed: int, hyper: dict = DEFAULTS, shape: dict = SHAPE_DEFAULTS, *,
             slip: str | None = None):
    """Mini's objects and torch twins of the same numbers: (head, objective, Z, torch loss, torch head)."""
    rng = np.random.default_rng(seed)
    d, k, m = shape["d"], shape["k"], shape["m"]
    head = init_head(spec, d, k, shape["width"], rng)
    Z = rng.standard_normal((2 * m, d))
    Hb = head(Z)
    act = head.spec.activation
    predictor = None
    if objective in ("simsiam", "byol"):
        depth = hyper["predictor_depth"]
        p_spec = "linear" if act is None or depth == 1 else f"{act}{depth}"
        predictor = init_head(p_spec, k, k, hyper["predictor_width"], rng)
    targets = Hb + 0.5 * rng.standard_normal(Hb.shape) if objective in ("mse", "simsiam", "byol") else None
    if objective == "vicreg":
        mini_obj = losses.vicreg(*hyper["vicreg"], eps=VICREG_EPS)
    elif objective == "barlow":
        mini_obj = losses.barlow(hyper["barlow_lambda"], eps=BN_EPS)
    else:
        mini_obj = make_objective(objective, Hb, predictor=predictor, targets=targets, temperature=hyper["tau"])

    def weights(h):
        return [(torch.tensor(layer["W"]), torch.tensor(layer["b"])) for layer in h.layers]

    t_head = lambda x, w=weights(head): mlp(w, act, x)  # noqa: E731
    T = None if targets is None else torch.tensor(targets)
    if objective == "mse":
        loss = mse_to_targets(T, factor=2.0 if slip == "mse_doubled" else 1.0)
    elif objective == "mse_views":
        loss = mse_between_views
    elif objective == "simclr":
        loss = lambda Hb: nt_xent(Hb, hyper["tau"], with_positive_in_denominator=slip != "ntxent_no_positive")  # noqa: E731
    elif objective in ("simsiam", "byol"):
        pw = weights(predictor)
        t_pred = lambda x: mlp(pw, predictor.spec.activation, x)  # noqa: E731
        loss = (simsiam if objective == "simsiam" else byol)(t_pred, T)
    elif objective == "vicreg":
        loss = lambda Hb: vicreg(Hb, hyper["vicreg"], variance_dim=1 if slip == "vicreg_wrong_axis" else 0)  # noqa: E731
    else:
        loss = lambda Hb: barlow(Hb, hyper["barlow_lambda"])  # noqa: E731
    return head, mini_obj, Z, loss, t_head


def torch_route(loss, t_head, Z: np.ndarray) -> dict[str, np.ndarray]:
    n, d = Z.shape
    z = torch.tensor(Z).reshape(-1)
    h_of = lambda zf: t_head(zf.reshape(n, d))  # noqa: E731
    Hb = h_of(z)
    k = Hb.shape[1]
    L_of = lambda hf: loss(hf.reshape(n, k))  # noqa: E731
    H = hessian(lambda zf: loss(h_of(zf)))(z)
    J = jacrev(lambda zf: h_of(zf).reshape(-1))(z)  # (n*k, n*d)
    HL = hessian(L_of)(Hb.reshape(-1))  # (n*k, n*k)
    rho = grad(L_of)(Hb.reshape(-1)).reshape(n, k).detach()
    M = hessian(lambda zf: (rho * h_of(zf)).sum())(z)
    summands = float(torch.linalg.matrix_norm(J, 2) ** 2 * torch.linalg.matrix_norm(HL, 2)
                     + torch.linalg.matrix_norm(M, 2))
    return {"H": H.numpy(), "G": (J.T @ HL @ J).numpy(), "M": M.numpy(), "rho": rho.numpy(), "summands": summands,
            "J_norm": float(torch.linalg.matrix_norm(J, 2))}


def _seed(spec: str, objective: str) -> int:
    return zlib.crc32(f"independent/{spec}/{objective}".encode())


hyperparameters = st.fixed_dictionaries({
    "tau": st.floats(0.05, 2.0),
    "vicreg": st.tuples(st.floats(0.1, 50.0), st.floats(0.1, 50.0), st.floats(0.1, 10.0)),
    "barlow_lambda": st.floats(1e-4, 1.0),
    "predictor_depth": st.integers(1, 3),
    "predictor_width": st.integers(2, 8),
})


@st.composite
def shapes(draw, objective: str) -> dict:
    return {"d": draw(st.integers(2, 5)), "k": draw(st.integers(2, 4)), "width": draw(st.integers(2, 6)),
            "m": draw(st.integers(3 if objective == "barlow" else 2, 4))}


def check_routes(spec: str, objective: str, seed: int, hyper: dict, shape: dict) -> None:
    head, obj, Z, loss, t_head = instance(spec, objective, seed, hyper, shape)
    ref = torch_route(loss, t_head, Z)
    scale = float(np.abs(np.linalg.eigvalsh(ref["H"])).max())
    # The accuracy of the evaluation: the scale, and the round-off of the terms H_eff is summed from.
    terms = ref["summands"]
    if objective == "simclr":
        terms += nt_xent_term_scale(head(Z), hyper["tau"], ref["J_norm"])
    tol = REL_TOL * scale + ROUNDOFF_REL * terms
    assert np.abs(ref["rho"]).max() > 0, f"rho = 0 makes the comparison of M empty ({spec}, {objective})"
    for route in (decompose_autograd, decompose_closed_form):
        dec = route(head, obj, Z)
        for name in ("H", "G", "M"):
            err = float(np.abs(getattr(dec, name) - ref[name]).max())
            assert err <= tol, f"{route.__name__}: {name} off by {err:.2e} > {tol:.2e} ({spec}, {objective})"
        assert np.abs(np.asarray(dec.rho) - ref["rho"]).max() <= REL_TOL * np.abs(ref["rho"]).max()


@pytest.mark.parametrize("objective", OBJECTIVES)
@settings(max_examples=examples(0.3))  # each example is four dense torch.func Hessians
@given(spec=st.sampled_from(SPECS), seed=seeds, hyper=hyperparameters, data=st.data())
@example(spec="gelu2", seed=0, hyper=DEFAULTS, data=None)  # the published defaults
def test_mini_routes_match_the_published_formulas(objective: str, spec: str, seed: int, hyper: dict, data) -> None:
    shape = SHAPE_DEFAULTS if data is None else data.draw(shapes(objective), label="shape")
    check_routes(spec, objective, seed, hyper, shape)


@pytest.mark.parametrize(("objective", "slip"), [("simclr", "ntxent_no_positive"), ("vicreg", "vicreg_wrong_axis"),
                                                 ("mse", "mse_doubled")])
def test_negative_control_a_slipped_formula_is_detected(objective: str, slip: str) -> None:
    head, obj, Z, loss, t_head = instance("gelu2", objective, _seed("gelu2", objective), slip=slip)
    ref = torch_route(loss, t_head, Z)
    dec = decompose_closed_form(head, obj, Z)
    scale = float(np.abs(np.linalg.eigvalsh(ref["H"])).max())
    assert float(np.abs(dec.H - ref["H"]).max()) > MATERIAL_REL * scale
