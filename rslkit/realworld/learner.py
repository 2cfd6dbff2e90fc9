"""The real-world learner: SAC (RLPD / HIL-SERL recipe) trained on transitions that actors stream in.

It is rslkit's off-policy runner with the env loop replaced by the network: the same SAC, replay buffer, logging
and checkpoints (a learner checkpoint is a SAC checkpoint: ``play.py`` and ``export`` take it), plus

- a gRPC :class:`~rslkit.link.server.LearnerServer` whose transitions handler stores into a
  :class:`~rslkit.realworld.replay_sink.ReplaySink`: it journals each arriving transition, writes it into the buffer
  (interventions into the demonstration buffer too) and only then acknowledges it;
- updates paced by the data: ``agent.algorithm.utd_ratio`` gradient updates per transition received (symmetric
  sampling with ``agent.replay.demo_fraction`` of each batch from demonstrations and interventions);
- versioned weights pushed every ``learner.publish_every_updates`` updates (or seconds), staleness logged from the
  policy version of every arriving transition, and optionally bounded (``learner.max_staleness``);
- checkpoints that hold the buffer, the row keys, the watermarks and the journal position, so a learner killed
  with ``kill -9`` and resumed holds every transition it acknowledged exactly once.

The buffer holds one "env" (num_envs 1): transitions are stored in arrival order, so the learner uses 1-step TD
targets (RLPD and HIL-SERL do too).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rslkit.deploy.onnx_weights import onnx_weight_arrays
from rslkit.envs.vec_env import VecEnv
from rslkit.link import transport, wire
from rslkit.link.journal import Journal
from rslkit.link.server import LearnerServer
from rslkit.link.sink import TransitionsHandler, Watermarks
from rslkit.realworld.learner_config import LearnerCfg
from rslkit.realworld.replay_sink import ReplaySink, RowKeys
from rslkit.realworld.task_schema import transition_schema
from rslkit.realworld.weights import SAC_ACTING, state_arrays
from rslkit.runners.off_policy_runner import OffPolicyRunner
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.utils.config import to_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.validation import validate


class RealWorldLearner(OffPolicyRunner):
    """SAC fed by actors over gRPC (see module doc). Build it with :func:`rslkit.recipes.run.build_run` /
    ``load_run`` and ``runner_cls=functools.partial(RealWorldLearner, learner_cfg=...)``; then :meth:`serve`, then
    ``learn()``.

    Args:
        env: the task with one env; only its spaces and observation layout are used (the actors step theirs).
        cfg: SAC agent config (``algorithm.n_step`` must be 1).
        learner_cfg: the learner's loop settings (``publish`` ``onnx`` / ``both``: the policy is exported with
            :func:`rslkit.deploy.onnx_weights.onnx_weight_arrays` for robots without torch).
        other args: as :class:`~rslkit.runners.off_policy_runner.OffPolicyRunner`.
    """

    def __init__(
        self,
        env: VecEnv,
        cfg: SACRunnerCfg,
        log_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        dist_info: DistInfo | None = None,
        run_info: dict[str, Any] | None = None,
        *,
        learner_cfg: LearnerCfg | None = None,
    ) -> None:
        if env.num_envs != 1:
            raise ValueError(
                f"The learner's env only describes the task: build it with num_envs 1, not {env.num_envs}."
            )
        if cfg.algorithm.n_step != 1:
            raise ValueError(
                f"agent.algorithm.n_step is {cfg.algorithm.n_step}, but the real-world learner uses 1-step targets: "
                "transitions of several actors (and of episodes an actor restart cut short) arrive interleaved. "
                "Set --agent.algorithm.n_step 1."
            )
        self.learner_cfg = learner_cfg or LearnerCfg()
        validate(self.learner_cfg, "learner")
        if self.learner_cfg.bc_warmstart_updates and not cfg.demo_path:
            raise ValueError("learner.bc_warmstart_updates needs demonstrations: set --agent.demo_path.")
        super().__init__(env, cfg, log_dir, device, dist_info, run_info)
        self.schema = transition_schema(env, self.policy.obs_groups)
        self.version = 0
        """Weights version last published (0: none yet)."""
        self.total_updates = 0
        self.watermarks = Watermarks()
        self.keys: RowKeys | None = None
        self.journal_start = 0
        """The journal segment a resumed learner replays from (recorded by the checkpoint it resumed)."""
        self.sink: ReplaySink | None = None
        self.server: LearnerServer | None = None
        self.bc_done = False
        self._returns: deque[float] = deque(maxlen=self.learner_cfg.episode_window)
        self._episodes = 0
        self._last_publish = self._last_checkpoint = time.monotonic()
        self._gated_s = 0.0

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
        """Replay the journal (a resumed run), publish the current weights and start serving actors on ``bind``."""
        buffer = self._ensure_buffer()
        if self.keys is None:
            self.keys = RowKeys(buffer.capacity)
        if buffer.demos is not None and self.version == 0:  # a fresh run: the demonstrations set the first statistics
            self.policy.update_normalization(buffer.demos.data["obs"][: buffer.demos.size, 0])
        journal = None
        if self.learner_cfg.journal and self.log_dir is not None:
            journal = Journal(self.log_dir / "journal", fsync=self.learner_cfg.journal_fsync)
        self.sink = ReplaySink(buffer, self.schema, journal, self.watermarks, self.keys, max_message_bytes)
        self.sink.received = self.env_steps
        self.sink.version = self.version
        if journal is not None:
            replayed = self.sink.replay(journal.replay(self.journal_start, self.schema, max_message_bytes))
            self.env_steps = self.sink.received
            if replayed:
                print(f"Learner: {replayed} transitions replayed from the journal.", flush=True)
        self.sink.take_stats()  # replayed rows were logged by the run that received them
        self.server = LearnerServer(
            [TransitionsHandler(self.schema, self.sink)],
            bind,
            token=token,
            tls=tls,
            allow_insecure_remote=allow_insecure_remote,
            max_message_bytes=max_message_bytes,
        )
        if self.log_dir is not None and not any(self.log_dir.glob("model_*.pt")):
            self.save(self.log_dir / f"model_{self.iteration}.pt")  # a learner killed from now on can be resumed
        self.publish()
        return self.server

    def publish(self) -> int:
        """Push the current weights as the next version; returns it."""
        assert self.server is not None and self.sink is not None, "call serve() first"
        arrays: dict[str, np.ndarray] = {}
        if self.learner_cfg.publish in ("torch", "both"):
            arrays.update(state_arrays(self.policy, SAC_ACTING))
        if self.learner_cfg.publish in ("onnx", "both"):
            arrays.update(onnx_weight_arrays(self.policy, self.env, task=self.run_info.get("task")))
        arrays["meta/published_ns"] = np.array([time.time_ns()], np.int64)
        arrays["meta/updates"] = np.array([self.total_updates], np.int64)
        self.version += 1
        self.server.publish_weights(self.version, arrays)
        self.sink.version = self.version
        self._last_publish = time.monotonic()
        return self.version

    def stop_serving(self) -> None:
        """Stop the server (actors reconnect to the next learner) and close the journal."""
        if self.server is not None:
            self.server.stop()
        if self.sink is not None and self.sink.journal is not None:
            self.sink.journal.close()

    # ------------------------------------------------------------------ training loop
    def _start_learning(self) -> None:
        if self.sink is None:
            raise RuntimeError("RealWorldLearner.learn() needs serve() first: it trains on what actors send.")
        if self.learner_cfg.bc_warmstart_updates and not self.bc_done:
            self._bc_warmstart()

    def _bc_warmstart(self) -> None:
        assert self.buffer is not None and self.buffer.demos is not None
        c = self.cfg.algorithm
        losses = []
        for _ in range(self.learner_cfg.bc_warmstart_updates):
            demo = self.buffer.demos.sample(c.batch_size, 1, c.gamma)
            losses.append(float(self.alg.bc_update(demo)["bc"]))
        self.bc_done = True
        print(f"BC warm start: {len(losses)} updates, loss {losses[0]:.3f} -> {losses[-1]:.3f}", flush=True)
        self.publish()

    def _updates_owed(self) -> int:
        assert self.sink is not None
        if self.sink.received < self.cfg.learning_starts:
            return 0
        return math.floor(self.cfg.algorithm.utd_ratio * self.sink.received + 1e-9) - self.total_updates

    def _publish_due(self, updates: int) -> bool:
        """Whether the learner publishes after its ``updates``-th update."""
        cfg = self.learner_cfg
        if updates % cfg.publish_every_updates == 0:
            return True
        return bool(cfg.publish_every_s) and time.monotonic() - self._last_publish >= cfg.publish_every_s

    def _staleness_gate(self) -> bool:
        """Whether the next update would publish a version more than ``max_staleness`` ahead of the oldest version a
        connected actor runs (actors report a new version only once the data of the old one is acknowledged)."""
        bound = self.learner_cfg.max_staleness
        if not bound or self.server is None or not self._publish_due(self.total_updates + 1):
            return False
        versions = [a.policy_version for a in self.server.actors().values() if a.connected]
        return bool(versions) and self.version + 1 - min(versions) > bound

    def _iteration(self) -> dict[str, float]:
        assert self.sink is not None and self.buffer is not None
        cfg, c = self.learner_cfg, self.cfg.algorithm
        start = time.perf_counter()
        deadline = start + cfg.iteration_timeout_s
        sums: dict[str, torch.Tensor] = {}
        counts: dict[str, int] = {}
        updates = 0
        wait_s = 0.0
        while updates < cfg.updates_per_iteration and (now := time.perf_counter()) < deadline:
            self._fold_normalization()
            if self._staleness_gate() or self._updates_owed() <= 0:
                t0 = time.perf_counter()
                gated = self._staleness_gate()
                with self.sink.arrived:
                    self.sink.arrived.wait(timeout=min(0.05, deadline - now))
                waited = time.perf_counter() - t0
                wait_s += waited
                self._gated_s += waited if gated else 0.0
                continue
            with self.sink.lock:
                batch = self.buffer.sample(c.batch_size, 1, c.gamma)
            for key, value in self.alg.update(batch).items():
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
            updates += 1
            self.total_updates += 1
            if self._publish_due(self.total_updates):
                self.publish()
        elapsed = time.perf_counter() - start
        self.env_steps = self.sink.received
        self._maybe_checkpoint_by_time()
        return self._learner_metrics(sums, counts, updates, elapsed, wait_s)

    def _fold_normalization(self) -> None:
        assert self.sink is not None
        obs = self.sink.take_new_obs()
        if obs is not None:
            self.policy.update_normalization(obs.to(self.device))

    def _learner_metrics(
        self, sums: dict[str, torch.Tensor], counts: dict[str, int], updates: int, elapsed: float, wait_s: float
    ) -> dict[str, float]:
        assert self.sink is not None and self.buffer is not None and self.server is not None
        names = {
            "value": "Loss/value",
            "actor": "Loss/actor",
            "alpha_loss": "Loss/alpha",
            "q": "Policy/mean_q",
            "target_q": "Policy/mean_target_q",
            "entropy": "Policy/entropy",
        }
        metrics = {names[k]: float(v) / counts[k] for k, v in sums.items() if k in names}
        metrics["Policy/alpha"] = float(self.alg.alpha)
        arrived = self.sink.take_stats()
        for _, ret, _, _ in arrived.episodes:
            self._returns.append(ret)
        self._episodes += len(arrived.episodes)
        if self._returns:
            metrics["Train/mean_return"] = float(np.mean(self._returns))
        online_human, demo_human = self.buffer.num_interventions()
        metrics.update(
            {
                "Train/episodes": float(self._episodes),
                "Train/received": float(arrived.transitions),
                "Train/replay_size": float(len(self.buffer)),
                "Train/demo_size": float(self.buffer.num_demos),
                "Train/interventions_online": float(online_human),
                "Train/interventions_demo": float(demo_human),
                "Train/intervention_rate": arrived.interventions / max(arrived.transitions, 1),
                "Perf/updates": float(updates),
                "Perf/updates_per_s": updates / max(elapsed - wait_s, 1e-9),
                "Perf/learner_busy_fraction": 1.0 - wait_s / max(elapsed, 1e-9),
                "Perf/total_env_steps": float(self.sink.received),
                "Perf/total_updates": float(self.total_updates),
                "Realworld/weights_version": float(self.version),
                "Realworld/staleness_mean": arrived.staleness_sum / max(arrived.transitions, 1),
                "Realworld/staleness_max": float(arrived.staleness_max),
                "Realworld/gated_s": self._gated_s,
                "Realworld/duplicates": float(arrived.duplicates),
                "Realworld/actors_connected": float(sum(a.connected for a in self.server.actors().values())),
            }
        )
        if self.sink.journal is not None:
            metrics["Realworld/journal_bytes"] = float(self.sink.journal.disk_bytes())
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def _maybe_checkpoint_by_time(self) -> None:
        every = self.learner_cfg.checkpoint_every_s
        if every and self.log_dir is not None and time.monotonic() - self._last_checkpoint >= every:
            self.save(self.log_dir / f"model_{self.iteration + 1}.pt")

    def save(self, path: str | Path) -> None:
        """An atomic checkpoint that holds the buffer with its row keys and watermarks; afterwards the journal
        segments it covers are deleted. Transitions arriving meanwhile wait (their actors keep them spooled)."""
        journal = self.sink.journal if self.sink is not None else None
        if self.sink is None:
            super().save(path)
            return
        with self.sink.lock:
            self.journal_start = journal.rotate() if journal is not None else 0
            super().save(path)
        if journal is not None:
            journal.drop_before(self.journal_start)
        self._last_checkpoint = time.monotonic()

    def _checkpoint_state(self) -> dict[str, Any]:
        if self.sink is not None:
            self.env_steps = self.sink.received
        state = super()._checkpoint_state()
        if self.buffer is not None:
            state["replay"] = self.buffer.state_dict()  # always: acknowledged data must survive the learner
        state["realworld"] = {
            "learner_cfg": to_dict(self.learner_cfg),
            "watermarks": self.watermarks.snapshot(),
            "row_keys": self.keys.state_dict(self.buffer.online.size) if self.keys and self.buffer else None,
            "journal_start": self.journal_start,
            "version": self.version,
            "total_updates": self.total_updates,
            "bc_done": self.bc_done,
            "episodes": self._episodes,
            "returns": list(self._returns),
        }
        return state

    def _restore(self, data: dict[str, Any]) -> None:
        super()._restore(data)
        rw: Mapping[str, Any] | None = data.get("realworld")
        if rw is None:
            return  # a plain SAC checkpoint: start a learner from its weights and buffer
        self.watermarks = Watermarks(rw["watermarks"])
        if rw["row_keys"] is not None:
            self.keys = RowKeys(self._ensure_buffer().capacity)
            self.keys.load_state_dict(rw["row_keys"])
        self.journal_start = int(rw["journal_start"])
        self.version, self.total_updates = int(rw["version"]), int(rw["total_updates"])
        self.bc_done, self._episodes = bool(rw["bc_done"]), int(rw["episodes"])
        self._returns.extend(rw["returns"])

    def stored_keys(self) -> list[tuple[str, int]]:
        """``(actor id, seq)`` of every online row in the buffer (for tests and audits)."""
        assert self.keys is not None and self.buffer is not None
        size = self.buffer.online.size
        rows = self.keys.keys[:size] if size < len(self.keys.keys) else self.keys.keys
        return [(self.keys.actor_ids[a], int(s)) for a, s, _ in rows]
