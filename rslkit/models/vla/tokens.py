"""Observation tokens of a VLA-style policy: the state, the instruction and each camera's image as ``d``-wide tokens.

Layout along the token axis, fixed by the config: ``[state, instruction (if any), camera 1 (G*G), camera 2 ...]``.
Every slot adds a learned position embedding, so the expert can tell the state from the instruction and one
camera's patch from another's. Images are encoded by a small CNN per camera, as grid cells
(:class:`ImageTokenizer`) or spatial-softmax keypoints (:class:`KeypointTokenizer`), or by one pretrained vision
tower shared by all cameras (:class:`~rslkit.models.vla.hf_backbone.HFVisionTokenizer`).

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


class KeypointTokenizer(nn.Module):
    """``[B, 3, H, W]`` in ``[0, 1]`` -> ``[B, K, d]``: spatial-softmax keypoints (Levine et al. 2016).

    The CNN's convolutions have stride 2 but the last (stride 1), so its feature map ``F [B, C, h, w]`` keeps a
    quarter of the image's resolution per side with three layers. ``K`` learned 1x1 maps ``a_k = softmax_hw(W_k F)``
    each attend to one thing in the image; keypoint ``k`` is its expected position ``(E[x], E[y]) in [-1, 1]^2``
    and its attended features ``sum_hw a_k F``, projected to one token. The position is a soft average over the
    map, so it resolves less than a cell (a grid token only says which cell).

    Args:
        channels: output channels of the convolutions.
        num_keypoints: ``K``.
        d_model: token width.
        image_size: ``(H, W)`` of the images (fixes the coordinate grid).
    """

    def __init__(self, channels: tuple[int, ...], num_keypoints: int, d_model: int, image_size: tuple[int, int]):
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        h, w = image_size
        for i, ch in enumerate(channels):
            stride = 1 if i == len(channels) - 1 and len(channels) > 1 else 2
            layers += [nn.Conv2d(in_ch, ch, 3, stride=stride, padding=1), nn.GroupNorm(1, ch), nn.GELU()]
            h, w = -(-h // stride), -(-w // stride)
            in_ch = ch
        self.conv = nn.Sequential(*layers)
        self.attention = nn.Conv2d(in_ch, num_keypoints, 1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("coords", torch.stack((xs.flatten(), ys.flatten()), -1))  # [h*w, 2]
        self.coords: torch.Tensor
        self.proj = nn.Linear(2 + in_ch, d_model)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``images [B, 3, H, W]`` -> tokens ``[B, K, d]``."""
        features = self.conv(images * 2.0 - 1.0).flatten(2)  # [B, C, h*w]
        maps = torch.softmax(self.attention(features.unsqueeze(-1)).squeeze(-1), -1)  # [B, K, h*w], the 1x1 maps
        positions = maps @ self.coords  # [B, K, 2]
        attended = maps @ features.transpose(1, 2)  # [B, K, C]
        return self.proj(torch.cat((positions, attended), -1))


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
        keypoints = cfg.image_tokens == "keypoints"

        def cnn_tokenizer() -> nn.Module:
            if keypoints:
                h, w = cfg.image_size
                return KeypointTokenizer(cfg.cnn_channels, cfg.num_keypoints, d, (h, w))
            return ImageTokenizer(cfg.cnn_channels, cfg.token_grid, d)

        self.images = nn.ModuleDict({c: cnn_tokenizer() for c in self.cameras} if cnn else {})
        """One CNN per camera (``backbone="cnn"``): grid or keypoint tokens (``cfg.image_tokens``)."""
        self.backbone = None if cnn or vlm else HFVisionTokenizer(cfg)
        """The pretrained vision tower all cameras share (``backbone="hf-vision"``)."""
        self.tokens_per_camera = cfg.num_keypoints if keypoints else cfg.token_grid**2
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
