"""Stale-data losses: decoupled PPO, A-3PO's log-linear proximal policy and M2PO's mask against hand-computed
values; in PPO and ReinFlow they reduce to plain PPO on fresh data and anchor the trust region on stale data."""

import copy
import math

import pytest
import torch

from rslkit.algorithms.ppo import PPO, PPOCfg
from rslkit.algorithms.ppo_losses import clipped_surrogate
from rslkit.algorithms.reinflow import ReinFlowCfg
from rslkit.algorithms.staleness import (
    StalenessCfg,
    behaviour_weight,
    decoupled_surrogate,
    loglinear_proximal_log_prob,
    m2_mask,
    policy_loss,
)
from rslkit.envs import make_env
from rslkit.models.actor_critic import ActorCritic, PolicyCfg
from rslkit.utils.validation import ConfigError, validate


# ---------------------------------------------------------------------------------------------- the formulas
def test_decoupled_surrogate_matches_hand_computed_values():
    log_prob = torch.tensor([0.0, 0.0, 0.0])
    prox = torch.log(torch.tensor([0.5, 1.0, 2.0]))  # u = 2, 1, 0.5
    behav = torch.log(torch.tensor([0.25, 1.0, 0.2]))  # w = 2, 1, 10
    adv = torch.tensor([1.0, -2.0, 3.0])
    # per sample w * min(u A, clip(u, 0.8, 1.2) A): 2 * min(2, 1.2) = 2.4; 1 * min(-2, -2) = -2; masked (w 10 > 5)
    loss, parts = decoupled_surrogate(log_prob, prox, behav, adv, clip=0.2, weight_cap=5.0, weight_mode="mask")
    assert float(loss) == pytest.approx(-(2.4 - 2.0 + 0.0) / 3)  # masked samples stay in the denominator
    assert parts["w_kept"].tolist() == [True, True, False]
    torch.testing.assert_close(parts["u"], torch.tensor([2.0, 1.0, 0.5]))
    # clamp: the third sample counts with w = 5: 5 * min(0.5 * 3, 0.8 * 3) = 7.5
    loss, _ = decoupled_surrogate(log_prob, prox, behav, adv, clip=0.2, weight_cap=5.0, weight_mode="clamp")
    assert float(loss) == pytest.approx(-(2.4 - 2.0 + 7.5) / 3)
    # uncapped: w = 10 -> 15
    loss, _ = decoupled_surrogate(log_prob, prox, behav, adv, clip=0.2, weight_cap=None)
    assert float(loss) == pytest.approx(-(2.4 - 2.0 + 15.0) / 3)


def test_decoupled_surrogate_is_ppo_when_the_proximal_policy_is_the_behaviour_policy():
    torch.manual_seed(0)
    log_prob, behav, adv = torch.randn(64, requires_grad=True), torch.randn(64), torch.randn(64)
    ppo = clipped_surrogate(torch.exp(log_prob - behav), adv, 0.2)
    dec, parts = decoupled_surrogate(log_prob, behav, behav, adv, 0.2)
    assert torch.equal(parts["w"], torch.ones(64))
    torch.testing.assert_close(dec, ppo, rtol=0, atol=1e-7)
    (g_ppo,) = torch.autograd.grad(ppo, log_prob)
    (g_dec,) = torch.autograd.grad(dec, log_prob)
    torch.testing.assert_close(g_dec, g_ppo, rtol=0, atol=1e-7)


def test_behaviour_weight_carries_no_gradient():
    prox = torch.zeros(3, requires_grad=True)
    w, _ = behaviour_weight(prox, torch.full((3,), -1.0), 5.0, "mask")
    assert not w.requires_grad
    torch.testing.assert_close(w, torch.full((3,), math.e))


def test_loglinear_proximal_policy_interpolates_by_staleness():
    behav = torch.tensor([-1.0, -1.0, -1.0])
    theta = torch.tensor([-2.0, -2.0, -2.0], requires_grad=True)
    versions = torch.tensor([5, 3, 0])  # learner at version 5: staleness 0, 2, 5 -> alpha 0, 2/3, 5/6
    prox = loglinear_proximal_log_prob(behav, theta, versions, version=5)
    torch.testing.assert_close(prox, torch.tensor([-1.0, -1.0 - 2 / 3, -1.0 - 5 / 6]))
    assert not prox.requires_grad  # pi_theta enters detached
    # a version from the future (clock skew) counts as fresh, not as extrapolation
    torch.testing.assert_close(loglinear_proximal_log_prob(behav, theta, torch.tensor([7, 7, 7]), 5), behav)


def test_m2_mask_drops_the_fewest_largest_second_moments():
    behav = torch.zeros(4)
    prox = torch.tensor([1.0, 0.1, math.sqrt(0.02), math.sqrt(0.5)])  # M2 = 1, 0.01, 0.02, 0.5
    # sorted 1, 0.5, 0.02, 0.01: means of the kept rest 0.3825, 0.1767, 0.015 -> drop the two largest
    assert m2_mask(behav, prox, 0.04).tolist() == [False, True, True, False]
    assert m2_mask(behav, prox, 2.0).all()  # nothing to drop
    only = m2_mask(torch.zeros(3), torch.tensor([3.0, 2.0, 4.0]), 0.04)  # all far: keep one, the closest
    assert only.tolist() == [False, True, False]


def test_policy_loss_needs_what_its_proximal_policy_is_made_of():
    lp, adv = torch.zeros(4), torch.ones(4)
    with pytest.raises(ValueError, match="versions"):
        policy_loss(StalenessCfg(objective="decoupled", proximal="loglinear"), lp, lp, adv, 0.2)
    with pytest.raises(ValueError, match="recomputed"):
        policy_loss(StalenessCfg(objective="decoupled"), lp, lp, adv, 0.2)
    with pytest.raises(ValueError, match="recomputed"):
        policy_loss(StalenessCfg(m2_threshold=0.04), lp, lp, adv, 0.2)
    loss, ratio, stats = policy_loss(StalenessCfg(), lp, lp, adv, 0.2)  # plain PPO needs neither
    assert float(loss) == -1.0 and torch.equal(ratio, torch.ones(4)) and float(stats["masked_fraction"]) == 0.0


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("objective", "v-trace", "objective"),
        ("proximal", "guess", "proximal"),
        ("weight_cap", 0.5, "weight_cap"),
        ("weight_mode", "drop", "weight_mode"),
        ("m2_threshold", -1.0, "m2_threshold"),
    ],
)
def test_bad_staleness_settings_are_refused_with_the_field_path(field, value, match):
    cfg = PPOCfg()
    setattr(cfg.staleness, field, value)
    with pytest.raises(ConfigError, match=f"algorithm.staleness.{match}"):
        validate(cfg, "algorithm")


# ---------------------------------------------------------------------------------------------- inside PPO
def _ppo(staleness: StalenessCfg, steps: int = 8, num_envs: int = 16) -> tuple[PPO, object]:
    torch.manual_seed(0)
    env = make_env("pendulum", num_envs=num_envs, episode_length=5, seed=0)
    obs = env.get_observations()
    policy = ActorCritic(obs, env.num_actions, PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,)))
    cfg = PPOCfg(num_mini_batches=2, num_learning_epochs=2, schedule="fixed", staleness=staleness)
    return PPO(policy, cfg, steps, obs, "cpu"), env


def _collect(ppo: PPO, env, steps: int = 8) -> None:
    obs = env.get_observations()
    ppo.begin_rollout()
    with torch.inference_mode():
        for _ in range(steps):
            obs, rewards, dones, extras = env.step(ppo.act(obs))
            ppo.process_env_step(rewards, dones, extras)
        ppo.compute_returns(obs)


@pytest.mark.parametrize("proximal", ["recompute", "loglinear"])
def test_decoupled_ppo_on_fresh_data_is_plain_ppo(proximal):
    """eta = 0: every sample is of the current version, so pi_prox = pi_behav and the update is PPO's."""
    plain, env_a = _ppo(StalenessCfg())
    decoupled, env_b = _ppo(StalenessCfg(objective="decoupled", proximal=proximal))
    for k in range(2):
        torch.manual_seed(10 + k)  # the same actions sampled in both
        _collect(plain, env_a)
        torch.manual_seed(10 + k)
        _collect(decoupled, env_b)
        torch.manual_seed(1)
        stats_a = plain.update()
        torch.manual_seed(1)
        stats_b = decoupled.update()
        assert stats_b["staleness_max"] == 0.0 and stats_b["behaviour_weight_mean"] == pytest.approx(1.0)
    for (name, a), b in zip(plain.policy.state_dict().items(), decoupled.policy.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    assert stats_a["surrogate"] == pytest.approx(stats_b["surrogate"], abs=1e-6)
    assert plain.version == decoupled.version == 2


def _stale_rollout(staleness: StalenessCfg) -> PPO:
    """A rollout of version 0 trained after two updates on other data: every sample is 2 versions behind."""
    ppo, env = _ppo(staleness)
    _collect(ppo, env)
    stale = copy.deepcopy(ppo.storage)
    ppo.storage.clear()
    for _ in range(2):
        _collect(ppo, env)  # overwrites the storage, trains version 0 -> 1 -> 2 with a high learning rate
        for group in ppo.optimizer.param_groups:
            group["lr"] = 3e-2
        ppo.update()
    ppo.storage = stale
    return ppo


def test_on_stale_data_the_decoupled_ratio_starts_at_one_and_the_naive_one_does_not():
    decoupled = _stale_rollout(StalenessCfg(objective="decoupled", weight_cap=None))
    stats = decoupled.update()
    assert stats["staleness_mean"] == 2.0
    assert stats["first_ratio"] == pytest.approx(1.0, abs=1e-6)  # u = pi_theta / pi_prox before any step
    assert abs(stats["behaviour_weight_mean"] - 1.0) > 1e-3  # w = pi_prox / pi_behav carries the staleness
    naive = _stale_rollout(StalenessCfg())
    assert abs(naive.update()["first_ratio"] - 1.0) > 1e-3  # r = pi_theta / pi_behav: the trust region is stale


def test_m2_mask_drops_samples_of_stale_data_inside_ppo():
    ppo = _stale_rollout(StalenessCfg(m2_threshold=1e-4))
    stats = ppo.update()
    assert 0.0 < stats["masked_fraction"] < 1.0 and stats["m2"] > 1e-4


def test_policy_version_counts_updates_and_survives_a_checkpoint():
    ppo, env = _ppo(StalenessCfg(objective="decoupled"))
    for _ in range(3):
        _collect(ppo, env)
        ppo.update()
    other, _ = _ppo(StalenessCfg(objective="decoupled"))
    other.load_state_dict(ppo.state_dict())
    assert other.version == 3
    state = ppo.state_dict()
    del state["version"]  # a checkpoint from before policy versions
    other.load_state_dict(state)
    assert other.version == 0


# ---------------------------------------------------------------------------------------------- inside ReinFlow
def test_reinflow_decoupled_on_stale_chains_starts_at_ratio_one():
    from tests.algorithms.test_reinflow import _rollout

    cfg = ReinFlowCfg(
        critic_hidden_dims=(32,), num_mini_batches=2, num_learning_epochs=2, clip_param=0.05,
        actor_lr=1e-2, staleness=StalenessCfg(objective="decoupled", weight_cap=None),
    )  # fmt: skip
    alg = _rollout(2, cfg)
    stale = copy.deepcopy(alg.storage)
    fresh = copy.deepcopy(alg.storage)
    alg.update()  # version 0 -> 1
    alg.storage = fresh
    alg.storage.versions.fill_(1)
    alg.update()  # 1 -> 2
    alg.storage = stale
    stats = alg.update()
    assert alg.version == 3 and stats["staleness_mean"] == 2.0
    assert stats["first_ratio"] == 1.0 and stats["first_ratio_max_dev"] < 1e-6
    assert abs(stats["behaviour_weight_mean"] - 1.0) > 1e-4
