"""What a run sets about a SmolVLA policy (``--agent.policy.backbone smolvla``): the LeRobot checkpoint to start
from, LeRobot's freeze options, memory and precision switches, and the architecture of a policy built from scratch.

CLI: ``--agent.policy.smolvla.<field>``. This module imports nothing of rslkit's models (the VLA config nests it).
"""

from __future__ import annotations

from dataclasses import dataclass

from rslkit.utils.validation import expect, finite


@dataclass
class SmolVLACfg:
    """SmolVLA settings of a VLA policy (used with ``--agent.policy.backbone smolvla`` only)."""

    pretrained: str = ""
    """A LeRobot SmolVLA checkpoint directory (``config.json``, ``model.safetensors``, the pre/post-processor files,
    as ``lerobot`` >= 0.4 saves it); empty: a SmolVLA-architecture policy with random weights, its VLM built from
    ``--agent.policy.backbone_path`` and the architecture fields below."""
    camera_map: tuple[str, ...] = ()
    """``dataset_camera=checkpoint_camera`` pairs: which of the checkpoint's cameras (``observation.images.<name>``)
    each of ``--agent.policy.cameras`` feeds (LeRobot renamed cameras across versions). Unmapped cameras keep their
    name. Checkpoint cameras that no dataset camera feeds become empty images (LeRobot's ``empty_cameras``)."""
    freeze_vision_encoder: bool = True
    """LeRobot's ``freeze_vision_encoder``: the VLM's vision encoder does not train."""
    train_expert_only: bool = True
    """LeRobot's ``train_expert_only``: the whole VLM is frozen; the action expert and the projections train."""
    train_state_proj: bool = True
    """LeRobot's ``train_state_proj``: the state projection (the prefix's state token) trains."""
    use_cache: bool = True
    """Sampling runs the VLM over the prefix once and keeps its keys/values for every Euler step (LeRobot's
    ``use_cache``); False recomputes the prefix at each step (same chunk, K times the VLM cost)."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward pass instead of keeping them (less memory, ~1/3 more
    compute); training only."""
    bf16: bool = False
    """bfloat16 autocast of the VLM and expert on CUDA (weights stay float32). Refused on other devices."""
    max_state_dim: int = 32
    """From scratch: the state is zero-padded to this size (LeRobot's default 32)."""
    max_action_dim: int = 32
    """From scratch: actions are zero-padded to this size."""
    tokenizer_max_length: int = 48
    """From scratch: instructions longer than this many tokens are refused (LeRobot truncates them silently)."""
    expert_width_multiplier: float = 0.75
    """From scratch: the action expert's width relative to the VLM's text width."""
    self_attn_every_n_layers: int = 2
    """From scratch: every n-th layer of the expert is self-attention over [prefix, actions], the others
    cross-attention to the VLM layer's keys/values; <= 0: cross-attention in every layer."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for settings no SmolVLA can be built with."""
        for name in ("max_state_dim", "max_action_dim", "tokenizer_max_length"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        mult = self.expert_width_multiplier
        expect(finite(mult) and 0 < mult <= 4, "expert_width_multiplier", f"must be in (0, 4], got {mult}")
        every = self.self_attn_every_n_layers
        expect(isinstance(every, int), "self_attn_every_n_layers", f"must be an integer, got {every}")
        for pair in self.camera_map:
            source, _, target = pair.partition("=")
            expect(
                bool(source) and bool(target) and "=" not in target,
                "camera_map",
                f"must be dataset_camera=checkpoint_camera pairs, got {pair!r}",
            )
        sources = [pair.partition("=")[0] for pair in self.camera_map]
        expect(len(set(sources)) == len(sources), "camera_map", f"maps a dataset camera twice: {self.camera_map}")

    def camera_names(self, cameras: tuple[str, ...]) -> dict[str, str]:
        """``{dataset camera: checkpoint camera}`` for the policy's ``cameras`` (unmapped ones keep their name)."""
        pairs = dict(pair.partition("=")[::2] for pair in self.camera_map)
        return {cam: pairs.get(cam, cam) for cam in cameras}
