"""RND: the intrinsic reward falls on revisited states and stays higher on new ones; the target stays fixed; the
reward is the weighted error over the running std of its discounted sum; bad settings are refused."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rslkit.models.rnd import RandomNetworkDistillation, RndCfg
from rslkit.utils.validation import ConfigError, validate


def _states(n: int, seed: int) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict({"policy": torch.randn(n, 6, generator=g), "critic": torch.randn(n, 3, generator=g)}, [n])


def _rnd(num_envs: int, **kw) -> RandomNetworkDistillation:
    torch.manual_seed(0)
    return RandomNetworkDistillation(_states(1, 0), ["policy", "critic"], num_envs, RndCfg(weight=1.0, **kw), 0.5)


def test_intrinsic_reward_falls_on_revisited_states() -> None:
    rnd = _rnd(64, reward_normalization=False)
    visited, novel = _states(64, 1), _states(64, 2)
    target = [p.clone() for p in rnd.target.parameters()]
    first = rnd.intrinsic_reward(visited).mean()
    for _ in range(150):
        rnd.fit(visited)
    last = rnd.intrinsic_reward(visited).mean()
    assert last < 0.3 * first
    assert rnd.intrinsic_reward(novel).mean() > 2.0 * last
    assert all(torch.equal(p, q) for p, q in zip(rnd.target.parameters(), target))  # the target is frozen


def test_normalized_reward_is_the_weighted_error_over_the_return_std() -> None:
    rnd = _rnd(128)
    both = torch.cat((_states(64, 1), _states(64, 2)))
    for _ in range(3):
        reward = rnd.intrinsic_reward(both)
    error = rnd.prediction_error(rnd.state(both))
    std = rnd.return_normalizer.var[0].sqrt()  # type: ignore[union-attr]
    torch.testing.assert_close(reward, 0.5 * error / std, rtol=1e-5, atol=1e-6)
    for _ in range(150):
        rnd.fit(both[:64])
    reward = rnd.intrinsic_reward(both)  # one call, one scale: the revisited half earns less
    assert reward[:64].mean() < 0.5 * reward[64:].mean()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="rnd_cfg.weight"):
        validate(RndCfg(weight=-1.0), "agent.algorithm.rnd_cfg")
    with pytest.raises(ConfigError, match="rnd_cfg.predictor_hidden_dims"):
        validate(RndCfg(predictor_hidden_dims=(0,)), "agent.algorithm.rnd_cfg")
    with pytest.raises(ValueError, match="rnd_cfg.obs_groups names \\['camera'\\]"):
        RandomNetworkDistillation(_states(1, 0), ["camera"], 1, RndCfg(weight=1.0), 1.0)
