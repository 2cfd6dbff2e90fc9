"""The ROS-free pieces of the ROS 2 node: joint reordering, tick gate, limits, watchdog, observation, settings."""

from __future__ import annotations

import numpy as np
import pytest

from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.joint_map import JointReorder
from rslkit.deploy.ros2.limits import CommandLimiter
from rslkit.deploy.ros2.observation import ObservationBuilder
from rslkit.deploy.ros2.tick_gate import TickGate
from rslkit.deploy.ros2.watchdog import Watchdog


def test_reorder_picks_policy_order_ignores_extras_and_reports_missing() -> None:
    r = JointReorder(["a", "b", "c"])
    index = r.index(["c", "x", "a", "b"])
    assert isinstance(index, np.ndarray) and index.tolist() == [2, 3, 0]
    np.testing.assert_array_equal(r.take(index, [3.0, 9.0, 1.0, 2.0]), [1.0, 2.0, 3.0])
    assert r.index(["c", "a"]) == ["b"]
    assert r.index(["c", "x", "a", "b"]) is index  # cached per name list


def test_tick_gate_one_tick_per_period_with_jitter_and_decimation() -> None:
    rng = np.random.default_rng(0)
    gate = TickGate(200.0)
    same_rate = [k * 0.005 + rng.uniform(-0.0012, 0.0012) for k in range(200)]
    assert all(gate.ready(t) for t in same_rate)  # stamp jitter below a quarter period never drops a tick
    gate = TickGate(200.0)
    ticks = [t for t in (k * 0.001 for k in range(1000)) if gate.ready(t)]  # 1 kHz states -> 200 Hz ticks
    np.testing.assert_allclose(np.diff(ticks[1:]), 0.005, atol=1e-9)  # after the phase settles (0 -> 3 ms)
    assert len(ticks) == 201
    gate = TickGate(100.0)
    assert gate.ready(1.0) and not gate.ready(1.0)  # a repeated stamp never ticks twice
    assert gate.ready(5.0) and gate.ready(5.01)  # after a gap the schedule restarts


def test_limiter_rate_limits_around_previous_then_clamps() -> None:
    cfg = ControllerCfg(["a", "b"], 100.0, position_lower=[-1.0, -0.1], position_upper=[1.0, 0.1], max_velocity=[10, 1])
    lim = CommandLimiter(cfg)
    # steps of at most 0.1 and 0.01 per tick at 100 Hz, then the limits
    np.testing.assert_allclose(lim(np.array([5.0, -5.0]), np.array([0.0, 0.0])), [0.1, -0.01])
    np.testing.assert_allclose(lim(np.array([5.0, 0.5]), np.array([0.95, 0.095])), [1.0, 0.1])
    np.testing.assert_allclose(lim.clamp(np.array([-3.0, 0.0])), [-1.0, 0.0])
    free = CommandLimiter(ControllerCfg(["a"], 50.0))
    np.testing.assert_allclose(free(np.array([7.0]), np.array([0.0])), [7.0])


def test_watchdog_reports_missing_fresh_and_stale() -> None:
    w = Watchdog(0.1)
    assert w.fault(0.0) == "no joint state received yet"
    w.feed(1.0)
    assert w.fault(1.09) is None
    assert w.fault(1.25) == "joint state is stale (250.0 ms old, timeout 100.0 ms)"
    with pytest.raises(ValueError, match="timeout_s"):
        Watchdog(0.0)


def test_observation_terms_in_order_and_size_check() -> None:
    cfg = ControllerCfg(
        ["a", "b"],
        50.0,
        observation=["joint_pos_rel", "joint_vel", "command", "last_action", "joint_pos"],
        default_positions=[1.0, 2.0],
        command_dim=3,
    )
    build = ObservationBuilder(cfg, 11)
    obs = build(np.array([1.5, 2.5]), np.array([0.1, 0.2]), np.array([7.0, 8.0, 9.0]), np.array([-1.0, -2.0]))
    np.testing.assert_allclose(obs, [0.5, 0.5, 0.1, 0.2, 7, 8, 9, -1, -2, 1.5, 2.5], rtol=1e-6)
    assert obs.dtype == np.float32
    with pytest.raises(ValueError, match=r"give 11 values .* policy takes 12"):
        ObservationBuilder(cfg, 12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"joint_names": []}, "joint_names is empty"),
        ({"joint_names": ["a", "a"]}, "duplicates"),
        ({"rate_hz": 0.0}, "rate_hz"),
        ({"observation": ["joint_pos", "torque"]}, "Unknown or no observation terms"),
        ({"observation": ["command"]}, "command_dim"),
        ({"observation": ["joint_pos_normalized"], "position_upper": [1.0, 1.0]}, "set position_lower and"),
        (
            {"observation": ["joint_pos_normalized"], "position_lower": [0.0, 1.0], "position_upper": [1.0, 1.0]},
            r"position_lower < position_upper; equal for \['b'\]",
        ),
        ({"position_lower": [0.0]}, "position_lower has 1 values for 2 joints"),
        ({"action_scale": [1.0, 2.0, 3.0]}, "action_scale has 3 values"),
        ({"position_lower": [1.0, 0.0], "position_upper": [0.0, 1.0]}, r"position_lower > position_upper .*\['a'\]"),
        ({"max_velocity": 0.0}, "max_velocity must be > 0"),
        ({"trigger": "sometimes"}, "trigger"),
        ({"chunk_merge": "mix"}, "chunk_merge"),
    ],
)
def test_settings_errors_name_the_setting(kwargs: dict, match: str) -> None:
    base = {"joint_names": ["a", "b"], "rate_hz": 50.0}
    with pytest.raises(ValueError, match=match):
        ControllerCfg(**{**base, **kwargs}).validate()
