"""The real-time simulated robot: tick schedule and missed ticks (a fake clock, then 50 real ticks at 100 Hz),
action and observation latency, reset costs, the VecEnv interface, and return-and-explore from exact states
(TorchTask.env_state / start_episode_from on pendulum and so101-lift)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rslkit.realworld.sim_robot import RealTimeCfg, RealTimeRobot, StartStates
from rslkit.utils.validation import ConfigError

torch.set_num_threads(1)
PERIOD = 0.02


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


class CountingEnv:
    """One env; obs = [steps taken this episode, the action the env applied]; done every ``length`` steps."""

    num_envs, num_actions, device, cfg, step_dt = 1, 1, torch.device("cpu"), None, PERIOD

    def __init__(self, length: int = 5) -> None:
        self.max_episode_length = length
        self.episode_length_buf = torch.zeros(1, dtype=torch.long)
        self.applied: list[float] = []
        self._final = False
        self.action_space = "box"

    def request_final_obs(self) -> None:
        self._final = True

    def _obs(self, action: float) -> TensorDict:
        x = torch.tensor([[float(self.episode_length_buf[0]), action]])
        return TensorDict({"policy": x}, batch_size=[1])

    def get_observations(self) -> TensorDict:
        return self._obs(0.0)

    def step(self, actions: torch.Tensor):
        a = float(actions[0, 0])
        self.applied.append(a)
        self.episode_length_buf += 1
        done = bool(self.episode_length_buf[0] >= self.max_episode_length)
        extras: dict = {"time_outs": torch.tensor([done]), "log": {}}
        if done and self._final:
            extras["final_obs"] = self._obs(a)
        if done:
            self.episode_length_buf.zero_()
        return self._obs(a), torch.ones(1), torch.tensor([done]), extras


def _robot(env=None, clock=None, **cfg) -> tuple[RealTimeRobot, FakeClock]:
    clock = clock or FakeClock()
    cfg.setdefault("reset", "wait")
    cfg.setdefault("reset_wait_s", 1.0)
    robot = RealTimeRobot(env or CountingEnv(), RealTimeCfg(**cfg), clock=clock, sleep=clock.sleep)
    return robot, clock


def _act(x: float) -> torch.Tensor:
    return torch.tensor([[x]])


# ---------------------------------------------------------------------------------------------------- schedule
def test_fast_caller_returns_at_each_tick_and_misses_none() -> None:
    robot, clock = _robot(env=CountingEnv(length=1000))
    start = clock.now + 0.005  # the schedule starts at the first step()
    for k in range(1, 11):
        clock.now += 0.005  # the policy takes 5 ms
        robot.step(_act(0.0))
        assert clock.now == pytest.approx(start + k * PERIOD)
    stats = robot.stats()
    assert stats["ticks"] == 10 and stats["missed_ticks"] == 0 and stats["mean_lateness_s"] == 0.0
    assert robot.period_s == PERIOD and robot.num_envs == 1 and robot.action_space == "box"


def test_late_caller_misses_ticks_and_the_schedule_reanchors() -> None:
    robot, clock = _robot(env=CountingEnv(length=1000))
    robot.step(_act(0.0))  # first tick at 100.02
    clock.now += 0.001  # within the tolerance (2 ms): on time, returns at once
    robot.step(_act(0.0))
    assert clock.now == pytest.approx(100.04) and robot.missed_ticks == 0
    clock.now += 0.051  # 51 ms late: ticks at 100.06, 100.08 and 100.10 passed... the first two missed
    late = clock.now
    robot.step(_act(0.0))
    assert robot.missed_ticks == 2
    assert clock.now == pytest.approx(late + PERIOD)  # re-anchored: a full tick from the call, no burst
    robot.step(_act(0.0))
    assert clock.now == pytest.approx(late + 2 * PERIOD) and robot.missed_ticks == 2
    assert robot.stats()["ticks"] == 4


def test_control_hz_and_config_checks() -> None:
    robot, clock = _robot(control_hz=10.0)
    robot.step(_act(0.0))
    assert clock.now == pytest.approx(100.1)
    for bad in (
        {"control_hz": 0.0},
        {"obs_latency_s": -1.0},
        {"reset": "teleport"},
        {"home_speed": 0.0},
        {"max_tick_lateness_s": float("nan")},
    ):
        with pytest.raises(ConfigError):
            _robot(**bad)
    env = CountingEnv()
    env.num_envs = 2
    with pytest.raises(ValueError, match="num_envs=2"):
        RealTimeRobot(env)
    env = CountingEnv()
    env.step_dt = None
    with pytest.raises(ValueError, match="control_hz"):
        RealTimeRobot(env)


# ---------------------------------------------------------------------------------------------------- latency
def test_action_latency_is_whole_ticks_of_a_fifo() -> None:
    env = CountingEnv(length=6)
    robot, _ = _robot(env=env, action_latency_s=0.03)  # 1.5 ticks -> 2
    assert robot.action_delay_ticks == 2
    for a in (1, 2, 3, 4, 5, 6):
        robot.step(_act(a))
    assert env.applied == [1, 1, 1, 2, 3, 4]  # the first command until it has come through
    robot.step(_act(7))  # a new episode: nothing of the last one leaks in
    assert env.applied[-1] == 7


def test_observation_latency_and_final_obs() -> None:
    env = CountingEnv(length=4)
    env.request_final_obs()
    robot, _ = _robot(env=env, obs_latency_s=0.02)
    assert robot.obs_delay_ticks == 1
    seen = []
    for a in (1, 2, 3, 4):
        obs, _, dones, extras = robot.step(_act(a))
        seen.append(obs["policy"][0, 0].item())
    assert seen[:3] == [0, 1, 2]  # one tick old (the first obs repeated at the start)
    assert bool(dones[0]) and extras["final_obs"]["policy"][0, 0].item() == 3  # the final obs, one tick old too
    assert seen[3] == 0 and robot.get_observations()["policy"][0, 0].item() == 0  # the new episode's first


# ---------------------------------------------------------------------------------------------------- resets
def test_home_reset_takes_the_time_of_the_move() -> None:
    env = CountingEnv(length=2)
    pose = {"q": np.zeros(2), "during": np.array([1.0, -3.0])}
    inner_step = env.step

    def step(actions):  # the arm moves to pose["during"] in an episode; the auto-reset teleports it home
        out = inner_step(actions)
        pose["q"] = np.zeros(2) if bool(out[2][0]) else pose["during"]
        return out

    env.step = step  # type: ignore[method-assign]
    clock = FakeClock()
    cfg = RealTimeCfg(reset="home", home_speed=2.0, settle_s=0.25, min_reset_s=0.5)
    robot = RealTimeRobot(env, cfg, clock=clock, sleep=clock.sleep, joint_positions=lambda: pose["q"])
    robot.step(_act(0.0))
    _, _, dones, extras = robot.step(_act(0.0))
    assert bool(dones[0])
    assert extras["reset_s"] == pytest.approx(3.0 / 2.0 + 0.25)  # farthest joint 3 rad at 2 rad/s, then settle
    t = clock.now
    pose["during"] = np.array([0.1, 0.0])  # hardly moves: the reset takes min_reset_s
    robot.step(_act(0.0))
    assert clock.now == pytest.approx(t + PERIOD)  # the schedule restarts after the reset
    _, _, _, extras = robot.step(_act(0.0))
    assert extras["reset_s"] == pytest.approx(0.5)
    assert robot.stats()["reset_time_s"] == pytest.approx(1.75 + 0.5) and robot.stats()["resets"] == 2
    assert robot.missed_ticks == 0


def test_wait_reset_and_extras_only_on_reset_steps() -> None:
    robot, clock = _robot(reset_wait_s=3.0, env=CountingEnv(length=2))
    _, _, _, extras = robot.step(_act(0.0))
    assert "reset_s" not in extras
    t = clock.now
    _, _, _, extras = robot.step(_act(0.0))
    assert extras["reset_s"] == 3.0 and clock.now == pytest.approx(t + PERIOD + 3.0)


# ---------------------------------------------------------------------------------------------------- real time
def test_real_time_50_ticks_at_100_hz() -> None:
    robot = RealTimeRobot(CountingEnv(length=10_000), RealTimeCfg(control_hz=100.0, max_tick_lateness_s=0.004))
    start = time.monotonic()
    for _ in range(50):
        robot.step(_act(0.0))
    elapsed = time.monotonic() - start
    stats = robot.stats()
    assert stats["missed_ticks"] == 0, stats
    assert 0.49 <= elapsed < 0.6, elapsed
    assert stats["mean_lateness_s"] < 0.003, stats
    for k in range(10):
        if k % 3 == 0:
            time.sleep(0.025)  # the caller takes 2.5 ticks: 2 missed each time
        robot.step(_act(0.0))
    assert robot.stats()["missed_ticks"] >= 8, robot.stats()


# ------------------------------------------------------------------------------------------------ return and explore
def test_start_states_pool() -> None:
    pool = StartStates(probability=1.0, capacity=3, seed=0)
    assert pool.sample() is None and len(pool) == 0
    pool.add_episode([{"x": torch.tensor([float(i)])} for i in range(6)], stride=2, skip_last=1)
    assert len(pool) == 3  # states 0, 2, 4
    assert {pool.sample()["x"].item() for _ in range(30)} == {0.0, 2.0, 4.0}
    pool.add({"x": torch.tensor([9.0])})
    assert len(pool) == 3 and 0.0 not in {pool.sample()["x"].item() for _ in range(30)}
    never = StartStates(probability=0.0)
    never.add({"x": torch.zeros(1)})
    assert never.sample() is None
    with pytest.raises(ValueError, match="probability"):
        StartStates(probability=1.5)


def test_pendulum_start_episode_from_a_recorded_state() -> None:
    from rslkit.envs.tasks.pendulum import PendulumCfg, PendulumTask

    env = PendulumTask(PendulumCfg(num_envs=3, seed=1))
    for _ in range(5):
        env.step(torch.full((3, 1), 0.3))
    state, obs = env.env_state(1), env.get_observations()["policy"][1].clone()
    other = env.get_observations()["policy"][2].clone()
    env.step(torch.full((3, 1), -0.5))
    new = env.start_episode_from(0, state)
    torch.testing.assert_close(new["policy"][0], obs)
    assert int(env.episode_length_buf[0]) == 0 and int(env.episode_length_buf[2]) == 6
    assert not torch.equal(new["policy"][2], other)  # env 2 went on unchanged
    with pytest.raises(ValueError, match="lacks"):
        env.start_episode_from(0, {})


def test_so101_lift_return_and_explore_is_exact() -> None:
    pytest.importorskip("mujoco")
    from rslkit.envs.mujoco.models import ModelNotFoundError, so101_model_dir

    try:
        so101_model_dir()
    except ModelNotFoundError as err:
        pytest.skip(f"SO-101 model missing ({err})")
    from rslkit.envs.tasks.so101_lift import SO101LiftCfg, SO101LiftTask

    env = SO101LiftTask(SO101LiftCfg(num_envs=1, sim_threads=1, episode_length=8))
    clock = FakeClock()
    robot = RealTimeRobot(env, RealTimeCfg(home_speed=1.0, settle_s=0.5), clock=clock, sleep=clock.sleep)
    g = torch.Generator().manual_seed(0)
    actions = [torch.rand(1, 6, generator=g) * 2 - 1 for _ in range(8)]
    states, observed = [], []
    for a in actions[:7]:
        states.append(robot.capture_state())
        observed.append(robot.step(a)[0]["policy"].clone())
    _, _, dones, extras = robot.step(actions[7])
    assert bool(dones[0]) and extras["reset_s"] >= 1.0  # min_reset_s
    # start the next episode from the state before step 3: the same steps follow, exactly
    t = clock.now
    obs = robot.start_from(states[3])
    assert clock.now - t >= 0.5  # a scripted move to the recorded pose (settle_s at least)
    torch.testing.assert_close(obs["policy"], observed[2])
    for k in (3, 4, 5):
        torch.testing.assert_close(robot.step(actions[k])[0]["policy"], observed[k], rtol=0, atol=0)
    assert int(env.episode_length_buf[0]) == 3
    with pytest.raises(RuntimeError, match="episode"):
        robot.start_from(states[0])  # mid-episode
    assert robot.joint_names == env.joint_names
