"""ReinFlow runner: fine-tune a behaviour-cloned flow policy with PPO over its noisy Euler chain."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from tensordict import TensorDict

from rslkit.algorithms.reinflow import ReinFlow, ReinFlowCfg, make_chain
from rslkit.envs.action_chunk import ActionChunkWrapper
from rslkit.envs.vec_env import VecEnv
from rslkit.models.flow.chunk_executor import ChunkExecutor
from rslkit.models.flow.policy import FlowPolicy, FlowPolicyCfg
from rslkit.runners.bc_data import BCRunCfg
from rslkit.runners.checks import policy_obs_dim
from rslkit.runners.chunk_execution import ChunkExecutionCfg
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.evaluation import evaluate_episodes
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.rollout_runner import RolloutRunner
from rslkit.runners.run_config import RolloutCfg
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.utils.checkpoint import check_writer, checkpoint_must_fit, load_checkpoint
from rslkit.utils.config import from_dict, to_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.validation import expect


@dataclass
class ChunkedEnvCfg(ChunkExecutionCfg):
    """How a run of a chunk policy steps its env one chunk per decision (ReinFlow, Flow-SDE, DSRL), besides how
    evaluation executes chunks. CLI: ``--agent.<field>``."""

    restart_ended_episodes: str = "auto"
    """An episode that ends inside a chunk: ``restart`` starts it afresh once the chunk is done (the env's
    ``reset_envs``; the rest of the old chunk never drives a new episode, see
    :class:`~rslkit.envs.action_chunk.ActionChunkWrapper`), ``continue`` lets the new episode run the old chunk's
    remaining actions, ``auto`` restarts where the env can (TorchTask envs; a Gymnasium env continues)."""

    def check_chunked_env(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for an unknown ``restart_ended_episodes`` or chunk
        execution settings (:meth:`check_execution`) that cannot hold for any chunk size."""
        mode = self.restart_ended_episodes
        expect(mode in ("auto", "restart", "continue"), "restart_ended_episodes",
               f"must be 'auto', 'restart' or 'continue', got {mode!r}")  # fmt: skip
        self.check_execution(None)

    def restart_ended(self, env: VecEnv) -> bool:
        """Whether episodes that end inside a chunk of ``env`` restart at the chunk's end."""
        mode = self.restart_ended_episodes
        return mode == "restart" or (mode == "auto" and callable(getattr(env, "reset_envs", None)))

    def chunk_env(self, env: VecEnv, horizon: int, gamma: float) -> ActionChunkWrapper:
        """``env`` stepped one chunk of ``horizon`` actions per decision, rewards discounted by ``gamma`` per step.

        Raises:
            ConfigError: ``execute_steps`` exceeds ``horizon``.
        """
        self.check_execution(horizon, "agent.")
        return ActionChunkWrapper(env, horizon, gamma, self.restart_ended(env))


@dataclass
class ChainRunCfg(RolloutCfg, ChunkedEnvCfg):
    """The fields of every ReinFlow fine-tuning run (state-only flow or VLA policy). CLI: ``--agent.<field>``."""

    pretrained: str = ""
    """Behaviour-cloning checkpoint to fine-tune; its policy settings replace ``policy`` and its EMA weights are the
    start (``train.py --pretrained PATH``)."""
    algorithm: ReinFlowCfg = field(default_factory=ReinFlowCfg)
    num_steps_per_env: int = 25
    """Decisions (action chunks) per env and iteration."""
    max_iterations: int = 100
    eval_interval: int = 10
    """Iterations between deterministic evaluations (one episode per env; resets the env); 0: only the last."""

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for a field the fine-tuning loop cannot run with."""
        super().check()
        every = self.eval_interval
        expect(isinstance(every, int) and every >= 0, "eval_interval", f"must be >= 0 (0: only the last), got {every}")
        self.check_chunked_env()


@dataclass
class ReinFlowRunnerCfg(ChainRunCfg):
    """ReinFlow fine-tuning run of a flow-bc policy. CLI: ``--agent.<field>`` (``train.py --pretrained PATH`` sets
    ``pretrained``, a flow-bc checkpoint)."""

    policy: FlowPolicyCfg = field(default_factory=FlowPolicyCfg)
    """Filled from the pretrained checkpoint (kept so a ReinFlow checkpoint rebuilds without it)."""


def load_pretrained(
    path: str | Path, device: torch.device, bc: type[BCRunCfg], who: str, hint: str = ""
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The agent config (as saved) and the EMA policy weights (the deployed policy) of a behaviour-cloning checkpoint
    of ``bc.ALGORITHM``, for the fine-tuning run ``who``; ``hint`` ends the error message.

    Raises:
        ValueError: when the checkpoint was written by another algorithm.
    """
    data = load_checkpoint(path, device)
    if data.get("algorithm") != bc.ALGORITHM:
        raise ValueError(
            f"'{path}' was written by '{data.get('algorithm')}'; {who} starts from a {bc.ALGORITHM} checkpoint (train "
            f"one with train.py --algo {bc.ALGORITHM} --dataset DIR{hint})."
        )
    return data["agent_cfg"], data["alg"]["ema"]["model"]


ChainCfgT = TypeVar("ChainCfgT", bound=ChainRunCfg)


class ChainRunnerBase(RolloutRunner[ChainCfgT, ReinFlow]):
    """The ReinFlow loop, shared by the state-only (:class:`ReinFlowRunner`) and the VLA fine-tuning runner:
    rollouts of decisions, critic warm-up, PPO epochs, periodic evaluation, self-contained checkpoints.

    Rollouts run in an :class:`~rslkit.envs.action_chunk.ActionChunkWrapper` (one decision = ``Ta`` env steps);
    episode statistics are per env step. Checkpoints are self-contained (they hold the pretrained reference and
    store ``pretrained = ""`` in their config, with the origin under ``pretrained_from``), so ``play.py`` and
    ``--resume`` need no behaviour-cloning file. A subclass builds the policy and calls :meth:`_set_algorithm`.
    """

    pretrained_algorithm: str
    """The behaviour-cloning algorithm whose checkpoints this runner fine-tunes (for error messages)."""

    def __init__(
        self,
        env: VecEnv,
        cfg: ChainCfgT,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)
        self._pretrained_from = cfg.pretrained
        """Where the pretrained policy came from (``pretrained_from`` in checkpoints; kept across resumes)."""
        self._build(cfg.pretrained)

    @abstractmethod
    def _build(self, pretrained: str) -> None:
        """Build the policy (with the weights of the behaviour-cloning checkpoint ``pretrained``, when not empty),
        its chain and algorithm, and hand them to :meth:`_set_algorithm`."""

    def _set_algorithm(self, alg: ReinFlow, obs: TensorDict, initialized: bool) -> None:
        """Take ``alg`` (its chain's horizon sets the chunked env) and start the loop's state.

        Raises:
            ConfigError: ``execute_steps`` exceeds the pretrained policy's chunk size.
        """
        self.chunk_env = self.cfg.chunk_env(self.env, alg.chain.horizon, self.cfg.algorithm.gamma)
        self.alg = alg
        self.initialized = initialized
        """Whether the actor holds trained weights (from ``pretrained`` or :meth:`load`)."""
        self.rollout_env = self.chunk_env
        self.stats = EpisodeStats(self.env.num_envs, self.device)
        self.total_env_steps = 0
        self._actor_updated = False
        self._executor: ChunkExecutor | None = None
        self._obs = obs

    def _take_pretrained(self, policy: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
        """Load the pretrained policy's ``weights`` into ``policy``.

        Raises:
            ValueError: they do not fit (the checkpoint was trained on another task or with other sizes).
        """
        with checkpoint_must_fit(self.cfg.pretrained):
            policy.load_state_dict(weights)

    def reset_inference(self, dones: torch.Tensor | None) -> None:
        """Start a new chunk for envs whose episode ended."""
        if self._executor is not None:
            self._executor.reset(dones)

    # ------------------------------------------------------------------ training loop
    def learn(self, num_iterations: int | None = None) -> dict[str, float]:
        """Run ``num_iterations`` iterations (default: up to ``cfg.max_iterations``).

        Raises:
            ValueError: when there is no pretrained policy to fine-tune.

        Returns:
            The metrics of the last iteration.
        """
        if not self.initialized:
            pre = self.pretrained_algorithm
            raise ValueError(
                f"{self.algorithm_name} fine-tunes a pretrained policy: pass --pretrained PATH (a {pre} checkpoint), "
                f"--agent.pretrained PATH, or resume a {self.algorithm_name} run."
            )
        return super().learn(num_iterations)

    def _start_learning(self) -> None:
        self._obs = self.env.get_observations().to(self.device)

    def _record_step(self, rewards: torch.Tensor, dones: torch.Tensor, extras: dict[str, Any]) -> None:
        """Episode statistics per env step inside the decision (and a restart forgets the spoiled start)."""
        step_rewards, step_dones = extras["step_rewards"].to(self.device), extras["step_dones"].to(self.device)
        for j in range(step_rewards.shape[1]):
            self.stats.update(step_rewards[:, j], step_dones[:, j], None)
        self.stats.restart(extras["restarted"].to(self.device).nonzero().squeeze(-1))

    def _update(self) -> dict[str, float]:
        self._actor_updated = self.iteration >= self.cfg.algorithm.critic_warmup_iterations
        return self.alg.update(self._actor_updated)

    def _env_steps(self) -> int:
        return self.cfg.num_steps_per_env * self.env.num_envs * self.chunk_env.horizon

    def _policy_metrics(self, obs: TensorDict) -> dict[str, float]:
        return {
            "Loss/learning_rate": self.cfg.algorithm.actor_lr,
            "Policy/mean_std": self.alg.mean_sigma(self._actor_obs(obs)),
            "Policy/actor_updated": float(self._actor_updated),
        }

    def _after_iteration(self, metrics: dict[str, float], last: bool) -> None:
        interval = self.cfg.eval_interval
        if last or (interval > 0 and self.iteration % interval == 0):
            metrics.update(self.evaluate())
            self._obs = self.env.get_observations().to(self.device)

    # ------------------------------------------------------------------ inference and evaluation
    @abstractmethod
    def _act_chunk(self, obs: TensorDict, num_steps: int) -> torch.Tensor:
        """Deterministic chunks ``[N, Ta, A]`` of the policy for the env's observation (``num_steps`` ODE steps)."""

    def inference_policy(self) -> Callable[[TensorDict], torch.Tensor]:
        """Deterministic step policy: chunks from the noise-free ODE at the chain's K, executed action by action."""
        k = self.alg.chain.num_steps
        self._executor = self.cfg.chunk_executor(lambda obs: self._act_chunk(obs, k), self.alg.chain.horizon)
        return self._executor

    def evaluate(self) -> dict[str, float]:
        """One deterministic episode per env (:func:`~rslkit.runners.evaluation.evaluate_episodes`: return, success
        overall and per instruction where the env reports them), then a fresh start for training (the env is reset
        when it can be)."""
        metrics = evaluate_episodes(self.env, self.inference_policy(), self.reset_inference, self.device).metrics()
        if hasattr(self.env, "reset"):
            with torch.inference_mode():  # the env's state tensors were created under inference mode
                self.env.reset()
        self.stats.returns.zero_()
        self.stats.lengths.zero_()
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self) -> dict[str, Any]:
        """Actor, critic, pretrained reference, optimizers, config (without ``pretrained``, whose path is kept as
        ``pretrained_from``), env steps, RNG and env state: a self-contained checkpoint."""
        agent_cfg = to_dict(self.cfg)
        agent_cfg["pretrained"] = ""
        return {
            "total_env_steps": self.total_env_steps,
            "alg": self.alg.state_dict(),
            "agent_cfg": agent_cfg,
            "pretrained_from": self.cfg.pretrained or self._pretrained_from,
            **capture_run_state(self.env, self.stats),
        }

    def load(self, path: str | Path, weights_only: bool = False) -> dict[str, Any]:
        """Resume from a checkpoint of this runner, or with ``weights_only`` take its actor (chain), critic and
        reference weights (:meth:`BaseRunner.load`); a behaviour-cloning checkpoint goes to
        :meth:`_load_pretrained`.

        Raises:
            ValueError: for a checkpoint of another algorithm or an incompatible network.
        """
        data = load_checkpoint(path, self.device)
        if data.get("algorithm") == self.pretrained_algorithm:
            return self._load_pretrained(path, data, weights_only)
        data = self._load_data(path, check_writer(data, path, self.algorithm_name), weights_only)
        self.initialized = True
        return data

    def _load_pretrained(self, path: str | Path, data: dict[str, Any], weights_only: bool) -> dict[str, Any]:
        """The behaviour-cloning checkpoint ``data`` at ``path`` where one of this runner was expected.

        Raises:
            ValueError: it is to be passed as ``--pretrained``.
        """
        pre = self.pretrained_algorithm
        raise ValueError(
            f"Checkpoint '{path}' was written by '{pre}', not by {self.algorithm_name} (pass a {pre} checkpoint as "
            "--pretrained)."
        )

    def _load_weights(self, alg_state: dict[str, Any]) -> None:
        self.alg.chain.load_state_dict(alg_state["chain"])
        self.alg.critic.load_state_dict(alg_state["critic"])
        self.alg.reference.load_state_dict(alg_state["reference"])

    def _restore(self, data: dict[str, Any]) -> None:
        self.total_env_steps = data.get("total_env_steps", 0)
        self._pretrained_from = str(data.get("pretrained_from", ""))  # a resumed run keeps its origin
        restore_run_state(data, self.env, self.stats)


class ReinFlowRunner(ChainRunnerBase[ReinFlowRunnerCfg]):
    """Fine-tunes a flow policy with ReinFlow (same interface as :class:`~rslkit.runners.OnPolicyRunner`); the loop
    and checkpoints are :class:`ChainRunnerBase`'s.

    Args:
        env: the per-step environment.
        cfg: run config.
        log_dir: run directory; None for no files.
        device: training device.
        dist_info: ReinFlow runs in one process.
        run_info: extra checkpoint entries (task name, env config).
    """

    algorithm_name = "reinflow"
    pretrained_algorithm = FlowBCRunnerCfg.ALGORITHM

    def _build(self, pretrained: str) -> None:
        """Flow policy (from the flow-bc checkpoint ``pretrained`` when given), chain, algorithm and loop state."""
        cfg, env, weights = self.cfg, self.env, None
        if pretrained:
            agent_cfg, weights = load_pretrained(pretrained, self.device, FlowBCRunnerCfg, "ReinFlow")
            cfg.policy = from_dict(FlowPolicyCfg, agent_cfg["policy"])
        obs_dim = policy_obs_dim(env, cfg.policy.obs_group)
        policy = FlowPolicy(obs_dim, env.num_actions, cfg.policy)
        if weights is not None:
            self._take_pretrained(policy, weights)
        obs = env.get_observations().to(self.device)
        chain = make_chain(policy, cfg.algorithm)
        alg = ReinFlow(chain, cfg.algorithm, cfg.num_steps_per_env, obs, cfg.policy.obs_group, self.device)
        self._set_algorithm(alg, obs, initialized=weights is not None)

    @property
    def policy(self) -> FlowPolicy:
        """The flow policy being fine-tuned (deployed with the deterministic ODE)."""
        policy = self.alg.chain.policy
        assert isinstance(policy, FlowPolicy)
        return policy

    def _act_chunk(self, obs: TensorDict, num_steps: int) -> torch.Tensor:
        """Chunks from the observation group the flow policy reads."""
        return self.policy.act_chunk(obs[self.cfg.policy.obs_group], num_steps=num_steps)
