r"""What each released file of the paper's official code holds: its SHA-256 and size, and every field's name,
dtype and shape. ``scale.ledger.released.reader`` checks a file against this before any value is used.

Upstream: github.com/farischaudhry/projection-head-geometry at ``UPSTREAM_COMMIT`` (MIT), ``results/``. Three runs,
each named here by its backbone and dataset:

    R18-C10    results/cifar10/resnet18    E1 (14 configurations), E3 probes, kappa, E4 orbits, E2 tracker, E5 depths
    ViT-C10    results/cifar10/vit_tiny    E1 (9 configurations), E3 probes, kappa, E4 orbits
    R18-C100   results/cifar100/resnet18   E1 (4 configurations, 20 epochs), E3 probes, kappa

The ``.npy`` files are ``np.save`` of a dict (a pickle); the ``.npz`` files hold plain arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

UPSTREAM = "farischaudhry/projection-head-geometry"
UPSTREAM_COMMIT = "117231d60fee34d4906d1f16c5007e13a96a4d94"
MAX_BYTES = 4 * 2**20  # every released file is below 2 MB: a larger one is refused before it is read
RUNS = {"R18-C10": "results/cifar10/resnet18", "ViT-C10": "results/cifar10/vit_tiny",
        "R18-C100": "results/cifar100/resnet18"}
SEEDS = 3  # E1's training seeds and kappa's sampling seeds, in every run
ORBIT_POINTS, ORBITS, ROTATIONS, CLASSES = 180, 15, 12, 5  # E4: 5 classes x 3 images x 12 rotations
TRACKER_EPOCHS, SWEEP_IMAGES = 100, 100


@dataclass(frozen=True)
class Arr:
    """A NumPy array of exactly this dtype and shape (floats: every entry finite)."""

    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Scalar:
    """A Python or NumPy scalar of ``kind`` ("float": finite, "int", "str"), or a list of ``n`` of them."""

    kind: str
    n: int | None = None


Field = Arr | Scalar

_E1_SUFFIXES = ("mean", "std", "raw")
_R18_TRACKED = ("", "proj_update_norms_", "proj_update_norms_unnormalized_", "proj_update_rel_",
                "backbone_update_norms_", "backbone_update_rel_", "cond_nums_")
_VIT_TRACKED = ("", "grad_norms_", "cond_nums_")


def _e1_fields(prefixes: tuple[str, ...], epochs: int) -> dict[str, Field]:
    """One E1 configuration: per tracked quantity its mean and std over seeds (epochs,) and its raw (seeds, epochs)."""
    return {f"{p}{s}": Arr("float64", (SEEDS, epochs) if s == "raw" else (epochs,))
            for p in prefixes for s in _E1_SUFFIXES}


def _configs(acts: tuple[str, ...], bn_lr: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    return tuple(f"{a}_bn_{bn}_lr_{lr}" for a, bn, lr in ((a, b, r) for a in acts for b, r in bn_lr))


E1_CONFIGS: dict[str, tuple[str, ...]] = {
    "R18-C10": ("linear_bn_False_lr_base",
                *_configs(("swish",), (("False", "base"), ("True", "base"), ("False", "large"), ("False", "small"),
                                       ("True", "large"), ("True", "small"))),
                "gelu_bn_False_lr_base",
                *_configs(("relu",), (("False", "base"), ("True", "base"), ("False", "large"), ("False", "small"),
                                      ("True", "large"), ("True", "small")))),
    "ViT-C10": (*_configs(("linear", "relu", "gelu", "swish"), (("False", "base"),)),
                *_configs(("relu",), (("True", "base"), ("False", "large"), ("False", "small"), ("True", "large"),
                                      ("True", "small")))),
    "R18-C100": ("linear", "relu", "gelu", "swish"),  # lr base, BatchNorm off (the configuration names say no more)
}
E1_FIELDS = {"R18-C10": _e1_fields(_R18_TRACKED, 50), "ViT-C10": _e1_fields(_VIT_TRACKED, 50),
             "R18-C100": _e1_fields(("",), 20)}

CURVATURE: dict[str, Field] = {
    **{f"{k}_per_seed": Scalar("float", SEEDS) for k in ("curvatures_z", "curvatures_h", "ratios")},
    **{f"{s}_{k}": Scalar("float") for k in ("curv_z", "curv_h", "ratio") for s in ("mean", "std")},
    "num_seeds": Scalar("int"), "dataset": Scalar("str")}
GUILLOTINE: dict[str, Field] = {
    **{k: Scalar("float") for k in ("backbone_acc_linear", "head_acc_linear", "backbone_acc_mlp", "head_acc_mlp",
                                    "gap_backbone", "gap_head")}, "dataset": Scalar("str")}


def _orbits(d_z: int) -> dict[str, Field]:
    return {"orbits_z": Arr("float32", (ORBIT_POINTS, d_z)), "orbits_h": Arr("float32", (ORBIT_POINTS, 2048)),
            "orbit_labels": Arr("int64", (ORBIT_POINTS,)), "orbit_ids": Arr("int64", (ORBIT_POINTS,)),
            "orbit_angles": Arr("float64", (ORBIT_POINTS,))}


ORBIT_FILE = {d_z: {**_orbits(d_z), "selected_classes": Scalar("int", CLASSES), "class_names": Scalar("str", CLASSES),
                    "num_rotations": Scalar("int"), "num_classes": Scalar("int"), "images_per_class": Scalar("int"),
                    "dataset": Scalar("str")} for d_z in (512, 192)}
TRACKER: dict[str, Field] = {"epochs": Arr("int64", (TRACKER_EPOCHS,)),
                             **{k: Arr("float64", (TRACKER_EPOCHS,)) for k in ("min_eigenvalues", "variances",
                                                                                "condition_numbers")}}
DEPTH: dict[str, Field] = {"depth": Arr("int64", ()), "acc_z_linear": Arr("float64", ()),
                           "acc_h_linear": Arr("float64", ()), "curvatures_z": Arr("float32", (SWEEP_IMAGES,)),
                           "curvatures_h": Arr("float32", (SWEEP_IMAGES,)), **_orbits(512)}
TRACKER_RUNS = ("normal_swish", "collapsed_swish", "collapsed_relu")
DEPTHS = (1, 2, 3)


@dataclass(frozen=True)
class FileSpec:
    """One released file: where it lies under the repository root, its digest and size, and its layout
    (``fields``; for E1 ``configs`` and their ``fields`` each)."""

    run: str
    role: str  # collapse, curvature, guillotine, orbits, tracker:<run>, depth:<n>
    path: str
    sha256: str
    size: int
    fields: dict[str, Field]
    configs: tuple[str, ...] = ()

    @property
    def pickled(self) -> bool:
        return self.path.endswith(".npy")


def _spec(run: str, role: str, name: str, sha256: str, size: int, fields: dict[str, Field],
          configs: tuple[str, ...] = ()) -> FileSpec:
    return FileSpec(run, role, f"{RUNS[run]}/{name}", sha256, size, fields, configs)


FILES: tuple[FileSpec, ...] = (
    _spec("R18-C10", "collapse", "collapse_results.npy",
          "ab6f33dc41fdab70bcad60080e5b4819b9c960d35972b8e3a803c01935eab33e", 207670, E1_FIELDS["R18-C10"],
          E1_CONFIGS["R18-C10"]),
    _spec("R18-C10", "curvature", "curvature_results.npy",
          "7a25653500c631e75bd1bc9a5b2f99a66f6d696af88e44e3b2a49b4eefb244ab", 740, CURVATURE),
    _spec("R18-C10", "guillotine", "guillotine_results.npy",
          "8738d9d87c042e7c3b9e11e571cd1ef7c4a6727e9c24b356a07f578b44f1210e", 451, GUILLOTINE),
    _spec("R18-C10", "orbits", "orbit_visualization.npy",
          "3121c85537cf3792dcc238a039b1db8e9d02c544b6c66d8320722a79f622109d", 1848320, ORBIT_FILE[512]),
    *(_spec("R18-C10", f"depth:{d}", f"head_depth_ablations/geometric_ablation_depth_{d}.npz", sha, 1850890, DEPTH)
      for d, sha in ((1, "d3c1289cd94f8e4342cba16f5153995cabec387d9432b4cd72c6fc987b8fed34"),
                     (2, "c4e81fcda18713eafad7e67c74ece1907fb3301af6c2d94172778bdfbc58a18e"),
                     (3, "be29755cca40ee1a0b4ebe047f36f2a678989ec42331117b6f46400877872cf5"))),
    *(_spec("R18-C10", f"tracker:{t}", f"hessian_tracker/raw_data_{t}.npz", sha, 4244, TRACKER)
      for t, sha in (("normal_swish", "8d0a186663204f9ff43c36801896d4478e55544a6d01be61ef1b8d1239d2b556"),
                     ("collapsed_swish", "0e4cecd4850af91ea94dac050ef6fe51cb54b0cd328731d88e9e99e0923c746c"),
                     ("collapsed_relu", "a708ea30ebd03a3273b5bdcc78793301a77b1cb97b3383ac321e1195c54bc6b3"))),
    _spec("ViT-C10", "collapse", "collapse_results.npy",
          "4964d786e56a35f38966a9db37ac957e2e989cf76182d6c3bb35abcbedf29ecc", 57560, E1_FIELDS["ViT-C10"],
          E1_CONFIGS["ViT-C10"]),
    _spec("ViT-C10", "curvature", "curvature_results.npy",
          "dcee2fc7ddbb656d97adf1dbe22d3b7f4dd69a6b40e31c26565d2fef4f6e59cb", 740, CURVATURE),
    _spec("ViT-C10", "guillotine", "guillotine_results.npy",
          "ccca5f14dd700109810be9d8977da64b0c7440dc25ffbd5d45d8082fcabbc879", 451, GUILLOTINE),
    _spec("ViT-C10", "orbits", "orbit_visualization.npy",
          "1edd5ff06937a8165605ad0bb890668a17c9a2d6df59eb7ff1df282fa0521079", 1617919, ORBIT_FILE[192]),
    _spec("R18-C100", "collapse", "collapse_results.npy",
          "bff45387af112368f130a2db98ca4fb8974972bdaa2e307d0c34b1076ec22ddd", 3977, E1_FIELDS["R18-C100"],
          E1_CONFIGS["R18-C100"]),
    _spec("R18-C100", "curvature", "curvature_results.npy",
          "47211c746e75c20011cb7c7f98d668ab7e081de3c7212d7566a10f7ef09fed07", 741, CURVATURE),
    _spec("R18-C100", "guillotine", "guillotine_results.npy",
          "f5c2fd183eb44374a356ae39c62dfdbd9c86861eb2f6422ceb6831efc50614e2", 452, GUILLOTINE),
)
