"""DSRL: noise-space SAC over a frozen flow chunk policy (``--algo dsrl --pretrained CKPT``).

Wagenmaker et al. 2025 ("Steering your diffusion policy with latent space RL"): the behaviour-cloned flow policy
(a flow-bc or vla-bc checkpoint) stays frozen; SAC learns a small actor ``pi(w | o)`` over its initial noise, the
*latent action* ``w in [-1, 1]^(Ta A)`` (tanh-squashed, scaled to ``x0 = latent_scale * w``; its mean starts at
``w = 0``), and critics ``Q(o, w)``. The frozen policy's deterministic sampler turns ``x0`` into the executed chunk;
no gradient passes through it, so it works with any flow chunk policy. The env SAC sees is
:class:`~rslkit.runners.latent_action_env.LatentActionEnv` (one transition per chunk, reward the discounted sum of
the chunk's rewards), so this runner is the off-policy runner over that env: SAC's ``algorithm.gamma`` is the
discount per decision (``gamma_step^Ta``). The deployed policy is ``obs -> tanh(mu(o)) -> frozen sampler -> chunk``
(:meth:`DSRLRunner.inference_policy`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import VecEnv
from rslkit.models.flow.chunk_executor import ChunkExecutor
from rslkit.models.flow.policy import FlowPolicy, FlowPolicyCfg
from rslkit.models.vla.policy import VLAPolicy
from rslkit.runners.checks import policy_obs_dim
from rslkit.runners.env_instructions import EnvInstructions
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.latent_action_env import ChunkSampler, LatentActionEnv
from rslkit.runners.off_policy_runner import OffPolicyRunner
from rslkit.runners.reinflow_runner import ChunkedEnvCfg, load_pretrained
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.runners.vla_bc_data import VLABCRunnerCfg
from rslkit.runners.vla_reinflow_runner import load_vla_pretrained
from rslkit.utils.checkpoint import checkpoint_must_fit, load_checkpoint
from rslkit.utils.config import from_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.validation import expect, finite

PRETRAINED = (FlowBCRunnerCfg.ALGORITHM, VLABCRunnerCfg.ALGORITHM)
"""The behaviour-cloning algorithms whose policies DSRL steers."""


@dataclass
class DSRLRunnerCfg(SACRunnerCfg, ChunkedEnvCfg):
    """DSRL run: SAC's settings (``algorithm``, ``policy`` = the latent actor and critics, ``replay``) over the
    latent action of a frozen flow policy. CLI: ``--agent.<field>`` (``train.py --pretrained PATH`` sets
    ``pretrained``)."""

    pretrained: str = ""
    """The flow-bc or vla-bc checkpoint whose EMA policy is steered (read again by ``play.py`` and ``--resume``)."""
    latent_scale: float = 1.5
    """``x0 = latent_scale * w``: the largest initial noise per entry the latent actor can choose (DSRL bounds its
    noise actions by a tanh and such a magnitude)."""
    num_inference_steps: int = 0
    """Euler steps ``K`` of the frozen sampler; 0: the pretrained policy's."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field DSRL cannot run with."""
        super().check()
        scale = self.latent_scale
        expect(finite(scale) and scale > 0, "latent_scale", f"must be a finite number > 0 (e.g. 1.5), got {scale}")
        k = self.num_inference_steps
        expect(isinstance(k, int) and k >= 0, "num_inference_steps", f"must be >= 0 (0: the policy's), got {k}")
        self.check_chunked_env()


def dsrl_cfg(sac: SACRunnerCfg, chunk: int, **overrides: Any) -> DSRLRunnerCfg:
    """A DSRL config from a task's SAC recipe ``sac`` for policies of ``chunk`` actions per chunk: its settings, its
    per-step discount turned into the per-decision ``gamma^chunk``, and ``overrides``."""
    values = {f.name: getattr(sac, f.name) for f in fields(sac)}
    values["algorithm"] = replace(sac.algorithm, gamma=sac.algorithm.gamma**chunk)
    return DSRLRunnerCfg(**{**values, **overrides})


def frozen_flow_policy(
    path: str, env: VecEnv, num_steps: int, device: torch.device
) -> tuple[FlowPolicy | VLAPolicy, ChunkSampler]:
    """The EMA policy of the behaviour-cloning checkpoint ``path``, frozen (eval mode, no gradients), and its
    deterministic sampler at ``num_steps`` Euler steps (0: the policy's own) over ``env``'s observations.

    Raises:
        ValueError: a checkpoint of another algorithm, or one that does not fit ``env``.
    """
    algorithm = load_checkpoint(path, device).get("algorithm")
    if algorithm not in PRETRAINED:
        raise ValueError(
            f"'{path}' was written by '{algorithm}'; DSRL steers a flow-bc or vla-bc policy: pass one of their "
            "checkpoints as --pretrained."
        )
    policy: FlowPolicy | VLAPolicy
    if algorithm == FlowBCRunnerCfg.ALGORITHM:
        agent_cfg, weights = load_pretrained(path, device, FlowBCRunnerCfg, "DSRL")
        cfg = from_dict(FlowPolicyCfg, agent_cfg["policy"])
        policy = FlowPolicy(policy_obs_dim(env, cfg.obs_group), env.num_actions, cfg)
    else:
        pre = load_vla_pretrained(path, device)
        policy = VLAPolicy(policy_obs_dim(env, pre.policy.state_group), env.num_actions, pre.policy)
        weights = pre.weights
    with checkpoint_must_fit(path):
        policy.load_state_dict(weights)
    policy.to(device).eval().requires_grad_(False)
    k = num_steps or policy.cfg.num_inference_steps
    if isinstance(policy, FlowPolicy):
        group, flow = policy.cfg.obs_group, policy
        return policy, lambda obs, x0: flow.act_chunk(obs[group].to(device), x0, k)
    instructions = EnvInstructions(env, pre.text_encoder, pre.policy.language_dim, device, pre.instruction)
    vla = policy
    if pre.policy.language_dim > 0:
        return policy, lambda obs, x0: vla.act_chunk(instructions.add_to(obs.to(device)), x0, k)
    return policy, lambda obs, x0: vla.act_chunk(obs.to(device), x0, k)


class DSRLRunner(OffPolicyRunner):
    """Trains DSRL: the off-policy runner over :class:`LatentActionEnv` of a frozen pretrained flow policy.

    Args:
        env: the per-step environment (rendering the cameras a VLA policy reads).
        cfg: run config; ``cfg.pretrained`` is required.
        log_dir: run directory; None for no files.
        device: training device.
        dist_info: DSRL runs in one process.
        run_info: extra checkpoint entries (task name, env config).

    Raises:
        ValueError: without ``pretrained``, or with a checkpoint that is not flow-bc's or vla-bc's.
    """

    algorithm_name = "dsrl"

    def __init__(
        self,
        env: VecEnv,
        cfg: DSRLRunnerCfg,  # type: ignore[override]
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        if not cfg.pretrained:
            raise ValueError(
                "DSRL steers a frozen pretrained flow policy: pass --pretrained PATH (a flow-bc or vla-bc checkpoint)."
            )
        self.frozen, sampler = frozen_flow_policy(cfg.pretrained, env, cfg.num_inference_steps, torch.device(device))
        """The steered policy (never trained: eval mode, ``requires_grad`` off)."""
        horizon = self.frozen.horizon
        cfg.check_execution(horizon, "agent.")
        step_gamma = cfg.algorithm.gamma ** (1.0 / horizon)
        self.latent_env = LatentActionEnv(env, horizon, step_gamma, cfg.restart_ended(env), sampler, cfg.latent_scale)
        self._executor: ChunkExecutor | None = None
        super().__init__(self.latent_env, cfg, log_dir, device, dist_info, run_info)
        self.cfg: DSRLRunnerCfg = cfg
        self._start_at_zero_latent()

    def _start_at_zero_latent(self) -> None:
        """Zero the mean half of the latent actor's output layer: its deterministic action starts at ``w = 0``, the
        frozen policy's chunk from zero noise, instead of an arbitrary steering of it."""
        last = self.policy.actor.net[-1]
        assert isinstance(last, torch.nn.Linear)
        with torch.no_grad():
            last.weight[: self.env.num_actions].zero_()
            last.bias[: self.env.num_actions].zero_()

    @property
    def total_env_steps(self) -> int:
        """Env steps taken so far: every decision runs the ``Ta`` actions of its chunk."""
        return self.env_steps * self.env.num_envs * self.frozen.horizon

    def _metrics(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """The off-policy runner's metrics, with the speed in env steps (not decisions) per second."""
        metrics = super()._metrics(*args, **kwargs)
        metrics["Perf/steps_per_s"] *= self.frozen.horizon
        return metrics

    def chunk(self, obs: TensorDict) -> torch.Tensor:
        """The deployed policy's env-unit chunks ``[N, Ta, A]``: the latent actor's mean action ``tanh(mu(o))``
        through the frozen sampler."""
        with torch.no_grad():
            return self.latent_env.chunk(obs, self.policy.act_inference(obs.to(self.device)))

    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """Deterministic step policy of the per-step env: :meth:`chunk`'s chunks executed action by action."""
        self.policy.eval()
        self._executor = self.cfg.chunk_executor(self.chunk, self.frozen.horizon)
        return self._executor

    def reset_inference(self, dones: torch.Tensor | None) -> None:  # type: ignore[override]
        """Start a new chunk for envs whose episode ended."""
        if self._executor is not None:
            self._executor.reset(dones)

    def _checkpoint_state(self) -> dict[str, Any]:
        """The off-policy runner's entries and the frozen policy's weights (checked on load)."""
        return {**super()._checkpoint_state(), "frozen": self.frozen.state_dict()}

    def _restore(self, data: dict[str, Any]) -> None:
        """Restore the run; refuse a checkpoint whose frozen policy is not the one ``pretrained`` holds now.

        Raises:
            ValueError: the pretrained checkpoint changed since the run was saved.
        """
        frozen = data.get("frozen", {})
        mine = self.frozen.state_dict()
        if set(frozen) != set(mine) or not all(torch.equal(frozen[k].to(v.device), v) for k, v in mine.items()):
            raise ValueError(
                f"The DSRL checkpoint steered other policy weights than {self.cfg.pretrained} holds now; pass the "
                "pretrained checkpoint it was trained with as --agent.pretrained."
            )
        super()._restore(data)
