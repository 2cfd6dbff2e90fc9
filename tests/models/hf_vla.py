"""Shared builders of the tests of pretrained VLA backbones: a policy with set normalizer statistics (6 state
columns, 3 actions) and two-camera observations at 16x16 with an 8-wide instruction embedding."""

import torch
from tensordict import TensorDict

from rslkit.models.vla import INSTRUCTION_GROUP, VLAPolicy, VLAPolicyCfg


def normalized_policy(cfg: VLAPolicyCfg) -> VLAPolicy:
    """``VLAPolicy(6, 3, cfg)`` from seed 0 with fixed, non-trivial normalizer statistics."""
    torch.manual_seed(0)
    policy = VLAPolicy(6, 3, cfg)
    policy.obs_normalizer.set_stats(-2 * torch.ones(6), 3 * torch.ones(6))
    policy.action_normalizer.set_stats(torch.tensor([-1.0, -2.0, 0.0]), torch.tensor([1.0, 2.0, 0.5]))
    return policy


def two_camera_obs(b: int = 4, seed: int = 1) -> TensorDict:
    """``b`` random observations: ``policy [b, 6]``, the instruction ``[b, 8]``, cameras front and wrist."""
    g = torch.Generator().manual_seed(seed)
    groups = {"policy": torch.randn(b, 6, generator=g), INSTRUCTION_GROUP: torch.randn(b, 8, generator=g)}
    for c in ("front", "wrist"):
        groups[f"camera_{c}"] = torch.randint(0, 256, (b, 16, 16, 3), generator=g, dtype=torch.uint8)
    return TensorDict(groups, batch_size=[b])
