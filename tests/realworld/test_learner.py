"""The real-world learner in-process: what arrives is stored once (journal, buffer, row keys), a resumed learner
holds every acknowledged transition exactly once, interventions land in both buffers, staleness stays bounded."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from transport_helpers import FAST, needs_netns, wait_until

from rslkit.link.client import ActorClient
from rslkit.link.spool import Spool
from rslkit.link.transitions import TransitionBatch
from rslkit.realworld.defaults import agent_defaults
from rslkit.realworld.learner import RealWorldLearner
from rslkit.realworld.learner_config import LearnerCfg
from rslkit.realworld.task_schema import transition_schema
from rslkit.recipes import build_run, load_run

pytestmark = needs_netns
DEFAULTS = agent_defaults("pendulum")
OVERRIDES = ["--agent.learning_starts", "20", "--agent.logger", ""]


def make_learner(run_dir: Path | None, max_iterations: int = 3, **cfg: Any) -> RealWorldLearner:
    learner_cfg = LearnerCfg(**{"updates_per_iteration": 20, "iteration_timeout_s": 0.5, **cfg})
    factory = functools.partial(RealWorldLearner, learner_cfg=learner_cfg)
    _, runner = build_run(
        "pendulum",
        "sac",
        OVERRIDES,
        num_envs=1,
        log_dir=run_dir,
        max_iterations=max_iterations,
        runner_cls=factory,
        agent_fields=DEFAULTS,
    )
    assert isinstance(runner, RealWorldLearner)
    return runner


def batch(episode: int, steps: range, rng: np.random.Generator, human: np.ndarray | None = None, version: int = 1):
    n = len(steps)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    return TransitionBatch(
        obs={"policy": obs},
        next_obs={"policy": obs + 0.1},
        action=rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        reward=rng.normal(size=n).astype(np.float32),
        done=np.arange(n) == n - 1,
        truncated=np.arange(n) == n - 1,
        episode=np.full(n, episode, np.int64),
        step=np.array(steps, np.int64),
        policy_version=np.full(n, version, np.int64),
        intervention=np.zeros(n, bool) if human is None else human,
    )


def connect(learner: RealWorldLearner, directory: Path, actor_id: str = "actor-0") -> tuple[Spool, ActorClient]:
    assert learner.server is not None
    spool = Spool(directory, actor_id, transition_schema(learner.env, learner.policy.obs_groups))
    return spool, ActorClient(f"127.0.0.1:{learner.server.port}", actor_id, spool, config=FAST)


def test_resumed_learner_holds_every_acknowledged_transition_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    learner = make_learner(tmp_path / "run")
    learner.serve("127.0.0.1:0")
    spool, client = connect(learner, tmp_path / "spool")
    for episode in range(3):
        spool.append(batch(episode, range(10), rng))
    wait_until(lambda: spool.unacked_count == 0, 10, "the first 30 transitions acknowledged")
    learner.save(tmp_path / "run" / "model_0.pt")
    assert learner.sink is not None and learner.sink.journal is not None
    assert learner.sink.journal.segments() == [learner.journal_start]  # the checkpoint covers the older segments
    for episode in range(3, 5):
        spool.append(batch(episode, range(7), rng))
    wait_until(lambda: spool.unacked_count == 0, 10, "14 more acknowledged (journal only)")
    client.close()
    learner.stop_serving()  # as if killed: no checkpoint of the last 14

    factory = functools.partial(RealWorldLearner, learner_cfg=learner.learner_cfg)
    _, resumed, _ = load_run(tmp_path / "run" / "model_0.pt", num_envs=1, resume=True, runner_cls=factory)
    assert isinstance(resumed, RealWorldLearner)
    resumed.serve("127.0.0.1:0")
    keys = resumed.stored_keys()
    assert sorted(keys) == [("actor-0", s) for s in range(44)]  # 30 from the checkpoint, 14 replayed, once each
    assert resumed.watermarks.get("actor-0") == 43
    assert resumed.version == learner.version + 1  # resumed versions continue; serve() published one more
    spool2, client2 = connect(resumed, tmp_path / "spool2", "actor-1")
    spool2.append(batch(0, range(5), rng))
    wait_until(lambda: spool2.unacked_count == 0, 10, "a new actor served by the resumed learner")
    client2.close()
    resumed.stop_serving()
    assert len(resumed.stored_keys()) == 49


def test_interventions_land_in_both_buffers(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    learner = make_learner(None)
    learner.serve("127.0.0.1:0")
    spool, client = connect(learner, tmp_path / "spool")
    human = np.zeros(12, bool)
    human[3:7] = True
    spool.append(batch(0, range(12), rng, human))
    wait_until(lambda: spool.unacked_count == 0, 10, "acknowledged")
    client.close()
    learner.stop_serving()
    assert learner.buffer is not None
    assert len(learner.buffer) == 12
    assert learner.buffer.num_interventions() == (4, 4)
    assert learner.buffer.num_demos == 4
    sample = learner.buffer.sample(64, 1, 0.99)
    assert bool(sample["intervention"][sample["is_demo"]].all())


def test_staleness_never_exceeds_its_bound(tmp_path: Path) -> None:
    """An actor that reports version 1 forever: the learner stops before publishing a version 3 ahead."""
    rng = np.random.default_rng(2)
    learner = make_learner(None, max_iterations=6, max_staleness=2, publish_every_updates=5)
    learner.serve("127.0.0.1:0")
    spool, client = connect(learner, tmp_path / "spool")
    client.set_policy_version(1)
    for episode in range(10):
        spool.append(batch(episode, range(10), rng, version=1))
    thread = threading.Thread(target=learner.learn)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    assert learner.version == 3  # 1 + max_staleness
    assert learner.total_updates < 100 * learner.cfg.algorithm.utd_ratio  # gated, not all updates owed were done
    client.set_policy_version(3)
    wait_until(lambda: learner.server is not None and learner.server.actors()["actor-0"].policy_version == 3, 5, "hb")
    learner.learn(2)
    assert learner.version == 5
    client.close()
    learner.stop_serving()


def test_learner_refuses_settings_it_cannot_honour() -> None:
    with pytest.raises(ValueError, match="n_step 1"):
        build_run("pendulum", "sac", ["--agent.algorithm.n_step", "3"], num_envs=1, runner_cls=RealWorldLearner)
    with pytest.raises(ValueError, match="num_envs 1"):
        build_run("pendulum", "sac", OVERRIDES, num_envs=2, runner_cls=RealWorldLearner, agent_fields=DEFAULTS)
    with pytest.raises(ValueError, match="learner.updates_per_iteration"):
        make_learner(None, updates_per_iteration=0)
    with pytest.raises(ValueError, match="demo_path"):
        make_learner(None, bc_warmstart_updates=10)
    torch.set_num_threads(1)


def test_learner_pushes_onnx_policies_a_robot_without_torch_can_run(tmp_path: Path) -> None:
    from rslkit.deploy.onnx_weights import onnx_policy_from_arrays

    cfg = LearnerCfg(publish="both")  # the learner exports itself: no exporter is handed in
    factory = functools.partial(RealWorldLearner, learner_cfg=cfg)
    _, learner = build_run("pendulum", "sac", OVERRIDES, num_envs=1, runner_cls=factory, agent_fields=DEFAULTS)
    assert isinstance(learner, RealWorldLearner)
    learner.serve("127.0.0.1:0")
    spool, client = connect(learner, tmp_path / "spool")
    wait_until(lambda: client.latest_weights() is not None, 10, "the first weights")
    version, arrays = client.latest_weights()  # type: ignore[misc]
    client.close()
    learner.stop_serving()
    assert version == 1 and "policy.onnx" in arrays and "actor.net.0.weight" in arrays
    policy = onnx_policy_from_arrays(arrays)
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    with torch.no_grad():
        expected = learner.policy.act_inference(TensorDict({"policy": torch.from_numpy(obs)}, batch_size=[4]))
    np.testing.assert_allclose(policy({"policy": obs}), expected.numpy(), atol=1e-5)


def test_two_actors_feed_one_learner(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    learner = make_learner(None)
    learner.serve("127.0.0.1:0")
    (spool_a, client_a), (spool_b, client_b) = (
        connect(learner, tmp_path / "a", "arm-a"),
        connect(learner, tmp_path / "b", "arm-b"),
    )
    for episode in range(4):
        spool_a.append(batch(episode, range(6), rng))
        spool_b.append(batch(episode, range(9), rng))
    wait_until(lambda: spool_a.unacked_count == 0 and spool_b.unacked_count == 0, 10, "both acknowledged")
    client_a.close()
    client_b.close()
    learner.stop_serving()
    keys = learner.stored_keys()
    assert sorted(k for k in keys if k[0] == "arm-a") == [("arm-a", s) for s in range(24)]
    assert sorted(k for k in keys if k[0] == "arm-b") == [("arm-b", s) for s in range(36)]
    assert learner.watermarks.snapshot()["seq"] == {"arm-a": 23, "arm-b": 35}
