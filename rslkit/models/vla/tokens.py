"""Observation tokens of a VLA-style policy: the state, the instruction and each camera's image as ``d``-wide tokens.

Layout along the token axis, fixed by the config: ``[state, instruction (if any), camera 1 (G*G), camera 2 ...]``.
Every slot adds a learned position embedding, so the expert can tell the state from the instruction and one
camera's patch from another's. Images are encoded by a small CNN per camera (:class:`ImageTokenizer`) or by one
pretrained vision tower shared by all cameras (:class:`~rslkit.models.vla.hf_backbone.HFVisionTokenizer`).

With ``backbone="hf-vlm"`` the whole sequence comes from a pretrained VLM's decoder layers
(:class:`~rslkit.models.vla.hf_vlm.HFVLMTokenizer`), in SmolVLA's prefix order
``[camera 1 (G*G), camera 2 ..., instruction, state]``; the position embeddings and the final LayerNorm are added
here as for the other backbones.
"""

from __future__ import annotations

import torch
from torch import nn

from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.hf_backbone import HFVisionTokenizer
from rslkit.models.vla.hf_vlm import HFVLMTokenizer


class ImageTokenizer(nn.Module):
    """``[B, 3, H, W]`` in ``[0, 1]`` -> ``[B, G*G, d]``: stride-2 3x3 convolutions (GELU), adaptive average pooling
    to a ``G x G`` grid, a linear projection of each cell (a small CNN trained from scratch)."""

    def __init__(self, channels: tuple[int, ...], grid: int, d_model: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for ch in channels:
            layers += [nn.Conv2d(in_ch, ch, 3, stride=2, padding=1), nn.GroupNorm(1, ch), nn.GELU()]
            in_ch = ch
        self.conv = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(grid))
        self.proj = nn.Linear(in_ch, d_model)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``images [B, 3, H, W]`` -> tokens ``[B, G*G, d]``."""
        return self.proj(self.conv(images * 2.0 - 1.0).flatten(2).transpose(1, 2))


class ObservationTokenizer(nn.Module):
    """Normalized inputs (a dict of tensors) -> observation tokens ``[B, L, d]`` in the layout of the module doc.

    Args:
        state_dim: size of the normalized state.
        cfg: the policy's architecture.
    """

    def __init__(self, state_dim: int, cfg: VLAPolicyCfg) -> None:
        super().__init__()
        d = cfg.d_model
        self.cameras = tuple(cfg.cameras)
        self.vlm = HFVLMTokenizer(state_dim, cfg) if cfg.backbone == "hf-vlm" else None
        """The pretrained VLM that gives every token (``backbone="hf-vlm"``); the encoders below are then not built."""
        vlm = self.vlm is not None
        self.state = None if vlm else nn.Sequential(nn.Linear(state_dim, d), nn.GELU(), nn.Linear(d, d))
        self.language = nn.Linear(cfg.language_dim, d) if cfg.language_dim > 0 and not vlm else None
        cnn = cfg.backbone == "cnn" or not self.cameras
        self.images = nn.ModuleDict(
            {c: ImageTokenizer(cfg.cnn_channels, cfg.token_grid, d) for c in self.cameras} if cnn else {}
        )
        """One CNN per camera (``backbone="cnn"``)."""
        self.backbone = None if cnn or vlm else HFVisionTokenizer(cfg)
        """The pretrained vision tower all cameras share (``backbone="hf-vision"``)."""
        self.tokens_per_camera = cfg.token_grid**2
        self.num_tokens = 1 + (cfg.language_dim > 0) + len(self.cameras) * self.tokens_per_camera
        self.position = nn.Parameter(torch.randn(self.num_tokens, d) * 0.02)
        self.norm = nn.LayerNorm(d)

    def layout(self) -> list[tuple[str, slice]]:
        """``[(name, token slice), ...]``: ``state``, ``instruction`` and ``camera_<name>`` in token order."""
        if self.vlm is not None:
            return self.vlm.layout()
        out, start = [("state", slice(0, 1))], 1
        if self.language is not None:
            out.append(("instruction", slice(1, 2)))
            start = 2
        for c in self.cameras:
            out.append((f"camera_{c}", slice(start, start + self.tokens_per_camera)))
            start += self.tokens_per_camera
        return out

    def forward(
        self, state: torch.Tensor, language: torch.Tensor | None, images: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """``state [B, S]``, ``language [B, E]`` (None without language), ``images {camera: [B, 3, H, W]}`` ->
        ``[B, L, d]``."""
        if self.vlm is not None:
            return self.norm(self.vlm(state, language, images) + self.position)
        assert self.state is not None  # built for every backbone but hf-vlm
        parts = [self.state(state).unsqueeze(1)]
        if self.language is not None:
            if language is None:
                raise ValueError("This VLA policy reads an instruction embedding; pass one (the 'instruction' group).")
            parts.append(self.language(language).unsqueeze(1))
        if self.backbone is None:
            parts += [self.images[c](images[c]) for c in self.cameras]
        else:  # all cameras in one batch through the shared tower
            tokens = self.backbone(torch.cat([images[c] for c in self.cameras]))  # [C*B, T, d], camera-major
            parts.append(tokens.unflatten(0, (len(self.cameras), -1)).transpose(0, 1).flatten(1, 2))  # [B, C*T, d]
        return self.norm(torch.cat(parts, dim=1) + self.position)
