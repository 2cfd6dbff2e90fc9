"""The actor loop in-process against an in-process learner: records what it did (keys, versions, interventions),
swaps weights only at episode boundaries, and its interventions reach both of the learner's buffers."""

from __future__ import annotations

import csv
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_learner import make_learner
from transport_helpers import FAST, needs_netns

from rslkit.envs.registry import expert_for
from rslkit.link import wire
from rslkit.link.client import ActorClient
from rslkit.link.spool import Spool
from rslkit.link.transitions import Transitions
from rslkit.realworld.actor import Actor, restart_seed
from rslkit.realworld.actor_config import ActorCfg
from rslkit.realworld.defaults import agent_defaults
from rslkit.realworld.sim_robot import RealTimeCfg, RealTimeRobot
from rslkit.realworld.task_schema import transition_schema
from rslkit.recipes import build_run

pytestmark = needs_netns


class EveryThirdStep:
    """A "human" that takes over on every third step with the action +0.5."""

    def __init__(self) -> None:
        self.t = 0

    def reset(self) -> None:
        self.t = 0

    def __call__(self, obs: dict, policy_action: np.ndarray) -> np.ndarray | None:
        self.t += 1
        return np.full_like(policy_action, 0.5) if self.t % 3 == 0 else None


def test_actor_streams_episodes_with_interventions_into_both_buffers(tmp_path: Path) -> None:
    learner = make_learner(None, max_iterations=2)
    learner.serve("127.0.0.1:0")
    assert learner.server is not None
    env, runner = build_run("pendulum", "sac", num_envs=1, seed=3, agent_fields=agent_defaults("pendulum"))
    spool = Spool(tmp_path / "spool", "actor-0", transition_schema(env, runner.policy.obs_groups))
    client = ActorClient(f"127.0.0.1:{learner.server.port}", "actor-0", spool, config=FAST)
    cfg = ActorCfg(max_episodes=2, realtime=False, random_steps=50, first_weights_timeout_s=5.0)
    actor = Actor(env, runner.policy, client, cfg, tmp_path, interventions=EveryThirdStep())
    summary = actor.run()
    client.close()
    learner.stop_serving()
    assert summary.episodes == 2 and summary.env_steps == 400 and summary.unacked == 0
    assert summary.policy_version >= 1  # took the learner's weights before acting
    assert summary.interventions == 2 * (200 // 3)
    assert learner.buffer is not None
    assert len(learner.buffer) == 400
    assert learner.buffer.num_interventions() == (summary.interventions, summary.interventions)
    keys = learner.stored_keys()
    assert sorted(keys) == [("actor-0", s) for s in range(400)]
    assert learner.keys is not None
    versions = learner.keys.keys[:400, 2]
    assert len(set(versions[:200].tolist())) == 1  # one version per episode: swaps only at episode boundaries
    rows = list(csv.DictReader((tmp_path / "episodes.csv").open()))
    assert [int(r["episode"]) for r in rows] == [0, 1]
    assert [int(r["interventions"]) for r in rows] == [66, 66]


def lone_actor(tmp_path: Path, task: str, cfg: ActorCfg, **kwargs: Any) -> Actor:
    """An actor whose learner never answers (nothing listens on its port)."""
    sim, runner = build_run(task, "sac", num_envs=1, seed=0, agent_fields=agent_defaults(task))
    env = RealTimeRobot(sim, cfg.robot) if cfg.realtime else sim
    spool = Spool(tmp_path / "spool", "actor-0", transition_schema(sim, runner.policy.obs_groups))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = ActorClient(f"127.0.0.1:{port}", "actor-0", spool, config=FAST)
    return Actor(env, runner.policy, client, cfg, tmp_path, **kwargs)


class Expert:
    """Always the task's scripted expert (every episode succeeds)."""

    def __init__(self, task: str) -> None:
        self.expert = expert_for(task)

    def reset(self) -> None:
        pass

    def __call__(self, obs: dict, policy_action: np.ndarray) -> np.ndarray:
        return self.expert(obs)


def test_return_and_explore_starts_episodes_from_states_of_successful_ones(tmp_path: Path) -> None:
    robot = RealTimeCfg(control_hz=1000.0, home_speed=1000.0, settle_s=0.0, min_reset_s=0.0)
    cfg = ActorCfg(
        max_episodes=3, robot=robot, return_and_explore=1.0, first_weights_timeout_s=0.0, drain_timeout_s=0.0
    )
    actor = lone_actor(tmp_path, "so101-reach", cfg, interventions=Expert("so101-reach"))
    summary = actor.run()
    actor.client.close()
    assert summary.successes[0] == 1.0  # the first episode succeeded, so its states became start states
    assert summary.returned_starts == 2  # the next two began at one of them
    assert actor.start_states is not None and len(actor.start_states) > 0


def test_hold_mode_stops_acting_while_the_learner_is_unreachable(tmp_path: Path) -> None:
    robot = RealTimeCfg(control_hz=50.0)
    cfg = ActorCfg(
        max_time_s=1.5, robot=robot, on_learner_lost="hold", lost_after_s=0.2, first_weights_timeout_s=0.0,
        drain_timeout_s=0.0,
    )  # fmt: skip
    actor = lone_actor(tmp_path, "pendulum", cfg)
    summary = actor.run()
    actor.client.close()
    assert summary.held_s >= 1.0
    assert summary.env_steps <= 20  # about 0.2 s of 50 Hz ticks before it gave the learner up


def _spooled(spool: Spool) -> list[Transitions]:
    return [wire.decode(m, spool.schema) for _, _, m in spool.pending()]  # type: ignore[misc]


def test_the_running_episode_reaches_the_spool_every_second_and_success_is_not_printed_when_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A killed actor loses at most ``spool_every_s`` of its episode (pendulum: 20 steps of 0.05 s), not all of it;
    a task without success prints no ``success None``."""
    cfg = ActorCfg(max_env_steps=250, realtime=False, first_weights_timeout_s=0.0, drain_timeout_s=0.0)
    assert cfg.spool_every_s == 1.0  # the default
    actor = lone_actor(tmp_path, "pendulum", cfg)
    assert actor.spool_steps == 20
    actor.run()
    actor.client.close()
    messages = _spooled(actor.spool)
    assert [len(m.seq) for m in messages] == [20] * 12 + [10]  # episode 0 ends at step 200, episode 1 is cut at 50
    assert not messages[0].batch.done.any()  # handed over mid-episode
    out = capsys.readouterr().out
    assert "episode 0: return" in out and "success" not in out
    actor.spool.close()


def test_a_restarted_actor_does_not_replay_its_random_stream(tmp_path: Path) -> None:
    """Same seed, same actor directory, restarted: new random actions (and a new env seed); a fresh directory
    with the same seed repeats the first run exactly."""
    assert restart_seed(7, 0) == 7 and restart_seed(7, 1) != restart_seed(7, 2) != 7

    def first_actions(directory: Path) -> np.ndarray:
        cfg = ActorCfg(max_env_steps=30, random_steps=30, realtime=False, first_weights_timeout_s=0.0,
                       drain_timeout_s=0.0)  # fmt: skip
        actor = lone_actor(directory, "pendulum", cfg, seed=7)
        actor.run()
        actor.client.close()
        actions = np.concatenate([m.batch.action for m in _spooled(actor.spool)])
        actor.spool.close()
        return actions

    first = first_actions(tmp_path / "a")
    again = first_actions(tmp_path / "b")  # another, fresh directory: one uninterrupted run is reproducible
    restarted = first_actions(tmp_path / "a")  # the same directory: a restart
    np.testing.assert_array_equal(first, again)
    assert restarted.shape == (60, 1) and not np.allclose(restarted[30:], first[:30])
