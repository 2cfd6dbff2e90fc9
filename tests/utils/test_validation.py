"""Config validation: every built-in recipe is valid, and a bad value fails at construction naming its full path."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from rslkit.algorithms.flow_bc import FlowBCCfg
from rslkit.algorithms.ppo import PPOCfg
from rslkit.algorithms.reinflow import ReinFlowCfg
from rslkit.algorithms.sac import SACCfg
from rslkit.envs.registry import make_env
from rslkit.envs.tasks.pendulum import PendulumCfg, PendulumTask
from rslkit.envs.torch_task import TaskCfg
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.flow.policy import FlowPolicyCfg
from rslkit.models.sac_networks import SACNetworkCfg
from rslkit.recipes import agent_cfg, recipe_pairs
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.runners.reinflow_runner import ReinFlowRunnerCfg
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.storage.replay_buffer import ReplayCfg
from rslkit.utils.validation import ConfigError, validate

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("task, algo", recipe_pairs())
def test_every_recipe_config_is_valid(task, algo):
    validate(agent_cfg(task, algo), "agent")


@pytest.mark.parametrize(
    "cfg",
    [
        PPOCfg(),
        SACCfg(),
        FlowBCCfg(),
        ReinFlowCfg(),
        PolicyCfg(),
        SACNetworkCfg(),
        FlowPolicyCfg(),
        ReplayCfg(),
        PPORunnerCfg(),
        SACRunnerCfg(),
        FlowBCRunnerCfg(),
        ReinFlowRunnerCfg(),
        TaskCfg(),
        PendulumCfg(),
    ],
    ids=lambda c: type(c).__name__,
)
def test_defaults_are_valid(cfg):
    validate(cfg, "x")


def _setter(path: str, value: Any) -> Callable[[Any], None]:
    def apply(cfg: Any) -> None:
        *parents, name = path.split(".")
        for p in parents:
            cfg = getattr(cfg, p)
        setattr(cfg, name, value)

    return apply


# (agent config class, field path below --agent, bad value)
BAD_AGENT_VALUES: list[tuple[type, str, Any]] = [
    # PPO runner and its parts
    (PPORunnerCfg, "save_interval", 0),
    (PPORunnerCfg, "max_iterations", -1),
    (PPORunnerCfg, "logger", ("tensorboard", "mlflow")),
    (PPORunnerCfg, "num_steps_per_env", 0),
    (PPORunnerCfg, "episode_stats_window", 0),
    (PPORunnerCfg, "algorithm.gamma", NAN),
    (PPORunnerCfg, "algorithm.gamma", 0.0),
    (PPORunnerCfg, "algorithm.gamma", 1.5),
    (PPORunnerCfg, "algorithm.lam", -0.1),
    (PPORunnerCfg, "algorithm.lam", NAN),
    (PPORunnerCfg, "algorithm.learning_rate", 0.0),
    (PPORunnerCfg, "algorithm.learning_rate", INF),
    (PPORunnerCfg, "algorithm.clip_param", 0.0),
    (PPORunnerCfg, "algorithm.max_grad_norm", 0.0),
    (PPORunnerCfg, "algorithm.num_mini_batches", 0),
    (PPORunnerCfg, "algorithm.num_learning_epochs", 0),
    (PPORunnerCfg, "algorithm.value_loss_coef", NAN),
    (PPORunnerCfg, "algorithm.entropy_coef", -0.01),
    (PPORunnerCfg, "algorithm.schedule", "cosine"),
    (PPORunnerCfg, "algorithm.desired_kl", 0.0),
    (PPORunnerCfg, "algorithm.lr_factor", 0.5),
    (PPORunnerCfg, "algorithm.min_lr", 0.0),
    (PPORunnerCfg, "algorithm.max_lr", 1e-6),
    (PPORunnerCfg, "algorithm.micro_batch_size", -1),
    (PPORunnerCfg, "policy.actor_hidden_dims", (64, 0)),
    (PPORunnerCfg, "policy.critic_hidden_dims", (-3,)),
    (PPORunnerCfg, "policy.activation", "swish"),
    (PPORunnerCfg, "policy.distribution", "laplace"),
    (PPORunnerCfg, "policy.init_std", 0.0),
    (PPORunnerCfg, "policy.init_std", NAN),
    (PPORunnerCfg, "policy.min_std", 0.0),
    (PPORunnerCfg, "policy.max_std", 0.5),
    (PPORunnerCfg, "policy.rnn_type", "transformer"),
    # SAC runner and its parts
    (SACRunnerCfg, "save_interval", 0),
    (SACRunnerCfg, "num_steps_per_env", 0),
    (SACRunnerCfg, "random_steps", -1),
    (SACRunnerCfg, "learning_starts", -1),
    (SACRunnerCfg, "episode_stats_window", 0),
    (SACRunnerCfg, "algorithm.gamma", NAN),
    (SACRunnerCfg, "algorithm.tau", 0.0),
    (SACRunnerCfg, "algorithm.tau", 1.5),
    (SACRunnerCfg, "algorithm.n_step", 0),
    (SACRunnerCfg, "algorithm.batch_size", 0),
    (SACRunnerCfg, "algorithm.utd_ratio", 0.0),
    (SACRunnerCfg, "algorithm.actor_lr", NAN),
    (SACRunnerCfg, "algorithm.critic_lr", -1e-3),
    (SACRunnerCfg, "algorithm.alpha_lr", 0.0),
    (SACRunnerCfg, "algorithm.init_alpha", 0.0),
    (SACRunnerCfg, "algorithm.target_entropy", NAN),
    (SACRunnerCfg, "algorithm.policy_delay", 0),
    (SACRunnerCfg, "algorithm.max_grad_norm", -1.0),
    (SACRunnerCfg, "policy.actor_hidden_dims", (0,)),
    (SACRunnerCfg, "policy.activation", "swish"),
    (SACRunnerCfg, "policy.log_std_max", -6.0),
    (SACRunnerCfg, "replay.capacity", 0),
    (SACRunnerCfg, "replay.storage", "disk"),
    (SACRunnerCfg, "replay.demo_fraction", 1.5),
    (SACRunnerCfg, "replay.max_memory_fraction", 0.0),
    # flow-bc runner and its parts
    (FlowBCRunnerCfg, "save_interval", 0),
    (FlowBCRunnerCfg, "updates_per_iteration", 0),
    (FlowBCRunnerCfg, "eval_interval", -1),
    (FlowBCRunnerCfg, "algorithm.learning_rate", NAN),
    (FlowBCRunnerCfg, "algorithm.weight_decay", -1e-6),
    (FlowBCRunnerCfg, "algorithm.batch_size", 1),
    (FlowBCRunnerCfg, "algorithm.max_grad_norm", 0.0),
    (FlowBCRunnerCfg, "algorithm.ema_decay", 1.0),
    (FlowBCRunnerCfg, "algorithm.bootstrap_fraction", 2.0),
    (FlowBCRunnerCfg, "algorithm.min_step_log2", 0),
    (FlowBCRunnerCfg, "policy.horizon", 0),
    (FlowBCRunnerCfg, "policy.num_inference_steps", 0),
    (FlowBCRunnerCfg, "policy.hidden_dim", 0),
    (FlowBCRunnerCfg, "policy.num_blocks", -1),
    (FlowBCRunnerCfg, "policy.time_embed_dim", 7),
    (FlowBCRunnerCfg, "policy.objective", "diffusion"),
    (FlowBCRunnerCfg, "policy.obs_group", ""),
    (FlowBCRunnerCfg, "policy.max_future_offset", -1),
    (FlowBCRunnerCfg, "policy.future_state_slice", (0, 5)),
    (FlowBCRunnerCfg, "policy.future_state_source", "both"),
    # ReinFlow runner and its parts
    (ReinFlowRunnerCfg, "save_interval", 0),
    (ReinFlowRunnerCfg, "num_steps_per_env", 0),
    (ReinFlowRunnerCfg, "eval_interval", -1),
    (ReinFlowRunnerCfg, "algorithm.num_inference_steps", -1),
    (ReinFlowRunnerCfg, "algorithm.noise", "none"),
    (ReinFlowRunnerCfg, "algorithm.sigma_min", 0.0),
    (ReinFlowRunnerCfg, "algorithm.sigma_min", 0.5),
    (ReinFlowRunnerCfg, "algorithm.sigma_max", NAN),
    (ReinFlowRunnerCfg, "algorithm.noise_hidden_dims", (0,)),
    (ReinFlowRunnerCfg, "algorithm.critic_hidden_dims", (64, -1)),
    (ReinFlowRunnerCfg, "algorithm.gamma", NAN),
    (ReinFlowRunnerCfg, "algorithm.lam", 1.1),
    (ReinFlowRunnerCfg, "algorithm.clip_param", 0.0),
    (ReinFlowRunnerCfg, "algorithm.actor_lr", 0.0),
    (ReinFlowRunnerCfg, "algorithm.critic_lr", INF),
    (ReinFlowRunnerCfg, "algorithm.num_learning_epochs", 0),
    (ReinFlowRunnerCfg, "algorithm.num_mini_batches", 0),
    (ReinFlowRunnerCfg, "algorithm.entropy_coef", NAN),
    (ReinFlowRunnerCfg, "algorithm.w2_coef", -1.0),
    (ReinFlowRunnerCfg, "algorithm.critic_warmup_iterations", -1),
    (ReinFlowRunnerCfg, "algorithm.max_grad_norm", 0.0),
    (ReinFlowRunnerCfg, "algorithm.target_kl", -0.1),
    (ReinFlowRunnerCfg, "algorithm.reward_scale", 0.0),
    (ReinFlowRunnerCfg, "policy.horizon", 0),
]


@pytest.mark.parametrize(
    "cfg_cls, path, value", BAD_AGENT_VALUES, ids=[f"{c.__name__}.{p}={v}" for c, p, v in BAD_AGENT_VALUES]
)
def test_bad_value_names_its_full_path(cfg_cls, path, value):
    cfg = cfg_cls()
    _setter(path, value)(cfg)
    with pytest.raises(ConfigError, match=rf"^Invalid config value --agent\.{path}: ") as err:
        validate(cfg, "agent")
    assert err.value.field == f"agent.{path}"


def test_fixed_noise_needs_no_sigma_min():
    validate(ReinFlowCfg(noise="fixed", sigma_min=0.0), "agent.algorithm")


def test_future_state_slice_with_an_offset_is_valid():
    validate(FlowPolicyCfg(max_future_offset=4, future_state_slice=(0, 2)), "agent.policy")
    with pytest.raises(ConfigError, match="--agent.policy.future_state_slice"):
        validate(FlowPolicyCfg(max_future_offset=4), "agent.policy")


@pytest.mark.parametrize(
    "path, value, match",
    [
        ("algorithm.gamma", NAN, r"--agent\.algorithm\.gamma: must be in \(0, 1\], got nan"),
        ("save_interval", 0, r"--agent\.save_interval: must be >= 1, got 0"),
        ("num_steps_per_env", 0, r"--agent\.num_steps_per_env: must be an integer >= 1, got 0"),
    ],
)
def test_on_policy_runner_refuses_bad_config_at_construction(path, value, match):
    cfg = PPORunnerCfg(logger=())
    _setter(path, value)(cfg)
    env = make_env("pendulum", num_envs=2)
    with pytest.raises(ConfigError, match=match):
        OnPolicyRunner(env, cfg, None, "cpu")


@pytest.mark.parametrize("field, value", [("num_envs", 0), ("episode_length", 0)])
def test_task_refuses_bad_config_naming_env_path(field, value):
    with pytest.raises(ConfigError, match=rf"--env\.{field}: must be an integer >= 1, got {value}"):
        PendulumTask(PendulumCfg(**{field: value}))
