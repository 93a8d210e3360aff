"""Backbones ``f_theta: images -> z`` (docs/paper.md, "Experiments": CIFAR-stem ResNet-18 and a small ViT).

    resnet18   BasicBlock ResNet-18 with the CIFAR stem: 3x3 conv1, stride 1, no max-pool; stages of
               width w, 2w, 4w, 8w (w = 64 gives the usual 512-d output z); global average pool.
               ``width`` < 64 is a narrower network of the same shape (used for the CPU digits demo).
    vit_tiny   the paper's ViT-Tiny as its official code builds it: a conv patch embedding (patch 4),
               learned position embeddings and CLS token, ``nn.TransformerEncoder`` of 3 pre-norm
               ``nn.TransformerEncoderLayer`` (width 192, 3 heads, MLP 768, GELU, no dropout), and the
               CLS token's output with no final LayerNorm (z is 192-d). ``ViT(final_norm=True)`` adds
               the LayerNorm the usual ViT puts there.

Both map ``(B, 3, S, S)`` to ``(B, out_dim)``.
"""

from __future__ import annotations

import torch
from torch import nn

BACKBONES: tuple[str, ...] = ("resnet18", "vit_tiny")


# --------------------------------------------------------------------------------------------
# ResNet-18, CIFAR stem
# --------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        w = int(width)
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True))
        stages, c_in = [], w
        for i, c_out in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if i == 0 else 2
            stages += [BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.out_dim = 8 * w
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x)).mean(dim=(2, 3))  # (B, 8w)


# --------------------------------------------------------------------------------------------
# ViT-Tiny (paper's variant)
# --------------------------------------------------------------------------------------------


class ViT(nn.Module):
    """ViT-Tiny of the paper's official code (module docstring). torch's own pre-norm encoder layer is
    used, not a hand-written block: it is the official module, so the parameters and their order match.
    As there, ``nn.TransformerEncoder`` deep-copies one freshly initialised layer, so all ``depth``
    layers start from the same weights."""

    def __init__(self, image_size: int = 32, patch: int = 4, dim: int = 192, depth: int = 3, heads: int = 3,
                 mlp: int = 768, final_norm: bool = False) -> None:
        super().__init__()
        if image_size % patch:
            raise ValueError(f"image size {image_size} is not a multiple of the patch size {patch}")
        n_patches = (image_size // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)  # (B, dim, S/p, S/p)
        self.pos = nn.Parameter(torch.zeros(1, n_patches + 1, dim))
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=mlp, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        # enable_nested_tensor only applies to post-norm layers (it warns otherwise)
        self.encoder = nn.TransformerEncoder(layer, num_layers=depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim) if final_norm else nn.Identity()
        self.out_dim = dim
        nn.init.trunc_normal_(self.pos, std=0.02)
        nn.init.trunc_normal_(self.cls, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, dim)
        tokens = torch.cat([self.cls.expand(len(x), -1, -1), tokens], dim=1) + self.pos  # (B, N + 1, dim)
        return self.norm(self.encoder(tokens))[:, 0]  # CLS token, (B, dim)


def build_backbone(name: str, image_size: int = 32, width: int | None = None) -> nn.Module:
    """``resnet18`` (``width`` = base channels, default 64) or ``vit_tiny`` (``width`` = model dim, default 192)."""
    if name == "resnet18":
        return ResNet18(width or 64)
    if name == "vit_tiny":
        dim = width or 192
        if dim % 3:
            raise ValueError(f"vit_tiny width must be a multiple of its 3 heads, got {dim}")
        return ViT(image_size, dim=dim, mlp=4 * dim)
    raise ValueError(f"unknown backbone {name!r}; valid: {', '.join(BACKBONES)}")
