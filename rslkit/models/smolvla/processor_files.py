"""LeRobot's pre/post-processor files of a SmolVLA checkpoint: the pipelines' JSON and the normalizer statistics.

``policy_preprocessor.json`` lists LeRobot's input steps (rename, batch, newline, tokenizer, device, normalizer)
with the normalizer's statistics in ``policy_preprocessor_step_5_normalizer_processor.safetensors``;
``policy_postprocessor.json`` the unnormalizer (``..._step_0_unnormalizer_processor.safetensors``) and the move to
the CPU. Statistics are flat ``<feature>.<stat>`` keys (``observation.state.mean``, ``action.std``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

from rslkit.models.smolvla.lerobot_config import ACTION_KEY, STATE_KEY, LeRobotSmolVLAConfig
from rslkit.models.smolvla.normalization import EPS
from rslkit.utils.atomic_write import atomic_write_bytes, atomic_write_json

PREPROCESSOR = "policy_preprocessor"
POSTPROCESSOR = "policy_postprocessor"
NORMALIZER_FILE = f"{PREPROCESSOR}_step_5_normalizer_processor.safetensors"
UNNORMALIZER_FILE = f"{POSTPROCESSOR}_step_0_unnormalizer_processor.safetensors"


def read_stats(directory: Path) -> dict[str, torch.Tensor] | None:
    """The normalizer statistics of a checkpoint (``{"observation.state.mean": [S], ...}``), from the state file
    that ``policy_preprocessor.json`` names for its normalizer step; None when the checkpoint has none."""
    config = directory / f"{PREPROCESSOR}.json"
    if not config.is_file():
        return None
    for step in json.loads(config.read_text()).get("steps", []):
        if step.get("registry_name") == "normalizer_processor" and step.get("state_file"):
            file = directory / step["state_file"]
            return load_file(file) if file.is_file() else None
    return None


def _features(cfg: LeRobotSmolVLAConfig, with_inputs: bool) -> dict[str, Any]:
    inputs = cfg.to_json()["input_features"] if with_inputs else {}
    return {**inputs, ACTION_KEY: {"type": "ACTION", "shape": [cfg.action_dim]}}


def write_processors(
    directory: Path, cfg: LeRobotSmolVLAConfig, tokenizer_name: str, stats: dict[str, torch.Tensor]
) -> None:
    """Write both pipelines' JSON and statistics files (``stats``: ``<feature>.<stat>`` tensors) into
    ``directory``, as ``PolicyProcessorPipeline.save_pretrained`` lays them out."""
    norm_map = cfg.to_json()["normalization_mapping"]
    normalizer = {"eps": EPS, "features": _features(cfg, True), "norm_map": norm_map}
    pre = {
        "name": PREPROCESSOR,
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor", "config": {}},
            {"registry_name": "smolvla_new_line_processor", "config": {}},
            {
                "registry_name": "tokenizer_processor",
                "config": {
                    "max_length": cfg.tokenizer_max_length,
                    "task_key": "task",
                    "padding_side": "right",
                    "padding": cfg.pad_language_to,
                    "truncation": True,
                    "tokenizer_name": tokenizer_name,
                },
            },
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
            {"registry_name": "normalizer_processor", "config": normalizer, "state_file": NORMALIZER_FILE},
        ],
    }
    unnormalizer = {"eps": EPS, "features": _features(cfg, False), "norm_map": norm_map}
    post = {
        "name": POSTPROCESSOR,
        "steps": [
            {"registry_name": "unnormalizer_processor", "config": unnormalizer, "state_file": UNNORMALIZER_FILE},
            {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
        ],
    }
    tensors = {k: v.detach().float().cpu().contiguous() for k, v in stats.items()}
    atomic_write_bytes(directory / NORMALIZER_FILE, save(tensors))
    atomic_write_bytes(directory / UNNORMALIZER_FILE, save(tensors))
    atomic_write_json(directory / f"{PREPROCESSOR}.json", pre, indent=2)
    atomic_write_json(directory / f"{POSTPROCESSOR}.json", post, indent=2)


def stats_of(state_mean: torch.Tensor, state_std: torch.Tensor, action_mean: torch.Tensor, action_std: torch.Tensor
             ) -> dict[str, torch.Tensor]:  # fmt: skip
    """Flat ``<feature>.<stat>`` statistics of the state and action normalizers."""
    return {f"{STATE_KEY}.mean": state_mean, f"{STATE_KEY}.std": state_std,
            f"{ACTION_KEY}.mean": action_mean, f"{ACTION_KEY}.std": action_std}  # fmt: skip
