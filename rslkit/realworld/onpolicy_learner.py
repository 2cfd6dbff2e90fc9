"""The asynchronous on-policy learner: PPO or ReinFlow trained on rollouts that actor processes collect, with
AReaL's bounded staleness.

It is the synchronous runner (:class:`~rslkit.runners.OnPolicyRunner`, :class:`~rslkit.runners.ReinFlowRunner`) with
its env loop replaced by the network: the same algorithm, update, logging and checkpoints (a learner checkpoint is
a ppo / reinflow checkpoint: ``play.py``, ``export`` and ``--resume`` take it), plus

- a gRPC :class:`~rslkit.link.server.LearnerServer` whose handler of ``permit_request`` and ``rollout`` (this class)
  answers permit requests
  by :class:`~rslkit.realworld.admission.Admission` and takes each rollout only from the actor holding its permit;
- one iteration = the ``B`` rollouts of the next update, side by side: values from the current critic, GAE, the
  algorithm's update with its ``staleness`` settings (naive PPO, decoupled PPO, M2PO), new weights published, the
  next permits granted;
- ``Staleness/*`` logs: the update's statistics (mean/max staleness, behaviour-weight mean/max, fraction masked, M2)
  and the histogram ``Staleness/frac_<s>`` (fraction of samples ``s`` versions behind).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.algorithms.staleness import update_metrics
from rslkit.link import transport, wire
from rslkit.link.rollouts import Permit, PermitRequest, Rollout
from rslkit.link.server import LearnerServer, Stream
from rslkit.realworld.admission import Admission
from rslkit.realworld.onpolicy_codec import RolloutCodec, codec_for
from rslkit.realworld.onpolicy_config import OnPolicyLearnerCfg
from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.on_policy_runner import OnPolicyRunner
from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.validation import validate

log = logging.getLogger(__name__)
Holder = tuple[str, int]
"""A permit's holder: (actor id, stream number)."""


class _Stopped(Exception):
    """Ctrl-C / SIGTERM came while the learner waited for rollouts."""


class RolloutLearner:
    """The network-fed loop shared by :class:`PPOLearner` and :class:`ReinFlowLearner` (a mixin before the runner).

    Also the server's :class:`~rslkit.link.server.Handler` of permit requests and rollouts.
    """

    kinds: tuple[str, ...] = ("permit_request", "rollout")

    alg: Any
    env: Any
    cfg: Any
    iteration: int
    total_env_steps: int
    log_dir: Path | None
    interrupted: bool
    _stop_requested: bool

    def __init__(
        self,
        env: Any,
        cfg: PPORunnerCfg | ReinFlowRunnerCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
        *,
        learner_cfg: OnPolicyLearnerCfg | None = None,
    ) -> None:
        """The runner after this mixin in the class (PPO's or ReinFlow's) is built first, then the learner's state."""
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)  # type: ignore[call-arg]
        self.learner_cfg = learner_cfg or OnPolicyLearnerCfg()
        validate(self.learner_cfg, "learner")
        c = self.learner_cfg
        self.codec: RolloutCodec = codec_for(self)
        self.rollout_schema = self.schema = self.codec.schema(c.actor_envs)
        self.alg.storage = self.codec.make_storage(c.rollouts_per_update * c.actor_envs)
        self.server: LearnerServer | None = None
        self.admission = Admission(c.rollouts_per_update, c.max_staleness, self.iteration)
        self.staleness_log: list[list[int]] = []
        """Per update: the staleness of each consumed rollout (versions behind the policy it updated)."""
        self._cond = threading.Condition()
        self._waiting: dict[Holder, int] = {}  # permit requests in arrival order
        self._permit_versions: dict[int, int] = {}
        self._rollouts: dict[int, Rollout] = {}
        self._actor_stats: dict[str, EpisodeStats] = {}
        self._published = -1
        self._stopping = False
        self._last_arrival = time.monotonic()
        self._last_iteration_end = self._learn_started = time.monotonic()

    # ------------------------------------------------------------------ serving
    def serve(
        self,
        bind: str = transport.DEFAULT_ADDRESS,
        *,
        token: str | None = None,
        tls: transport.ServerTLS | None = None,
        allow_insecure_remote: bool = False,
        max_message_bytes: int = wire.DEFAULT_MAX_BYTES,
    ) -> LearnerServer:
        """Publish the current weights and serve actors on ``bind`` (the admission restarts at :attr:`iteration`)."""
        c = self.learner_cfg
        self.admission = Admission(c.rollouts_per_update, c.max_staleness, self.iteration)
        self.server = LearnerServer(
            [self], bind, token=token, tls=tls, allow_insecure_remote=allow_insecure_remote,
            max_message_bytes=max_message_bytes,
        )  # fmt: skip
        if self.log_dir is not None and not any(self.log_dir.glob("model_*.pt")):
            self.save(self.log_dir / f"model_{self.iteration}.pt")  # type: ignore[attr-defined]
        self._publish()
        return self.server

    def stop_serving(self) -> None:
        """Stop the server (the actors exit once they notice the learner is gone)."""
        self._stopping = True
        if self.server is not None:
            self.server.stop()

    def _publish(self) -> None:
        """Push the weights when the policy version moved (ReinFlow's critic warm-up leaves it)."""
        assert self.server is not None
        if self.alg.version > self._published:
            self.server.publish_weights(self.alg.version, self.codec.weights())
            self._published = self.alg.version

    # ------------------------------------------------------------------ Handler (the streams' threads)
    def handle(self, stream: Stream, message: PermitRequest | Rollout) -> None:
        """A permit request (queued, answered when the admission rule allows) or a rollout (kept for its update)."""
        actor_id, number = stream.actor_id, stream.number
        with self._cond:
            if isinstance(message, PermitRequest):
                held = self.admission.held_by((actor_id, number))
                if held:
                    raise ValueError(
                        f"actor {actor_id} asked for a permit while it holds one (rollout {held[0]}): send that "
                        "rollout first, one permit at a time."
                    )
                self._waiting[(actor_id, number)] = message.last_rollout
                self._grant()
            else:
                self._accept(actor_id, number, message)

    def stream_ended(self, stream: Stream) -> None:
        """Revoke the stream's permits: their rollout numbers go to the next actors that ask."""
        actor_id, number = stream.actor_id, stream.number
        with self._cond:
            self._waiting.pop((actor_id, number), None)
            revoked = self.admission.revoke((actor_id, number))
            if revoked and not self._stopping:
                log.warning("actor %s left holding permits %s: they go to other actors", actor_id, revoked)
                self._grant()

    def _accept(self, actor_id: str, stream: int, rollout: Rollout) -> None:
        k = rollout.rollout
        if self.admission.holder(k) != (actor_id, stream):
            raise ValueError(
                f"rollout {k} of actor {actor_id} holds no permit on this stream (revoked when an earlier stream "
                "ended, or sent twice): ask for a new permit."
            )
        low, high = self._permit_versions.pop(k), self.alg.version
        if not low <= rollout.policy_version <= high:
            raise ValueError(
                f"rollout {k} was collected with weights version {rollout.policy_version}, outside the permit's "
                f"[{low}, {high}]: load the weights the permit names before collecting."
            )
        self.admission.deliver(k)
        self._rollouts[k] = rollout
        self._last_arrival = time.monotonic()
        self._cond.notify_all()

    def _grant(self) -> None:
        """Answer the waiting requests, oldest first, as far as the rule allows (call under the lock)."""
        assert self.server is not None
        for holder in list(self._waiting):
            k = self.admission.grant(holder)
            if k is None:
                return
            del self._waiting[holder]
            self._permit_versions[k] = self.alg.version
            permit = Permit(transport.LEARNER_ID, k, self.alg.version, self.rollout_schema)
            if not self.server.send(holder[0], wire.encode(permit), stream=holder[1]):
                self.admission.revoke(holder)  # that stream is gone already

    # ------------------------------------------------------------------ training loop
    def learn(self, num_iterations: int | None = None) -> dict[str, float]:
        """Train until ``max_iterations`` (or Ctrl-C / SIGTERM, also while waiting for rollouts: then a checkpoint
        is saved and :attr:`interrupted` set)."""
        try:
            return super().learn(num_iterations)  # type: ignore[misc]
        except _Stopped:
            self.interrupted = True
            if self.log_dir is not None:
                self.save(self.log_dir / f"model_{self.iteration}.pt")  # type: ignore[attr-defined]
            print(f"Stopped while waiting for rollouts; saved iteration {self.iteration}.", flush=True)
            return {}

    def _start_learning(self) -> None:
        if self.server is None:
            raise RuntimeError("The on-policy learner's learn() needs serve() first: it trains on what actors send.")
        self._last_iteration_end = self._last_arrival = self._learn_started = time.monotonic()

    def _after_iteration(self, metrics: dict[str, float], last: bool) -> None:
        """No evaluation: the learner's env only describes the task (the actors step theirs)."""

    def _wait_batch(self) -> list[Rollout]:
        timeout = self.learner_cfg.rollout_timeout_s
        with self._cond:
            while (ks := self.admission.batch()) is None:
                if self._stop_requested:
                    raise _Stopped
                if time.monotonic() - self._last_arrival > timeout:
                    raise TimeoutError(
                        f"no rollout arrived in {timeout:.0f} s: start actors (python -m rslkit.realworld actor "
                        "--algo ... --actor.learner HOST:PORT) or raise --learner.rollout_timeout_s."
                    )
                self._cond.wait(0.2)
            return [self._rollouts.pop(k) for k in ks]

    def _iteration(self) -> dict[str, float]:
        t0 = time.perf_counter()
        rollouts = self._wait_batch()
        t1 = time.perf_counter()
        obs, step, versions = self._stack(rollouts)
        self._episode_stats(rollouts)
        version = self.alg.version
        staleness = [version - r.policy_version for r in rollouts]
        self.staleness_log.append(staleness)
        with torch.inference_mode():
            self.codec.fill(obs, step, versions)
        losses = self._update()
        t2 = time.perf_counter()
        with self._cond:
            self.admission.advance()
            self._publish()
            self._grant()
        steps = self.codec.num_steps * versions.numel() * self.codec.env_steps()
        self.total_env_steps += steps
        now = time.monotonic()
        metrics = update_metrics(losses) | self._staleness_histogram(staleness) | self._stats_summary()
        metrics |= {
            "Perf/steps_per_s": steps / max(now - self._last_iteration_end, 1e-9),
            "Perf/updates_per_s": 1.0 / max(now - self._last_iteration_end, 1e-9),
            "Perf/wait_time": t1 - t0,
            "Perf/learn_time": t2 - t1,
            "Perf/total_env_steps": float(self.total_env_steps),
            "Perf/wall_s": now - self._learn_started,
            "Actors/connected": float(sum(a.connected for a in self.server.actors().values())) if self.server else 0.0,
            "Loss/learning_rate": self._learning_rate(),
        }
        self._last_iteration_end = now
        return metrics

    def _update(self) -> dict[str, float]:
        """One update of the algorithm on the filled storage."""
        return self.alg.update()

    def _learning_rate(self) -> float:
        """The (actor's) learning rate now."""
        return float(self.alg.learning_rate)

    def _stack(self, rollouts: list[Rollout]) -> tuple[TensorDict, dict[str, torch.Tensor], torch.Tensor]:
        """The rollouts side by side: ``obs [T + 1, B N]``, ``step [T, B N, ...]``, ``versions [B N]``."""
        device = self.alg.device
        obs = {g: torch.cat([torch.from_numpy(r.obs[g]) for r in rollouts], 1).to(device) for g in rollouts[0].obs}
        step = {k: torch.cat([torch.from_numpy(r.step[k]) for r in rollouts], 1).to(device) for k in rollouts[0].step}
        n = self.learner_cfg.actor_envs
        versions = torch.cat([torch.full((n,), r.policy_version, dtype=torch.long) for r in rollouts]).to(device)
        batch = [self.codec.num_steps + 1, versions.numel()]
        return TensorDict(obs, batch_size=batch, device=device), step, versions

    def _episode_stats(self, rollouts: list[Rollout]) -> None:
        key = "env_reward" if "env_reward" in self.rollout_schema.step else "reward"
        for r in rollouts:
            stats = self._actor_stats.setdefault(
                r.sender, EpisodeStats(self.learner_cfg.actor_envs, torch.device("cpu"))
            )
            rewards, dones, success = (torch.from_numpy(r.step[k]) for k in (key, "done", "success"))
            for t in range(rewards.shape[0]):
                stats.update(rewards[t], dones[t], success[t])

    def _stats_summary(self) -> dict[str, float]:
        """Mean return, length and success over the last finished episodes of every actor."""
        lists: dict[str, list[float]] = {
            "Train/mean_return": [],
            "Train/mean_episode_length": [],
            "Train/success_rate": [],
        }
        for s in self._actor_stats.values():
            lists["Train/mean_return"] += list(s.finished_returns)
            lists["Train/mean_episode_length"] += list(s.finished_lengths)
            lists["Train/success_rate"] += list(s.finished_success)
        return {k: sum(v) / len(v) for k, v in lists.items() if v}

    def _staleness_histogram(self, staleness: list[int]) -> dict[str, float]:
        """``Staleness/frac_<s>``: the fraction of this update's rollouts ``s`` versions behind, ``s = 0 .. eta``."""
        n = len(staleness)
        return {f"Staleness/frac_{s}": staleness.count(s) / n for s in range(self.learner_cfg.max_staleness + 1)}

    def _checkpoint_state(self) -> dict[str, Any]:
        """The runner's checkpoint plus this learner's settings."""
        state: dict[str, Any] = super()._checkpoint_state()  # type: ignore[misc]
        return state | {"realworld": {"onpolicy_learner_cfg": to_dict(self.learner_cfg)}}


class PPOLearner(RolloutLearner, OnPolicyRunner):
    """Asynchronous PPO (naive, decoupled or M2PO by ``agent.algorithm.staleness``). Build it with
    :func:`rslkit.recipes.run.build_run` and ``runner_cls=functools.partial(PPOLearner, learner_cfg=...)``; then
    :meth:`serve`, then ``learn()``.

    Args:
        env: the task (its spaces and observation layout only; one env is enough).
        learner_cfg: admission and batch settings.
        other args: as :class:`~rslkit.runners.OnPolicyRunner`.

    Raises:
        ValueError: RND switched on (``agent.algorithm.rnd_cfg.weight > 0``): its intrinsic reward is computed where the
            env steps, and here the actors step the envs.
    """

    def __init__(self, env: Any, cfg: PPORunnerCfg, *args: Any, **kwargs: Any) -> None:
        if cfg.algorithm.rnd_cfg.enabled:
            raise ValueError(
                "RND curiosity needs the env steps in the learner's process, and in the real-world loop the actors "
                "step them: set --agent.algorithm.rnd_cfg.weight 0 (or train with RND in train.py)."
            )
        super().__init__(env, cfg, *args, **kwargs)


class ReinFlowLearner(RolloutLearner, ReinFlowRunner):
    """Asynchronous ReinFlow: actors send whole noisy chains, so the learner's recomputed log-likelihood of a fresh
    decision equals the actor's (the first ratio is 1). Built and used like :class:`PPOLearner`."""

    def _update(self) -> dict[str, float]:
        """Critic only for the first ``critic_warmup_iterations`` (the policy version stays), then both."""
        return self.alg.update(self.iteration >= self.cfg.algorithm.critic_warmup_iterations)

    def _learning_rate(self) -> float:
        return float(self.cfg.algorithm.actor_lr)
