"""Agent configs of ``so101-pick-place``: the lift's PPO and SAC settings (untuned here), VLA behaviour cloning
from the table camera, the instruction and the proprioceptive state, and its ReinFlow fine-tuning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rslkit.algorithms.flow_bc import FlowBCCfg
from rslkit.algorithms.reinflow import ReinFlowCfg
from rslkit.models.vla.config import VLAPolicyCfg
from rslkit.recipes.sac_defaults import robot_sac_cfg
from rslkit.recipes.so101_lift import so101_lift_ppo_cfg
from rslkit.runners.dsrl_runner import dsrl_cfg
from rslkit.runners.vla_bc_data import VLABCRunnerCfg
from rslkit.runners.vla_reinflow_runner import VLAReinFlowRunnerCfg


def so101_pick_place_vla_cfg() -> VLABCRunnerCfg:
    """VLA BC: the ``table`` camera at 64x64 as 32 spatial-softmax keypoints, MiniLM instructions, ``proprio`` state
    (joints and last action: no cube or goal position), chunks of 16 (0.32 s at 50 Hz), a 4-layer 128-wide action
    expert; an auxiliary probe regresses the cube's position from the observation tokens (the dataset's
    ``observation.environment_state``, recorded with ``--env_state_group policy``), weight 10; 70 iterations of 100
    updates. What it reaches, and what grid tokens on the front camera without the probe reach: docs/benchmarks.md,
    section 16."""
    return VLABCRunnerCfg(
        policy=VLAPolicyCfg(
            cameras=("table",),
            image_size=(64, 64),
            state_group="proprio",
            language_dim=384,
            horizon=16,
            num_inference_steps=4,
            image_tokens="keypoints",
        ),  # fmt: skip
        algorithm=FlowBCCfg(aux_state_coef=10.0),
        aux_state="policy",
        aux_state_columns="cube.*,cube_minus_grasp_point.*",
        max_iterations=70,
        updates_per_iteration=100,
        eval_interval=10,
    )


def so101_pick_place_vla_reinflow_cfg() -> VLAReinFlowRunnerCfg:
    """ReinFlow over the vla-bc policy's action expert (the observation tokenizer keeps its BC weights; the policy's
    settings come from the checkpoint) with a critic on the privileged ``policy`` group (arm, cube, goal): 10
    decisions of 16 steps per env and iteration (about one 150-step episode), rewards scaled to keep chunk returns
    O(1), 3 critic-only iterations first. Small exploration noise (sigma in [0.02, 0.08] per Euler step: the
    rollouts stay near the deterministic policy, which succeeds most of the time), actor lr 1e-5, a W2 pull to the
    BC policy and no entropy bonus. It keeps the BC policy's success but adds nothing measurable yet, and the paper's
    noise ([0.10, 0.24]) loses success (docs/benchmarks.md, section 16)."""
    return VLAReinFlowRunnerCfg(
        policy=so101_pick_place_vla_cfg().policy,
        critic_group="policy",
        trainable="action_expert",
        algorithm=ReinFlowCfg(
            reward_scale=0.01,
            critic_warmup_iterations=3,
            num_mini_batches=4,
            sigma_min=0.02,
            sigma_max=0.08,
            actor_lr=1e-5,
            w2_coef=1.0,
            entropy_coef=0.0,
        ),
        num_steps_per_env=10,
        max_iterations=20,
        eval_interval=5,
    )


RECIPES: dict[str, Callable[[], Any]] = {
    "ppo": so101_lift_ppo_cfg,
    "sac": lambda: robot_sac_cfg(gamma=0.97),
    "vla-bc": so101_pick_place_vla_cfg,
    "vla-reinflow": so101_pick_place_vla_reinflow_cfg,
    "dsrl": lambda: dsrl_cfg(robot_sac_cfg(gamma=0.97), chunk=16),
}
"""Algorithm name -> default agent config of ``so101-pick-place``."""

ENV_SETTINGS: dict[str, dict[str, Any]] = {
    "vla-bc": {"cameras": ("table",)},
    "vla-reinflow": {"cameras": ("table",)},
    "dsrl": {"cameras": ("table",)},
}
"""The VLA recipes read the table camera, which the env renders only when asked."""
