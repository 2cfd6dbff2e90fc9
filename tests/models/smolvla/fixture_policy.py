"""Policies and inputs from the LeRobot parity fixtures (``make_fixtures.py`` wrote them with LeRobot 0.4.4)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from tensordict import TensorDict

from rslkit.envs.camera_groups import camera_group
from rslkit.models.smolvla.policy import SmolVLAPolicy
from rslkit.models.smolvla.settings import SmolVLACfg
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.models.vla.policy import INSTRUCTION_GROUP

FIXTURES = Path(__file__).resolve().parent / "fixtures"
VLM = FIXTURES / "vlm"
INSTRUCTIONS = ["pick the red cube", "place the green block into the blue bowl"]
"""The instructions of the fixtures' batch (as in make_fixtures.py)."""
SPECS = {
    "interleaved_1cam": {"cameras": ("top",), "horizon": 5, "steps": 3},
    "cross_2cam": {"cameras": ("front", "wrist"), "horizon": 4, "steps": 4},
}


def policy_cfg(name: str, **settings) -> VLAPolicyCfg:
    """The VLA config that loads fixture ``name`` (``settings``: :class:`SmolVLACfg` fields, ``policy``: others)."""
    spec = SPECS[name]
    extra = settings.pop("policy", {})
    smolvla = SmolVLACfg(pretrained=str(FIXTURES / name), **settings)
    return VLAPolicyCfg(backbone="smolvla", backbone_path=str(VLM), cameras=spec["cameras"], horizon=spec["horizon"],
                        num_inference_steps=spec["steps"], smolvla=smolvla, **extra)  # fmt: skip


def io(name: str) -> dict[str, torch.Tensor]:
    """The fixture's inputs and LeRobot's outputs."""
    return load_file(FIXTURES / name / "io.safetensors")


def load(name: str, **settings) -> tuple[SmolVLAPolicy, dict[str, torch.Tensor]]:
    """``(policy in eval mode, io)`` of fixture ``name``."""
    data = io(name)
    policy = SmolVLAPolicy(data["state_raw"].shape[1], data["actions_raw"].shape[2], policy_cfg(name, **settings))
    return policy.eval(), data


def raw_obs(policy: SmolVLAPolicy, data: dict[str, torch.Tensor]) -> TensorDict:
    """The fixture's raw observation groups: state, instruction token ids, uint8 cameras."""
    groups = {"policy": data["state_raw"], INSTRUCTION_GROUP: policy.encode_instructions(INSTRUCTIONS)}
    for source, target in policy.cameras.items():  # dataset camera -> the checkpoint camera it feeds
        groups[camera_group(source)] = data[f"observation.images.{target}.uint8"]
    return TensorDict(groups, batch_size=[data["state_raw"].shape[0]])


def model_inputs(policy: SmolVLAPolicy, data: dict[str, torch.Tensor]) -> TensorDict:
    """Normalized inputs built from LeRobot's own preprocessed batch (its token ids and normalized state)."""
    lr = policy.lerobot
    pad = lr.tokenizer_max_length - data["tokens"].shape[1]
    tokens = torch.nn.functional.pad(data["tokens"], (0, pad))
    mask = torch.nn.functional.pad(data["token_mask"].long(), (0, pad))
    state = torch.nn.functional.pad(data["state_n"], (0, lr.max_state_dim - data["state_n"].shape[1]))
    groups = {"state": state, INSTRUCTION_GROUP: torch.cat([tokens, mask], dim=1)}
    for source, target in policy.cameras.items():  # dataset camera -> the checkpoint camera it feeds
        groups[camera_group(source)] = data[f"observation.images.{target}.uint8"].permute(0, 3, 1, 2).float() / 255.0
    return TensorDict(groups, batch_size=[state.shape[0]])
