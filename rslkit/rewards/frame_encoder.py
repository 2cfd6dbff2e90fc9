"""Frame encoder of the progress critic: camera images (a small CNN, or a frozen pretrained backbone) and state.

A frame is a TensorDict ``[B]`` with camera groups ``camera_<name>`` (uint8 ``[B, H, W, 3]``) and, optionally, a
state vector group (float ``[B, D]``). Each camera has its own encoder; the state is standardised with statistics
fitted on the training frames; everything is fused by an MLP into one feature ``[B, F]``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rslkit.envs.camera_groups import camera_group


def conv_encoder(channels: tuple[int, ...], height: int, width: int, out_dim: int) -> nn.Sequential:
    """``[B, 3, H, W]`` in ``[0, 1]`` -> ``[B, out_dim]``: strided 3x3 convolutions (stride 2), ReLU, a linear layer."""
    layers: list[nn.Module] = []
    in_ch = 3
    for ch in channels:
        layers += [nn.Conv2d(in_ch, ch, 3, stride=2, padding=1), nn.ReLU()]
        in_ch = ch
    with torch.no_grad():
        flat = nn.Sequential(*layers)(torch.zeros(1, 3, height, width)).numel()
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(flat, out_dim), nn.LayerNorm(out_dim))


class PretrainedImageEncoder(nn.Module):
    """A frozen ``transformers`` vision model (by local path or cached name; never downloaded), pooled, then linear.

    Images are resized to the backbone's ``image_size`` and standardised with ImageNet statistics.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, name: str, out_dim: int) -> None:
        super().__init__()
        try:
            from transformers import AutoConfig, AutoModel
        except ImportError as err:
            raise ImportError("A pretrained vision backbone needs transformers: pip install -e '.[rewards]'.") from err
        try:
            config = AutoConfig.from_pretrained(name, local_files_only=True)
            model = AutoModel.from_pretrained(name, local_files_only=True)
            self.backbone = getattr(model, "vision_model", model)  # CLIP / SigLIP: their vision tower only
        except OSError as err:
            raise ValueError(
                f"Cannot load the vision backbone {name!r} from local files ({err}); pass a model directory "
                "(rslkit never downloads models), or drop --vision_backbone to train the small CNN."
            ) from err
        vision = getattr(config, "vision_config", config)
        self.backbone.requires_grad_(False).eval()
        self.size = int(getattr(vision, "image_size", 224))
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.proj = nn.Sequential(nn.Linear(int(vision.hidden_size), out_dim), nn.LayerNorm(out_dim))

    def train(self, mode: bool = True) -> PretrainedImageEncoder:
        super().train(mode)
        self.backbone.eval()  # frozen: no dropout, fixed statistics
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``[B, 3, H, W]`` in ``[0, 1]`` -> ``[B, out_dim]``."""
        x = nn.functional.interpolate(images, size=(self.size, self.size), mode="bilinear", align_corners=False)
        with torch.no_grad():
            out = self.backbone(pixel_values=(x - self.mean) / self.std)
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:
            pooled = out.last_hidden_state.mean(1)
        return self.proj(pooled)


class FrameEncoder(nn.Module):
    """``frames [B] -> features [B, F]`` from the named cameras and the state group.

    Args:
        cameras: bare camera names (groups ``camera_<name>``).
        image_size: ``(H, W)`` every camera image must have.
        state_group: name of the state vector group, or None (images only).
        state_dim: its size.
        state_columns: the columns of the state group the encoder reads (:mod:`rslkit.envs.columns`);
            empty: all ``state_dim``.
        channels, feature_dim: CNN widths and the fused feature size.
        vision_backbone: a local ``transformers`` vision model to use (frozen) instead of the CNN.
    """

    state_mean: torch.Tensor
    state_std: torch.Tensor

    def __init__(
        self,
        cameras: tuple[str, ...],
        image_size: tuple[int, int],
        state_group: str | None,
        state_dim: int,
        channels: tuple[int, ...] = (32, 64, 64, 64),
        feature_dim: int = 256,
        vision_backbone: str | None = None,
        state_columns: tuple[int, ...] = (),
    ) -> None:
        super().__init__()
        if not cameras and state_group is None:
            raise ValueError("A progress critic needs at least one camera or a state group.")
        self.cameras, self.image_size, self.state_group = tuple(cameras), tuple(image_size), state_group
        h, w = self.image_size

        def image_encoder() -> nn.Module:
            if vision_backbone:
                return PretrainedImageEncoder(vision_backbone, feature_dim)
            return conv_encoder(channels, h, w, feature_dim)

        self.images = nn.ModuleDict({name: image_encoder() for name in self.cameras})
        parts = feature_dim * len(self.cameras)
        bad = [c for c in state_columns if not 0 <= c < state_dim]
        if bad or len(set(state_columns)) != len(state_columns):
            raise ValueError(
                f"State columns {list(state_columns)} must be distinct indices below state_dim {state_dim}."
            )
        self.state_columns = tuple(state_columns) or tuple(range(state_dim))
        if state_group is not None:
            read = len(self.state_columns)
            self.state = nn.Sequential(nn.Linear(read, feature_dim), nn.LayerNorm(feature_dim), nn.ReLU())
            self.register_buffer("state_mean", torch.zeros(read))
            self.register_buffer("state_std", torch.ones(read))
            parts += feature_dim
        self.fuse = nn.Sequential(nn.Linear(parts, feature_dim), nn.ReLU(), nn.Linear(feature_dim, feature_dim))
        self.state_dim = state_dim

    def fit_state_stats(self, states: torch.Tensor) -> None:
        """Standardise the state group with the mean/std of ``states [F, D]`` (the training frames)."""
        if self.state_group is not None:
            states = states[:, list(self.state_columns)]
            self.state_mean.copy_(states.mean(0))
            self.state_std.copy_(states.std(0, unbiased=False).clamp_min(1e-3))

    def check(self, frames: TensorDict) -> None:
        """Raise ``ValueError`` when ``frames`` lack a group this encoder reads or hold the wrong shapes."""
        present = sorted(frames.keys())
        for name in self.cameras:
            key = camera_group(name)
            if key not in frames.keys():
                raise ValueError(
                    f"Observations lack camera group '{key}' (they hold {present}); turn the camera on "
                    f"(`--env.cameras {name}`) or record the dataset with `--camera {name}`."
                )
            shape = tuple(frames[key].shape[1:])
            if shape != (*self.image_size, 3) or frames[key].dtype != torch.uint8:
                raise ValueError(
                    f"Camera '{name}' images are {frames[key].dtype} {shape}; the critic was trained on uint8 "
                    f"{(*self.image_size, 3)} (set the camera resolution to {self.image_size[1]}x{self.image_size[0]})."
                )
        if self.state_group is not None:
            if self.state_group not in frames.keys():
                raise ValueError(f"Observations lack the state group '{self.state_group}' (they hold {present}).")
            if tuple(frames[self.state_group].shape[1:]) != (self.state_dim,):
                raise ValueError(
                    f"State group '{self.state_group}' has shape {tuple(frames[self.state_group].shape[1:])}, the "
                    f"critic was trained on ({self.state_dim},)."
                )

    def forward(self, frames: TensorDict) -> torch.Tensor:
        """``frames [B]`` -> ``[B, F]`` (call :meth:`check` first on untrusted input)."""
        parts = []
        for name in self.cameras:
            images = frames[camera_group(name)].permute(0, 3, 1, 2).float() / 255.0
            parts.append(self.images[name](images))
        if self.state_group is not None:
            state = (frames[self.state_group][:, list(self.state_columns)].float() - self.state_mean) / self.state_std
            parts.append(self.state(state))
        return self.fuse(torch.cat(parts, dim=-1))
