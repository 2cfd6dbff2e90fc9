"""Tiny pendulum runners saved as checkpoints (nothing trained; weights randomized so outputs are not ~0)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rslkit.algorithms.ppo import PPOCfg
from rslkit.envs.registry import get_task
from rslkit.models.actor_critic import PolicyCfg
from rslkit.models.flow import FlowPolicyCfg
from rslkit.models.sac_networks import SACNetworkCfg
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.off_policy_runner import OffPolicyRunner
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.runners.pretrain_runner import PretrainRunner
from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.utils.config import to_dict
from rslkit.utils.seeding import seed_everything


def _env():
    spec = get_task("pendulum")
    cfg = spec.env_cfg()
    cfg.num_envs, cfg.episode_length = 4, 20
    return spec.make_env(cfg, "cpu"), {"task": "pendulum", "env_cfg": to_dict(cfg)}


@torch.no_grad()
def randomize(module: torch.nn.Module, obs_dim: int = 3) -> None:
    """Random weights and normalizer statistics, so every part of the graph matters."""
    for name, p in module.named_parameters():
        p.copy_(torch.randn_like(p) * (0.3 if "log_std" not in name else 0.2))
    for name, b in module.named_buffers():
        if name.endswith("normalizers.policy.mean") or name.endswith("normalizer.center"):
            b.copy_(torch.randn_like(b))
        elif name.endswith("normalizers.policy.var"):
            b.copy_(torch.rand_like(b) + 0.5)
        elif name.endswith("normalizer.half_range"):
            b.copy_(torch.rand_like(b) + 0.5)


def ppo_checkpoint(path: Path, **policy) -> OnPolicyRunner:
    """A PPO runner with a 16-wide actor saved to ``path``."""
    seed_everything(0)
    env, info = _env()
    cfg = PPORunnerCfg(
        algorithm=PPOCfg(),
        policy=PolicyCfg(actor_hidden_dims=(16, 16), critic_hidden_dims=(16,), **policy),
        num_steps_per_env=4,
        logger=(),
    )
    runner = OnPolicyRunner(env, cfg, None, "cpu", run_info=info)
    randomize(runner.policy)
    runner.save(path)
    return runner


def sac_checkpoint(path: Path) -> OffPolicyRunner:
    """A SAC runner with a 16-wide actor saved to ``path``."""
    seed_everything(0)
    env, info = _env()
    cfg = SACRunnerCfg(policy=SACNetworkCfg(actor_hidden_dims=(16, 16), critic_hidden_dims=(16,)), logger=())
    runner = OffPolicyRunner(env, cfg, None, "cpu", run_info=info)
    randomize(runner.policy)
    runner.save(path)
    return runner


def flow_checkpoint(path: Path, **policy) -> PretrainRunner:
    """A flow-bc runner (horizon 4, K 4, 32 wide) saved to ``path``; the EMA copy is the deployed policy."""
    seed_everything(0)
    env, info = _env()
    cfg = FlowBCRunnerCfg(
        policy=FlowPolicyCfg(**{"horizon": 4, "num_inference_steps": 4, "hidden_dim": 32, "num_blocks": 2, **policy}),
        logger=(),
    )
    runner = PretrainRunner(env, cfg, None, "cpu", run_info=info)
    randomize(runner.policy)
    runner.save(path)
    return runner


def reinflow_checkpoint(path: Path) -> ReinFlowRunner:
    """A ReinFlow runner (horizon 4, K 2, no pretrained file) saved to ``path``."""
    seed_everything(0)
    env, info = _env()
    policy = FlowPolicyCfg(horizon=4, num_inference_steps=2, hidden_dim=32, num_blocks=1)
    runner = ReinFlowRunner(env, ReinFlowRunnerCfg(policy=policy, logger=()), None, "cpu", run_info=info)
    randomize(runner.policy)
    runner.save(path)
    return runner


@pytest.fixture
def build() -> SimpleNamespace:
    """Checkpoint builders: ``build.ppo(path, **policy)``, ``.sac``, ``.flow(path, **policy)``, ``.reinflow``."""
    return SimpleNamespace(
        ppo=ppo_checkpoint, sac=sac_checkpoint, flow=flow_checkpoint, reinflow=reinflow_checkpoint, randomize=randomize
    )
