"""Agent configs of ``so101-pick-place``: the lift's PPO and SAC settings (untuned here), VLA behaviour cloning
from the front camera, the instruction and the proprioceptive state, and its ReinFlow fine-tuning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.reinflow import ReinFlowCfg
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.recipes.sac_defaults import robot_sac_cfg
from rslkit.recipes.so101_lift import so101_lift_ppo_cfg
from rslkit.runners.vla_reinflow_runner import VLAReinFlowRunnerCfg
from rslkit.runners.vla_runner import VLABCRunnerCfg


def so101_pick_place_vla_cfg() -> VLABCRunnerCfg:
    """VLA BC: the ``front`` camera at 64x64 (16 tokens), MiniLM instructions, ``proprio`` state (joints and last
    action: no cube or goal position), chunks of 16 (0.32 s at 50 Hz), a 4-layer 128-wide action expert."""
    return VLABCRunnerCfg(
        policy=VLAPolicyCfg(
            cameras=("front",),
            image_size=(64, 64),
            state_group="proprio",
            language_dim=384,
            horizon=16,
            num_inference_steps=4,
        ),  # fmt: skip
        max_iterations=100,
        updates_per_iteration=100,
        eval_interval=25,
    )


def so101_pick_place_vla_reinflow_cfg() -> VLAReinFlowRunnerCfg:
    """ReinFlow over the vla-bc policy (its settings come from the checkpoint) with a critic on the privileged
    ``policy`` group (arm, cube, goal): 10 decisions of 16 steps per env and iteration (about one 150-step episode),
    rewards scaled to keep chunk returns O(1), 3 critic-only iterations first. Untuned."""
    return VLAReinFlowRunnerCfg(
        policy=so101_pick_place_vla_cfg().policy,
        critic_group="policy",
        algorithm=ReinFlowCfg(reward_scale=0.01, critic_warmup_iterations=3, num_mini_batches=4),
        num_steps_per_env=10,
        max_iterations=50,
        eval_interval=10,
    )


RECIPES: dict[str, Callable[[], Any]] = {
    "ppo": so101_lift_ppo_cfg,
    "sac": lambda: robot_sac_cfg(gamma=0.97),
    "vla-bc": so101_pick_place_vla_cfg,
    "vla-reinflow": so101_pick_place_vla_reinflow_cfg,
}
"""Algorithm name -> default agent config of ``so101-pick-place``."""

ENV_OVERRIDES: dict[str, list[str]] = {"vla-bc": ["--env.cameras", "front"], "vla-reinflow": ["--env.cameras", "front"]}
"""The VLA recipes read the front camera, which the env renders only when asked."""
