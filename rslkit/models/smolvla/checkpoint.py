"""Weights of a LeRobot SmolVLA checkpoint in and out: ``model.safetensors`` with LeRobot's key names.

Loading is a plain safetensors read (no pickle) into the model built from the checkpoint's ``config.json`` and the
VLM directory's config; every key must match by name and shape, so a VLM directory that is not the checkpoint's
(another width or depth) is refused by naming the first tensor that disagrees. Saving writes ``config.json``,
``model.safetensors`` (LoRA adapters merged) and the pre/post-processor files as LeRobot does, so
``SmolVLAPolicy.from_pretrained(DIR)`` of LeRobot loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

from rslkit.models.smolvla.flow import SmolVLAFlow
from rslkit.models.smolvla.lerobot_config import LeRobotSmolVLAConfig
from rslkit.models.smolvla.processor_files import write_processors
from rslkit.models.smolvla.tuning import lerobot_state_dict
from rslkit.utils.atomic_write import atomic_write_bytes, atomic_write_json

WEIGHTS = "model.safetensors"
PREFIX = "model."
LM_HEAD = "vlm_with_expert.vlm.lm_head.weight"


def load_weights(flow: SmolVLAFlow, directory: Path, vlm_dir: Path) -> None:
    """Copy ``directory/model.safetensors`` (LeRobot's ``model.*`` keys) into ``flow``.

    Raises:
        FileNotFoundError: no ``model.safetensors``.
        ValueError: a weight missing, left over or of another shape than the model built from ``vlm_dir``.
    """
    file = directory / WEIGHTS
    if not file.is_file():
        raise FileNotFoundError(
            f"{directory} has a config.json but no {WEIGHTS}: pass a complete LeRobot checkpoint directory as "
            "--agent.policy.smolvla.pretrained (or leave it empty for a policy with random weights)."
        )
    stored = {k[len(PREFIX) :]: v for k, v in load_file(file).items() if k.startswith(PREFIX)}
    own = flow.state_dict()
    vlm: Any = flow.vlm_with_expert.vlm
    if LM_HEAD not in stored and LM_HEAD in own and vlm.config.tie_word_embeddings:
        stored[LM_HEAD] = stored.get("vlm_with_expert.vlm.model.text_model.embed_tokens.weight", own[LM_HEAD])
    missing, extra = sorted(set(own) - set(stored)), sorted(set(stored) - set(own))
    wrong = [
        (k, list(stored[k].shape), list(own[k].shape)) for k in own if k in stored and stored[k].shape != own[k].shape
    ]
    if missing or extra or wrong:
        detail = (
            f"{wrong[0][0]} is {wrong[0][1]} in the checkpoint but {wrong[0][2]} in the model" if wrong
            else f"missing {missing[:3]}, unexpected {extra[:3]}"
        )  # fmt: skip
        raise ValueError(
            f"The weights of {file} do not fit the SmolVLA built from {vlm_dir}/config.json ({detail}): pass the "
            "VLM the checkpoint was made from (SmolVLM2-500M-Video-Instruct for lerobot/smolvla_base) as "
            "--agent.policy.backbone_path."
        )
    flow.load_state_dict(stored)


def save_checkpoint(
    directory: str | Path,
    flow: SmolVLAFlow,
    cfg: LeRobotSmolVLAConfig,
    tokenizer_name: str,
    stats: dict[str, torch.Tensor],
) -> Path:
    """Write a LeRobot checkpoint directory: ``config.json``, ``model.safetensors``, the processor files.

    Returns:
        The directory.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    weights = {PREFIX + k: v.contiguous() for k, v in lerobot_state_dict(flow).items()}
    atomic_write_bytes(out / WEIGHTS, save(weights))
    atomic_write_json(out / "config.json", cfg.to_json(), indent=4)
    write_processors(out, cfg, tokenizer_name, stats)
    return out
