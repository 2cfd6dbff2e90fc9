"""A pretrained ``transformers`` vision tower as the image encoder of a VLA policy: ``G*G`` tokens per image.

Supported checkpoints, by the ``model_type`` of their ``config.json``:

- ``siglip`` / ``siglip_vision_model``: ``SiglipVisionModel`` (SmolVLM2's vision encoder): its patch tokens after
  the final LayerNorm (the attention-pooling head is dropped);
- ``smolvlm`` / ``idefics3`` (SmolVLM2, SmolVLM, Idefics3): the VLM's vision model and its connector (pixel shuffle
  by ``scale_factor``, then the pretrained projection to the text width): the visual tokens SmolVLA feeds its
  decoder. The text decoder is dropped (it is loaded with the checkpoint, then freed); ``backbone="hf-vlm"``
  (:mod:`rslkit.models.vla.hf_vlm`) runs it.

The tower runs on the image resized to its ``image_size`` and normalized with the mean/std of the checkpoint's
``preprocessor_config.json`` (SigLIP's and Idefics3's default 0.5/0.5 without one), all torch ops and buffers, so
the policy exports to ONNX with the preprocessing inside. Its patch grid (``image_size / patch_size`` per side, over
``scale_factor`` after a connector) is reduced to ``token_grid`` by average pooling or pixel shuffle and projected
to ``d_model``. Nothing downloads: a hub name is resolved from the local cache only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rslkit.models.vla.backbone_tuning import configure_trainable
from rslkit.models.vla.config import VLAPolicyCfg

_TOWERS = {
    "siglip": "SiglipVisionModel",
    "siglip_vision_model": "SiglipVisionModel",
    "smolvlm": "SmolVLMModel",
    "idefics3": "Idefics3Model",
}
"""``model_type`` -> the ``transformers`` class the vision tower is loaded with."""
_INSTALL_HINT = "pip install -e '.[vla]'"


def resolve_model_dir(name: str) -> Path:
    """The local directory of the model ``name``: a directory, or a hub name's snapshot in the local cache.

    Raises:
        ImportError: ``huggingface_hub`` is missing.
        FileNotFoundError: ``name`` is neither a directory nor in the cache, saying how to get it there once.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:
        raise ImportError(f"Pretrained backbones need transformers: {_INSTALL_HINT}.") from err
    try:
        return Path(snapshot_download(name, local_files_only=True))
    except (OSError, ValueError) as err:  # not cached (LocalEntryNotFoundError) or not a repo id (HFValidationError)
        raise FileNotFoundError(
            f"The backbone {name!r} is neither a local directory nor in the Hugging Face cache, and rslkit never "
            f"downloads at run time. Download it once (`hf download {name}`, or `huggingface-cli download {name}` "
            "with older huggingface_hub), or save a model with `model.save_pretrained(DIR)` and pass "
            "--agent.policy.backbone_path DIR."
        ) from err


def checkpoint_type(directory: Path) -> str:
    """The ``model_type`` of the ``config.json`` in ``directory`` ("" when it names none).

    Raises:
        FileNotFoundError: ``directory`` has no ``config.json``, saying how to make a model directory.
    """
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(
            f"{directory} has no config.json: not a transformers model directory. Save one with "
            "model.save_pretrained(DIR) (or `hf download NAME`) and pass --agent.policy.backbone_path DIR."
        )
    return str(json.loads((directory / "config.json").read_text()).get("model_type", ""))


def load_model(directory: Path, class_name: str) -> tuple[Any, list[str]]:
    """``(model, missing weight names)``: the ``transformers`` class ``class_name`` from ``directory``, offline, in
    float32 with SDPA attention (its loading report, which lists the weights a tower drops, is silenced)."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(f"Pretrained backbones need transformers: {_INSTALL_HINT}.") from err
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        model, info = getattr(transformers, class_name).from_pretrained(
            str(directory), local_files_only=True, dtype=torch.float32, attn_implementation="sdpa",
            output_loading_info=True,
        )  # fmt: skip
    finally:
        transformers.logging.set_verbosity(verbosity)
    return model, sorted(info["missing_keys"])


def image_normalization(directory: Path) -> tuple[list[float], list[float]]:
    """``(mean, std)`` per RGB channel from ``preprocessor_config.json``; SigLIP / Idefics3's 0.5, 0.5 without it."""
    file = directory / "preprocessor_config.json"
    data = json.loads(file.read_text()) if file.is_file() else {}
    if data.get("do_normalize") is False:
        return [0.0] * 3, [1.0] * 3
    mean, std = data.get("image_mean", [0.5] * 3), data.get("image_std", [0.5] * 3)
    if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
        raise ValueError(f"{file}: image_mean and image_std must hold 3 values (std > 0), got {mean}, {std}.")
    return [float(m) for m in mean], [float(s) for s in std]


class VisionTower(nn.Module):
    """``pixels [B, 3, S, S]`` (normalized) -> ``[B, g*g, C]`` patch tokens of a pretrained vision transformer.

    Holds the pretrained pieces only: patch and position embeddings, the first ``num_layers`` encoder layers, the
    final LayerNorm and (VLMs) the pixel-shuffle connector.

    Args:
        name: local directory or cached hub name (:func:`resolve_model_dir`).
        num_layers: keep the first N encoder layers; 0: all.
        loaded: the checkpoint's :func:`load_model` result, when the caller loaded it already (``hf-vlm`` keeps
            its text decoder too); None: load it here.

    Raises:
        ValueError: an unsupported ``model_type``, a checkpoint without the tower's weights, or more layers asked
            for than it has.
    """

    def __init__(self, name: str, num_layers: int = 0, loaded: tuple[Any, list[str]] | None = None) -> None:
        super().__init__()
        directory = resolve_model_dir(name)
        model_type = checkpoint_type(directory)
        if model_type not in _TOWERS:
            raise ValueError(
                f"The backbone {name!r} is a {model_type!r} model; hf-vision takes {sorted(_TOWERS)} checkpoints "
                "(SigLIP, or SmolVLM / SmolVLM2 / Idefics3)."
            )
        self.kind = "siglip" if _TOWERS[model_type] == "SiglipVisionModel" else "vlm"
        vision, connector, self.scale = self._split(loaded or load_model(directory, _TOWERS[model_type]), name)
        self.connector: Any = connector
        cfg = vision.config
        layers = list(vision.encoder.layers)
        if num_layers > len(layers):
            raise ValueError(
                f"backbone_layers is {num_layers} but {name!r} has {len(layers)} encoder layers: set "
                f"--agent.policy.backbone_layers {len(layers)} or fewer (0: all)."
            )
        self.embeddings: Any = vision.embeddings
        self.layers = nn.ModuleList(layers[: num_layers or len(layers)])
        self.post_layernorm: Any = vision.post_layernorm
        self.image_size, self.patch_size = int(cfg.image_size), int(cfg.patch_size)
        self.grid = self.image_size // self.patch_size // self.scale
        """Side of the token grid the tower gives (after the connector's pixel shuffle)."""
        width = self.connector.modality_projection.proj.out_features if self.connector is not None else None
        self.width = int(width or cfg.hidden_size)
        """Size of each token."""
        self.mean, self.std = image_normalization(directory)

    def _split(self, loaded: tuple[Any, list[str]], name: str) -> tuple[Any, Any, int]:
        """``(vision model, connector or None, pixel-shuffle factor)`` of a :func:`load_model` result."""
        model, missing_keys = loaded
        missing = [k for k in missing_keys if "text_model" not in k and "lm_head" not in k]
        if missing:
            raise ValueError(
                f"The checkpoint {name!r} lacks weights of its vision tower ({missing[:4]}...): it would run "
                "with random weights. Save the whole model (model.save_pretrained) or use another checkpoint."
            )
        if self.kind == "siglip":
            return model, None, 1
        return model.vision_model, model.connector, int(model.config.scale_factor)

    def embed(self, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels [B, 3, S, S]`` -> patch embeddings with positions ``[B, n, C]``."""
        if self.kind == "siglip":
            return self.embeddings(pixels)
        # SmolVLM's embeddings bucket positions for padded images of any size; a full S x S image has position i
        # at patch i, which is what this computes without the data-dependent bucketing (ONNX-friendly).
        patches = self.embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)
        return patches + self.embeddings.position_embedding.weight

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels [B, 3, S, S]`` (normalized) -> tokens ``[B, grid*grid, width]``."""
        hidden = self.embed(pixels)
        for layer in self.layers:
            hidden = layer(hidden, None)
        hidden = self.post_layernorm(hidden)
        return hidden if self.connector is None else self.connector(hidden)


def reduce_grid(tokens: torch.Tensor, side: int, grid: int, mode: str) -> torch.Tensor:
    """``tokens [B, side*side, C]`` (a row-major grid) -> ``[B, grid*grid, C']``: average pooling (``C' = C``) or
    pixel shuffle (``C' = C r^2``: each ``r x r`` cell's tokens stacked, channel-major), ``r = side / grid``."""
    r = side // grid
    if r == 1:
        return tokens
    x = tokens.transpose(1, 2).unflatten(2, (side, side))  # [B, C, side, side]
    x = F.avg_pool2d(x, r) if mode == "pool" else F.pixel_unshuffle(x, r)
    return x.flatten(2).transpose(1, 2)


def check_token_grid(grid: int, side: int, name: str) -> None:
    """Raise ``ValueError`` unless ``token_grid = grid`` divides the ``side x side`` token grid of the tower ``name``
    (the message lists the values that do)."""
    if grid > side or side % grid:
        fits = [k for k in range(1, side + 1) if side % k == 0]
        raise ValueError(
            f"token_grid {grid} must divide the {side}x{side} token grid of {name!r}: set "
            f"--agent.policy.token_grid to one of {fits}."
        )


def tower_input(images: torch.Tensor, size: int, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``images [B, 3, H, W]`` in ``[0, 1]`` -> a vision tower's input ``[B, 3, size, size]``: resized (bilinear)
    where needed, normalized with the checkpoint's ``mean`` / ``std``."""
    if tuple(images.shape[-2:]) != (size, size):
        images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    return (images - mean) / std


class HFVisionTokenizer(nn.Module):
    """``images [B, 3, H, W]`` in ``[0, 1]`` -> ``[B, G*G, d]`` through a pretrained vision tower.

    Resize to the tower's ``image_size`` (bilinear) and normalize with its mean/std (buffers), run the tower, reduce
    its ``g x g`` grid to ``G = cfg.token_grid``, project each token to ``d_model`` (always trained). The tower's
    weights are frozen, partly trained, LoRA-adapted or trained in full per ``cfg.backbone_trainable``
    (:func:`~rslkit.models.vla.backbone_tuning.configure_trainable`).

    Args:
        cfg: the policy's architecture (``backbone_*``, ``lora_*``, ``token_grid``, ``d_model``).

    Raises:
        ValueError: ``token_grid`` does not divide the tower's grid (the message lists the ones that do).
    """

    def __init__(self, cfg: VLAPolicyCfg) -> None:
        super().__init__()
        self.tower = VisionTower(cfg.backbone_path, cfg.backbone_layers)
        g, grid = self.tower.grid, cfg.token_grid
        check_token_grid(grid, g, cfg.backbone_path)
        self.grid, self.reduce = grid, cfg.backbone_reduce
        self.register_buffer("mean", torch.tensor(self.tower.mean).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(self.tower.std).view(1, 3, 1, 1))
        self.mean: torch.Tensor
        self.std: torch.Tensor
        width = self.tower.width * ((g // grid) ** 2 if self.reduce == "shuffle" else 1)
        self.proj = nn.Linear(width, cfg.d_model)
        self.frozen = cfg.backbone_trainable == "frozen"
        configure_trainable(self.tower, cfg, self.tower.layers, [self.tower.post_layernorm, self.tower.connector])

    @property
    def num_tokens(self) -> int:
        """Tokens per image, ``token_grid**2``."""
        return self.grid**2

    def train(self, mode: bool = True) -> HFVisionTokenizer:
        """Train mode for the trained parts; a frozen tower stays in eval mode (no dropout on fixed features)."""
        super().train(mode)
        if self.frozen:
            self.tower.eval()
        return self

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """``images [B, 3, H, W]`` in ``[0, 1]`` -> the tower's input ``[B, 3, S, S]``."""
        return tower_input(images, self.tower.image_size, self.mean, self.std)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``images [B, 3, H, W]`` in ``[0, 1]`` -> tokens ``[B, G*G, d]``."""
        return self.proj(reduce_grid(self.tower(self.preprocess(images)), self.tower.grid, self.grid, self.reduce))
