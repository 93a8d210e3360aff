# %% [markdown]
# # 6. From the toy to a network: the same measurements on a trained ResNet
#
# Chapters 1-5 worked on objects small enough to hold exactly. The paper's experiments run on
# ResNet-18 and CIFAR. `scale` is the same theory in PyTorch at that size: `H_eff` by Lanczos on
# matrix-free products instead of dense eigendecompositions, orbits of real rotated images instead of
# a hue group, and the orbit metrics of chapter 5 computed by the very same functions
# (`mini.invariance` is written against the array API and runs on torch tensors unchanged).
#
# This chapter trains a small model the way the paper's E3 does (the official code's head: Linear,
# BatchNorm, ReLU, Linear, BatchNorm, no biases; its one-direction InfoNCE at temperature 0.1; Adam)
# on scikit-learn's bundled `digits`, which needs no download, and measures it with
# `scale.analyze.analyze_model`, the function behind `python -m scale.analyze RUN_DIR`. To run in
# seconds it trains on 512 images for 2 epochs (8 steps), so its numbers are a demonstration, not a
# replication: `python -m scale.e4_study` is the real study, 5 seeds of the full E3 run.

# %%
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import torch

from scale import Trainer, analyze_model, load_dataset
from scale.analyze import AnalysisSettings
from scale.e4_study import e3_config

torch.set_num_threads(1)  # float sums depend on the thread count: pin it, so a rerun repeats this run

# %% [markdown]
# ## Train
#
# `e3_config` is the configuration `scale.paper` uses for E3 on digits: a ResNet-18 of base width 16
# (so `z` has 128 dimensions) on 16 x 16 images, the paper-style `relu2` head 128 -> 256 -> 128,
# batch 128. We shrink only the amount of training. `Trainer` is the same engine as
# `python -m scale.run`; without a run directory it writes nothing.

# %%
cfg = replace(e3_config("digits", seed=0, epochs=2), train_subset=512, augment_path="batched")
data = load_dataset("digits")
print(f"{cfg.method}: backbone {cfg.backbone} (width {cfg.backbone_width}), head {cfg.head} "
      f"{cfg.head_width}-{cfg.head_out} (style '{cfg.head_style}': BatchNorm, no biases), "
      f"batch {cfg.batch_size}, {cfg.epochs} epochs on {cfg.train_subset} of {len(data.train_x)} training images")
trainer = Trainer(cfg, data, torch.device("cpu"), run_dir=None, log=None)
trainer.fit()
model = trainer.model.eval()
print("trained:", sum(p.numel() for p in model.parameters()), "parameters")

# %% [markdown]
# ## Measure
#
# `analyze_model` takes any backbone and head (here the trained ones) and returns:
#
# - **curvature**: `H_eff` of `z -> L(h(z))` at 16 images x 2 augmented views (`n d = 32 x 128 = 4096`
#   dimensions), its extreme eigenvalues by Lanczos, and, along the lowest Ritz vector `v`, the split
#   `v^T H v = v^T G v + v^T M v` of chapter 1;
# - **orbits** (E4): 5 classes x 3 test images x 12 rotations, spread of `z` and of `h`, the untrained
#   controls, and a verdict (compressor, expander or neither) from a 95 % interval over the orbits;
# - **probes** (E3): which of the four quarter turns was applied, read linearly from `z` and from `h`.

# %%
settings = AnalysisSettings(hessian_images=16, lanczos_iter=40, probe_images=300)
result = analyze_model(model.backbone, model.projector, data, cfg, settings=settings)
curv, geo, verdict = result["curvature"], result["geometry"], result["verdict"]
split = curv["split_at_lambda_min"]
print("lambda_min(H_eff) < 0:", curv["H"]["lambda_min"] < 0)
print("along its Ritz vector, v^T M v = 0 exactly (a ReLU head):", split["vMv"] == 0.0,
      "  so G carries all of it:", split["share_G"] == 1.0)

# %% [markdown]
# That is chapter 1's ReLU gap and its caveat, at scale: the ReLU head contributes no `M`, yet the
# backbone sees negative curvature, all of it from `G`, because this InfoNCE loss, like NT-Xent, has an
# indefinite Hessian.
#
# ## The orbit compression, and where it comes from
#
# E4 measures orbits with the head applied to *normalised* `z`, `normalize(h(z / |z|))`. But the head
# was trained on raw `z`, and its BatchNorm layers keep running statistics of raw `z`. `analyze_model`
# measures both: the paper's protocol (`h`) and the head on the input it was trained on
# (`h_raw_input`). The compression factor is the mean orbit spread of `z` over that of `h`.

# %%
protocols = {"paper's protocol (head on z / |z|)": "h", "head on the raw z it was trained on": "h_raw_input",
             "untrained head, paper's protocol": "h_untrained"}
per_orbit = {name: np.asarray(result["per_orbit"][space]["spread"]) for name, space in protocols.items()}
spread_z = np.asarray(result["per_orbit"]["z"]["spread"])
print("compression under the paper's protocol is above 5x:", geo["compression"] > 5,
      "   verdict:", verdict["verdict"])
print("the same trained head on raw z compresses nothing (factor below 1):", geo["compression_raw_input"] < 1)
print("an untrained head, paper's protocol, is within 25 % of no change:",
      0.8 < geo["compression_untrained"] < 1.25)

# %% [markdown]
# The same weights, on the same images, compress orbits about tenfold or expand them, depending only
# on whether the input is normalised before it meets BatchNorm statistics gathered on raw `z`. The
# figure plots each orbit's spread in `h` against its spread in `z`; below the diagonal, the head
# compresses.
#
# The digits printed here are deliberately few. A float32 network trained for 8 steps is not
# reproducible to the last digit across machines: another CPU instruction set (AVX-512, AVX2, none),
# another MKL or oneDNN code path or another thread count rounds differently, and 8 steps carry that
# into every figure. Measured over eleven such configurations of this run and two more seeds
# (`docs/testing.md`), the paper-protocol compression ranged 7.8x to 11.6x, the raw-input one 0.55x to
# 0.78x, the untrained head's 1.00x to 1.09x and `lambda_min(H_eff)` -0.49 to -0.37. These figures are
# machine-dependent; this page prints only comparisons that held in every configuration, each with a
# margin (the closest: the untrained head's 1.09x against its bar of 1.25x, and the compression's 7.8x
# against 5x). The figure shows this run's values on the machine that rendered it.

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), num="Orbit spread in z and in h, and the spectrum of H_eff")
lo, hi = 0.5 * min(v.min() for v in [spread_z, *per_orbit.values()]), 2 * spread_z.max()
axes[0].plot([lo, hi], [lo, hi], color="0.6", lw=0.8, label="no change")
for name, spread_h in per_orbit.items():
    axes[0].loglog(spread_z, spread_h, "o", ms=4, label=name)
axes[0].set_xlabel("orbit spread of z")
axes[0].set_ylabel("orbit spread of h")
axes[0].set_title("15 rotation orbits (E4); below the diagonal: compression")
axes[0].legend(fontsize=7)
for name, style in (("H", dict(marker="o", ms=7, mfc="none")), ("G", dict(marker=".", ms=5))):
    ritz = np.sort(np.asarray(curv[name]["ritz_values"]))
    axes[1].plot(np.arange(ritz.size), ritz, ls="none", label=f"{name}: Ritz values, 40 Lanczos steps", **style)
axes[1].axhline(0.0, color="0.6", lw=0.8)
axes[1].set_xlabel("index (sorted)")
axes[1].set_title("H_eff and G coincide: M = 0 for a ReLU head")
axes[1].legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The probes
#
# E3's claim is that `h` has lost what the augmentation changes: probing which quarter turn was
# applied, the paper's head loses 14.72 points against the backbone (CIFAR-10, linear probe). In this
# 8-step run the head loses far less of the rotation than that, and it loses the class too. (After the
# full run the E4 study measures a rotation-probe loss of 3.3 points at 50 epochs, close to what an
# untrained head loses, 3.4-3.6.)
#
# How many points are lost is machine-dependent here: over the configurations above, the rotation
# probe's loss ranged from -1.3 to 6.6 points (a bar at 5 points, which an earlier version of this page
# printed, flipped with AVX2's kernels) and the class probe's from 7.0 to 14.7. The bars below sit at
# least 7 points away from every measured value.

# %%
rotation, headline = result["probes"]["rotation"], result["probes"]["headline"]["accuracy"]
print("rotation probe (linear): h loses fewer points against z than the paper's head (14.72):",
      rotation["z"]["linear"] - rotation["h"]["linear"] < 14.72)
print("class probe (linear):    h reads the class worse than z:", headline["z"] - headline["h"] > 0)

# %% [markdown]
# ## What proves it, and where the paper and the instance disagree
#
# - `tests/test_crosscheck.py` and `python -m scale.crosscheck`: scale's `H_eff`, `G`, `M` and their
#   extreme eigenvalues against `mini` on 6 heads x 6 objectives, to 1e-9.
# - `tests/test_analyze.py`, `tests/test_orbit_metrics.py` (the orbit metrics on NumPy and torch give
#   the same numbers), `tests/test_lanczos.py` (Lanczos against dense eigenvalues).
# - The theory itself: chapters 1, 4 and 5 (`theory_checks/test_eq1_decomposition.py`,
#   `test_relu_gap.py`, `test_prop5_2_metric_singularity.py`).
#
# Where the paper and the instance disagree: the E4 study (`docs/e4_study/report.md`, 5 seeds, the
# full E3 run on digits) finds that the orbit compression is the protocol, not learned invariance.
# Under the paper's protocol the trained head compresses rotation orbits 51.9x [40.9, 62.9] (paper,
# CIFAR-10: 21.85x); the same head on the raw `z` it was trained on expands them, 0.141x
# [0.132, 0.149], and so does the paper's protocol once only the BatchNorm statistics are re-estimated
# on normalised `z`. Measured against each space's own class separation, what a trained head learns is
# small, and its rotation-probe loss (3.3 points, linear, 50 epochs) is close to an untrained head's.
# To measure your own model: `python -m scale.analyze RUN_DIR`, or `CHECKPOINT --backbone X --head Y`
# (`--head-input raw` measures the head on the input it was trained on).
