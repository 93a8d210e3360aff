"""Pretrained SSL models of experiment E6, readable, in the state-dict layouts their authors publish.

docs/paper.md, E6: DINO ViT-S/16 and ResNet-50, VICReg ResNet-50, Barlow Twins ResNet-50, each as the
backbone ``f: image -> z`` plus the projection head ``h: z -> h`` it was trained with.

Layouts (key names are what the official full checkpoints hold; ``module.`` prefixes from
DistributedDataParallel are stripped on load):

- DINO ViT-S/16 (``dino_vits16``): ``backbone.{cls_token, pos_embed, patch_embed.proj,
  blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}, norm}`` (12 blocks, width 384,
  6 heads, LayerNorm eps 1e-6) and ``head.mlp.{0,2,4}`` (Linear-GELU-Linear-GELU-Linear,
  384-2048-2048-256) + ``head.last_layer.{weight_g, weight_v}`` (weight-normalised 256 -> 65536).
  File: the full checkpoint's ``teacher`` entry.
- DINO ResNet-50 (``dino_resnet50``): ``backbone.`` + torchvision ResNet-50 keys without ``fc``, and
  ``head.mlp.{0 Linear, 1 BatchNorm, 3 Linear}`` (2048-4096-256, GELU) + ``head.last_layer.weight``
  (a plain Linear 256 -> 65536: this checkpoint predates the weight-normalised last layer).
  File: the full checkpoint's ``teacher`` entry (DDP-wrapped, hence ``module.`` prefixes).
- VICReg ResNet-50 (``vicreg_resnet50``): ``backbone.`` + ResNet-50 keys, ``projector.{0,3}``
  Linear with bias, ``projector.{1,4}`` BatchNorm1d, ``projector.6`` Linear without bias
  (2048-8192-8192-8192). File: the full checkpoint's ``model`` entry.
- Barlow Twins ResNet-50 (``barlow_resnet50``): ``backbone.`` + ResNet-50 keys, ``projector.{0,3,6}``
  Linear without bias, ``projector.{1,4}`` BatchNorm1d (2048-8192-8192-8192), and ``bn`` (the
  affine-free BatchNorm1d that the loss applies; kept so the file loads strictly, not part of h).
  File: the full checkpoint's ``model`` entry.

Which head output is compared (the "h" of E6): DINO's 256-d bottleneck, the output of ``head.mlp``
before the L2 normalisation and the 65536 prototypes (the prototype scores are a softmax over
65536 logits, not an embedding); VICReg's and Barlow Twins' 8192-d projector output (for Barlow,
before the loss-only ``bn``). ``PretrainedSSL.compared`` is that module, ``PretrainedSSL.embed`` returns ``(z, h)``.

Widths are read from the checkpoint (so small stand-ins in the same layout load through the same
path); depths, head counts and layer patterns are fixed per model, so a missing block is a missing
key, not a different architecture.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from scale.engine.checkpoint import unreadable_reason

MODELS = ("dino_vits16", "dino_resnet50", "vicreg_resnet50", "barlow_resnet50")

# ImageNet statistics: all four models were trained on images normalised with them.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# --------------------------------------------------------------------------------------------
# Backbones
# --------------------------------------------------------------------------------------------


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride on the 3x3 conv), torchvision key names."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


class ResNet50(nn.Module):
    """ResNet-50 without its classifier: image (n, 3, H, W) -> z (n, 16 * width) (2048 at width 64)."""

    blocks_per_stage = (3, 4, 6, 3)

    def __init__(self, width: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = width
        for stage, n_blocks in enumerate(self.blocks_per_stage):
            planes = width * 2**stage
            blocks = [Bottleneck(inplanes, planes, stride=1 if stage == 0 else 2)]
            inplanes = planes * Bottleneck.expansion
            blocks += [Bottleneck(inplanes, planes) for _ in range(n_blocks - 1)]
            self.add_module(f"layer{stage + 1}", nn.Sequential(*blocks))
        self.out_dim = inplanes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)


class PatchEmbed(nn.Module):
    def __init__(self, patch: int, dim: int):
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(3, dim, patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # (n, dim, h, w) -> (n, h*w, dim)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, c = x.shape
        qkv = (
            self.qkv(x).reshape(n, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        )  # (3, n, heads, t, c/heads)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])  # softmax(q k^T / sqrt(c/heads)) v
        return self.proj(y.transpose(1, 2).reshape(n, t, c))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1 x), then x + mlp(norm2 x)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, mlp_ratio * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViTS16(nn.Module):
    """ViT-S/16 as DINO trains it: image (n, 3, H, W) -> CLS token after the final norm, z (n, dim).

    ``pos_embed`` holds 1 + 14 x 14 positions (224 px); other sizes interpolate the patch grid
    bicubically, as DINO does, so small test images run through the same weights.
    """

    def __init__(self, dim: int = 384, depth: int = 12, heads: int = 6, patch: int = 16, grid: int = 14):
        super().__init__()
        self.patch_embed = PatchEmbed(patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + grid * grid, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.out_dim = dim
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def _pos_embed(self, h: int, w: int) -> torch.Tensor:
        cls_pos, grid_pos = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        g = math.isqrt(grid_pos.shape[1])
        if (h, w) == (g, g):
            return self.pos_embed
        grid_pos = grid_pos.reshape(1, g, g, -1).permute(0, 3, 1, 2)  # (1, dim, g, g)
        grid_pos = F.interpolate(grid_pos, size=(h, w), mode="bicubic", align_corners=False)
        return torch.cat([cls_pos, grid_pos.permute(0, 2, 3, 1).reshape(1, h * w, -1)], dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2] // self.patch_embed.patch, x.shape[-1] // self.patch_embed.patch
        tokens = self.patch_embed(x)  # (n, h*w, dim)
        tokens = torch.cat([self.cls_token.expand(len(x), -1, -1), tokens], dim=1) + self._pos_embed(h, w)
        for block in self.blocks:
            tokens = block(tokens)
        return self.norm(tokens)[:, 0]


# --------------------------------------------------------------------------------------------
# Heads
# --------------------------------------------------------------------------------------------


class WeightNormLinear(nn.Module):
    """Bias-free Linear with W = g * v / |v| row by row (``weight_g`` (out, 1), ``weight_v`` (out, in)),
    the parametrisation ``nn.utils.weight_norm`` stores."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.weight_g = nn.Parameter(torch.ones(out_dim, 1))
        self.weight_v = nn.Parameter(torch.empty(out_dim, in_dim))
        nn.init.trunc_normal_(self.weight_v, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight_g * self.weight_v / self.weight_v.norm(dim=1, keepdim=True))


class DINOHead(nn.Module):
    """DINO's head: ``mlp`` (Linear [BN] GELU ... Linear) to the bottleneck, L2 normalisation, then the
    prototype layer ``last_layer`` (weight-normalised or plain, bias-free) to ``out_dim`` logits."""

    def __init__(
        self, in_dim: int, hidden: int, bottleneck: int, out_dim: int, nlayers: int, use_bn: bool, weight_norm: bool
    ):
        super().__init__()
        dims = [in_dim] + [hidden] * (nlayers - 1) + [bottleneck]
        layers: list[nn.Module] = []
        for i in range(nlayers):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i < nlayers - 1:
                layers += [nn.BatchNorm1d(dims[i + 1])] if use_bn else []
                layers.append(nn.GELU())
        self.mlp = nn.Sequential(*layers)
        self.last_layer = (
            WeightNormLinear(bottleneck, out_dim) if weight_norm else nn.Linear(bottleneck, out_dim, bias=False)
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.last_layer(F.normalize(self.mlp(z), dim=-1))


def projector(dims: list[int], hidden_bias: bool) -> nn.Sequential:
    """(Linear BN ReLU) x (len(dims) - 2), then a bias-free Linear: VICReg (hidden_bias=True) and
    Barlow Twins (hidden_bias=False) projectors, indices 0 1 2 | 3 4 5 | 6."""
    layers: list[nn.Module] = []
    for i in range(len(dims) - 2):
        layers += [
            nn.Linear(dims[i], dims[i + 1], bias=hidden_bias),
            nn.BatchNorm1d(dims[i + 1]),
            nn.ReLU(inplace=True),
        ]
    layers.append(nn.Linear(dims[-2], dims[-1], bias=False))
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------
# Backbone + head
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dims:
    """The widths of one model; the official values are ``OFFICIAL[name]``."""

    backbone: int  # ViT embedding width, or ResNet base width (64 -> z of 2048)
    hidden: int  # head hidden width
    bottleneck: int  # head output compared in E6 (DINO bottleneck / projector output)
    out: int = 0  # DINO prototypes (0 for the projectors)


OFFICIAL: dict[str, Dims] = {
    "dino_vits16": Dims(backbone=384, hidden=2048, bottleneck=256, out=65536),
    "dino_resnet50": Dims(backbone=64, hidden=4096, bottleneck=256, out=65536),
    "vicreg_resnet50": Dims(backbone=64, hidden=8192, bottleneck=8192),
    "barlow_resnet50": Dims(backbone=64, hidden=8192, bottleneck=8192),
}


class PretrainedSSL(nn.Module):
    """``backbone`` + the trained head under its original attribute name (``head`` or ``projector``)."""

    def __init__(self, name: str, dims: Dims):
        super().__init__()
        check_model_name(name)
        self.name, self.dims = name, dims
        self.backbone = ViTS16(dim=dims.backbone) if name == "dino_vits16" else ResNet50(width=dims.backbone)
        d = self.backbone.out_dim
        if name == "dino_vits16":
            self.head = DINOHead(d, dims.hidden, dims.bottleneck, dims.out, nlayers=3, use_bn=False, weight_norm=True)
        elif name == "dino_resnet50":
            self.head = DINOHead(d, dims.hidden, dims.bottleneck, dims.out, nlayers=2, use_bn=True, weight_norm=False)
        else:
            self.projector = projector(
                [d, dims.hidden, dims.hidden, dims.bottleneck], hidden_bias=name == "vicreg_resnet50"
            )
            if name == "barlow_resnet50":
                self.bn = nn.BatchNorm1d(dims.bottleneck, affine=False)  # loss-only normalisation

    @property
    def compared(self) -> nn.Module:
        """The head module whose output E6 compares with z (see the module docstring): DINO's ``head.mlp``
        (z -> the bottleneck), the projector otherwise."""
        return self.head.mlp if self.name.startswith("dino") else self.projector

    def embed(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised images (n, 3, H, W) -> (z (n, d), h (n, k))."""
        z = self.backbone(images)
        return z, self.compared(z)


def check_model_name(name: str) -> None:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid choices: {', '.join(MODELS)}")


def build_model(name: str, dims: Dims | None = None, seed: int | None = None) -> PretrainedSSL:
    """A randomly initialised model in the official layout (official widths unless ``dims`` given)."""
    check_model_name(name)
    if seed is not None:
        torch.manual_seed(seed)
    return PretrainedSSL(name, dims or OFFICIAL[name])


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used (unreadable, wrong file, wrong layout)."""


class CheckpointKeyError(CheckpointError):
    """A checkpoint whose keys do not match the model's layout; the message lists the keys."""


def _shape(sd: dict[str, torch.Tensor], key: str, axis: int) -> int:
    if key not in sd:
        raise CheckpointKeyError(f"checkpoint lacks the key {key!r}, which fixes a width of the model")
    return int(sd[key].shape[axis])


def infer_dims(name: str, sd: dict[str, torch.Tensor]) -> Dims:
    """Widths from the tensors of an (unprefixed) state dict in the layout of ``name``."""
    check_model_name(name)
    if name == "dino_vits16":
        backbone = _shape(sd, "backbone.cls_token", 2)
    else:
        backbone = _shape(sd, "backbone.conv1.weight", 0)
    if name == "dino_vits16":
        hidden, bottleneck = _shape(sd, "head.mlp.0.weight", 0), _shape(sd, "head.mlp.4.weight", 0)
        return Dims(backbone, hidden, bottleneck, _shape(sd, "head.last_layer.weight_v", 0))
    if name == "dino_resnet50":
        hidden, bottleneck = _shape(sd, "head.mlp.0.weight", 0), _shape(sd, "head.mlp.3.weight", 0)
        return Dims(backbone, hidden, bottleneck, _shape(sd, "head.last_layer.weight", 0))
    return Dims(backbone, _shape(sd, "projector.0.weight", 0), _shape(sd, "projector.6.weight", 0))


def load_state_dict_strict(model: nn.Module, sd: dict[str, torch.Tensor]) -> None:
    """``load_state_dict`` that fails with every missing, unexpected and mis-shaped key listed."""
    own = model.state_dict()
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    shapes = sorted(
        f"{k}: checkpoint {tuple(sd[k].shape)} vs model {tuple(own[k].shape)}"
        for k in set(own) & set(sd)
        if own[k].shape != sd[k].shape
    )
    if missing or unexpected or shapes:
        parts = []
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", shapes)):
            if keys:
                parts.append(f"{len(keys)} {label} key(s):\n  " + "\n  ".join(keys))
        raise CheckpointKeyError(
            f"checkpoint does not match the {getattr(model, 'name', '')} layout; " + "\n".join(parts)
        )
    model.load_state_dict(sd, strict=True)


def model_from_state_dict(name: str, sd: dict[str, torch.Tensor]) -> PretrainedSSL:
    """Build ``name`` with the widths ``sd`` carries and load ``sd`` strictly."""
    try:
        dims = infer_dims(name, sd)
    except CheckpointKeyError:
        dims = OFFICIAL[name]  # let the strict load below list every missing key
    model = PretrainedSSL(name, dims)
    load_state_dict_strict(model, sd)
    return model.eval()


def with_dims(name: str, **widths: int) -> Dims:
    """The official widths of ``name`` with some replaced (small stand-ins for tests and benchmarks)."""
    return replace(OFFICIAL[name], **widths)


# --------------------------------------------------------------------------------------------
# Official checkpoint files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OfficialFile:
    url: str  # the full checkpoint (backbone + head) its authors publish
    entry: str  # the top-level entry holding the state dict
    backbone_only_url: str  # the hub weights: backbone only, useless for E6


OFFICIAL_FILES: dict[str, OfficialFile] = {
    "dino_vits16": OfficialFile(
        "https://dl.fbaipublicfiles.com/dino/dino_deitsmall16_pretrain/dino_deitsmall16_pretrain_full_checkpoint.pth",
        "teacher",
        "https://dl.fbaipublicfiles.com/dino/dino_deitsmall16_pretrain/dino_deitsmall16_pretrain.pth",
    ),
    "dino_resnet50": OfficialFile(
        "https://dl.fbaipublicfiles.com/dino/dino_resnet50_pretrain/dino_resnet50_pretrain_full_checkpoint.pth",
        "teacher",
        "https://dl.fbaipublicfiles.com/dino/dino_resnet50_pretrain/dino_resnet50_pretrain.pth",
    ),
    "vicreg_resnet50": OfficialFile(
        "https://dl.fbaipublicfiles.com/vicreg/resnet50_fullckpt.pth",
        "model",
        "https://dl.fbaipublicfiles.com/vicreg/resnet50.pth",
    ),
    "barlow_resnet50": OfficialFile(
        "https://dl.fbaipublicfiles.com/barlowtwins/ljng/checkpoint.pth",
        "model",
        "https://dl.fbaipublicfiles.com/barlowtwins/ljng/resnet50.pth",
    ),
}


def _exclude_bias_and_norm(p: torch.Tensor) -> bool:  # pragma: no cover - never called
    return p.ndim == 1


# VICReg's full checkpoint pickles its optimizer, whose parameter groups name the training script's
# filter function ``__main__.exclude_bias_and_norm``; DINO's stores its ``argparse.Namespace``. The
# weights-only unpickler accepts exactly these names, mapped to inert stand-ins: no code of the
# file runs, and the optimizer and arguments are never used.
_exclude_bias_and_norm.__module__ = "__main__"
_exclude_bias_and_norm.__name__ = _exclude_bias_and_norm.__qualname__ = "exclude_bias_and_norm"


def read_checkpoint(path: str) -> dict:
    """``torch.load(path, weights_only=True)`` with the two known non-tensor globals allowed."""
    try:
        with torch.serialization.safe_globals([argparse.Namespace, _exclude_bias_and_norm]):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:

        raise CheckpointError(f"{path}: not readable as a weights-only torch checkpoint ({unreadable_reason(exc)}); "
                              "is it the official full checkpoint?") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a dict of tensors or a checkpoint dict, found {type(obj).__name__}")
    return obj


def official_state_dict(name: str, checkpoint: dict) -> dict[str, torch.Tensor]:
    """The backbone + head state dict inside a full checkpoint (or a bare state dict), unprefixed."""
    check_model_name(name)
    entry = OFFICIAL_FILES[name].entry
    sd = checkpoint.get(entry, checkpoint)
    if not isinstance(sd, dict):
        raise CheckpointKeyError(f"checkpoint entry {entry!r} is a {type(sd).__name__}, not a state dict")
    sd = {(k[len("module.") :] if k.startswith("module.") else k): v for k, v in sd.items()}
    sd = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    if sd and not any(k.startswith("backbone.") for k in sd):
        raise CheckpointKeyError(
            f"this file holds no 'backbone.' keys (top-level entries: {sorted(checkpoint)[:8]}): it looks like the "
            f"backbone-only weights; E6 needs the head too. Use the full checkpoint {OFFICIAL_FILES[name].url}"
        )
    return sd


def load_checkpoint(name: str, path: str) -> PretrainedSSL:
    """The path every user takes: an official full checkpoint file -> the model, strictly checked."""
    return model_from_state_dict(name, official_state_dict(name, read_checkpoint(path)))
