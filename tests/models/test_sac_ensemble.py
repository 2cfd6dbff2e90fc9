"""SAC critic ensembles (REDQ / RLPD): shapes, the subset-min target by hand, and defaults unchanged bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from tensordict import TensorDict

from rslkit.algorithms.sac import SAC, SACCfg, polyak_update
from rslkit.models.sac_networks import EnsembleLayerNorm, EnsembleLinear, EnsembleQ, SACModel, SACNetworkCfg, TwinQ
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.utils.validation import ConfigError, validate


def _model(num_critics: int = 2, layer_norm: bool = False, seed: int = 0) -> tuple[SACModel, TensorDict]:
    torch.manual_seed(seed)
    obs = TensorDict({"policy": torch.randn(8, 3)}, batch_size=[8])
    cfg = SACNetworkCfg(
        actor_hidden_dims=(16,), critic_hidden_dims=(16, 8), num_critics=num_critics, critic_layer_norm=layer_norm
    )
    return SACModel(obs, 2, cfg), obs


def _batch(obs: TensorDict, seed: int = 1) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    n = obs.batch_size[0]
    return TensorDict(
        {
            "obs": obs,
            "action": torch.rand(n, 2, generator=g) * 2 - 1,
            "reward": torch.randn(n, generator=g),
            "next_obs": TensorDict({"policy": torch.randn(n, 3, generator=g)}, batch_size=[n]),
            "discount": torch.full((n,), 0.9),
            "weight": torch.ones(n),
        },
        batch_size=[n],
    )


@pytest.mark.parametrize("layer_norm", [False, True])
def test_ensemble_shapes_and_members_are_independent(layer_norm):
    model, obs = _model(num_critics=5, layer_norm=layer_norm)
    assert isinstance(model.critic, EnsembleQ) and model.num_critics == 5
    x, a = model.critic_input(obs), torch.zeros(8, 2)
    q = model.critic(x, a)
    assert q.shape == (5, 8) and model.critic_target(x, a).shape == (5, 8)
    assert model.critic.net[0].weight.shape == (5, 3 + 2, 16)
    # member j is the MLP of its own slices: compare against a hand-written forward pass
    for j in range(5):
        h = torch.cat((x, a), -1)
        for layer in model.critic.net:
            if isinstance(layer, EnsembleLinear):
                h = h @ layer.weight[j] + layer.bias[j, 0]
            elif isinstance(layer, EnsembleLayerNorm):
                h = nn.functional.layer_norm(h, h.shape[-1:]) * layer.weight[j, 0] + layer.bias[j, 0]
            else:
                h = layer(h)
        torch.testing.assert_close(q[j], h.squeeze(-1))
    assert not torch.allclose(q[0], q[1])


def test_twin_critics_keep_their_checkpoint_keys_and_stack():
    model, obs = _model()
    assert isinstance(model.critic, TwinQ) and model.num_critics == 2
    keys = [k for k in model.state_dict() if k.startswith("critic.")]
    assert keys and all(k.startswith(("critic.q1.", "critic.q2.")) for k in keys)
    x, a = model.critic_input(obs), torch.zeros(8, 2)
    xa = torch.cat((x, a), -1)
    q1, q2 = model.critic(x, a)  # unpacking still works
    assert torch.equal(q1, model.critic.q1(xa).squeeze(-1)) and torch.equal(q2, model.critic.q2(xa).squeeze(-1))


def test_subset_min_target_matches_hand_computation():
    model, obs = _model(num_critics=6)
    sac = SAC(model, SACCfg(init_alpha=0.3, critic_subset=3), 2, "cpu")
    batch = _batch(obs)
    torch.manual_seed(7)
    _, info = sac.critic_loss(batch)
    torch.manual_seed(7)
    with torch.no_grad():
        x_next = model.actor_input(batch["next_obs"])
        a_next, log_prob = model.actor.sample(x_next)
        subset = torch.randperm(6)[:3]  # drawn after the actor's sample, as in critic_loss
        q_all = model.critic_target(model.critic_input(batch["next_obs"]), a_next)
        q_min = torch.stack([q_all[j] for j in subset.tolist()]).min(0).values
        y = batch["reward"] + 0.9 * (q_min - 0.3 * log_prob)
    assert float(info["target"]) == pytest.approx(float(y.mean()), rel=1e-6)
    assert bool((sac.subset_min(q_all) >= q_all.amin(0)).all())  # a min over fewer critics is never lower
    full = SAC(model, SACCfg(critic_subset=6), 2, "cpu")
    state = torch.get_rng_state()
    assert torch.equal(full.subset_min(q_all), q_all.amin(0))
    assert torch.equal(torch.get_rng_state(), state)  # all critics: no random draw, the RNG stream is untouched


def test_ensemble_actor_loss_uses_the_mean_over_critics():
    model, obs = _model(num_critics=4)
    sac = SAC(model, SACCfg(init_alpha=0.2), 2, "cpu")
    torch.manual_seed(3)
    loss, _ = sac.actor_loss(_batch(obs))
    torch.manual_seed(3)
    a, log_prob = model.actor.sample(model.actor_input(obs))
    q = model.critic(model.critic_input(obs), a)
    torch.testing.assert_close(loss, (0.2 * log_prob - q.mean(0)).mean())


def test_ensemble_update_trains_every_member_and_polyak_averages_the_targets():
    model, obs = _model(num_critics=3)
    sac = SAC(model, SACCfg(tau=0.1), 2, "cpu")
    before = [p.detach().clone() for p in model.critic.parameters()]
    target_before = [p.detach().clone() for p in model.critic_target.parameters()]
    out = sac.update(_batch(obs))
    assert {"value", "q", "target_q", "actor", "entropy", "alpha_loss"} <= set(out)
    for new, old in zip(model.critic.parameters(), before):
        assert all(not torch.equal(new[j], old[j]) for j in range(3))
    for t, old, src in zip(model.critic_target.parameters(), target_before, model.critic.parameters()):
        torch.testing.assert_close(t, 0.1 * src.detach() + 0.9 * old)


def test_critic_subset_out_of_range_raises():
    model, _ = _model(num_critics=3)
    with pytest.raises(ValueError, match="critic_subset"):
        SAC(model, SACCfg(critic_subset=4), 2, "cpu")
    with pytest.raises(ValueError, match="num_critics"):
        SACModel(TensorDict({"policy": torch.zeros(2, 3)}, [2]), 2, SACNetworkCfg(num_critics=1))
    cfg = SACRunnerCfg()
    cfg.algorithm.critic_subset = 3
    with pytest.raises(ConfigError, match="agent.algorithm.critic_subset"):
        validate(cfg, "agent")
    cfg.policy.num_critics = 10
    validate(cfg, "agent")
    cfg.policy.num_critics = 1
    with pytest.raises(ConfigError, match="agent.policy.num_critics"):
        validate(cfg, "agent")


# ---------------------------------------------------------------------------------------------- defaults unchanged
def _reference_update(sac: SAC, batch: TensorDict) -> dict[str, torch.Tensor]:
    """SAC.update as it was before critic ensembles: twin critics called one by one, ``torch.min`` of the two."""
    m, c = sac.model, sac.cfg
    assert isinstance(m.critic, TwinQ) and isinstance(m.critic_target, TwinQ)
    with torch.no_grad():
        next_action, next_log_prob = m.actor.sample(m.actor_input(batch["next_obs"]))
        xa_next = torch.cat((m.critic_input(batch["next_obs"]), next_action), -1)
        q1_next, q2_next = m.critic_target.q1(xa_next).squeeze(-1), m.critic_target.q2(xa_next).squeeze(-1)
        y = batch["reward"] + batch["discount"] * (torch.min(q1_next, q2_next) - sac.alpha * next_log_prob)
    xa = torch.cat((m.critic_input(batch["obs"]), batch["action"]), -1)
    q1, q2 = m.critic.q1(xa).squeeze(-1), m.critic.q2(xa).squeeze(-1)
    w = batch["weight"]
    denom = w.sum().clamp_min(1.0)
    loss_q = ((w * (q1 - y) ** 2).sum() + (w * (q2 - y) ** 2).sum()) / denom
    sac.critic_optimizer.zero_grad(set_to_none=True)
    loss_q.backward()
    sac.critic_optimizer.step()
    polyak_update(m.critic_target, m.critic, c.tau)
    sac.num_updates += 1
    out = {
        "value": loss_q.detach(),
        "q": ((q1 + q2) * 0.5 * w).sum().detach() / denom,
        "target_q": (y * w).sum() / denom,
    }
    m.critic.requires_grad_(False)
    action, log_prob = m.actor.sample(m.actor_input(batch["obs"]))
    xa_pi = torch.cat((m.critic_input(batch["obs"]), action), -1)
    loss_pi = (sac.alpha * log_prob - torch.min(m.critic.q1(xa_pi), m.critic.q2(xa_pi)).squeeze(-1)).mean()
    sac.actor_optimizer.zero_grad(set_to_none=True)
    loss_pi.backward()
    sac.actor_optimizer.step()
    m.critic.requires_grad_(True)
    log_prob = log_prob.detach()
    out["actor"], out["entropy"] = loss_pi.detach(), -log_prob.mean()
    loss_alpha = sac.alpha_loss(log_prob)
    sac.alpha_optimizer.zero_grad(set_to_none=True)
    loss_alpha.backward()
    sac.alpha_optimizer.step()
    out["alpha_loss"] = loss_alpha.detach()
    return out


@pytest.mark.parametrize("layer_norm", [False, True])
def test_default_twin_update_is_bit_for_bit_the_previous_one(layer_norm):
    new_model, obs = _model(layer_norm=layer_norm)
    old_model, _ = _model(layer_norm=layer_norm)
    new, old = SAC(new_model, SACCfg(), 2, "cpu"), SAC(old_model, SACCfg(), 2, "cpu")
    for step in range(4):
        batch = _batch(obs, seed=step)
        torch.manual_seed(100 + step)
        got = new.update(batch)
        torch.manual_seed(100 + step)
        want = _reference_update(old, batch)
        assert got.keys() == want.keys()
        for key in want:
            assert torch.equal(got[key], want[key]), (step, key)
    for (name, a), b in zip(new_model.state_dict().items(), old_model.state_dict().values()):
        assert torch.equal(a, b), name
    assert torch.equal(new.log_alpha, old.log_alpha)
