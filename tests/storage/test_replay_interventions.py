"""Replay buffer for HIL-SERL: interventions in both rings, the demonstration ring, add_sequence, state dicts."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rslkit.storage.replay_buffer import ReplayBuffer, ReplayCfg


def _obs(values: torch.Tensor) -> TensorDict:
    """Group ``policy`` ``[M, 2]`` whose first entry is ``values`` (the time index of the step)."""
    x = torch.stack((values.float(), torch.zeros(values.shape[0])), -1)
    return TensorDict({"policy": x}, batch_size=[values.shape[0]])


def _buffer(num_envs: int = 1, capacity: int = 100, **kw) -> ReplayBuffer:
    return ReplayBuffer(_obs(torch.zeros(num_envs)), 1, ReplayCfg(capacity=capacity, **kw), "cpu")


def _steps(t0: int, m: int, done_at: int | None = None, intervention: bool = False) -> dict:
    """``m`` consecutive steps ``t0 .. t0 + m - 1`` with reward ``t``; step ``done_at`` terminates."""
    t = torch.arange(t0, t0 + m)
    return {
        "obs": _obs(t),
        "action": (t.float() / 100.0)[:, None],
        "reward": t.float(),
        "next_obs": _obs(t + 1),
        "terminated": t == done_at if done_at is not None else torch.zeros(m, dtype=torch.bool),
        "truncated": torch.zeros(m, dtype=torch.bool),
        "intervention": torch.full((m,), intervention),
    }


def _demos(m: int, value: float = 1000.0) -> TensorDict:
    """``m`` demonstration steps (obs ``value + t``), episodes of 10 truncated at the end, without ``intervention``."""
    t = torch.arange(m)
    return TensorDict(
        {
            "obs": _obs(value + t),
            "action": torch.zeros(m, 1),
            "reward": torch.ones(m),
            "next_obs": _obs(value + t + 1),
            "terminated": torch.zeros(m, dtype=torch.bool),
            "truncated": t % 10 == 9,
        },
        batch_size=[m],
    )


def _starts(batch: TensorDict) -> dict[int, tuple[float, float, float, bool]]:
    """``start time -> (return, discount, next obs value, intervention)``."""
    obs, nxt = batch["obs", "policy"][:, 0], batch["next_obs", "policy"][:, 0]
    return {
        int(obs[i]): (
            float(batch["reward"][i]),
            float(batch["discount"][i]),
            float(nxt[i]),
            bool(batch["intervention"][i]),
        )
        for i in range(batch.batch_size[0])
    }


def test_interventions_go_to_both_rings_and_are_counted():
    buf = _buffer(demo_capacity=50)
    assert buf.demos is None and buf.num_interventions() == (0, 0)
    for t in range(6):
        step = _steps(t, 1, intervention=2 <= t < 5)
        buf.add(**step)
        if bool(step["intervention"][0]):
            buf.add_to_demos(**step)
    assert buf.demos is not None and buf.demos.horizon == 50
    assert buf.num_demos == 3 and buf.num_interventions() == (3, 3)
    batch = buf.sample(400, 1, 0.9)
    got = _starts(batch)
    assert set(got) == set(range(6))
    assert all(got[t][3] == (2 <= t < 5) for t in got)
    assert torch.equal(batch["is_demo"] & ~batch["intervention"], torch.zeros(400, dtype=torch.bool))


def test_loaded_demonstrations_get_no_interventions_and_the_ring_grows_to_hold_them():
    buf = _buffer(demo_capacity=8)
    buf.add_demonstrations(_demos(12))  # more than demo_capacity: all are kept
    assert buf.demos is not None and (buf.demos.horizon, buf.demos.size, buf.demos.ptr) == (12, 12, 0)
    assert buf.num_interventions() == (0, 0)
    buf.add_to_demos(**_steps(0, 3, intervention=True))  # the ring is full: the oldest three rows go
    assert buf.num_demos == 12 and buf.num_interventions() == (0, 3)
    starts = set(_starts(buf.demos.sample(500, 1, 0.9)))
    assert starts == {1000 + t for t in range(3, 12)} | {0, 1, 2}


def test_demo_ring_wraps_around_keeping_the_newest_rows():
    buf = _buffer(demo_capacity=5)
    buf.add_to_demos(**_steps(0, 3))
    buf.add_to_demos(**_steps(3, 4))  # 7 steps in a ring of 5: the second write wraps
    ring = buf.demos
    assert ring is not None and (ring.ptr, ring.size) == (2, 5)
    assert ring.data["obs", "policy"][:, 0, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    got = _starts(buf.sample(500, 3, 0.5))
    assert set(got) == {2, 3, 4, 5, 6}
    assert got[4] == pytest.approx((4 + 0.5 * 5 + 0.25 * 6, 0.125, 7.0, False))  # chains cross the wrap
    assert got[6] == pytest.approx((6.0, 0.5, 7.0, False))  # the newest row: nothing stored after it


def test_n_step_chains_do_not_run_from_one_intervention_into_the_next():
    g = 0.5
    buf = _buffer(demo_capacity=20)
    buf.add_to_demos(**_steps(5, 3, intervention=True))  # steps 5, 6, 7
    buf.add_to_demos(**_steps(8, 1, intervention=True))  # step 8 follows step 7: the chain continues
    later = _steps(20, 2, intervention=True)
    truncated_in = later["truncated"].clone()
    buf.add_to_demos(**later)  # a later intervention: step 8's chain ends there
    assert torch.equal(later["truncated"], truncated_in)  # the caller's tensors are not written to
    # one message with two interventions (rows 30, 31 and 34): the rows are selected by a mask, so 31 -> 34 is a gap
    message = _steps(30, 5, intervention=True)
    human = torch.tensor([True, True, False, False, True])
    buf.add_to_demos(**{k: v[human] for k, v in message.items()})
    got = _starts(buf.sample(1000, 3, g))
    assert got[7] == pytest.approx((7 + g * 8, g**2, 9.0, True))
    assert got[8] == pytest.approx((8.0, g, 9.0, True))  # bootstraps from its own next observation
    assert got[20] == pytest.approx((20 + g * 21, g**2, 22.0, True))
    assert got[21] == pytest.approx((21.0, g, 22.0, True))
    assert got[30] == pytest.approx((30 + g * 31, g**2, 32.0, True))
    assert got[34] == pytest.approx((34.0, g, 35.0, True))
    assert buf.demos is not None
    assert buf.demos.data["truncated"][:9, 0].tolist() == [0, 0, 0, 1, 0, 1, 0, 1, 0]
    assert not bool(buf.demos.data["terminated"].any())


def test_add_sequence_equals_single_adds():
    single, seq = _buffer(capacity=7), _buffer(capacity=7)
    for t in range(17):
        single.add(**_steps(t, 1, done_at=9, intervention=t % 3 == 0))
    for t0, m in ((0, 3), (3, 1), (4, 10), (14, 3)):  # the third write is longer than the ring
        step = _steps(t0, m, done_at=9)
        step["intervention"] = torch.arange(t0, t0 + m) % 3 == 0
        seq.add_sequence(**step)
    assert (seq.online.ptr, seq.online.size) == (single.online.ptr, single.online.size) == (3, 7)
    assert (seq.online.data == single.online.data).all()
    assert seq.num_interventions() == single.num_interventions() == (2, 0)
    with pytest.raises(ValueError, match="one env"):
        _buffer(num_envs=2).add_sequence(**_steps(0, 3))


def test_state_dict_round_trips_the_demo_ring_exactly():
    buf = _buffer(demo_capacity=6)
    buf.add(**_steps(0, 1, intervention=True))
    buf.add_to_demos(**_steps(0, 4, intervention=True))
    buf.add_to_demos(**_steps(4, 4))  # wrapped: ptr 2
    other = _buffer(demo_capacity=99)  # the saved ring's size wins over the config
    other.load_state_dict(buf.state_dict())
    a, b = buf.demos, other.demos
    assert a is not None and b is not None
    assert (b.ptr, b.size, b.horizon) == (a.ptr, a.size, a.horizon) == (2, 6, 6)
    assert (a.data == b.data).all() and other.num_interventions() == buf.num_interventions() == (1, 2)
    for x in (buf, other):
        x.add_to_demos(**_steps(8, 3, intervention=True))
    assert (a.data == b.data).all()
    torch.manual_seed(0)
    s1 = buf.sample(64, 3, 0.9)
    torch.manual_seed(0)
    assert (s1 == other.sample(64, 3, 0.9)).all()


def test_old_state_dict_without_interventions_loads():
    buf = _buffer(num_envs=2, capacity=10)
    step = _steps(0, 2)
    step.pop("intervention")
    buf.add(**step)
    buf.add_demonstrations(_demos(4))
    state = buf.state_dict()
    # as saved before interventions existed: no intervention field, no demo ring size
    for part in (state["online"], state["demos"]):
        part["data"].pop("intervention")
    state["demos"].pop("horizon")
    state["demos"]["ptr"] = 0  # a ring of exactly its rows
    other = _buffer(num_envs=2, capacity=10)
    other.load_state_dict(state)
    assert other.num_interventions() == (0, 0)
    assert other.demos is not None and (other.demos.horizon, other.demos.size, other.demos.ptr) == (4, 4, 0)
    assert buf.demos is not None and (other.demos.data == buf.demos.data[:4]).all()
    assert (other.online.data == buf.online.data).all()
    assert set(other.sample(32, 2, 0.9).keys()) >= {"intervention", "is_demo"}


def test_bad_demo_steps_raise():
    buf = _buffer()
    step = _steps(0, 2)
    step["action"] = torch.full((2, 1), 2.0)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        buf.add_to_demos(**step)
    step = _steps(0, 2)
    step["obs"] = TensorDict({"policy": torch.zeros(2, 3)}, batch_size=[2])
    with pytest.raises(ValueError, match="shape"):
        buf.add_to_demos(**step)
