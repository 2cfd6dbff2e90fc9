"""Future-state flow policies deployed: the exported ``future_state`` input, ``D`` refused beyond its range, and the
engine feeding the rolled-forward state into that input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from rslkit.deploy.async_engine import AsyncChunkEngine, AsyncEngineCfg
from rslkit.deploy.clock import FakeClock
from rslkit.deploy.export import export_checkpoint
from rslkit.deploy.future_state import ConditionedObservation, FutureStateConditioner
from rslkit.deploy.inference_worker import SimulatedInference
from rslkit.deploy.onnx_policy import OnnxPolicy

ATOL = 1e-5
D = 3  # trained offset range
FUTURE = dict(max_future_offset=D, future_state_slice=(2, 3))  # pendulum obs [cos, sin, velocity]; 1 action


@pytest.fixture
def exported(tmp_path, build):
    runner = build.flow(tmp_path / "model_0.pt", **FUTURE)
    meta = export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx")
    return runner, meta, tmp_path / "p.onnx"


def test_future_state_input_is_exported_and_matches_torch(exported):
    runner, meta, path = exported
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert meta.input_names == ["policy", "noise", "future_state"]
    assert (meta.future_state_slice, meta.max_future_offset, meta.future_state_dim) == ([2, 3], D, 1)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(8, 3)).astype(np.float32)
    noise = rng.normal(size=(8, 4, 1)).astype(np.float32)
    future = rng.normal(size=(8, 1)).astype(np.float32) * 2
    policy = OnnxPolicy(path)
    got = policy(obs, noise, future_state=future)
    with torch.no_grad():
        expected = runner.policy.act_chunk(
            torch.from_numpy(obs), torch.from_numpy(noise), future_state=torch.from_numpy(future)
        )
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=ATOL)
    observed = policy(obs, noise)  # omitted: the observed state (offset 0)
    np.testing.assert_allclose(observed, policy(obs, noise, future_state=obs[:, 2:3]), rtol=0, atol=0)
    assert np.abs(got - observed).max() > 1e-3  # the input matters


def test_offsets_beyond_the_trained_range_are_refused(exported, tmp_path, build):
    _, meta, path = exported
    policy = OnnxPolicy(path)
    obs = np.zeros(3, np.float32)
    assert policy(ConditionedObservation(obs, np.ones(1, np.float32), D)).shape == (4, 1)
    with pytest.raises(ValueError, match="trained with offsets up to 3"):
        policy(ConditionedObservation(obs, np.ones(1, np.float32), D + 1))
    conditioner = FutureStateConditioner.for_policy(meta)
    with pytest.raises(ValueError, match="max_future_offset >= 4"):
        conditioner(obs, np.zeros((D + 1, 1), np.float32))
    clock = FakeClock()
    inference = SimulatedInference(policy, clock, lambda request: 0.1)
    cfg = AsyncEngineCfg(rate_hz=50.0, initial_latency_s=0.1)  # 5 ticks of delay > D
    with pytest.raises(ValueError, match="inference delay is 5 control ticks"):
        AsyncChunkEngine(_Robot(), inference, clock, cfg, conditioner)
    build.flow(tmp_path / "plain.pt")
    export_checkpoint(tmp_path / "plain.pt", tmp_path / "plain.onnx")
    with pytest.raises(ValueError, match="no future_state input"):
        FutureStateConditioner.for_policy(OnnxPolicy(tmp_path / "plain.onnx").meta)
    with pytest.raises(ValueError, match="future_state is an input"):
        OnnxPolicy(tmp_path / "plain.onnx")(obs, future_state=np.zeros(1, np.float32))


def test_engine_refuses_when_measured_latency_outgrows_d(exported):
    _, meta, path = exported
    clock = FakeClock()
    inference = SimulatedInference(OnnxPolicy(path), clock, lambda request: 0.05 if request.request_id < 2 else 0.15)
    cfg = AsyncEngineCfg(rate_hz=50.0, initial_latency_s=0.05, latency_warmup=0, request_margin=4)
    engine = AsyncChunkEngine(_Robot(), inference, clock, cfg, FutureStateConditioner.for_policy(meta))
    with pytest.raises(ValueError, match="trained with future-state offsets up to 3"):
        engine.run(200)
    assert engine.stats.chunks >= 3


class _Robot:
    """Observation ``[cos, sin, velocity]`` drifting with the tick; actions recorded."""

    def __init__(self) -> None:
        self.tick, self.acts = 0, []

    def observe(self) -> np.ndarray:
        return np.array([np.cos(0.1 * self.tick), np.sin(0.1 * self.tick), 0.5], np.float32)

    def act(self, action: np.ndarray) -> None:
        self.acts.append(np.asarray(action).copy())
        self.tick += 1


class _RecordingSession:
    """Wraps an ONNX Runtime session and keeps the feeds of every run."""

    def __init__(self, session) -> None:
        self.session, self.feeds = session, []

    def run(self, names, feeds):
        self.feeds.append({k: v.copy() for k, v in feeds.items()})
        return self.session.run(names, feeds)


def test_engine_feeds_the_rolled_forward_state_into_the_future_state_input(exported):
    _, meta, path = exported
    policy = OnnxPolicy(path)
    session = _RecordingSession(policy.session)
    policy.session = session
    requests = []

    def latency(request):
        requests.append(request)
        return 0.05  # 3 ticks at 50 Hz

    clock = FakeClock()
    inference = SimulatedInference(policy, clock, latency)
    cfg = AsyncEngineCfg(rate_hz=50.0, initial_latency_s=0.05, chunk_start="delay", request_margin=2)
    engine = AsyncChunkEngine(_Robot(), inference, clock, cfg, FutureStateConditioner.for_policy(meta, "absolute"))
    engine.run(60)
    assert len(requests) == len(session.feeds) >= 8
    observed = requests[0].obs
    assert observed.offset == 0  # nothing planned yet: the state as observed
    np.testing.assert_array_equal(session.feeds[0]["future_state"][0], observed.obs[2:3])
    for request, feeds in zip(requests[1:], session.feeds[1:]):
        assert request.obs.offset == request.start - request.tick == 3
        # absolute targets: the state rolled forward is the action executed on the tick before the chunk starts
        np.testing.assert_array_equal(feeds["future_state"][0], engine.executed[request.start - 1])
        np.testing.assert_array_equal(feeds["policy"][0], request.obs.obs)  # the observation itself is unchanged
        assert feeds["future_state"][0] != request.obs.obs[2]
