"""Bad rollouts are refused with a reason the actor sees (its stream ends), and the learner goes on training."""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np
import pytest
from onpolicy_helpers import FAST, Loop, add_actor, learner
from transport_helpers import needs_netns, wait_until

from rslkit.link import wire
from rslkit.link.client import ActorClient
from rslkit.link.rollouts import PermitRequest, Rollout, RolloutSchema
from rslkit.realworld.onpolicy_config import OnPolicyLearnerCfg
from rslkit.realworld.onpolicy_learner import PPOLearner
from rslkit.recipes import build_run

pytestmark = needs_netns
OVERRIDES = ["--agent.num_steps_per_env", "4", "--agent.algorithm.num_mini_batches", "2"]


def rollout(schema: RolloutSchema, k: int, version: int = 0, sender: str = "bad") -> Rollout:
    """A valid rollout of zeros."""
    t, n = schema.steps, schema.envs
    obs = {g: np.zeros((t + 1, n, *s.shape), s.dtype) for g, s in schema.obs.items()}
    step = {name: np.zeros((t, n, *s.shape), s.dtype) for name, s in schema.step.items()}
    return Rollout(sender, k, version, obs, step, schema)


def _header(r: Rollout) -> dict:
    return {"kind": "rollout", "sender": r.sender, "rollout": r.rollout, "policy_version": r.policy_version,
            "schema": r.schema.to_json()}  # fmt: skip


def raw_rollout(r: Rollout, **arrays: np.ndarray) -> bytes:
    """``r`` encoded without the encoder's checks, with some arrays replaced (``step_reward=...``)."""
    header = _header(r)
    out = {f"obs/{g}": a for g, a in r.obs.items()} | {f"step/{k}": a for k, a in r.step.items()}
    out |= {name.replace("_", "/", 1): a for name, a in arrays.items()}
    return wire.frame(header, out)


def _refused(port: int, schema: RolloutSchema, data: bytes) -> str:
    """Why the learner ended the stream on which ``data`` (a message of actor "bad") was sent."""
    client = ActorClient(f"127.0.0.1:{port}", "bad", schema=schema, config=FAST)
    try:
        assert client.wait_weights(0, 5.0) is not None
        assert client._stream is not None
        client._stream.outbox.put(data)  # bytes no encoder would make
        wait_until(lambda: client.last_error is not None, 5.0, "the refusal")
        return str(client.last_error)
    finally:
        client.close()


def test_bad_rollouts_refused_learner_alive() -> None:
    run = learner("point-reach", "ppo", OVERRIDES, OnPolicyLearnerCfg(0, 1, 4, 30.0), iterations=1)
    schema, port = run.rollout_schema, run.server.port
    good = rollout(schema, 0)
    t, n = schema.steps, schema.envs
    nan_reward = np.zeros((t, n), np.float32)
    nan_reward[1, 2] = np.nan
    cases = {
        "non-finite": raw_rollout(good, step_reward=nan_reward),
        "expected float32 [4, 4]": raw_rollout(good, step_reward=np.zeros((t, n + 1), np.float32)),
        "cast with": raw_rollout(good, step_log_prob=np.zeros((t, n), np.float64)),
        "missing arrays": wire.frame(_header(good), {}),
        "schema mismatch": wire.encode(dataclasses.replace(good, **_other_schema(good, schema))),
        "holds no permit": wire.encode(good),
        "time-out must also be done": raw_rollout(good, step_time_out=np.ones((t, n), bool)),
    }
    try:
        for reason, data in cases.items():
            assert reason in _refused(port, schema, data)
        counts = run.server.counts()
        assert counts["refused"] == len(cases) and counts["refused_FAILED_PRECONDITION"] == 1
        loop = Loop(run)
        add_actor(loop, "point-reach", "ppo", OVERRIDES, 4, 0)
        started = time.monotonic()
        run.learn()
        assert run.iteration == 1 and time.monotonic() - started < 20
    finally:
        run.stop_serving()
        if "loop" in locals():
            loop.close()


def _other_schema(r: Rollout, schema: RolloutSchema) -> dict:
    other = RolloutSchema(
        schema.steps, schema.envs, schema.obs, {**schema.step, "extra": wire.ArraySpec((), "float32")}
    )
    step = dict(r.step) | {"extra": np.zeros((schema.steps, schema.envs), np.float32)}
    return {"schema": other, "step": step}


def test_actor_refuses_a_learner_of_another_schema() -> None:
    run = learner("point-reach", "ppo", OVERRIDES, OnPolicyLearnerCfg(0, 1, 4, 30.0), iterations=1)
    schema = dataclasses.replace(run.rollout_schema, envs=5)
    client = ActorClient(f"127.0.0.1:{run.server.port}", "other", schema=schema, config=FAST)
    try:
        assert client.request(PermitRequest("other", -1), "permit", 5.0) is None
        assert client.fatal is not None and "schema mismatch" in client.fatal
    finally:
        client.close()
        run.stop_serving()


def test_ppo_learner_refuses_rnd_whose_reward_only_train_py_computes():
    """RND's intrinsic reward is added where the env steps; the loop's learner never steps one, so it refuses."""
    factory = functools.partial(PPOLearner, learner_cfg=OnPolicyLearnerCfg())
    with pytest.raises(ValueError, match="--agent.algorithm.rnd_cfg.weight 0"):
        build_run("point-reach", "ppo", [*OVERRIDES, "--agent.algorithm.rnd_cfg.weight", "1"], num_envs=1, seed=0,
                  runner_cls=factory)  # fmt: skip
