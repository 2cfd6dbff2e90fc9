"""SAC behaviour cloning (HIL-SERL / RLPD warm start): the NLL by hand for a tiny actor, and bc_update lowers it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rslkit.algorithms.sac import SAC, SACCfg, SACModel, SACNetworkCfg


def _tiny_sac() -> SAC:
    """Actor ``[mean, raw log std] = W x + b`` on one observation dim and one action, no normalization."""
    obs = TensorDict({"policy": torch.zeros(4, 1)}, batch_size=[4])
    cfg = SACNetworkCfg(actor_hidden_dims=(), critic_hidden_dims=(8,), obs_normalization=False)
    model = SACModel(obs, 1, cfg)
    with torch.no_grad():
        model.actor.net[0].weight.copy_(torch.tensor([[0.5], [-0.3]]))
        model.actor.net[0].bias.copy_(torch.tensor([0.1, 0.2]))
    return SAC(model, SACCfg(), 1, "cpu")


def _hand_nll(x: float, a: float, lo: float = -5.0, hi: float = 2.0) -> float:
    """``-log π(a|s)`` of ``a = tanh(u)``: ``-[log N(atanh a; μ, σ) - log(1 - a^2)]``, a clipped to ±(1 - 1e-6)."""
    a = float(np.clip(np.float32(a), np.float32(-1 + 1e-6), np.float32(1 - 1e-6)))
    mean, raw = 0.5 * x + 0.1, -0.3 * x + 0.2
    log_std = lo + 0.5 * (hi - lo) * (math.tanh(raw) + 1.0)
    u = math.atanh(a)
    log_normal = -0.5 * ((u - mean) / math.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    return -(log_normal - math.log(1.0 - a * a))


def _batch(x: list[float], a: list[float]) -> TensorDict:
    n = len(x)
    return TensorDict({"obs": {"policy": torch.tensor(x)[:, None]}, "action": torch.tensor(a)[:, None]}, batch_size=[n])


def test_bc_loss_matches_hand_computed_nll():
    sac = _tiny_sac()
    x, a = [0.0, 1.0, -2.0, 0.5], [0.3, -0.9, 1.0, -1.0]  # ±1 exactly: clipped before atanh
    want = sum(_hand_nll(xi, ai) for xi, ai in zip(x, a)) / len(x)
    got = float(sac.bc_loss(_batch(x, a)).detach())
    assert math.isfinite(got) and got == pytest.approx(want, rel=1e-5)


def test_bc_update_lowers_the_nll_and_touches_only_the_actor():
    torch.manual_seed(0)
    obs = TensorDict({"policy": torch.randn(64, 3)}, batch_size=[64])
    model = SACModel(obs, 2, SACNetworkCfg(actor_hidden_dims=(32,), critic_hidden_dims=(16,)))
    model.update_normalization(obs)
    sac = SAC(model, SACCfg(actor_lr=3e-3), 2, "cpu")
    expert = torch.tanh(obs["policy"][:, :2] * 1.5)  # a deterministic function of the state
    batch = TensorDict({"obs": obs, "action": expert}, batch_size=[64])
    critic = [p.detach().clone() for p in model.critic.parameters()]
    alpha = float(sac.alpha)
    before = float(sac.bc_loss(batch).detach())
    err_before = float((model.act_inference(obs) - expert).abs().mean().detach())
    for _ in range(200):
        out = sac.bc_update(batch)
    assert set(out) == {"bc"} and not out["bc"].requires_grad
    after = float(sac.bc_loss(batch).detach())
    assert after < before - 2.0, (before, after)
    assert all(torch.equal(p, q) for p, q in zip(model.critic.parameters(), critic))
    assert float(sac.alpha) == alpha and sac.num_updates == 0
    # the deterministic action moved toward the demonstrations
    err = float((model.act_inference(obs) - expert).abs().mean().detach())
    assert err < 0.5 * err_before, (err_before, err)
