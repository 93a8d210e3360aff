r"""Probes on frozen features, backbone ``z`` versus head ``h``: one protocol per question, each named.

The headline (``HEADLINE_PROTOCOL``; every report names it): a linear probe on the class labels, a
multinomial logistic regression on features standardised with the training set's statistics, fitted
full batch by L-BFGS to convergence with an L2 penalty of 1e-4 on the weights. The problem is strictly
convex, so the accuracy depends on the features alone, not on a learning rate, an epoch count or a
batch order: what a comparison of ``z`` with ``h`` needs. The paper reports no class-label probe; this
is the classical linear evaluation of SSL features, and the number ``python -m scale.run`` prints.

Beside it, on the same features (``KNN_PROTOCOL``): a weighted kNN vote on the class labels (the 20 most
cosine-similar training images, weights exp(cos / 0.07)), nothing fitted. A linear probe of a random ResNet on
digits is already near 94 %, near its ceiling; the kNN probe reads the features' neighbourhoods and shows what
training changed there (``scale.runs.premise`` reads both against the backbone at initialisation).

Beside both, the baseline no representation is guaranteed to beat: the same two probes of the raw input
(``raw_input_features``: the normalised pixels the backbone reads, flattened, in float64 so that the baseline does
not move with the processor's kernels). "The network learned" is measured against a random backbone; whether z
reads the classes better than the pixels it was computed from is this baseline's question (on digits it often
does not: the raw 16x16 pixels reach 97.56 % linear and 98.22 % kNN on the main job's split).

E3, the guillotine (``E3_PROTOCOL``; only where the paper's rotation figures are compared): every image
turned by 0, 90, 180 and 270 degrees (exact quarter turns, ``torch.rot90``), and a probe trained to
predict the turn (4 classes) with the paper's protocol:

    linear   nn.Linear(dim, 4)
    MLP      Linear(dim, hidden) - ReLU - Linear(hidden, 4), hidden 256 on z and 512 on h
    both     cross-entropy, Adam lr 1e-3, 5 epochs over the rotated training images in shuffled
             mini-batches of 256; features standardised with the probe-training statistics

Probe-training images come from the training split, test images from the test split, so no base image
is seen on both sides. Accuracies are returned in percent (``scale.runs.summary``), each gap h minus z with
its paired interval over the same test images (``scale.geometry.verdict.paired_gap``; the four quarter
turns of a base image resampled together).

One protocol for the probes wherever they run: ``scale.analyze`` of a run takes the run's recorded image
counts and seed (``scale.analysis.AnalysisSettings.from_run``), so that it repeats the run's own end-of-run
probes and the two reports agree on the same weights.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from scale.engine.progress import Phases
from scale.geometry.verdict import paired_gap
from scale.runs.summary import ClassProbe, KnnProbe, ProbePair, RotationProbes

HEADLINE_PROTOCOL = "class labels, linear: logistic regression (L-BFGS to convergence, L2 1e-4, standardised features)"
KNN_K = 20  # neighbours of the kNN probe
KNN_TEMPERATURE = 0.07  # their weights exp(cos / T)
KNN_PROTOCOL = (f"class labels, weighted kNN: k = {KNN_K} nearest training images by cosine similarity, votes "
                f"weighted exp(cos / {KNN_TEMPERATURE:g})")
E3_PROTOCOL = "the paper's E3 protocol: Adam 1e-3, 5 epochs, mini-batches of 256, standardised features"
L2 = 1e-4  # the headline probe's ridge on the weights (features are standardised)
MAX_ITER = 300  # its L-BFGS iterations
QUARTER_TURNS = (0, 1, 2, 3)  # 0, 90, 180, 270 degrees


@dataclass(frozen=True)
class ProbeSettings:
    hidden_z: int = 256
    hidden_h: int = 512
    lr: float = 1e-3
    epochs: int = 5
    batch: int = 256
    train_images: int | None = 10_000  # cap on base images from the training split (x 4 rotations)
    test_images: int | None = None  # cap on base images from the test split (None: all)
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("hidden_z", "hidden_h", "epochs", "batch"):
            if getattr(self, key) < 1:
                raise ValueError(f"probe setting {key} must be a positive integer, got {getattr(self, key)}")
        for key in ("train_images", "test_images"):
            v = getattr(self, key)
            if v is not None and v < 2:
                raise ValueError(f"probe setting {key} must be >= 2 or None, got {v}")
        if not self.lr > 0:
            raise ValueError(f"probe lr must be positive, got {self.lr}")


def rotated(x_uint8: torch.Tensor, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images (4n, 3, S, S), quarter-turn labels (4n,))``, rotation-major, of the first ``limit`` images."""
    x = x_uint8[:limit] if limit is not None else x_uint8
    out = torch.cat([torch.rot90(x, k, dims=(-2, -1)) for k in QUARTER_TURNS])
    y = torch.arange(len(QUARTER_TURNS), device=x.device).repeat_interleave(len(x))
    return out, y


def train_probe(Xtr: torch.Tensor, ytr: torch.Tensor, Xte: torch.Tensor, yte: torch.Tensor, n_classes: int,
                hidden: int | None, settings: ProbeSettings) -> dict[str, Any]:
    """A linear (``hidden=None``) or 2-layer MLP probe trained with the paper's protocol; accuracies in [0, 1]
    (``train``, ``test``) and ``correct``, the test samples it got right (bool ``(n_test,)``, on the CPU)."""
    mu, sd = Xtr.mean(0), Xtr.std(0).clamp_min(1e-6)
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    gen = torch.Generator().manual_seed(settings.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        d = Xtr.shape[1]
        probe = (nn.Linear(d, n_classes) if hidden is None
                 else nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))).to(Xtr.device)
    opt = torch.optim.Adam(probe.parameters(), lr=settings.lr)
    with torch.enable_grad():
        for _ in range(settings.epochs):
            perm = torch.randperm(len(Xtr), generator=gen).to(Xtr.device)
            for i in range(0, len(Xtr), settings.batch):
                b = perm[i : i + settings.batch]
                loss = F.cross_entropy(probe(Xtr[b]), ytr[b])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    with torch.no_grad():
        right = [(probe(X).argmax(1) == y).cpu() for X, y in ((Xtr, ytr), (Xte, yte))]
    return {"train": float(right[0].float().mean()), "test": float(right[1].float().mean()), "correct": right[1]}


def rotated_features(embed, x_uint8, limit: int, normalize, chunk: int = 1024
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z, h, quarter-turn labels)`` of ``rotated(x_uint8, limit)``, in its rotation-major order, computed
    ``chunk`` base images at a time: only ``4 x chunk`` rotated images exist at once (a split decoded from
    disk, ``scale.engine.images.ImageFiles``, is read a chunk at a time too)."""
    parts = []
    for i in range(0, limit, chunk):
        rx, _ = rotated(x_uint8[i : min(i + chunk, limit)])
        z, h = features(embed, rx, normalize)
        parts.append((z.reshape(len(QUARTER_TURNS), -1, z.shape[-1]), h.reshape(len(QUARTER_TURNS), -1, h.shape[-1])))
    z = torch.cat([p[0] for p in parts], dim=1).flatten(0, 1)  # (4 limit, d), rotation-major
    h = torch.cat([p[1] for p in parts], dim=1).flatten(0, 1)
    y = torch.arange(len(QUARTER_TURNS), device=z.device).repeat_interleave(limit)
    return z, h, y


CLASS_PHASES = ("class probe: features", "class probe: fits")  # the probes' phases (scale.engine.progress)
ROTATION_PHASES = ("rotation probes: features", "rotation probes: fits")


def plan_class_probe(phases: Phases, images: int, initial: bool = False) -> None:
    """The headline probe's phases: ``images`` forward passes, then two L-BFGS fits (z and h); with
    ``initial`` the backbone at initialisation and the raw input too (``images`` more passes, two more fits)."""
    phases.plan(CLASS_PHASES[0], images * (2 if initial else 1), "images")
    phases.plan(CLASS_PHASES[1], 4 if initial else 2, "L-BFGS fits")


def plan_rotation_probes(phases: Phases, train_images: int, test_images: int) -> None:
    """E3's phases: 4 quarter turns of every image forward, then four Adam fits (linear and MLP, z and h)."""
    phases.plan(ROTATION_PHASES[0], 4 * (train_images + test_images), "images")
    phases.plan(ROTATION_PHASES[1], 4, "Adam fits")


def _phase(phases: Phases | None, name: str, detail: str = ""):
    return phases.run(name, detail) if phases is not None else contextlib.nullcontext()


def run_rotation_probes(embed, normalize, train_x: torch.Tensor, test_x: torch.Tensor,
                        settings: ProbeSettings = ProbeSettings(), phases: Phases | None = None) -> RotationProbes:
    """E3's rotation probes of one frozen model. ``embed(normalised images) -> (z, h)`` (eval mode, no
    gradient), ``normalize(uint8) -> float``; images uint8 ``(N, 3, S, S)`` on the model's device.
    ``phases``: planned by ``plan_rotation_probes``, each part announced and timed."""
    n_tr = min(len(train_x), settings.train_images or len(train_x))
    n_te = min(len(test_x), settings.test_images or len(test_x))
    with _phase(phases, ROTATION_PHASES[0], f"4 quarter turns of {n_tr} training and {n_te} test images"):
        ztr, htr, ry_tr = rotated_features(embed, train_x, n_tr, normalize)
        zte, hte, ry_te = rotated_features(embed, test_x, n_te, normalize)
    acc, gaps = {}, {}
    units = torch.arange(n_te).repeat(len(QUARTER_TURNS)).numpy()  # rotation-major: sample r n + j is image j
    with _phase(phases, ROTATION_PHASES[1], "linear and MLP probes on z and h, the paper's protocol"):
        for kind in ("linear", "mlp"):
            fits = [train_probe(Ftr, ry_tr, Fte, ry_te, 4, hidden if kind == "mlp" else None, settings)
                    for Ftr, Fte, hidden in ((ztr, zte, settings.hidden_z), (htr, hte, settings.hidden_h))]
            acc[kind] = ProbePair(*(100 * f["test"] for f in fits))
            gaps[kind] = paired_gap(fits[0]["correct"].numpy(), fits[1]["correct"].numpy(), units)
    return RotationProbes(
        settings={**asdict(settings), "protocol": E3_PROTOCOL, "train_base_images": n_tr, "test_base_images": n_te,
                  "rotation_samples": {"train": len(ry_tr), "test": len(ry_te)}},
        linear=acc["linear"], mlp=acc["mlp"], gaps=gaps,
    )


# --------------------------------------------------------------------------------------------
# The headline: class labels, logistic regression
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def features(fn, x: torch.Tensor, normalize, batch: int = 1024, dtype: torch.dtype = torch.float32):
    """The frozen features of images, a batch of ``batch`` rows at a time: ``fn(normalize(x[i : i + batch]))``
    concatenated over ``x`` and cast to ``dtype``. ``x``: uint8 or in [0, 1], whatever ``normalize`` takes;
    ``fn``: a backbone (one tensor, ``(N, d)``) or ``embed`` (a tuple, ``(Z, H)``). One feature extractor
    for the probes, the orbit geometry (``scale.geometry.measure``) and the E4 study."""
    parts = [fn(normalize(x[i : i + batch])) for i in range(0, len(x), batch)]
    if isinstance(parts[0], torch.Tensor):
        return torch.cat([p.to(dtype) for p in parts])
    return tuple(torch.cat([p.to(dtype) for p in column]) for column in zip(*parts))


def logistic_probe_accuracy(
    train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor, classes: int
) -> float:
    """Test accuracy (fraction) of the headline probe fitted on ``(train_f, train_y)``."""
    return float(logistic_probe_correct(train_f, train_y, test_f, test_y, classes).float().mean())


def logistic_probe_correct(
    train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor, classes: int
) -> torch.Tensor:
    """The test samples the headline probe fitted on ``(train_f, train_y)`` gets right: bool ``(n_test,)``
    on the CPU."""
    mean, std = train_f.mean(0), train_f.std(0).clamp_min(1e-6)
    xtr, xte = (train_f - mean) / std, (test_f - mean) / std
    # W as (classes, d), nn.Linear's layout: the gradient is then (P - Y)^T X, a (C, n) @ (n, d) product,
    # where the (d, C) layout's X^T (P - Y) is a transposed skinny product 3-4x slower per evaluation on a
    # CPU (the same minimisation: L-BFGS does not depend on the order of the coordinates)
    W = torch.zeros(classes, xtr.shape[1], dtype=xtr.dtype, device=xtr.device, requires_grad=True)
    b = torch.zeros(classes, dtype=xtr.dtype, device=xtr.device, requires_grad=True)
    opt = torch.optim.LBFGS([W, b], lr=1.0, max_iter=MAX_ITER, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-6, tolerance_change=1e-9)

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(xtr @ W.T + b, train_y) + L2 * (W * W).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return ((xte @ W.T + b).argmax(1) == test_y).cpu()


@torch.no_grad()
def knn_correct(train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor,
                classes: int, k: int = KNN_K, temperature: float = KNN_TEMPERATURE, chunk: int = 1024) -> torch.Tensor:
    """The test samples a weighted kNN classifier gets right (bool ``(n_test,)`` on the CPU): each test row's
    ``k`` most cosine-similar training rows vote for their labels with weight ``exp(cos / temperature)``, the
    class of the largest total wins (ties: the smallest class index). Nothing is fitted, so the accuracy is a
    function of the features' neighbourhoods alone: where a linear probe of random features is already near
    its ceiling (digits), the neighbourhoods still show what training changed."""
    tr = torch.nn.functional.normalize(train_f.double(), dim=1)
    te = torch.nn.functional.normalize(test_f.double(), dim=1)
    k = min(k, len(tr))
    out = []
    for i in range(0, len(te), chunk):
        sim = te[i : i + chunk] @ tr.T  # (c, n_train) cosine similarities
        top, idx = sim.topk(k, dim=1)
        votes = torch.zeros(len(sim), classes, dtype=torch.float64, device=sim.device)
        votes.scatter_add_(1, train_y[idx], torch.exp(top / temperature))
        out.append(votes.argmax(1) == test_y[i : i + chunk])
    return torch.cat(out).cpu()


def raw_input_features(x: torch.Tensor, normalize) -> torch.Tensor:
    """The raw input as features: the normalised images the backbone reads, flattened to ``(N, 3 S S)``, float64."""
    return features(lambda u: u.flatten(1), x, normalize, dtype=torch.float64)


# The raw input's probes depend on the images and labels alone, not on the run: each distinct split is fitted once per
# process (a float64 L-BFGS fit on 3 S^2 dimensions costs seconds; a process measures many runs of one dataset: the
# ledger's units, the grid, the tests). Keyed by the SHA-256 of the features and labels, so equal inputs, never equal
# names, share a result; a few entries at most (one per dataset and image size a process reads).
_RAW_INPUT_MEMO: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
_RAW_INPUT_MEMO_SIZE = 4


def raw_input_correct(train_f: torch.Tensor, test_f: torch.Tensor, train_y: torch.Tensor, test_y: torch.Tensor,
                      classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The test samples the headline probe and the kNN probe of the raw input get right (``raw_input_features``),
    memoised per process by content."""
    digest = hashlib.sha256(repr(classes).encode())
    for t in (train_f, test_f, train_y, test_y):
        digest.update(repr((t.dtype, tuple(t.shape))).encode())
        digest.update(t.detach().cpu().contiguous().numpy().tobytes())
    key = digest.hexdigest()
    if key not in _RAW_INPUT_MEMO:
        if len(_RAW_INPUT_MEMO) >= _RAW_INPUT_MEMO_SIZE:
            _RAW_INPUT_MEMO.pop(next(iter(_RAW_INPUT_MEMO)))
        _RAW_INPUT_MEMO[key] = (logistic_probe_correct(train_f, train_y, test_f, test_y, classes),
                                knn_correct(train_f, train_y, test_f, test_y, classes))
    right, near = _RAW_INPUT_MEMO[key]
    return right.clone(), near.clone()


def class_probe_skip_reason(data) -> str | None:
    """Why the headline class probe cannot be fitted on ``data`` (a ``scale.engine.dataset.Dataset``), or
    ``None``: no labels, a single class (every accuracy would be 100 %: nothing to tell apart), or an
    empty split."""
    if not getattr(data, "labelled", True):
        return "the images have no labels (a folder without class sub-folders)"
    if len(data.train_x) == 0 or len(data.test_x) == 0:
        return "a split is empty"
    present = len(torch.unique(data.train_y))
    if present < 2:
        return (f"the training split holds {present} class; a classifier has nothing to tell apart (any accuracy "
                "would be 100 %)")
    return None


def class_probe(embed, normalize, train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                test_y: torch.Tensor, classes: int, phases: Phases | None = None,
                initial: Callable[[torch.Tensor], torch.Tensor] | None = None) -> ClassProbe:
    """The headline probe of ``z`` and ``h`` on every training and test image (unaugmented), the gap h minus
    z paired over the test images; with ``initial`` (the backbone at initialisation: normalised images ->
    z, eval mode), the same probe of it, the control for what training added, and of the raw input
    (``raw_input_features``), the baseline z is not required to beat. ``phases``: planned by
    ``plan_class_probe``, each part announced and timed."""
    with _phase(phases, CLASS_PHASES[0], f"z and h of {len(train_x)} training and {len(test_x)} test images"
                + (", z of the backbone at initialisation" if initial is not None else "")):
        ztr, htr = features(embed, train_x, normalize)
        zte, hte = features(embed, test_x, normalize)
        spaces = [(ztr, zte), (htr, hte)]
        if initial is not None:
            spaces.append((features(initial, train_x, normalize), features(initial, test_x, normalize)))
            raw = (raw_input_features(train_x, normalize), raw_input_features(test_x, normalize))
    with _phase(phases, CLASS_PHASES[1], f"a logistic regression and a kNN vote on z ({ztr.shape[1]}-d) and on h "
                f"({htr.shape[1]}-d)" + (f", on z at initialisation and on the raw input ({spaces[-1][0].shape[1]}-d, "
                                         "float64)" if initial is not None else "")):
        right = [logistic_probe_correct(Ftr, train_y, Fte, test_y, classes) for Ftr, Fte in spaces]
        near = [knn_correct(Ftr, train_y, Fte, test_y, classes) for Ftr, Fte in spaces]
        if initial is not None:
            raw_right, raw_near = raw_input_correct(*raw, train_y, test_y, classes)
            right.append(raw_right)
            near.append(raw_near)
    linear, knn = (_probe_parts(r, initial is not None) for r in (right, near))
    return ClassProbe(HEADLINE_PROTOCOL, len(ztr), len(zte), *linear[:4], knn=KnnProbe(KNN_PROTOCOL, *knn),
                      raw_input=linear[4], raw_input_gain=linear[5])


def _probe_parts(right: list[torch.Tensor], baselines: bool) -> tuple:
    """``(accuracies of z and h, h minus z, z at initialisation, trained minus initial z, the raw input, z minus
    the raw input)`` from the correct test samples of z, h and (``baselines``) the backbone at initialisation and
    the raw input, each gap paired over the samples (``None`` for the baselines not measured)."""
    acc = [100 * float(r.float().mean()) for r in right]
    ok = [r.numpy() for r in right]
    if not baselines:
        return ProbePair(acc[0], acc[1]), paired_gap(ok[0], ok[1]), None, None, None, None
    return (ProbePair(acc[0], acc[1]), paired_gap(ok[0], ok[1]), acc[2], paired_gap(ok[2], ok[0]), acc[3],
            paired_gap(ok[3], ok[0]))


def plan_probes(phases: Phases, n_class: tuple[int, int], n_rotation: tuple[int, int] | None,
                initial: bool = False) -> None:
    """The phases of ``run_probes``: the headline probe on ``n_class`` (training, test) images (``initial``:
    with the backbone at initialisation), E3's rotation probes on ``n_rotation`` base images per split
    (``None``: not run)."""
    plan_class_probe(phases, sum(n_class), initial)
    if n_rotation is not None:
        plan_rotation_probes(phases, *n_rotation)


def run_probes(embed, normalize, data, n_class: tuple[int, int], n_rotation: tuple[int, int] | None, seed: int,
               phases: Phases, notes: list[str], initial: Callable[[torch.Tensor], torch.Tensor] | None = None
               ) -> tuple[ClassProbe | None, RotationProbes | None]:
    """The probes of one frozen model on ``data`` (a ``scale.engine.dataset.Dataset``), in the phases that
    ``plan_probes`` planned: the headline class probe on the first ``n_class`` (training, test) images, or
    its skip reason appended to ``notes`` (``class_probe_skip_reason``); E3's rotation probes on at most
    ``n_rotation`` base images per split (``None``: not run); ``initial``: the backbone at initialisation,
    probed beside (``class_probe``)."""
    head = None
    skip = class_probe_skip_reason(data)
    if skip:
        notes.append(f"class probe skipped: {skip}")
        for name in CLASS_PHASES:
            phases.skip(name, skip)
    else:
        (a, b) = n_class
        head = class_probe(embed, normalize, data.train_x[:a] if a < len(data.train_x) else data.train_x,
                           data.train_y[:a], data.test_x[:b] if b < len(data.test_x) else data.test_x,
                           data.test_y[:b], data.classes, phases, initial)
    rotation = None
    if n_rotation is not None:
        rotation = run_rotation_probes(embed, normalize, data.train_x, data.test_x,
                                       ProbeSettings(train_images=n_rotation[0], test_images=n_rotation[1], seed=seed),
                                       phases)
    return head, rotation
