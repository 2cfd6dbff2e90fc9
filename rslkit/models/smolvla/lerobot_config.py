"""LeRobot's SmolVLA ``config.json``: read into a typed config, written back in LeRobot's layout.

A checkpoint directory as ``lerobot`` >= 0.4 saves it holds ``config.json`` with ``"type": "smolvla"``, the input
and output features (``observation.state``, ``observation.images.<camera>``, ``action``), the normalization mapping
and the architecture (``chunk_size``, ``max_state_dim``, ``num_vlm_layers``, ...). The fields rslkit reads are
typed here; the whole JSON object is kept so that a saved checkpoint carries every other field unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rslkit.models.smolvla.settings import SmolVLACfg

IMAGE_PREFIX = "observation.images."
STATE_KEY = "observation.state"
ACTION_KEY = "action"
SUPPORTED_NORMALIZATION = {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}


@dataclass
class LeRobotSmolVLAConfig:
    """The architecture fields of LeRobot's ``SmolVLAConfig`` that the model reads (names as in ``config.json``)."""

    state_dim: int
    action_dim: int
    cameras: tuple[str, ...]
    """Checkpoint camera names (``observation.images.<name>`` without the prefix), in the config's order."""
    chunk_size: int = 50
    max_state_dim: int = 32
    max_action_dim: int = 32
    resize_imgs_with_padding: tuple[int, int] = (512, 512)
    empty_cameras: int = 0
    tokenizer_max_length: int = 48
    pad_language_to: str = "longest"
    num_steps: int = 10
    num_vlm_layers: int = 16
    num_expert_layers: int = -1
    self_attn_every_n_layers: int = 2
    expert_width_multiplier: float = 0.75
    min_period: float = 4e-3
    max_period: float = 4.0
    attention_mode: str = "cross_attn"
    add_image_special_tokens: bool = False
    prefix_length: int = -1
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    """The whole ``config.json`` object (written back with the fields above updated)."""

    def check(self, source: str) -> None:
        """Refuse what rslkit's implementation does not reproduce, naming ``source`` (the checkpoint dir).

        Raises:
            ValueError: cross-attention off, image special tokens, a fixed prefix length, fewer expert layers than
                VLM layers, or a normalization other than LeRobot's default.
        """
        unsupported = {
            "attention_mode": (self.attention_mode, "cross_attn"),
            "add_image_special_tokens": (self.add_image_special_tokens, False),
            "prefix_length": (self.prefix_length, -1),
        }
        for name, (value, wanted) in unsupported.items():
            if value != wanted:
                raise ValueError(
                    f"{source}: {name} = {value!r} is not supported by rslkit's SmolVLA (needs {wanted!r})."
                )
        if self.num_expert_layers > 0 and self.num_expert_layers != self.num_vlm_layers:
            raise ValueError(
                f"{source}: num_expert_layers = {self.num_expert_layers} differs from num_vlm_layers = "
                f"{self.num_vlm_layers}; rslkit's SmolVLA pairs one expert layer with each VLM layer."
            )
        mapping = self.raw.get("normalization_mapping", SUPPORTED_NORMALIZATION)
        if mapping != SUPPORTED_NORMALIZATION:
            raise ValueError(
                f"{source}: normalization_mapping {mapping} is not LeRobot's SmolVLA default "
                f"{SUPPORTED_NORMALIZATION}, the only one rslkit implements."
            )
        if self.state_dim > self.max_state_dim or self.action_dim > self.max_action_dim:
            raise ValueError(
                f"{source}: state {self.state_dim} / action {self.action_dim} exceed max_state_dim "
                f"{self.max_state_dim} / max_action_dim {self.max_action_dim}."
            )

    def to_json(self) -> dict[str, Any]:
        """``config.json`` content: the read object with this config's fields written over it."""
        out: dict[str, Any] = dict(self.raw) if self.raw else {"type": "smolvla"}
        out["input_features"] = {
            STATE_KEY: {"type": "STATE", "shape": [self.state_dim]},
            **{IMAGE_PREFIX + c: {"type": "VISUAL", "shape": self._image_shape(c)} for c in self.cameras},
        }
        out["output_features"] = {ACTION_KEY: {"type": "ACTION", "shape": [self.action_dim]}}
        out.setdefault("normalization_mapping", dict(SUPPORTED_NORMALIZATION))
        for name in _FIELDS:
            value = getattr(self, name)
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    def _image_shape(self, camera: str) -> list[int]:
        old = self.raw.get("input_features", {}).get(IMAGE_PREFIX + camera)
        return list(old["shape"]) if old else [3, *self.resize_imgs_with_padding]


_FIELDS = (
    "chunk_size", "max_state_dim", "max_action_dim", "resize_imgs_with_padding", "empty_cameras",
    "tokenizer_max_length", "pad_language_to", "num_steps", "num_vlm_layers", "num_expert_layers",
    "self_attn_every_n_layers", "expert_width_multiplier", "min_period", "max_period", "attention_mode",
    "add_image_special_tokens", "prefix_length",
)  # fmt: skip
"""Fields of :class:`LeRobotSmolVLAConfig` stored under the same name in ``config.json``."""


def read_lerobot_config(directory: str | Path) -> LeRobotSmolVLAConfig:
    """The SmolVLA config of a LeRobot checkpoint directory.

    Raises:
        FileNotFoundError: no directory, or no ``config.json`` in it.
        ValueError: a ``type`` other than ``smolvla``, missing state/action/camera features, or an unsupported
            setting (:meth:`LeRobotSmolVLAConfig.check`).
    """
    path = Path(directory).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{path} has no config.json: not a LeRobot policy checkpoint. Pass the directory that "
            "policy.save_pretrained(DIR) wrote (or `hf download lerobot/smolvla_base --local-dir DIR`) as "
            "--agent.policy.smolvla.pretrained DIR."
        )
    raw = json.loads((path / "config.json").read_text())
    kind = raw.get("type")
    if kind != "smolvla":
        raise ValueError(
            f"{path}/config.json is a LeRobot {kind!r} policy; --agent.policy.smolvla.pretrained loads 'smolvla' "
            "checkpoints only."
        )
    inputs, outputs = raw.get("input_features") or {}, raw.get("output_features") or {}
    cameras = tuple(k[len(IMAGE_PREFIX) :] for k, v in inputs.items() if v.get("type") == "VISUAL")
    cameras = tuple(c for c in cameras if not c.startswith("empty_camera_"))
    if STATE_KEY not in inputs or ACTION_KEY not in outputs or not cameras:
        raise ValueError(
            f"{path}/config.json must name input_features {STATE_KEY!r} and at least one camera "
            f"({IMAGE_PREFIX}<name>) and output_features {ACTION_KEY!r}; it has {sorted(inputs)} / {sorted(outputs)}."
        )
    known: dict[str, Any] = {n: (tuple(raw[n]) if isinstance(raw[n], list) else raw[n]) for n in _FIELDS if n in raw}
    cfg = LeRobotSmolVLAConfig(
        state_dim=int(inputs[STATE_KEY]["shape"][-1]),
        action_dim=int(outputs[ACTION_KEY]["shape"][-1]),
        cameras=cameras,
        raw=raw,
        **known,
    )
    cfg.check(str(path))
    return cfg


def scratch_config(
    settings: SmolVLACfg,
    state_dim: int,
    action_dim: int,
    cameras: tuple[str, ...],
    horizon: int,
    num_steps: int,
    resize: int,
    vlm_layers: int,
) -> LeRobotSmolVLAConfig:
    """The config of a SmolVLA built from scratch (random weights) from rslkit's settings.

    ``cameras`` are the checkpoint camera names, ``resize`` the side images are resized to (with padding; the VLM's
    vision image size), ``vlm_layers`` 0 keeps every text layer of the VLM (-1 in LeRobot's config).
    """
    cfg = LeRobotSmolVLAConfig(
        state_dim=state_dim,
        action_dim=action_dim,
        cameras=cameras,
        chunk_size=horizon,
        max_state_dim=settings.max_state_dim,
        max_action_dim=settings.max_action_dim,
        resize_imgs_with_padding=(resize, resize),
        tokenizer_max_length=settings.tokenizer_max_length,
        num_steps=num_steps,
        num_vlm_layers=vlm_layers or -1,
        self_attn_every_n_layers=settings.self_attn_every_n_layers,
        expert_width_multiplier=settings.expert_width_multiplier,
    )
    cfg.check("--agent.policy.smolvla")
    return cfg
