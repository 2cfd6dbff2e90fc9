"""Actor mode of the policy node: every control tick becomes a transition, streamed to a real-world learner.

Per tick the controller shows its observer the observation (before the policy runs) and the command (after). A tick
that ran the policy leaves a transition open, ``(obs_k, action_k, policy version)``; the next tick's observation
closes it, with the reward source's ``(reward, done, intervention)`` at that moment. Episodes end when the source
says done, at ``max_episode_steps`` (truncated), or when the controller holds the robot (a fault, the shutdown):
the open transition has then no next observation of the policy's loop and is dropped. New weights are swapped in
only between episodes (chunk policies: their next chunk is computed by the new policy, and each executed action is
recorded with the version of the chunk that planned it).

Nothing here waits: rows go to the writer thread (:class:`~rslkit.link.spool_writer.SpoolWriter`, dropping rows
rather than blocking when the disk falls behind), at least every ``spool_every_s`` seconds and at each episode end;
weights come ready from the loader thread (:mod:`~rslkit.deploy.ros2.actor_weights`), the network is the client's
thread (:class:`~rslkit.link.client.ActorClient`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.actor_config import RobotActorCfg, schema_json
from rslkit.deploy.ros2.actor_rewards import RewardSource, make_reward_source
from rslkit.deploy.ros2.actor_weights import WeightLoader
from rslkit.deploy.ros2.controller import ControlOutput, Log, PolicyController
from rslkit.link.client import ActorClient, ClientConfig
from rslkit.link.episodes import EpisodeNumbers
from rslkit.link.spool import Spool
from rslkit.link.spool_writer import SpoolWriter
from rslkit.link.transitions import Row, TransitionSchema
from rslkit.link.wire import ArraySpec

EPISODE_FILE = "actor_episodes.json"
"""Beside the spool's own files: the next episode number, so that (actor id, episode, step) keys never repeat
across restarts of the node."""

_Open = tuple[np.ndarray, np.ndarray, int, int]  # obs [D], action [A], policy version, step


class ActorMode:
    """Records the transitions of ``controller``'s ticks (install it as the controller's ``observer``).

    Args:
        controller: the control loop whose ticks are recorded and whose policy is swapped.
        submit: takes finished rows without waiting (``SpoolWriter.submit``).
        reward: the reward and episode-end source.
        first_episode: number of the first episode (episodes count up from it).
        batch_steps: rows handed to ``submit`` at most at once (also at each episode end).
        spool_every_s: rows are handed to ``submit`` at least this often (seconds of the tick clock; 0: off).
        max_episode_steps: truncate an episode after this many transitions (0: never).
        version: the policy version running at start.
        take_weights: the newest ready ``(version, policy)`` or None (``WeightLoader.take``).
        report_version: told the version whenever it changes (``ActorClient.set_policy_version``).
        logger: where problems are logged.
    """

    def __init__(
        self,
        controller: PolicyController,
        submit: Callable[[list[Row]], bool],
        reward: RewardSource,
        *,
        first_episode: int = 0,
        batch_steps: int = 1000,
        spool_every_s: float = 1.0,
        max_episode_steps: int = 0,
        version: int = 0,
        take_weights: Callable[[], tuple[int, OnnxPolicy] | None] | None = None,
        report_version: Callable[[int], None] | None = None,
        logger: Log | None = None,
    ) -> None:
        self.controller, self.submit, self.reward = controller, submit, reward
        groups = list(controller.policy.meta.obs_groups)
        if len(groups) != 1:
            raise ValueError(
                f"Actor mode records one float observation group; this policy reads {groups} (camera images, an "
                "instruction). Run it without --actor.learner."
            )
        self.group = groups[0]
        self.batch_steps, self.max_episode_steps, self.spool_every_s = batch_steps, max_episode_steps, spool_every_s
        self._last_flush: float | None = None
        self.version = version
        self.take_weights, self.report_version = take_weights, report_version
        self.log: Log = logger or logging.getLogger(__name__)
        self.next_episode = first_episode
        self.episode: int | None = None
        """The episode in progress (None: between episodes)."""
        self.step = 0
        self.counts: Counter[str] = Counter()
        """``transitions``, ``episodes``, ``dropped_at_hold``, ``reward_errors``, ``swaps``, ``errors``."""
        self.hook_max_s = 0.0
        """The longest time one hook took on the control thread."""
        self._open: _Open | None = None
        self._obs: np.ndarray | None = None
        self._rows: list[Row] = []
        self._chunk_swap: tuple[Any, int, int] | None = None  # (engine, its first request after a swap, old version)
        self._warned: set[str] = set()
        if report_version is not None:
            report_version(version)

    # ------------------------------------------------------------------ TickObserver
    def before_policy(self, now: float, obs: np.ndarray) -> None:
        """Close the open transition with ``obs``; between episodes, swap in new weights."""
        start = time.perf_counter()
        try:
            self._obs = obs
            if self._open is not None:
                self._close_transition(obs)
            if self._last_flush is None or not self._rows:
                self._last_flush = now
            elif self.spool_every_s and now - self._last_flush >= self.spool_every_s:
                self.flush()
                self._last_flush = now
            if self.episode is None:
                self._between_episodes()
        except Exception as err:  # the control loop goes on whatever happens here
            self._error("before_policy", err)
        self._timed(start)

    def after_output(self, out: ControlOutput) -> None:
        """Open a transition for a tick that ran the policy; end the episode when the robot is held."""
        start = time.perf_counter()
        try:
            obs, self._obs = self._obs, None
            if out.status == "run" and obs is not None:
                if self.episode is None:
                    self._start_episode()
                action = np.array(self.controller.last_action, np.float32)
                self._open = (obs, action, self._tick_version(), self.step)
                self.step += 1
            elif self.episode is not None:
                if self._open is not None:
                    self.counts["dropped_at_hold"] += 1
                    self._open = None
                self._end_episode()
        except Exception as err:
            self._error("after_output", err)
        self._timed(start)

    # ------------------------------------------------------------------ episodes
    def _close_transition(self, next_obs: np.ndarray) -> None:
        assert self._open is not None and self.episode is not None
        obs, action, version, step = self._open
        self._open = None
        try:
            reward, done, intervention = self.reward.outcome({self.group: next_obs})
        except Exception as err:  # a plug-in's bug: this transition is lost, the episode goes on
            self.counts["reward_errors"] += 1
            self._warn_once("reward", f"actor: the reward source failed, transition dropped: {err!r}")
            return
        truncated = not done and self.max_episode_steps > 0 and step + 1 >= self.max_episode_steps
        obs_g, next_g = {self.group: obs}, {self.group: next_obs}
        row = Row(
            obs_g, action, reward, done or truncated, truncated, next_g, self.episode, step, version, intervention
        )
        self._rows.append(row)
        self.counts["transitions"] += 1
        if done or truncated:
            self._end_episode()
        elif len(self._rows) >= self.batch_steps:
            self.flush()

    def _start_episode(self) -> None:
        self.episode, self.step = self.next_episode, 0
        self.next_episode += 1
        self.reward.episode_started()

    def _end_episode(self) -> None:
        self.flush()
        self.episode = None
        self.counts["episodes"] += 1

    def _between_episodes(self) -> None:
        ready = self.take_weights() if self.take_weights is not None else None
        if ready is not None:
            self._swap(*ready)
        elif self.controller.policy.kind == "recurrent":
            self.controller.policy.reset()  # an episode starts from zero memory

    def _swap(self, version: int, policy: OnnxPolicy) -> None:
        engine = self.controller.engine
        try:
            self.controller.set_policy(policy)
        except ValueError as err:
            self.log.warning(f"actor: weights version {version} not swapped in: {err}")
            return
        if engine is not None:  # actions already planned still come from the old version's chunks
            self._chunk_swap = (engine, engine.stats.requests, self.version)
        self.version = version
        self.counts["swaps"] += 1
        if self.report_version is not None:
            self.report_version(version)

    def _tick_version(self) -> int:
        """The version of the policy that chose this tick's action."""
        swap, engine = self._chunk_swap, self.controller.engine
        if swap is None or engine is None or swap[0] is not engine or not engine.executed_chunks:
            return self.version
        chunk = engine.executed_chunks[-1]
        return swap[2] if chunk is not None and chunk < swap[1] else self.version

    def flush(self) -> None:
        """Hand the finished rows to ``submit``."""
        if self._rows:
            rows, self._rows = self._rows, []
            self.submit(rows)

    # ------------------------------------------------------------------ bookkeeping
    def _timed(self, start: float) -> None:
        self.hook_max_s = max(self.hook_max_s, time.perf_counter() - start)

    def _error(self, where: str, err: Exception) -> None:
        self.counts["errors"] += 1
        self._warn_once(where, f"actor: {where} failed ({err!r}); the control loop goes on, recording may have gaps")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning(message)


class RobotActor:
    """The actor mode, assembled: spool, writer thread, network client, weight loader and the observer.

    Installs itself as ``controller.observer``; :meth:`close` stops it all (the spool keeps what the learner has not
    acknowledged, for the next start).

    Args:
        cfg: the ``--actor.*`` settings.
        controller: the node's control loop.
        logger: where it reports.
        intra_op_threads: ONNX Runtime threads of swapped-in policies.

    Raises:
        ValueError: bad settings, a schema that does not fit the policy, a spool held by another process.
    """

    def __init__(
        self, cfg: RobotActorCfg, controller: PolicyController, logger: Log | None = None, intra_op_threads: int = 1
    ) -> None:
        cfg.validate()
        self.cfg, self.log = cfg, logger or logging.getLogger(__name__)
        meta = controller.policy.meta
        if cfg.task and meta.task != cfg.task:
            raise ValueError(f"The policy was exported from task {meta.task!r}, not {cfg.task!r} (--actor.task).")
        self.schema = check_schema(TransitionSchema.from_json(schema_json(cfg, meta)), controller)
        token, tls = cfg.read_token(), cfg.client_tls()
        self.spool = Spool(cfg.spool_dir, cfg.id, self.schema)
        self.client: ActorClient | None = None
        try:
            episodes = EpisodeNumbers(cfg.spool_dir / EPISODE_FILE)
            self.writer = SpoolWriter(self.spool, when_full="drop", max_buffered=cfg.max_buffered, episodes=episodes)
            # spool polls every 50 ms (the transport's default is 20 ms): transitions come once per episode or
            # chunk_steps anyway, and fewer wake-ups of the network thread leave the control thread the CPU and GIL
            heartbeat = min(0.5, cfg.dead_after_s / 3)
            config = ClientConfig(heartbeat_s=heartbeat, dead_after_s=cfg.dead_after_s, poll_s=min(0.05, heartbeat))
            self.client = ActorClient(
                cfg.learner, cfg.id, self.spool, token=token, tls=tls, config=config,
                allow_insecure_remote=cfg.allow_insecure_remote,
            )  # fmt: skip
            self.loader = WeightLoader(self.client.latest_weights, meta, cfg.task, intra_op_threads, poll_s=0.1)
            self.mode = ActorMode(
                controller,
                self.writer.submit,
                make_reward_source(cfg.reward, cfg.reward_fn),
                first_episode=episodes.next_episode,
                batch_steps=cfg.batch_steps,
                spool_every_s=cfg.spool_every_s,
                max_episode_steps=cfg.max_episode_steps,
                version=cfg.initial_version,
                take_weights=self.loader.take,
                report_version=self.client.set_policy_version,
                logger=self.log,
            )
        except BaseException:
            if self.client is not None:
                self.client.close()
            self.spool.close()
            raise
        self.controller = controller
        controller.observer = self.mode
        self.log.info(
            f"Actor mode: actor '{cfg.id}' streams to {cfg.learner} ({'TLS' if tls else 'plain text'}), spool "
            f"'{cfg.spool_dir}', reward '{cfg.reward}', episodes from {episodes.next_episode}, "
            f"{self.spool.unacked_count} transitions pending from before."
        )

    @property
    def reward(self) -> RewardSource:
        """The reward source (the node feeds a topic source its messages)."""
        return self.mode.reward

    def status(self) -> dict[str, Any]:
        """Counts of the observer and the writer, the spool's and the client's state (a snapshot)."""
        assert self.client is not None
        client = self.client.status()
        return {
            **self.mode.counts,
            "buffered": self.writer.buffered,
            "spooled": self.writer.spooled,
            "dropped_buffer_full": self.writer.dropped,
            "refused": self.writer.refused,
            "acked": client.acked,
            "unacked": client.unacked,
            "connected": client.connected,
            "policy_version": self.mode.version,
            "weights_refused": self.loader.refused,
            "hook_max_ms": round(self.mode.hook_max_s * 1e3, 3),
        }

    def close(self) -> None:
        """Spool the finished rows, wait up to ``drain_s`` for acknowledgements, stop the threads, close the spool."""
        self.controller.observer = None
        self.mode.flush()
        self.writer.close()
        deadline = time.monotonic() + self.cfg.drain_s
        while self.spool.unacked_count and time.monotonic() < deadline:
            time.sleep(0.02)
        self.loader.close()
        assert self.client is not None
        self.client.close()
        self.log.info(f"Actor mode stopped: {self.status()}.")
        self.spool.close()


def check_schema(schema: TransitionSchema, controller: PolicyController) -> TransitionSchema:
    """``schema`` if it describes what the controller records: its one observation group and its actions, float32.

    Raises:
        ValueError: naming the difference.
    """
    meta = controller.policy.meta
    expected = TransitionSchema(
        {g: ArraySpec(tuple(s), "float32") for g, s in meta.obs_groups.items()},
        ArraySpec((meta.action_dim,), "float32"),
    )
    if schema != expected:
        raise ValueError(
            f"The transition schema {schema.to_json()} does not describe what this policy's loop records "
            f"({expected.to_json()}); the learner's task must have the policy's observation group and actions."
        )
    return schema
