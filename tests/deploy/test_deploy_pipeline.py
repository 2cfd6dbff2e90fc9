"""Checkpoint -> ``python -m rslkit.export`` -> OnnxPolicy -> asynchronous engine, end to end."""

from __future__ import annotations

import runpy
import sys

import numpy as np
import pytest

from rslkit.deploy.async_engine import AsyncChunkEngine, AsyncEngineCfg
from rslkit.deploy.clock import FakeClock
from rslkit.deploy.future_state import FutureStateConditioner
from rslkit.deploy.inference_worker import SimulatedInference
from rslkit.deploy.onnx_policy import OnnxPolicy


class Pendulum:
    """Observation ``[cos, sin, th_dot]`` of a pendulum whose angle follows the commanded torque a little."""

    def __init__(self) -> None:
        self.th, self.th_dot = 0.3, 0.0

    def observe(self) -> np.ndarray:
        return np.array([np.cos(self.th), np.sin(self.th), self.th_dot], np.float32)

    def act(self, action: np.ndarray) -> None:
        self.th_dot = float(np.clip(self.th_dot + 0.05 * action[0], -8, 8))
        self.th += 0.05 * self.th_dot


def test_module_entry_point_then_async_execution(tmp_path, build, monkeypatch):
    build.flow(tmp_path / "model_0.pt")
    out = tmp_path / "flow.onnx"
    monkeypatch.setattr(sys, "argv", ["rslkit.export", "--checkpoint", str(tmp_path / "model_0.pt"), "--out", str(out)])
    runpy.run_module("rslkit.export", run_name="__main__")
    policy = OnnxPolicy(out, seed=0)
    assert policy.kind == "chunk" and policy.meta.control_rate_hz == pytest.approx(20.0)
    clock = FakeClock()
    inference = SimulatedInference(policy, clock, lambda request: 0.12)  # unbatched obs [3] -> chunk [4, 1]
    cfg = AsyncEngineCfg(rate_hz=policy.meta.control_rate_hz, initial_latency_s=0.12)
    # pendulum actions are torques, not states: no future-state conditioning (the engine still schedules by delay)
    engine = AsyncChunkEngine(Pendulum(), inference, clock, cfg)
    stats = engine.run(60)
    assert stats.chunks >= 10 and stats.starved_ticks == 0 and stats.startup_ticks == 3
    assert all(a is not None and a.shape == (1,) and np.isfinite(a).all() for a in engine.executed[3:])


def test_future_state_conditioning_feeds_the_onnx_policy(tmp_path, build):
    build.flow(tmp_path / "model_0.pt")
    from rslkit.deploy.export import export_checkpoint

    export_checkpoint(tmp_path / "model_0.pt", tmp_path / "flow.onnx")
    policy = OnnxPolicy(tmp_path / "flow.onnx")
    seen: list[np.ndarray] = []

    def chunk_fn(obs):
        seen.append(obs)
        return policy(obs, noise=np.zeros((4, 1), np.float32))

    clock = FakeClock()
    inference = SimulatedInference(chunk_fn, clock, lambda request: 0.05)
    cond = FutureStateConditioner("delta", [2])  # pretend th_dot integrates the actions
    engine = AsyncChunkEngine(Pendulum(), inference, clock, AsyncEngineCfg(rate_hz=20.0, initial_latency_s=0.05), cond)
    engine.run(20)
    assert len(seen) >= 5 and all(o.dtype == np.float32 and o.shape == (3,) for o in seen)
    executed = [a for a in engine.executed if a is not None]
    assert any(not np.allclose(o[2], 0.0) for o in seen[1:]) and len(executed) > 10
