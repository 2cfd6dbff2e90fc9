"""The transport-agnostic control loop of the ROS 2 node, driven by hand-made events (no ROS)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rslkit.deploy.clock import Clock, FakeClock
from rslkit.deploy.future_state import ConditionedObservation
from rslkit.deploy.inference_worker import ChunkFn, InferenceRequest, SimulatedInference
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.deploy.ros2.config import ControllerCfg
from rslkit.deploy.ros2.controller import PolicyController
from rslkit.deploy.ros2.synthetic import chunk_policy, mlp_policy

J = ["a", "b", "c"]


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ros2_graphs")
    return {
        "mlp": mlp_policy(d / "mlp.onnx", 6, 3, hidden=(16,), control_rate_hz=100.0),
        "nan": mlp_policy(d / "nan.onnx", 4, 3, hidden=(8,), nan_when_negative=3),
        "chunk": chunk_policy(d / "chunk.onnx", 3, 3, 4, hidden=(16,)),
    }


def _controller(path: Path, **cfg: object) -> PolicyController:
    settings = {"joint_names": J, "rate_hz": 100.0, "observation": ["joint_pos", "last_action"], **cfg}
    return PolicyController(OnnxPolicy(path, check_outputs=False), ControllerCfg(**settings))  # type: ignore[arg-type]


def test_reorders_joints_and_feeds_last_action(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"], action_scale=[1.0, 2.0, 0.5], default_positions=[0.1, 0.0, -0.1])
    ref = OnnxPolicy(graphs["mlp"])
    out = ctrl.on_joint_state(0.0, ["c", "x", "a", "b"], [0.3, 5.0, 0.1, 0.2])
    assert out is not None and out.status == "run" and out.source == "state"
    a0 = ref(np.array([0.1, 0.2, 0.3, 0, 0, 0], np.float32))
    np.testing.assert_allclose(out.positions, [0.1, 0.0, -0.1] + np.array([1.0, 2.0, 0.5]) * a0, rtol=1e-6)
    out = ctrl.on_joint_state(0.01, ["a", "b", "c"], [0.0, 0.0, 0.0])
    a1 = ref(np.concatenate([np.zeros(3, np.float32), a0]))
    np.testing.assert_allclose(out.positions, [0.1, 0.0, -0.1] + np.array([1.0, 2.0, 0.5]) * a1, rtol=1e-6)


def test_first_command_is_rate_limited_from_the_measured_position(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"], action_scale=100.0, max_velocity=1.0, position_lower=[-0.5] * 3)
    out = ctrl.on_joint_state(0.0, J, [0.2, -0.495, 0.0])
    assert out is not None
    assert np.all(np.abs(out.positions - [0.2, -0.495, 0.0]) <= 0.01 + 1e-12)  # 1 rad/s at 100 Hz
    assert out.positions[1] >= -0.5


def test_stale_state_holds_on_timer_then_resumes(graphs: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    ctrl = _controller(graphs["mlp"], state_timeout_s=0.05)
    assert ctrl.on_timer(0.0) is None  # nothing received: nothing to hold, no tick counted
    run = ctrl.on_joint_state(0.0, J, [0.1, 0.2, 0.3])
    assert run is not None
    assert ctrl.on_timer(0.04) is None  # fresh: the timer only watches
    with caplog.at_level(logging.INFO):
        hold = ctrl.on_timer(0.06)
        assert hold is not None and hold.status == "hold" and hold.source == "timer"
        assert hold.reason.startswith("joint state is stale (60.0 ms old")
        np.testing.assert_array_equal(hold.positions, run.positions)
        assert ctrl.on_timer(0.07) is not None
        resumed = ctrl.on_joint_state(0.08, J, [0.1, 0.2, 0.3])
    assert resumed is not None and resumed.status == "run"
    assert [r.message for r in caplog.records].count("Holding position: " + hold.reason + ".") == 1  # logged once
    assert any("resuming the policy" in r.message for r in caplog.records)
    assert ctrl.counts["hold:watchdog"] == 2


def test_bad_state_holds_without_latching(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"])
    run = ctrl.on_joint_state(0.0, J, [0.1, 0.2, 0.3])
    missing = ctrl.on_joint_state(0.01, ["a", "c"], [0.1, 0.3])
    nan = ctrl.on_joint_state(0.02, J, [0.1, np.nan, 0.3])
    short = ctrl.on_joint_state(0.03, J, [0.1])
    assert missing is not None and missing.reason == "joint state is missing joints ['b']"
    assert nan is not None and nan.reason == "joint state has non-finite positions for joints ['b']"
    assert short is not None and short.reason == "joint state has 3 names but 1 positions"
    for hold in (missing, nan, short):
        np.testing.assert_array_equal(hold.positions, run.positions)
    assert ctrl.on_joint_state(0.04, J, [0.1, 0.2, 0.3]).status == "run"  # type: ignore[union-attr]


def test_velocity_needed_by_the_observation(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"], observation=["joint_pos", "joint_vel"])
    out = ctrl.on_joint_state(0.0, J, [0.1, 0.2, 0.3])
    assert out is None  # nothing measured yet to hold
    out = ctrl.on_joint_state(0.01, J, [0.1, 0.2, 0.3], [0.0, 0.0, 0.0])
    assert out is not None and out.status == "run"
    hold = ctrl.on_joint_state(0.02, J, [0.1, 0.2, 0.3])
    assert hold is not None and hold.reason == "joint state has 0 velocities for 3 joints (observation needs them)"


def test_non_finite_policy_output_latches(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["nan"], observation=["joint_pos", "command"], command_dim=1)
    ctrl.on_command(0.0, [1.0])
    run = ctrl.on_joint_state(0.0, J, [0.1, 0.2, 0.3])
    assert run is not None and run.status == "run"
    ctrl.on_command(0.01, [-1.0])
    hold = ctrl.on_joint_state(0.01, J, [0.1, 0.2, 0.3])
    assert hold is not None and hold.status == "hold"
    assert hold.reason == "policy returned non-finite actions for joints ['a', 'b', 'c'] (latched until restart)"
    ctrl.on_command(0.02, [1.0])
    later = ctrl.on_joint_state(0.02, J, [0.1, 0.2, 0.3])
    assert later is not None and later.status == "hold" and np.array_equal(later.positions, run.positions)
    assert ctrl.on_timer(0.03) is None  # states still arrive: they hold, the timer does not add commands
    silent = ctrl.on_timer(0.2)  # no state for longer than the timeout: the timer holds, still latched
    assert silent is not None and silent.source == "timer" and silent.reason == hold.reason


def test_commands_checked_and_expire(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["nan"], observation=["joint_pos", "command"], command_dim=1, command_timeout_s=0.1)
    ctrl.on_command(0.0, [1.0, 2.0])
    ctrl.on_command(0.0, [np.inf])
    assert ctrl.counts["ignored_commands"] == 2 and ctrl.command.tolist() == [0.0]
    ctrl.on_command(0.0, [-1.0])
    ctrl.on_joint_state(0.2, J, [0.1, 0.2, 0.3])  # the -1 command expired: zeros, a finite action
    assert ctrl.latched is None and ctrl.command.tolist() == [0.0]


def test_timer_trigger_ticks_on_timer_only(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"], trigger="timer")
    assert ctrl.on_joint_state(0.0, J, [0.1, 0.2, 0.3]) is None
    out = ctrl.on_timer(0.01)
    assert out is not None and out.status == "run" and out.source == "timer" and out.tick == 0
    assert ctrl.on_timer(0.02).tick == 1  # type: ignore[union-attr]


def test_shutdown_holds_the_last_command(graphs: dict[str, Path]) -> None:
    ctrl = _controller(graphs["mlp"])
    run = ctrl.on_joint_state(0.0, J, [0.1, 0.2, 0.3])
    final = ctrl.shutdown(0.01)
    assert final is not None and final.source == "shutdown" and np.array_equal(final.positions, run.positions)
    assert ctrl.on_joint_state(0.02, J, [0.0, 0.0, 0.0]).status == "hold"  # type: ignore[union-attr]


def test_chunk_policy_through_the_async_engine(graphs: dict[str, Path]) -> None:
    clock = FakeClock()
    ctrl = PolicyController(
        OnnxPolicy(graphs["chunk"]),
        ControllerCfg(J, 100.0, observation=["joint_pos"], chunk_initial_latency_s=0.02),
        clock=clock,
        inference_factory=lambda fn, c: SimulatedInference(fn, c, lambda request: 0.02),
    )
    pos = [0.1, 0.2, 0.3]
    chunk = OnnxPolicy(graphs["chunk"])(np.array(pos, np.float32))  # [4, 3], the same for every request
    outs = []
    for k in range(12):
        clock.sleep_until(k * 0.01)
        outs.append(ctrl.on_joint_state(k * 0.01, J, pos))
    assert [o.status for o in outs[:2]] == ["startup", "startup"]  # type: ignore[union-attr]
    np.testing.assert_array_equal(outs[0].positions, pos)  # type: ignore[union-attr]
    # requested at tick 0 for ticks 2.. (d = 2 ticks), arriving at tick 2: then every tick has a planned action
    assert all(o.status == "run" for o in outs[2:])  # type: ignore[union-attr]
    rows = {tuple(np.round(r, 6)) for r in chunk.astype(np.float64)}
    assert all(tuple(np.round(o.positions, 6)) in rows for o in outs[2:])  # type: ignore[union-attr]
    assert ctrl.engine is not None and ctrl.engine.stats.starved_ticks == 0


def test_chunk_in_flight_builds_that_many_workers(graphs: dict[str, Path]) -> None:
    from rslkit.deploy.inference_worker import ThreadedInference

    cfg = ControllerCfg(J, 100.0, observation=["joint_pos"], chunk_in_flight=2)
    ctrl = PolicyController(OnnxPolicy(graphs["chunk"]), cfg)
    try:
        ctrl.on_joint_state(0.0, J, [0.1, 0.2, 0.3])
        assert ctrl.engine is not None and ctrl.engine.cfg.max_in_flight == 2
        inference = ctrl.engine.inference
        assert isinstance(inference, ThreadedInference) and inference.workers == 2
    finally:
        ctrl.shutdown(0.01)
    for bad in ({"chunk_in_flight": 0}, {"chunk_worker_rt_priority": 100}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            ControllerCfg(J, 100.0, **bad).validate()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"chunk_worker_rt_priority": -1}, r"chunk_worker_rt_priority must be 1-99 \(0: inherit"),
        ({"observation": ["joint_pos", "command"]}, r"no command input: set the command_type parameter"),
        ({"rate_hz": -5.0}, r"\(the control_rate_hz parameter\), got -5.0"),
        ({"command_dim": -1}, r"command_dim must be >= 0, got -1"),
        ({"chunk_merge": "x"}, r"chunk_merge must be one of replace, blend, ensemble, got 'x'"),
    ],
)
def test_bad_settings_are_named_as_node_parameters(settings: dict, message: str) -> None:
    """Messages name the node's parameters (``-p name:=value``) and their values, not Python spellings (None)."""
    cfg = {"joint_names": J, "rate_hz": 100.0, "observation": ["joint_pos"], **settings}
    with pytest.raises(ValueError, match=message) as err:
        ControllerCfg(**cfg).validate()
    assert "None" not in str(err.value)


def test_instruction_for_a_policy_without_one_is_refused(graphs: dict[str, Path]) -> None:
    """Was silently ignored: the node ran a joint-state policy with an instruction parameter it never used."""
    cfg = ControllerCfg(J, 50.0, observation=["joint_pos", "last_action"], instruction="pick up the cube")
    with pytest.raises(ValueError, match=r"instruction parameter \('pick up the cube'\) .* takes none"):
        PolicyController(OnnxPolicy(graphs["mlp"]), cfg)


def test_exported_ppo_policy_runs(tmp_path: Path, build: SimpleNamespace) -> None:
    """A policy from rslkit's exporter (pendulum PPO: obs 3, one joint), not only the synthetic graphs."""
    from rslkit.deploy.export import export_policy

    runner = build.ppo(tmp_path / "ppo.pt")
    export_policy(runner.policy, tmp_path / "ppo.onnx", "ppo")
    ctrl = PolicyController(
        OnnxPolicy(tmp_path / "ppo.onnx"),
        ControllerCfg(["pole"], 50.0, observation=["joint_pos", "joint_vel", "last_action"]),
    )
    out = ctrl.on_joint_state(0.0, ["pole"], [0.5], [0.1])
    expected = OnnxPolicy(tmp_path / "ppo.onnx")(np.array([0.5, 0.1, 0.0], np.float32))
    assert out is not None and out.status == "run"
    np.testing.assert_allclose(out.positions, expected, rtol=1e-6)


def test_policy_must_fit_the_settings(graphs: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="outputs 3 actions but joint_names lists 2"):
        PolicyController(OnnxPolicy(graphs["mlp"]), ControllerCfg(["a", "b"], 50.0, observation=["joint_pos"]))
    with pytest.raises(ValueError, match=r"joint_pos \(3\)\) but the policy takes 6"):
        PolicyController(OnnxPolicy(graphs["mlp"]), ControllerCfg(J, 50.0, observation=["joint_pos"]))


def test_future_state_chunk_policy_gets_the_rolled_forward_state(tmp_path: Path) -> None:
    """A chunk policy trained with VLASH offsets: each request carries the state after the actions still planned
    before its chunk starts (absolute targets: the last of them), and a delay beyond the trained range is refused."""
    path = chunk_policy(tmp_path / "fs.onnx", 3, 3, 4, hidden=(8,), future_state_slice=(0, 3), max_future_offset=4)
    requests: list[InferenceRequest] = []

    class Recorded(SimulatedInference):
        def submit(self, request: InferenceRequest) -> None:
            requests.append(request)
            super().submit(request)

    def factory(fn: ChunkFn, clock: Clock) -> Recorded:
        return Recorded(fn, clock, lambda request: 0.02)

    clock = FakeClock()
    cfg = ControllerCfg(J, 100.0, observation=["joint_pos"], chunk_initial_latency_s=0.02)
    ctrl = PolicyController(OnnxPolicy(path), cfg, clock=clock, inference_factory=factory)
    outs = []
    for k in range(16):
        clock.sleep_until(k * 0.01)
        outs.append(ctrl.on_joint_state(k * 0.01, J, [0.1, 0.2, 0.3]))
    assert all(isinstance(r.obs, ConditionedObservation) for r in requests) and len(requests) == 6
    assert requests[0].obs.offset == 0  # nothing planned yet: the state as observed
    np.testing.assert_allclose(requests[0].obs.future_state, [0.1, 0.2, 0.3], rtol=1e-6)
    for r in requests[1:-1]:  # d = 20 ms / 10 ms = 2 ticks; the last request's chunk never ran
        assert r.start - r.tick == r.obs.offset == 2
        np.testing.assert_allclose(r.obs.future_state, outs[r.start - 1].positions, atol=1e-6)  # type: ignore[union-attr]
    tight = chunk_policy(tmp_path / "d1.onnx", 3, 3, 4, hidden=(8,), future_state_slice=(0, 3), max_future_offset=1)
    with pytest.raises(ValueError, match="trained with future-state offsets up to 1"):  # refused before moving
        PolicyController(OnnxPolicy(tight), cfg, clock=clock, inference_factory=factory)
