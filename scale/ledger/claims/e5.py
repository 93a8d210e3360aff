r"""E5 (head depth): the paper's depth claims as trends over depths 1, 2, 3 (the least-squares slope per seed,
``scale.ledger.readers.depth_slope``), the depth-3-minus-depth-1 differences of the v1 ledger as alternatives.
"""

from __future__ import annotations

from scale.ledger.claims.base import NEGATIVE, PAPER, PAPER_MD, POSITIVE, Alternative, Claim, Control
from scale.ledger.readers import depth_slope, gap, protocol
from scale.ledger.stats import log10_ratio

DEPTH_TRANSFER = ("scale-dependent", "depth effects depend on width and training length; a CIFAR run must show "
                  "the same slopes at width 2048")
E5_LINE = (PAPER_MD, 110, "Swish + BatchNorm head of depth 1, 2, 3")


def _slope(proto: str, of):
    return lambda res, s: depth_slope(res, s, lambda name: of(res, name, proto))


def _gap(res, name, proto):
    return gap(res, name, proto, "rot_linear")


def _head_probe(res, name, proto):
    return 100 * protocol(res, name, proto, "rot_linear_h")


def _log_compression(res, name, proto):
    c = protocol(res, name, proto, "compression")
    return log10_ratio(c, 1.0)


def _ends(proto: str, of):
    return lambda res, s: of(res, f"E5-depth3-s{s}", proto) - of(res, f"E5-depth1-s{s}", proto)


CLAIMS: tuple[Claim, ...] = (
    Claim("E5.1", "E5", PAPER, "the guillotine gap grows with depth (rotation, linear probe)", E5_LINE,
          "-0.12 -> -16.74 points", "slope over depth of (h - z), rotation probe, linear, protocol b",
          "points per layer", NEGATIVE, _slope("b_raw", _gap),
          controls=(Control("untrained heads", _slope("d_untrained_nobias", _gap)),), transfer=DEPTH_TRANSFER,
          known="v1 (depth 3 - depth 1): -3.78 [-7.32, -0.24], 'reproduced', fragile (dropping one of three seeds "
          "makes it inconclusive)",
          alternatives=(Alternative("depth 3 minus depth 1 (v1's statistic)", "(h - z at depth 3) - (at depth 1)",
                                    _ends("b_raw", _gap), NEGATIVE),)),
    Claim("E5.2", "E5", PAPER, "the head's rotation probe falls with depth", E5_LINE, "47.40 -> 35.61 %",
          "slope over depth of the rotation probe on h, linear, protocol b", "points per layer", NEGATIVE,
          _slope("b_raw", _head_probe), controls=(Control("untrained heads", _slope("d_untrained_nobias",
                                                                                     _head_probe)),),
          transfer=DEPTH_TRANSFER, known="v1 (depth 3 - depth 1): -2.24 [-5.76, 1.27], inconclusive",
          alternatives=(Alternative("depth 3 minus depth 1 (v1's statistic)", "probe on h at depth 3 - at depth 1",
                                    _ends("b_raw", _head_probe), NEGATIVE),)),
    Claim("E5.3", "E5", PAPER, "orbit compression grows with depth", E5_LINE, "49.1x -> 78.5x",
          "slope over depth of log10(compression), protocol a", "log10 per layer", POSITIVE,
          _slope("a_paper", _log_compression),
          controls=(Control("protocol b", _slope("b_raw", _log_compression), protocol=True),
                    Control("BatchNorm re-estimated (c)", _slope("c_bn_renorm", _log_compression), protocol=True),
                    Control("untrained heads", _slope("d_untrained_nobias", _log_compression))),
          transfer=DEPTH_TRANSFER, known="v1 (depth 3 / depth 1, log10): 0.087 [-0.025, 0.199], inconclusive; "
          "c: -0.054 [-0.089, -0.020]",
          alternatives=(Alternative("depth 3 over depth 1 (v1's statistic)", "log10(compression at 3 / at 1)",
                                    _ends("a_paper", _log_compression), POSITIVE, "mean"),)),
)
