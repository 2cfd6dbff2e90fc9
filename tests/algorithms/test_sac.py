"""SAC math: Polyak averaging, squashed-Gaussian log-probabilities, temperature tuning, Bellman targets."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.algorithms.sac import SAC, SACCfg, SACModel, SACNetworkCfg, polyak_update, squashed_gaussian_log_prob


def _model(obs_dim: int = 3, num_actions: int = 2, **kw) -> tuple[SACModel, TensorDict]:
    torch.manual_seed(0)
    obs = TensorDict({"policy": torch.randn(8, obs_dim)}, batch_size=[8])
    return SACModel(obs, num_actions, SACNetworkCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,), **kw)), obs


def test_polyak_update_math():
    torch.manual_seed(0)
    source, target = nn.Linear(4, 3), nn.Linear(4, 3)
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update(target, source, tau=0.25)
    for new, old, src in zip(target.parameters(), before, source.parameters()):
        torch.testing.assert_close(new, 0.25 * src + 0.75 * old)
    polyak_update(target, source, tau=1.0)  # tau = 1 is a hard copy
    for new, src in zip(target.parameters(), source.parameters()):
        assert torch.equal(new, src)


def test_sac_updates_target_by_polyak_after_each_critic_step():
    model, obs = _model()
    sac = SAC(model, SACCfg(tau=0.1, batch_size=8), 2, "cpu")
    before = [p.detach().clone() for p in model.critic_target.parameters()]
    sac.update(_batch(obs, discount=0.9))
    for new, old, src in zip(model.critic_target.parameters(), before, model.critic.parameters()):
        torch.testing.assert_close(new, 0.1 * src.detach() + 0.9 * old)


def test_squashed_log_prob_matches_change_of_variables_with_numerical_jacobian():
    torch.manual_seed(0)
    mean, log_std = torch.randn(5, 3, dtype=torch.float64), 0.5 * torch.randn(5, 3, dtype=torch.float64)
    u = mean + log_std.exp() * torch.randn(5, 3, dtype=torch.float64)
    got = squashed_gaussian_log_prob(mean, log_std, u)
    for i in range(5):
        # log p(a) = log N(u) - log |det da/du|, the Jacobian by central finite differences.
        eps = 1e-6
        jac = torch.stack([(torch.tanh(u[i] + eps * e) - torch.tanh(u[i] - eps * e)) / (2 * eps) for e in torch.eye(3)])
        normal = torch.distributions.Normal(mean[i], log_std[i].exp()).log_prob(u[i]).sum()
        want = normal - torch.linalg.det(jac).abs().log()
        assert float(got[i]) == pytest.approx(float(want), abs=1e-6)


def test_squashed_log_prob_matches_monte_carlo_histogram():
    torch.manual_seed(0)
    mean, log_std = torch.tensor([[0.4]]), torch.tensor([[math.log(0.8)]])
    u = mean + log_std.exp() * torch.randn(400_000, 1)
    a = torch.tanh(u)
    edges = torch.linspace(-0.9, 0.9, 19)
    counts = torch.histc(a, bins=18, min=-0.9, max=0.9)
    width = float(edges[1] - edges[0])
    empirical = counts / (a.numel() * width)
    centers = (edges[:-1] + edges[1:]) / 2
    u_c = torch.atanh(centers)[:, None]
    density = squashed_gaussian_log_prob(mean.expand(18, 1), log_std.expand(18, 1), u_c).exp()
    torch.testing.assert_close(empirical, density, rtol=0.05, atol=0.01)


def test_actor_sample_is_bounded_and_log_prob_consistent():
    model, obs = _model()
    x = model.actor_input(obs)
    torch.manual_seed(1)
    a, log_prob = model.actor.sample(x)
    assert a.shape == (8, 2) and bool((a.abs() < 1).all())
    mean, log_std = model.actor(x)
    torch.manual_seed(1)
    u = mean + log_std.exp() * torch.randn_like(mean)
    torch.testing.assert_close(log_prob, squashed_gaussian_log_prob(mean, log_std, u))


@pytest.mark.parametrize("entropy, direction", [(-5.0, +1), (5.0, -1)])
def test_temperature_moves_toward_target_entropy(entropy, direction):
    model, _ = _model()
    sac = SAC(model, SACCfg(init_alpha=0.5, alpha_lr=0.01), num_actions=2, device="cpu")
    assert sac.target_entropy == -2.0
    log_prob = torch.full((16,), -entropy)  # entropy = -E[log pi]
    before = float(sac.alpha)
    for _ in range(5):
        loss = sac.alpha_loss(log_prob)
        sac.alpha_optimizer.zero_grad()
        loss.backward()
        sac.alpha_optimizer.step()
    after = float(sac.alpha)
    assert (after - before) * direction > 0, (before, after)


def _batch(obs: TensorDict, reward: float = 1.0, discount: float = 0.9) -> TensorDict:
    n = obs.batch_size[0]
    return TensorDict(
        {
            "obs": obs,
            "action": torch.zeros(n, 2),
            "reward": torch.full((n,), reward),
            "next_obs": TensorDict({"policy": obs["policy"] + 1.0}, batch_size=[n]),
            "discount": torch.full((n,), discount),
            "weight": torch.ones(n),
        },
        batch_size=[n],
    )


def test_bellman_target_terminal_vs_bootstrapped():
    model, obs = _model()
    sac = SAC(model, SACCfg(init_alpha=0.3), 2, "cpu")
    # Terminal transitions (discount 0): the target is the reward alone.
    _, info = sac.critic_loss(_batch(obs, reward=2.5, discount=0.0))
    assert float(info["target"]) == pytest.approx(2.5)
    # Time-out / non-terminal: y = r + gamma^K [min_j Q̄_j(s', a') - alpha log pi(a'|s')], computed by hand.
    batch = _batch(obs, reward=2.5, discount=0.81)
    torch.manual_seed(3)
    _, info = sac.critic_loss(batch)
    torch.manual_seed(3)
    with torch.no_grad():
        x_next = model.actor_input(batch["next_obs"])
        mean, log_std = model.actor(x_next)
        u = mean + log_std.exp() * torch.randn_like(mean)
        a = torch.tanh(u)
        xa = torch.cat((model.critic_input(batch["next_obs"]), a), -1)
        q = torch.min(model.critic_target.q1(xa), model.critic_target.q2(xa)).squeeze(-1)
        y = 2.5 + 0.81 * (q - 0.3 * squashed_gaussian_log_prob(mean, log_std, u))
    assert float(info["target"]) == pytest.approx(float(y.mean()), rel=1e-5)


def test_masked_transitions_do_not_contribute_to_critic_loss():
    model, obs = _model()
    sac = SAC(model, SACCfg(), 2, "cpu")
    batch = _batch(obs)
    batch["weight"][4:] = 0.0
    torch.manual_seed(0)
    loss, _ = sac.critic_loss(batch)
    batch["reward"][4:] = 1e6  # e.g. a time-out whose "next obs" is really the reset obs
    torch.manual_seed(0)
    loss_changed, _ = sac.critic_loss(batch)
    assert float(loss_changed.detach()) == pytest.approx(float(loss.detach()), rel=1e-6)


def test_asymmetric_critic_reads_critic_group():
    obs = TensorDict({"policy": torch.randn(4, 3), "critic": torch.randn(4, 7)}, batch_size=[4])
    model = SACModel(obs, 2, SACNetworkCfg(actor_hidden_dims=(8,), critic_hidden_dims=(8,)))
    assert model.actor_groups == ["policy"] and model.critic_groups == ["critic"]
    assert model.critic.q1[0].in_features == 7 + 2 and model.actor.net[0].in_features == 3
    with pytest.raises(ValueError, match="privileged"):
        SACModel(obs, 2, SACNetworkCfg(critic_obs_groups=("privileged",)))


def test_bad_config_raises():
    model, _ = _model()
    with pytest.raises(ValueError, match="n_step"):
        SAC(model, SACCfg(n_step=0), 2, "cpu")
    with pytest.raises(ValueError, match="utd_ratio"):
        SAC(model, SACCfg(utd_ratio=0.0), 2, "cpu")


def test_fractional_utd_ratio_schedules_updates():
    model, _ = _model()
    sac = SAC(model, SACCfg(utd_ratio=0.5), 2, "cpu")
    assert [sac.updates_due() for _ in range(6)] == [0, 1, 0, 1, 0, 1]
    sac = SAC(model, SACCfg(utd_ratio=2.0), 2, "cpu")
    assert sac.updates_due() == 2
