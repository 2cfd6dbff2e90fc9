"""Algorithm name -> (agent config class, runner class): the algorithms every entry point can train."""

from __future__ import annotations

from typing import Any

from rslkit.runners.distillation_config import DistillationRunnerCfg
from rslkit.runners.distillation_runner import DistillationRunner
from rslkit.runners.dsrl_runner import DSRLRunner, DSRLRunnerCfg
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.off_policy_runner import OffPolicyRunner
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.runners.pretrain_runner import PretrainRunner
from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.runners.vla_bc_data import VLABCRunnerCfg
from rslkit.runners.vla_reinflow_runner import VLAReinFlowRunner, VLAReinFlowRunnerCfg

ALGORITHMS: dict[str, tuple[type, Any]] = {
    "ppo": (PPORunnerCfg, OnPolicyRunner),
    "sac": (SACRunnerCfg, OffPolicyRunner),
    "flow-bc": (FlowBCRunnerCfg, PretrainRunner),
    "reinflow": (ReinFlowRunnerCfg, ReinFlowRunner),
    "vla-bc": (VLABCRunnerCfg, PretrainRunner),
    "vla-reinflow": (VLAReinFlowRunnerCfg, VLAReinFlowRunner),
    "distillation": (DistillationRunnerCfg, DistillationRunner),
    "dsrl": (DSRLRunnerCfg, DSRLRunner),
}
"""Each runner takes ``(env, cfg, log_dir, device, dist_info, run_info)`` and provides ``learn()``,
``load(path, weights_only)``, ``save(path)``, ``iteration`` and ``inference_policy()``. Behaviour cloning has one
runner: the config's dataset/policy pair (``cfg.make_data``) makes it flow-bc or vla-bc."""


def get_algorithm(algo: str) -> tuple[type, Any]:
    """Config class and runner class of an algorithm.

    Raises:
        ValueError: for an unknown algorithm name.
    """
    if algo not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm '{algo}'; available: {sorted(ALGORITHMS)}.")
    return ALGORITHMS[algo]
