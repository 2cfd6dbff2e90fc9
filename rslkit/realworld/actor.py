"""The actor loop: act on one env (a real-time simulated robot, or any VecEnv with one env), spool, swap weights.

Per control tick: read the observation, choose an action (uniform at first, then the SAC policy; a human or scripted
expert may take over), step, and record the transition. The running episode goes to the spool at least every
``spool_every_s`` seconds of robot time and at its end, through :class:`~rslkit.link.spool_writer.SpoolWriter`
(off the loop's thread), from where the :class:`~rslkit.link.client.ActorClient` streams it to the learner. Weights
are swapped only at episode boundaries (or every ``swap_every`` steps); every transition records the version that
chose it. The loop never touches the network.

Episode numbers continue across restarts (``actor_state.json`` beside the spool), so (actor, episode, step) keys
stay unique, and the spool resends whatever the learner had not acknowledged. A restarted actor draws new random
actions (its generator is seeded by the seed and the first episode number), so it never replays the random
stream of an earlier start; one uninterrupted run with one seed is reproducible.
"""

from __future__ import annotations

import csv
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.vec_env import VecEnv, control_period
from rslkit.link.client import ActorClient
from rslkit.link.episodes import EpisodeNumbers
from rslkit.link.spool_writer import RewardFn, SpoolWriter
from rslkit.link.transitions import Row
from rslkit.models.sac_networks import SACModel
from rslkit.realworld.actor_config import ActorCfg
from rslkit.realworld.sim_robot import RealTimeRobot, StartStates
from rslkit.realworld.weights import SAC_ACTING, load_state_arrays

if TYPE_CHECKING:
    from rslkit.realworld.interventions import InterventionSource

log = logging.getLogger(__name__)
STATE_FILE = "actor_state.json"
"""In the actor directory: the next episode number (:class:`~rslkit.link.episodes.EpisodeNumbers`)."""
EPISODE_FIELDS = (
    "episode",
    "env_steps",
    "return",
    "length",
    "success",
    "interventions",
    "intervention_rate",
    "policy_version",
    "wall_s",
    "connected",
)


@dataclass
class ActorSummary:
    """What one :meth:`Actor.run` did."""

    episodes: int
    env_steps: int
    wall_s: float
    busy_s: float
    """Seconds the loop spent choosing actions and recording (the rest: waiting for ticks and the robot)."""
    held_s: float
    """Seconds the robot was held because the learner was unreachable (``on_learner_lost hold``)."""
    weight_swaps: int
    policy_version: int
    spooled: int
    unacked: int
    push_latency_s: list[float]
    spool_append_s: list[float]
    interventions: int
    returns: list[float]
    successes: list[float | None]
    """Per episode, whether it succeeded (None: the task does not say)."""
    returned_starts: int = 0
    """Episodes that began at a state of an earlier successful episode (return-and-explore)."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-friendly dict with percentiles instead of the raw lists of latencies."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("push_latency_s", "spool_append_s")}
        for name in ("push_latency_s", "spool_append_s"):
            values = getattr(self, name)
            out[name] = {
                "n": len(values),
                "p50": float(np.percentile(values, 50)) if values else None,
                "p99": float(np.percentile(values, 99)) if values else None,
            }
        out["idle_fraction"] = 1.0 - self.busy_s / self.wall_s if self.wall_s > 0 else None
        return out


@dataclass
class _Tally:
    """Counters of one :meth:`Actor.run`."""

    start: float
    episodes: int = 0
    steps: int = 0
    swaps: int = 0
    interventions: int = 0
    busy_s: float = 0.0
    held_s: float = 0.0
    returns: list[float] = field(default_factory=list)
    successes: list[float | None] = field(default_factory=list)


@dataclass
class _Episode:
    """The running episode's return, length and interventions."""

    ret: float = 0.0
    steps: int = 0
    interventions: int = 0
    start: float = field(default_factory=time.monotonic)
    states: list[dict[str, torch.Tensor]] = field(default_factory=list)
    """Start states captured along the episode (return-and-explore)."""

    def add(self, row: Row) -> None:
        """Count one recorded transition."""
        self.ret += row.reward
        self.steps += 1
        self.interventions += row.intervention


class Actor:
    """Runs the actor loop of one env (see module doc).

    Args:
        env: a VecEnv with one env (wrap a simulated task in
            :class:`~rslkit.realworld.sim_robot.RealTimeRobot` to pace it like a robot).
        model: the SAC networks the learner trains (only the actor and normalizers are used).
        client: streams the spool; gives the newest weights.
        cfg: the loop's settings.
        actor_dir: where ``actor_state.json`` and ``episodes.csv`` go (the spool's parent, typically).
        interventions: who may take over (None: nobody).
        reward_fn: replaces the env's rewards when batches are spooled.
        owed_updates: the learner's updates owed for ``n`` transitions (``cfg.lockstep``).
        seed: of the random actions (with the first episode number: see :func:`restart_seed`).
    """

    def __init__(
        self,
        env: VecEnv,
        model: SACModel,
        client: ActorClient,
        cfg: ActorCfg,
        actor_dir: str | Path,
        *,
        interventions: InterventionSource | None = None,
        reward_fn: RewardFn | None = None,
        owed_updates: Callable[[int], int] | None = None,
        seed: int = 0,
    ) -> None:
        if cfg.lockstep and owed_updates is None:
            raise ValueError("actor.lockstep needs owed_updates (the learner's updates owed per transition count).")
        self.owed_updates = owed_updates
        if env.num_envs != 1:
            raise ValueError(f"An actor drives one robot: build its env with num_envs 1, not {env.num_envs}.")
        self.env, self.model, self.client, self.cfg = env, model.eval(), client, cfg
        self.groups = model.obs_groups
        self.dir = Path(actor_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.interventions = interventions
        if client.spool is None:
            raise ValueError("the actor's client streams its spool: build it with ActorClient(..., spool).")
        self.spool = client.spool
        self.writer = SpoolWriter(self.spool, when_full="wait", reward_fn=reward_fn)
        self.episodes = EpisodeNumbers(self.dir / STATE_FILE)
        self.episode = self.episodes.next_episode
        seed = restart_seed(seed, self.episode)
        self.rng = np.random.default_rng(seed)
        self.returned_starts = 0
        """Episodes that began at a stored start state."""
        self.version = 0
        self.stop_requested = False
        """Set from another thread (or a signal handler) to end :meth:`run` after the running tick."""
        self._lost_since: float | None = None
        self._report_pending = False
        self.start_states: StartStates | None = None
        """Return-and-explore: states of successful episodes that later episodes may start from."""
        self.robot: RealTimeRobot | None = None
        if cfg.return_and_explore > 0:
            if not isinstance(env, RealTimeRobot):
                raise ValueError("actor.return_and_explore needs a RealTimeRobot env (actor.realtime true).")
            self.robot, self.start_states = env, StartStates(cfg.return_and_explore, seed=seed)
        elif isinstance(env, RealTimeRobot):
            self.robot = env
        self.spool_steps = self._spool_steps(cfg.spool_every_s)

    def _spool_steps(self, every_s: float) -> int:
        """``spool_every_s`` in control periods (0: at episode ends only)."""
        if every_s == 0:
            return 0
        period = self.robot.period_s if self.robot is not None else control_period(self.env)
        if period is None:
            raise ValueError(
                f"{type(self.env).__name__} does not say its control period, so --actor.spool_every_s cannot be "
                "counted in steps: set --actor.robot.control_hz, or --actor.spool_every_s 0 (at episode ends only)."
            )
        return max(1, round(every_s / period))

    def _save_episode(self) -> None:
        """Reserve the running episode's number: a restart (after kill -9 mid-episode) begins with the next one."""
        self.episodes.cover(self.episode)

    # ------------------------------------------------------------------ weights
    def swap_weights(self) -> bool:
        """Take the newest weights the client received, if newer than the ones acting; returns whether it did."""
        latest = self.client.latest_weights()
        if latest is None or latest[0] <= self.version:
            return False
        version, arrays = latest
        acting = {k: v for k, v in arrays.items() if k.split("/")[0] not in ("meta", "policy.onnx")}
        load_state_arrays(self.model, acting, SAC_ACTING)
        self.version = version
        self._report_pending = True
        return True

    def _report_version(self, unsent: list[Row]) -> None:
        """Tell the learner (through heartbeats) the version acting, once every transition of older versions is
        acknowledged (``unsent``: the rows not yet handed to the spool): the learner bounds staleness by it
        (``learner.max_staleness``)."""
        older_unsent = bool(unsent) and unsent[0].policy_version != self.version
        if self._report_pending and not older_unsent and self.writer.idle() and self.spool.unacked_count == 0:
            self.client.set_policy_version(self.version)
            self._report_pending = False

    def _wait_for_first_weights(self) -> None:
        deadline = time.monotonic() + self.cfg.first_weights_timeout_s
        while not self.swap_weights() and time.monotonic() < deadline and not self.stop_requested:
            time.sleep(0.02)
        if self.version == 0:
            log.warning(
                "actor: no weights from the learner after %.1f s; acting with initial ones",
                self.cfg.first_weights_timeout_s,
            )

    # ------------------------------------------------------------------ acting
    def _numpy_obs(self, obs: TensorDict) -> dict[str, np.ndarray]:
        return {g: obs[g][0].detach().to("cpu", torch.float32).numpy().copy() for g in self.groups}

    def _policy_action(self, obs: TensorDict, steps: int) -> np.ndarray:
        if steps < self.cfg.random_steps:
            return self.rng.uniform(-1.0, 1.0, self.env.num_actions).astype(np.float32)
        with torch.no_grad():
            act = self.model.act_inference if self.cfg.deterministic else self.model.act
            return act(obs.to("cpu"))[0].numpy().astype(np.float32)

    def _wait_for_learner(self) -> None:
        """``cfg.lockstep``: wait until the newest weights come from at least the updates the learner owes for every
        transition this actor spooled (over restarts too: the spool's next seq), less one publish interval's worth
        of slack (100 updates)."""
        assert self.owed_updates is not None
        deadline = time.monotonic() + self.cfg.lockstep_timeout_s
        while not self.writer.idle() and time.monotonic() < deadline:
            time.sleep(0.005)
        owed = self.owed_updates(self.spool.next_seq) - 100
        while time.monotonic() < deadline and not self.stop_requested:
            latest = self.client.latest_weights()
            done = latest[1].get("meta/updates") if latest is not None else None
            if done is not None and int(done[0]) >= owed:
                return
            time.sleep(0.01)
        log.warning("actor: the learner did not catch up with %d updates in %.0f s", owed, self.cfg.lockstep_timeout_s)

    def _learner_lost(self) -> bool:
        if self.client.status().connected:
            self._lost_since = None
            return False
        now = time.monotonic()
        self._lost_since = self._lost_since or now
        return now - self._lost_since >= self.cfg.lost_after_s

    def _limits_reached(self, episodes: int, steps: int, start: float) -> bool:
        c = self.cfg
        return (
            self.stop_requested
            or (c.max_episodes > 0 and episodes >= c.max_episodes)
            or (c.max_env_steps > 0 and steps >= c.max_env_steps)
            or (c.max_time_s > 0 and time.monotonic() - start >= c.max_time_s)
        )

    def run(self) -> ActorSummary:
        """Act until a limit of :attr:`cfg` is reached or :attr:`stop_requested`; then flush the spool and wait (up
        to ``drain_timeout_s``) for the learner's acknowledgements."""
        run = _Tally(start=time.monotonic())
        self._save_episode()
        self._wait_for_first_weights()
        obs = self.env.get_observations()
        rows: list[Row] = []
        episode = _Episode()
        if self.interventions is not None:
            self.interventions.reset()
        with open(self.dir / "episodes.csv", "a", newline="") as csv_file:
            episodes_csv = csv.writer(csv_file)
            if csv_file.tell() == 0:
                episodes_csv.writerow(EPISODE_FIELDS)
            while not self._limits_reached(run.episodes, run.steps, run.start):
                if self.cfg.on_learner_lost == "hold" and self._learner_lost():
                    time.sleep(0.05)
                    run.held_s += 0.05
                    continue
                t0 = time.perf_counter()
                self._report_version(rows)
                if self.robot is not None and episode.steps % self.cfg.start_state_stride == 0:
                    episode.states.append(self.robot.capture_state())
                o, action, human = self._choose(obs, run.steps)
                run.busy_s += time.perf_counter() - t0
                next_obs, reward, done, extras = self.env.step(torch.from_numpy(action)[None].to(self.env.device))
                t1 = time.perf_counter()
                row = self._row(o, action, human, next_obs, float(reward[0]), bool(done[0]), extras, episode.steps)
                rows.append(row)
                run.steps += 1
                episode.add(row)
                if row.done or (self.spool_steps and len(rows) >= self.spool_steps):
                    self._spool(rows)
                    rows = []
                if row.done:
                    self._end_episode(run, episode, extras, episodes_csv)
                    csv_file.flush()
                    episode = _Episode()
                    if not self._limits_reached(run.episodes, run.steps, run.start):
                        next_obs = self._maybe_return(next_obs)
                elif self.cfg.swap_every and episode.steps % self.cfg.swap_every == 0:
                    run.swaps += self.swap_weights()
                obs = next_obs
                run.busy_s += time.perf_counter() - t1
        if rows:
            self._spool(rows)
            self.episode += 1  # a cut episode's number is not reused
            self._save_episode()
        self.writer.close()
        self._check_writer()
        self._drain()
        return ActorSummary(
            run.episodes, run.steps, time.monotonic() - run.start, run.busy_s, run.held_s, run.swaps, self.version,
            self.writer.spooled, self.spool.unacked_count, self.client.push_latencies_s(),
            self.writer.append_s, run.interventions, run.returns, run.successes, self.returned_starts,
        )  # fmt: skip

    def _choose(self, obs: TensorDict, steps: int) -> tuple[dict[str, np.ndarray], np.ndarray, bool]:
        """``(observation groups, action, whether a human chose it)`` for this tick."""
        o = self._numpy_obs(obs)
        action = self._policy_action(obs, steps)
        human = self.interventions(o, action) if self.interventions is not None else None
        if human is None:
            return o, action, False
        return o, np.clip(np.asarray(human, np.float32), -1.0, 1.0), True

    def _row(
        self,
        o: dict[str, np.ndarray],
        action: np.ndarray,
        human: bool,
        next_obs: TensorDict,
        reward: float,
        done: bool,
        extras: dict[str, Any],
        step: int,
    ) -> Row:
        """One transition; its next observation is the one before the env's auto-reset when the episode ended."""
        final = extras.get("final_obs") if done else None
        time_out = extras.get("time_outs")
        truncated = done and time_out is not None and bool(time_out[0])
        next_o = self._numpy_obs(final if final is not None else next_obs)
        return Row(o, action, reward, done, truncated, next_o, self.episode, step, self.version, human)

    def _spool(self, rows: list[Row]) -> None:
        """Hand ``rows`` to the writer thread."""
        self._check_writer()
        self.writer.submit(rows)

    def _check_writer(self) -> None:
        if self.writer.error is not None:
            raise RuntimeError(
                f"the spool writer refused transitions ({self.writer.error}): stop the robot, the data is unsafe."
            ) from self.writer.error

    def _maybe_return(self, obs: TensorDict) -> TensorDict:
        """Return-and-explore: start the new episode from a stored state (with ``cfg.return_and_explore``)."""
        state = self.start_states.sample() if self.start_states is not None else None
        if state is None or self.robot is None:
            return obs
        self.returned_starts += 1
        return self.robot.start_from(state)

    def _end_episode(self, run: _Tally, episode: _Episode, extras: dict[str, Any], out: Any) -> None:
        """Log the finished episode, reserve the next number, wait in lockstep, take new weights."""
        success = extras.get("success")
        succeeded = float(success[0]) if success is not None else None
        run.returns.append(episode.ret)
        run.successes.append(succeeded)
        if self.start_states is not None and succeeded:
            self.start_states.add_episode(episode.states)
        run.interventions += episode.interventions
        out.writerow(
            (
                self.episode, run.steps, f"{episode.ret:.4f}", episode.steps, succeeded, episode.interventions,
                f"{episode.interventions / episode.steps:.4f}", self.version,
                f"{time.monotonic() - episode.start:.3f}", int(self.client.status().connected),
            )
        )  # fmt: skip
        shown = "" if succeeded is None else f", success {succeeded:g}"
        print(
            f"episode {self.episode}: return {episode.ret:.1f}, length {episode.steps}{shown}, "
            f"interventions {episode.interventions}, weights v{self.version}",
            flush=True,
        )
        run.episodes += 1
        self.episode += 1
        self._save_episode()
        if self.client.fatal is not None:
            raise RuntimeError(f"actor: {self.client.fatal}")
        if self.cfg.lockstep:
            self._wait_for_learner()
        run.swaps += self.swap_weights()
        if self.interventions is not None:
            self.interventions.reset()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.cfg.drain_timeout_s
        while self.spool.unacked_count and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.spool.unacked_count:
            log.warning(
                "actor: %d transitions not acknowledged after %.0f s; they stay in the spool and are sent next time",
                self.spool.unacked_count,
                self.cfg.drain_timeout_s,
            )


def restart_seed(seed: int, first_episode: int) -> int:
    """The seed of an actor's random streams (its env, its random actions): ``seed`` for a run that starts at episode
    0, a seed derived from both for a restarted one (which must not replay the first start's random episodes)."""
    if first_episode == 0:
        return seed
    return int(np.random.SeedSequence([seed, first_episode]).generate_state(1)[0] & 0x7FFFFFFF)
