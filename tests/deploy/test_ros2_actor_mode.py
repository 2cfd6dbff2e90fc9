"""The ROS 2 node's actor mode at the controller level (no ROS): transitions from ticks, episodes, weight swaps, the
writer thread and, inside a private network namespace, a learner stand-in that is present, absent or stopped."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rslkit.deploy.clock import FakeClock
from rslkit.deploy.inference_worker import SimulatedInference
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.onnx_weights import POLICY_KEY, onnx_policy_from_arrays
from rslkit.deploy.ros2.actor import EPISODE_FILE, ActorMode, RobotActor
from rslkit.deploy.ros2.actor_config import RobotActorCfg
from rslkit.deploy.ros2.actor_rewards import NoReward, PluginReward, TopicReward
from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.controller import PolicyController
from rslkit.deploy.ros2.synthetic import chunk_policy, mlp_policy
from rslkit.link import wire
from rslkit.link.episodes import EpisodeNumbers
from rslkit.link.spool import Spool
from rslkit.link.spool_writer import SpoolWriter
from rslkit.link.transitions import Row, TransitionSchema

J = ["a", "b", "c"]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ros2"))  # the learner stand-in process
from learner_stub import LearnerStub  # noqa: E402

needs_netns = pytest.mark.skipif(
    os.environ.get("RSLKIT_NETNS_TESTS") != "1",
    reason="opens sockets: runs only inside a private network namespace with only loopback (RSLKIT_NETNS_TESTS=1, "
    "e.g. unshare -rn sh -c 'python tests/ros2/lo_up.py && RSLKIT_NETNS_TESTS=1 pytest tests/deploy/...')",
)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("actor_graphs")
    return {
        "mlp": mlp_policy(d / "mlp.onnx", 6, 3, hidden=(16,), control_rate_hz=100.0, seed=0),
        "mlp_v1": mlp_policy(d / "mlp_v1.onnx", 6, 3, hidden=(16,), control_rate_hz=100.0, seed=1),
        "other": mlp_policy(d / "other.onnx", 9, 3, hidden=(16,), control_rate_hz=100.0),
        "chunk": chunk_policy(d / "chunk.onnx", 3, 3, 4, hidden=(16,), seed=0),
        "chunk_v1": chunk_policy(d / "chunk_v1.onnx", 3, 3, 4, hidden=(16,), seed=1),
    }


def _controller(path: Path, **cfg: object) -> PolicyController:
    settings = {"joint_names": J, "rate_hz": 100.0, "observation": ["joint_pos", "last_action"], **cfg}
    return PolicyController(OnnxPolicy(path, check_outputs=False), ControllerCfg(**settings))  # type: ignore[arg-type]


def _weights(path: Path) -> dict[str, np.ndarray]:
    return {POLICY_KEY: np.frombuffer(path.read_bytes(), np.uint8)}


class Batches:
    """A ``submit`` that keeps every batch of rows."""

    def __init__(self) -> None:
        self.batches: list[list[Row]] = []

    def __call__(self, rows: list[Row]) -> bool:
        self.batches.append(rows)
        return True

    @property
    def rows(self) -> list[Row]:
        return [r for b in self.batches for r in b]


def _state(k: int) -> list[float]:
    return [0.01 * k, -0.02 * k, 0.1]


def test_ticks_become_transitions_with_keys_next_obs_rewards_and_episode_ends(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"])
    reward, batches = TopicReward(), Batches()
    mode = ActorMode(ctrl, batches, reward, first_episode=7, max_episode_steps=4, batch_steps=3)
    ctrl.observer = mode
    ref = OnnxPolicy(graphs["mlp"])
    observed, last = [], np.zeros(3, np.float32)
    for k in range(12):
        reward.on_reward(float(k))  # the reward that holds at tick k belongs to transition k - 1
        if k == 6:
            reward.on_done(True)  # a termination signalled before tick 6 ends the transition of tick 5
        out = ctrl.on_joint_state(k * 0.01, J, _state(k))
        assert out is not None and out.status == "run"
        obs = np.concatenate([np.array(_state(k), np.float32), last])
        last = ref(obs)
        observed.append((obs, last))
    assert len(batches.rows) == 10  # episode 10 goes on (its one closed transition waits for its end)
    mode.flush()
    rows = batches.rows
    assert len(rows) == 11  # the last tick's transition is still open
    # episode 7: ticks 0-3 (truncated at 4 steps); episode 8: ticks 4-5 (terminated); episode 9: ticks 6-9; 10: 10
    keys = [(r.episode, r.step) for r in rows]
    assert keys == [(7, 0), (7, 1), (7, 2), (7, 3), (8, 0), (8, 1), (9, 0), (9, 1), (9, 2), (9, 3), (10, 0)]
    assert [(r.done, r.truncated) for r in rows if r.done] == [(True, True), (True, False), (True, True)]
    assert [r.step for r in rows if r.done] == [3, 1, 3]
    for k, r in enumerate(rows):
        np.testing.assert_array_equal(r.obs["policy"], observed[k][0])
        np.testing.assert_array_equal(
            r.next_obs["policy"], observed[k + 1][0]
        )  # next obs: the observation at the next tick
        np.testing.assert_allclose(r.action, observed[k][1], atol=1e-6)
        assert r.reward == k + 1 and r.policy_version == 0 and not r.intervention
    assert [len(b) for b in batches.batches] == [3, 1, 2, 3, 1, 1]  # every 3 steps, at each episode end, and flush()
    assert mode.counts["episodes"] == 3 and mode.hook_max_s < 0.05


def test_a_hold_drops_the_open_transition_and_ends_the_episode(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"])
    batches = Batches()
    ctrl.observer = mode = ActorMode(ctrl, batches, NoReward())
    for k in range(3):
        ctrl.on_joint_state(k * 0.01, J, _state(k))
    held = ctrl.on_joint_state(0.03, J, [0.0, float("nan"), 0.0])
    assert held is not None and held.status == "hold"
    for k in range(4, 7):
        ctrl.on_joint_state(k * 0.01, J, _state(k))
    assert [(r.episode, r.step) for r in batches.rows] == [(0, 0), (0, 1)]  # tick 2's transition has no next obs
    assert mode.counts["dropped_at_hold"] == 1 and mode.episode == 1
    out = ctrl.shutdown(0.07)  # the final hold ends the episode in progress and spools it
    assert out is not None and mode.episode is None and mode.counts["dropped_at_hold"] == 2
    assert [(r.episode, r.step, r.done) for r in batches.rows[2:]] == [(1, 0, False), (1, 1, False)]


def test_weights_are_swapped_only_at_an_episode_boundary(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"])
    batches, reported = Batches(), []
    staged: list[tuple[int, OnnxPolicy]] = []
    take = lambda: staged.pop() if staged else None  # noqa: E731
    mode = ActorMode(
        ctrl, batches, NoReward(), max_episode_steps=5, version=3, take_weights=take, report_version=reported.append
    )
    ctrl.observer = mode
    for k in range(11):
        if k == 2:  # arrives mid-episode: waits for the episode's end at tick 5
            staged.append((4, onnx_policy_from_arrays(_weights(graphs["mlp_v1"]))))
        ctrl.on_joint_state(k * 0.01, J, _state(k))
    rows = batches.rows
    assert [r.policy_version for r in rows] == [3] * 5 + [4] * 5
    assert reported == [3, 4] and mode.counts["swaps"] == 1
    new = OnnxPolicy(graphs["mlp_v1"])
    for r in rows[5:]:
        np.testing.assert_allclose(r.action, new(r.obs["policy"]), atol=1e-6)
    with pytest.raises(ValueError, match="obs_groups"):
        ctrl.set_policy(OnnxPolicy(graphs["other"]))


def test_chunk_policy_actions_carry_the_version_of_the_chunk_that_planned_them(graphs: dict[str, Path]) -> None:
    clock = FakeClock()
    ctrl = PolicyController(
        OnnxPolicy(graphs["chunk"]),
        ControllerCfg(J, 100.0, observation=["joint_pos"], chunk_initial_latency_s=0.02),
        clock=clock,
        inference_factory=lambda fn, c: SimulatedInference(fn, c, lambda request: 0.02),
    )
    batches, staged = Batches(), [(1, OnnxPolicy(graphs["chunk_v1"]))]
    ctrl.observer = ActorMode(ctrl, batches, NoReward(), max_episode_steps=6, take_weights=lambda: None)
    outs = []
    for k in range(30):
        clock.sleep_until(k * 0.01)
        if k == 9:
            ctrl.observer.take_weights = lambda: staged.pop() if staged else None  # type: ignore[attr-defined]
        outs.append(ctrl.on_joint_state(k * 0.01, J, [0.1, 0.2, 0.3]))
    assert outs[0].status == "startup" and all(o.status == "run" for o in outs[3:])
    old = OnnxPolicy(graphs["chunk"])(np.array([0.1, 0.2, 0.3], np.float32))
    new = OnnxPolicy(graphs["chunk_v1"])(np.array([0.1, 0.2, 0.3], np.float32))
    rows = batches.rows
    assert len(rows) == 24 and all(r.policy_version == 0 for r in rows if r.episode < 2)  # swapped at tick 14
    versions = [r.policy_version for r in rows if r.episode >= 2]
    first_new = versions.index(1)
    assert first_new > 0, "the chunk planned before the swap still executes, labelled with its version"
    assert versions[first_new:] == [1] * (len(versions) - first_new)  # once a new chunk executes, only new ones
    for r in rows:  # each action is a row of the chunk of the version it is labelled with
        chunk = new if r.policy_version == 1 else old
        assert np.isclose(chunk, r.action, atol=1e-6).all(axis=1).any()


def test_reward_plugin_by_name_and_json_messages() -> None:
    plugin = PluginReward("builtins:len")  # any importable callable; its result is checked
    with pytest.raises(ValueError, match=r"return \(reward, done"):
        plugin.outcome({"policy": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="--actor.reward_fn"):
        PluginReward("no_such_module_here:fn")
    topic = TopicReward()
    topic.on_json(json.dumps({"reward": 1.5, "intervention": True}))
    topic.on_json("not json")
    topic.on_json(json.dumps({"reward": "NaN"}))
    assert topic.outcome({}) == (1.5, False, True) and topic.ignored == 2
    topic.on_json(json.dumps({"done": True}))
    assert topic.outcome({}) == (1.5, True, True) and topic.outcome({})[1] is False  # an end is used once


def reward_near_origin(obs: dict[str, np.ndarray]) -> tuple[float, bool]:
    """A plug-in: reward -|q|, done within 0.05 of the origin."""
    dist = float(np.abs(obs["policy"][:3]).sum())
    return -dist, dist < 0.05


def test_plugin_rewards_end_episodes(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"])
    batches = Batches()
    ctrl.observer = ActorMode(ctrl, batches, PluginReward(f"{__name__}:reward_near_origin"))
    for k in range(5):
        ctrl.on_joint_state(k * 0.01, J, [0.3 - 0.1 * k, 0.0, 0.0])  # reaches 0.0 at tick 3
    rows = batches.rows
    assert [(r.step, r.done) for r in rows] == [(0, False), (1, False), (2, True)]
    np.testing.assert_allclose([r.reward for r in rows], [-0.2, -0.1, 0.0], atol=1e-6)


def test_writer_spools_rows_and_episode_numbers_survive_a_restart(graphs: dict[str, Path], tmp_path: Path) -> None:
    schema = TransitionSchema({"policy": wire.ArraySpec((6,), "float32")}, wire.ArraySpec((3,), "float32"))
    ctrl = _controller(graphs["mlp"])
    with Spool(tmp_path / "s", "robot-1", schema) as spool:
        counter = EpisodeNumbers(spool.directory / EPISODE_FILE)
        writer = SpoolWriter(spool, when_full="drop", max_buffered=1000, episodes=counter)
        ctrl.observer = ActorMode(ctrl, writer.submit, NoReward(), max_episode_steps=3)
        for k in range(7):
            ctrl.on_joint_state(k * 0.01, J, _state(k))
        writer.close()
        stored = [wire.decode(m, schema) for _, _, m in spool.pending()]
        assert writer.spooled == 6 and spool.unacked_count == 6
    keys = [(int(e), int(s)) for m in stored for e, s in zip(m.batch.episode, m.batch.step)]  # type: ignore[union-attr]
    assert keys == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert (
        EpisodeNumbers(tmp_path / "s" / EPISODE_FILE).next_episode == 2
    )  # a restarted node numbers its episodes from 2


def test_settings_are_checked(graphs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        RobotActorCfg(learner="nowhere").validate()
    with pytest.raises(ValueError, match="reward_fn"):
        RobotActorCfg(learner="127.0.0.1:1", reward="plugin").validate()
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {"obs": {"policy": {"shape": [7], "dtype": "float32"}}, "action": {"shape": [3], "dtype": "float32"}}
        )
    )
    with pytest.raises(ValueError, match="does not describe what this policy's loop records"):
        RobotActor(RobotActorCfg(learner="127.0.0.1:1", schema=str(schema)), _controller(graphs["mlp"]))
    with pytest.raises(ValueError, match="not 'pendulum'"):
        RobotActor(RobotActorCfg(learner="127.0.0.1:1", task="pendulum"), _controller(graphs["mlp"]))
    spool = tmp_path / "refused"
    with pytest.raises(ValueError, match="Pass --actor.tls_ca CA.pem.*--actor.allow_insecure_remote"):
        RobotActor(RobotActorCfg(learner="10.1.2.3:50051", spool=str(spool)), _controller(graphs["mlp"]))
    assert not spool.exists()  # refused before the spool is made


def test_actor_flags_are_one_typed_spelling_for_every_actor() -> None:
    """``--actor.*`` through the one override parser: the connection fields are the same on the ROS 2 node and the
    simulated actors (``python -m rslkit.realworld actor``)."""
    from dataclasses import fields

    from rslkit.deploy.ros2.__main__ import robot_actor_cfg
    from rslkit.link.transport import ActorLinkCfg
    from rslkit.realworld.actor_config import ActorCfg
    from rslkit.realworld.onpolicy_config import OnPolicyActorCfg

    link = {f.name for f in fields(ActorLinkCfg)}
    for cfg in (RobotActorCfg, ActorCfg, OnPolicyActorCfg):
        assert link <= {f.name for f in fields(cfg)}, cfg
    assert robot_actor_cfg([]) is None
    cfg = robot_actor_cfg(
        ["--actor.learner", "127.0.0.1:1", "--actor.allow_insecure_remote=true", "--actor.reward", "none"]
    )
    assert cfg is not None and cfg.allow_insecure_remote is True and cfg.reward == "none" and cfg.id == "actor-0"
    with pytest.raises(ValueError, match="--actor.id need --actor.learner HOST:PORT"):
        robot_actor_cfg(["--actor.id", "arm-1"])
    with pytest.raises(ValueError, match="Bad value for 'actor.reward'"):
        robot_actor_cfg(["--actor.learner", "127.0.0.1:1", "--actor.reward", "sometimes"])


# ---------------------------------------------------------------------------------------------------- with sockets
def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Ticker:
    """Ticks a controller at ``rate_hz`` on real time, its states stamped on one regular schedule."""

    def __init__(self, ctrl: PolicyController, rate_hz: float = 100.0) -> None:
        self.ctrl, self.rate_hz, self.k = ctrl, rate_hz, 0
        self.took: list[float] = []
        """How long each tick took (s)."""

    def run(self, seconds: float) -> None:
        t0 = time.monotonic()
        for i in range(int(seconds * self.rate_hz)):
            while time.monotonic() < t0 + i / self.rate_hz:
                time.sleep(0.0005)
            start = time.monotonic()
            out = self.ctrl.on_joint_state(start, J, _state(self.k), stamp=1.0 + self.k / self.rate_hz)
            self.took.append(time.monotonic() - start)
            self.k += 1
            assert out is not None and out.status in ("run", "startup")

    def until(self, done: Callable[[], bool], timeout_s: float) -> None:
        """Tick on until ``done()`` (checked every 0.2 s), for ``timeout_s`` at most."""
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            self.run(0.2)


@needs_netns
@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["mlp", "chunk"])
def test_ticks_stay_on_time_while_the_learner_is_absent_then_stopped(
    graphs: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    ctrl = _controller(graphs["mlp"]) if kind == "mlp" else _controller(graphs["chunk"], observation=["joint_pos"])
    port = _free_port()
    cfg = RobotActorCfg(learner=f"127.0.0.1:{port}", spool=str(tmp_path / "spool"), chunk_steps=20, dead_after_s=0.6)
    actor = RobotActor(cfg, ctrl)
    learner, ticker = None, Ticker(ctrl)
    try:
        ticker.run(1.0)  # nobody listens on the port: the client reconnects with backoff meanwhile
        assert actor.status()["spooled"] > 0 and not actor.status()["connected"]
        learner = LearnerStub(actor.schema, port)
        ticker.until(lambda: actor.status()["unacked"] == 0, 20)
        assert actor.status()["unacked"] == 0, actor.status()
        learner.signal(signal.SIGSTOP)  # alive to the kernel, silent to the actor
        ticker.run(1.5)
        assert actor.status()["unacked"] > 0 and not actor.status()["connected"]
        learner.signal(signal.SIGCONT)
        ticker.until(lambda: actor.status()["unacked"] == 0, 20)
        assert actor.status()["unacked"] == 0, actor.status()
    finally:
        actor.close()
        if learner is not None:
            learner.kill()
    took = ticker.took[10:] if kind == "chunk" else ticker.took  # after the startup ticks
    # a tick that waited for the network would take the 0.6 s the client needs to notice the stopped learner
    assert max(took) < 0.1, f"slowest tick {max(took) * 1e3:.1f} ms"
    assert actor.mode.hook_max_s < 0.05 and actor.writer.dropped == 0


@needs_netns
@pytest.mark.timeout(60)
def test_a_learner_stand_in_stores_every_transition_once_and_its_weights_are_swapped_in(
    graphs: dict[str, Path], tmp_path: Path
) -> None:
    from rslkit.link.server import LearnerServer
    from rslkit.link.sink import MemorySink, TransitionsHandler

    ctrl = _controller(graphs["mlp"])
    sink = MemorySink()
    schema = TransitionSchema({"policy": wire.ArraySpec((6,), "float32")}, wire.ArraySpec((3,), "float32"))
    with LearnerServer([TransitionsHandler(schema, sink)], "127.0.0.1:0") as server:
        cfg = RobotActorCfg(
            learner=server.address, id="arm-1", spool=str(tmp_path / "spool"), max_episode_steps=10, drain_s=10.0
        )
        actor = RobotActor(cfg, ctrl)
        ticker = Ticker(ctrl)
        ticker.run(0.35)
        server.publish_weights(5, _weights(graphs["mlp_v1"]))
        ticker.until(lambda: actor.mode.version == 5, 10)
        # The actor reports v5 once every v0 transition is acked: give the acks and a heartbeat time (bounded).
        ticker.until(lambda: server.actors()["arm-1"].policy_version == 5, 10)
        ticker.run(0.3)
        actor.close()
        assert server.actors()["arm-1"].policy_version == 5  # reported in the heartbeats
    rows = [
        (int(e), int(k), int(v)) for _, _, b in sink.received for e, k, v in zip(b.episode, b.step, b.policy_version)
    ]
    assert sink.duplicates == 0 and sink.seqs("arm-1") == list(range(len(rows))) == list(range(actor.writer.spooled))
    assert len(set((e, k) for e, k, _ in rows)) == len(rows)
    by_episode: dict[int, list[tuple[int, int]]] = {}
    for e, k, v in rows:
        by_episode.setdefault(e, []).append((k, v))
    for e, steps in by_episode.items():
        assert [k for k, _ in steps] == list(range(len(steps))), f"episode {e} has gaps"
        assert len({v for _, v in steps}) == 1, f"episode {e} mixes policy versions"
    assert {v for _, _, v in rows} == {0, 5}
    obs = np.concatenate([b.obs["policy"] for _, _, b in sink.received])
    next_obs = np.concatenate([b.next_obs["policy"] for _, _, b in sink.received])
    done = np.concatenate([b.done for _, _, b in sink.received])
    np.testing.assert_array_equal(next_obs[:-1][~done[:-1]], obs[1:][~done[:-1]])  # within episodes: the next tick


def test_the_running_episode_is_handed_over_at_least_every_spool_every_s(graphs: dict[str, Path]) -> None:
    """A node killed mid-episode loses at most ``spool_every_s`` of it: rows leave without an episode end."""
    ctrl = _controller(graphs["mlp"])
    batches = Batches()
    ctrl.observer = ActorMode(ctrl, batches, NoReward(), spool_every_s=0.05)
    for k in range(23):
        ctrl.on_joint_state(k * 0.01, J, _state(k))
    assert batches.batches and len(batches.rows) >= 15  # no episode ended, yet the rows reached the writer
    assert all(len(b) <= 6 for b in batches.batches)
    off, held = _controller(graphs["mlp"]), Batches()
    off.observer = ActorMode(off, held, NoReward(), spool_every_s=0.0)
    for k in range(23):
        off.on_joint_state(k * 0.01, J, _state(k))
    assert not held.batches  # 0: at episode ends (and every batch_steps) only
