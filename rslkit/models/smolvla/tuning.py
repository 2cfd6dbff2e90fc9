"""Which weights of a SmolVLA train: LeRobot's freeze options, or LoRA adapters (peft) and nothing else.

LeRobot's options (``--agent.policy.smolvla.<flag>``): ``train_expert_only`` freezes the whole VLM (vision
encoder, connector, text layers); without it the VLM trains except its unused ``lm_head`` (its last layer's output
block and final norm get no gradient: the expert reads only the layers' keys and values); ``freeze_vision_encoder``
freezes the vision encoder either way; ``train_state_proj`` trains the state token's projection. The action expert
and the action/time projections always train. Frozen modules stay in eval mode.

LoRA (``--agent.policy.backbone_trainable lora``): every base weight is frozen and low-rank adapters go on the
linear layers named by ``--agent.policy.lora_targets``: those of the action expert (``q_proj``, ``k_proj``,
``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``) and the projections (``state_proj``,
``action_in_proj``, ``action_out_proj``, ``action_time_mlp_in``, ``action_time_mlp_out``); LeRobot's PEFT
default is ``q_proj,v_proj`` plus the five projections. Saving in LeRobot's format merges the adapters
(:func:`lerobot_state_dict`).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from rslkit.models.smolvla.flow import SmolVLAFlow
from rslkit.models.smolvla.settings import SmolVLACfg
from rslkit.models.vla.backbone_tuning import linear_names
from rslkit.models.vla.config import VLAPolicyCfg

PROJECTIONS = ("state_proj", "action_in_proj", "action_out_proj", "action_time_mlp_in", "action_time_mlp_out")
LEROBOT_LORA_TARGETS = ("q_proj", "v_proj", *PROJECTIONS)


def freeze(flow: SmolVLAFlow, settings: SmolVLACfg) -> None:
    """Set ``requires_grad`` per LeRobot's freeze options (module doc)."""
    vlm: Any = flow.vlm_with_expert.vlm
    flow.requires_grad_(True)
    vlm.lm_head.requires_grad_(False)
    if settings.freeze_vision_encoder:
        vlm.model.vision_model.requires_grad_(False)
    if settings.train_expert_only:
        vlm.requires_grad_(False)
    flow.state_proj.requires_grad_(settings.train_state_proj)


def frozen_modules(flow: SmolVLAFlow, settings: SmolVLACfg) -> list[nn.Module]:
    """The modules that stay in eval mode while the policy trains."""
    vlm: Any = flow.vlm_with_expert.vlm
    if settings.train_expert_only:
        return [vlm]
    return [vlm.model.vision_model] if settings.freeze_vision_encoder else []


def add_lora(flow: SmolVLAFlow, cfg: VLAPolicyCfg) -> None:
    """Freeze every weight of ``flow`` and inject LoRA adapters into the linear layers ``cfg.lora_targets`` of the
    action expert and the projections (module doc).

    Raises:
        ImportError: ``peft`` is missing.
        ValueError: a target names no linear layer of the expert or a projection.
    """
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as err:
        raise ImportError("backbone_trainable 'lora' needs peft: pip install -e '.[vla]'.") from err
    expert_names = linear_names(flow.vlm_with_expert.lm_expert)
    targets = tuple(cfg.lora_targets)
    unknown = [t for t in targets if t not in expert_names and t not in PROJECTIONS]
    if unknown:
        raise ValueError(
            f"lora_targets {unknown} name no linear layer of SmolVLA's action expert or projections; set "
            f"--agent.policy.lora_targets to some of {sorted({*expert_names, *PROJECTIONS})} (LeRobot's default: "
            f"{','.join(LEROBOT_LORA_TARGETS)})."
        )
    in_expert = [re.escape(t) for t in targets if t in expert_names]
    top = [re.escape(t) for t in targets if t in PROJECTIONS]
    parts = []
    if in_expert:
        parts.append(rf"vlm_with_expert\.lm_expert\.layers\.\d+\.(self_attn|mlp)\.({'|'.join(in_expert)})")
    if top:
        parts.append(rf"({'|'.join(top)})")
    flow.requires_grad_(False)
    config = LoraConfig(
        r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules="|".join(parts),
        bias="none",
    )  # fmt: skip
    inject_adapter_in_model(config, flow)


def lerobot_state_dict(flow: SmolVLAFlow) -> dict[str, torch.Tensor]:
    """``flow``'s weights under LeRobot's names (``model.`` prefix left to the caller), LoRA adapters merged into
    their base weights (``W + (alpha / r) B A``), detached float32 copies."""
    state = flow.state_dict()
    out = {
        name.replace(".base_layer.", "."): tensor.detach().float().clone()
        for name, tensor in state.items()
        if ".lora_" not in name
    }
    if len(out) == len(state):
        return out
    from peft.tuners.lora import LoraLayer  # adapters exist, so peft is installed

    with torch.no_grad():
        for name, module in flow.named_modules():
            if isinstance(module, LoraLayer):
                out[f"{name}.weight"] += module.get_delta_weight("default").float()  # type: ignore[attr-defined]
    return out
