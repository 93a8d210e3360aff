r"""E5 (head depth): the paper's depth claims as trends over depths 1, 2, 3 (the least-squares slope per seed,
``scale.ledger.readers.depth_slope``), the depth-3-minus-depth-1 differences of the v1 ledger as alternatives. The
paper's figures are the released arrays of its official code (``docs/paper.md``, "E5, from the released arrays"):
their slopes are the magnitudes, each from one run (``Magnitude.runs``: the paper's value against the prediction
interval of one run); E5.3's slope of a log10 ratio is a per-layer ratio, its band a factor 2 on that ratio. Each
slope of the trained heads has its twin: the same slope of untrained heads of the same layers under the same
protocol (a: h, the untrained head carrying raw-z statistics onto normalised z as a does; b: g); every depth's
training must have learned.
"""

from __future__ import annotations

from scale.ledger.claims.base import (
    NEGATIVE,
    PAPER,
    PAPER_MD,
    POSITIVE,
    Alternative,
    Claim,
    Control,
    Twin,
    factor_band,
    ratio_band,
)
from scale.ledger.readers import depth_slope, gap, protocol
from scale.ledger.stats import log10_ratio

DEPTH_TRANSFER = ("scale-dependent", "depth effects depend on width and training length; a CIFAR run must show "
                  "the same slopes at width 2048")
E5_LINE = (PAPER_MD, 110, "Swish + BatchNorm head of depth 1, 2, 3")
LEARNED = tuple((f"E5-depth{d}-s{{s}}", "raw") for d in (1, 2, 3))
TWIN_OF = {"a_paper": "h_untrained_raw_bn", "b_raw": "g_untrained_raw_renorm"}


def _slope(proto: str, of):
    return lambda res, s: depth_slope(res, s, lambda name: of(res, name, proto))


def _twin(proto: str, of, rule) -> Twin:
    twin = TWIN_OF[proto]
    return Twin(f"trained minus untrained heads' slope, protocol {proto[0]} ({twin[0]}: {twin})",
                lambda res, s: _slope(proto, of)(res, s) - _slope(twin, of)(res, s), rule)


def _gap(res, name, proto):
    return gap(res, name, proto, "rot_linear")


def _head_probe(res, name, proto):
    return 100 * protocol(res, name, proto, "rot_linear_h")


def _z_probe(key: str):
    return lambda res, name, proto: 100 * protocol(res, name, proto, key)


def _log_compression(res, name, proto):
    c = protocol(res, name, proto, "compression")
    return log10_ratio(c, 1.0)


def _ends(proto: str, of):
    return lambda res, s: of(res, f"E5-depth3-s{s}", proto) - of(res, f"E5-depth1-s{s}", proto)


CLAIMS: tuple[Claim, ...] = (
    Claim("E5.1", "E5", PAPER, "the guillotine gap grows with depth (rotation, linear probe)", E5_LINE,
          "-0.12 -> -16.74 points (released arrays)", "slope over depth of (h - z), rotation probe, linear, protocol b",
          "points per layer", NEGATIVE, _slope("b_raw", _gap),
          controls=(Control("untrained heads, protocol a (d)", _slope("d_untrained_nobias", _gap)),),
          twin=_twin("b_raw", _gap, NEGATIVE),
          magnitude=factor_band(-8.31, f"{PAPER_MD}:143: -8.31 points per layer", runs=1), learned=LEARNED,
          protocol="b",
          transfer=DEPTH_TRANSFER,
          known="v1 (depth 3 - depth 1): -3.78 [-7.32, -0.24], 'reproduced', fragile; v2: -1.4 [-2.54, -0.255] per "
          "layer, about 17 % of the arrays' slope",
          alternatives=(Alternative("depth 3 minus depth 1 (v1's statistic)", "(h - z at depth 3) - (at depth 1)",
                                    _ends("b_raw", _gap), NEGATIVE),)),
    Claim("E5.2", "E5", PAPER, "the head's rotation probe falls with depth", E5_LINE, "47.40 -> 35.61 % (released "
          "arrays)", "slope over depth of the rotation probe on h, linear, protocol b", "points per layer", NEGATIVE,
          _slope("b_raw", _head_probe),
          controls=(Control("untrained heads, protocol a (d)", _slope("d_untrained_nobias", _head_probe)),),
          twin=_twin("b_raw", _head_probe, NEGATIVE),
          magnitude=factor_band(-5.895, f"{PAPER_MD}:143: -5.895 points per layer", runs=1), learned=LEARNED,
          protocol="b",
          transfer=DEPTH_TRANSFER, known="v1 (depth 3 - depth 1): -2.24 [-5.76, 1.27], inconclusive; v2: -0.964 "
          "[-1.57, -0.36] per layer",
          alternatives=(Alternative("depth 3 minus depth 1 (v1's statistic)", "probe on h at depth 3 - at depth 1",
                                    _ends("b_raw", _head_probe), NEGATIVE),)),
    Claim("E5.3", "E5", PAPER, "orbit compression grows with depth", E5_LINE, "49.1x -> 78.5x (released arrays)",
          "slope over depth of log10(compression), protocol a", "log10 per layer", POSITIVE,
          _slope("a_paper", _log_compression),
          controls=(Control("protocol b", _slope("b_raw", _log_compression), protocol=True),
                    Control("BatchNorm re-estimated (c)", _slope("c_bn_renorm", _log_compression), protocol=True)),
          twin=_twin("a_paper", _log_compression, POSITIVE),
          magnitude=ratio_band(10 ** 0.1019, f"{PAPER_MD}:144: +0.1019 per layer", runs=1), learned=LEARNED,
          protocol="a",
          transfer=DEPTH_TRANSFER, known="v1 (depth 3 / depth 1, log10): 0.087 [-0.025, 0.199], inconclusive; "
          "c: -0.054 [-0.089, -0.020]",
          alternatives=(Alternative("depth 3 over depth 1 (v1's statistic)", "log10(compression at 3 / at 1)",
                                    _ends("a_paper", _log_compression), POSITIVE, "mean"),)),
    Claim("E5.4", "E5", PAPER, "deeper heads give the backbone better downstream accuracy", (PAPER_MD, 144,
          "deeper heads give the"), "47.52 -> 52.35 % (rotation, linear, on z; released arrays)",
          "slope over depth of the rotation probe on z, linear", "points per layer", POSITIVE,
          _slope("a_paper", _z_probe("rot_linear_z")),
          controls=(Control("class probe on z (logistic regression)", _slope("a_paper", _z_probe("class_z"))),),
          no_twin="a property of the backbone trained through each head; the backbone at initialisation does not "
          "depend on the head's depth, so its contrast equals the statistic",
          magnitude=factor_band(2.415, f"{PAPER_MD}:144: +2.415 points per layer", runs=1), learned=LEARNED,
          transfer=DEPTH_TRANSFER,
          known="no row before v3; the v2 units hold it (not read)"),
)
