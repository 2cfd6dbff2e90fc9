"""Export the tiny VLA policy of the ROS tests: ``.venv/bin/python tests/ros2/export_vla.py OUT.onnx``.

The ROS venv has no torch, so ``conftest.vla_policy`` runs this with the main venv: a VLA policy built from a
config (one 16x16 front camera, an 8-d instruction embedding, state = joint_pos + joint_vel of 3 joints, chunks of
8, 50 Hz) exported with an instruction table of :data:`INSTRUCTIONS` (random embeddings: nothing downloads).
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from rslkit.deploy.export import export_policy
from rslkit.models.vla import VLAPolicy, VLAPolicyCfg

INSTRUCTIONS = ["pick up the cube", "push the cube left"]


def main(out: str) -> None:
    """Write the policy to ``out``."""
    torch.manual_seed(0)
    cfg = VLAPolicyCfg(cameras=("front",), image_size=(16, 16), language_dim=8, horizon=8, d_model=32, num_heads=4,
                       num_layers=2, cnn_channels=(8, 16), token_grid=2, time_embed_dim=16)  # fmt: skip
    policy = VLAPolicy(6, 3, cfg)
    policy.obs_normalizer.set_stats(-torch.ones(6), torch.ones(6))
    policy.action_normalizer.set_stats(-0.5 * torch.ones(3), 0.5 * torch.ones(3))
    rng = np.random.default_rng(0)
    table = {t: rng.normal(size=8).astype(np.float32) for t in INSTRUCTIONS}
    export_policy(policy.eval(), out, "vla-bc", control_rate_hz=50.0, instructions=table)


if __name__ == "__main__":
    main(sys.argv[1])
