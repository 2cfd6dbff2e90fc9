"""PPO: first ratio exactly 1, clipped losses, adaptive learning rate."""

import pytest
import torch

from rslkit.algorithms.ppo import PPO, PPOCfg
from rslkit.envs import make_env
from rslkit.models.actor_critic import ActorCritic, PolicyCfg


def _rollout(policy_cfg: PolicyCfg, ppo_cfg: PPOCfg | None = None, steps: int = 8, num_envs: int = 16) -> PPO:
    torch.manual_seed(0)
    env = make_env("pendulum", num_envs=num_envs, episode_length=5)  # short episodes: resets inside the rollout
    obs = env.get_observations()
    policy = ActorCritic(obs, env.num_actions, policy_cfg)
    ppo = PPO(policy, ppo_cfg or PPOCfg(num_mini_batches=2), steps, obs, "cpu")
    # Non-trivial normalizer statistics, so normalization is part of what must stay fixed during the update.
    policy.update_normalization(obs.apply(lambda x: x * 3 + 1))
    ppo.begin_rollout()
    with torch.inference_mode():
        for _ in range(steps):
            actions = ppo.act(obs)
            obs, rewards, dones, extras = env.step(actions)
            ppo.process_env_step(rewards, dones, extras)
        ppo.compute_returns(obs)
    return ppo


@pytest.mark.parametrize(
    "policy_cfg",
    [
        PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,)),
        PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,), state_dependent_std=True),
        PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,), distribution="tanh_gaussian"),
        PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,), distribution="beta"),
        PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,), rnn_type="gru", rnn_hidden_dim=8),
        PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,), rnn_type="lstm", rnn_hidden_dim=8),
    ],
    ids=["gaussian", "state_dependent", "tanh", "beta", "gru", "lstm"],
)
def test_first_mini_batch_ratio_is_exactly_one(policy_cfg):
    ppo = _rollout(policy_cfg)
    stats = ppo.update()
    # Every sample of the first mini-batch, not just the mean: recompute before any optimizer step.
    assert stats["first_ratio"] == pytest.approx(1.0, abs=1e-6)
    ppo2 = _rollout(policy_cfg)
    batches = ppo2.storage.recurrent_mini_batches(2, 1) if ppo2.policy.is_recurrent else ppo2.storage.mini_batches(2, 1)
    batch = next(iter(batches))
    if policy_cfg.distribution == "tanh_gaussian":
        torch.manual_seed(1)  # entropy of a squashed Gaussian is sampled; log-probs are exact either way
    log_prob, _, values, _ = ppo2.policy.evaluate(batch.obs, batch.actions, batch.hidden, batch.resets)
    torch.testing.assert_close(log_prob, batch.log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(values, batch.values, atol=1e-5, rtol=0)


def test_surrogate_and_value_clipping_match_formulas():
    cfg = PPOCfg(num_mini_batches=1, num_learning_epochs=1, clip_param=0.2, schedule="fixed", entropy_coef=0.0)
    ppo = _rollout(PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,)), cfg)
    batch = next(iter(ppo.storage.mini_batches(1, 1)))
    # Pretend the rollout policy was different: old log-probs lower by 0.5 -> ratio e^0.5 (clipped at 1.2);
    # old values higher by 1 -> the clipped value moves at most 0.2 from them.
    batch.log_probs = batch.log_probs - 0.5
    batch.values = batch.values + 1.0
    log_prob, _, values, _ = ppo.policy.evaluate(batch.obs, batch.actions)
    ratio = torch.exp(log_prob - batch.log_probs).detach()
    adv = batch.advantages
    expected_surrogate = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    v = values.detach()
    v_clipped = batch.values + (v - batch.values).clamp(-0.2, 0.2)
    expected_value = torch.max((v - batch.returns) ** 2, (v_clipped - batch.returns) ** 2).mean()
    stats = ppo._update_mini_batch(batch)
    torch.testing.assert_close(stats["surrogate"], expected_surrogate)
    torch.testing.assert_close(stats["value"], expected_value)
    assert stats["clip_fraction"] == pytest.approx(1.0)  # e^0.5 - 1 > 0.2 everywhere
    # Clipping bounds the objective: for positive advantages the clipped term caps at 1.2 * A.
    pos = adv > 0
    assert torch.all(torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)[pos] <= 1.2 * adv[pos] + 1e-6)


@pytest.mark.parametrize("kl,expected", [(1.0, 1e-3 / 1.5), (1e-6, 1e-3 * 1.5), (0.01, 1e-3)])
def test_adaptive_learning_rate(kl, expected):
    ppo = _rollout(PolicyCfg(actor_hidden_dims=(8,), critic_hidden_dims=(8,)), PPOCfg(learning_rate=1e-3))
    ppo._adapt_learning_rate(torch.tensor(kl))
    assert ppo.learning_rate == pytest.approx(expected)
    assert all(g["lr"] == pytest.approx(expected) for g in ppo.optimizer.param_groups)


def test_adaptive_learning_rate_is_clamped():
    ppo = _rollout(PolicyCfg(actor_hidden_dims=(8,), critic_hidden_dims=(8,)), PPOCfg(learning_rate=1e-3))
    for _ in range(50):
        ppo._adapt_learning_rate(torch.tensor(10.0))
    assert ppo.learning_rate == pytest.approx(1e-5)
    for _ in range(50):
        ppo._adapt_learning_rate(torch.tensor(0.0001))
    assert ppo.learning_rate == pytest.approx(1e-2)


def test_normalizer_changes_only_after_update():
    ppo = _rollout(PolicyCfg(actor_hidden_dims=(8,), critic_hidden_dims=(8,)))
    norm = ppo.policy.normalizers["policy"]
    before = norm.count.clone()
    ppo.update()
    assert norm.count.item() == before.item() + ppo.storage.num_steps * ppo.storage.num_envs


def test_micro_batches_give_the_same_update():
    policy_cfg = PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,))
    results = []
    for micro in (0, 7):
        ppo = _rollout(policy_cfg, PPOCfg(num_mini_batches=1, num_learning_epochs=1, micro_batch_size=micro))
        torch.manual_seed(3)
        batch = next(iter(ppo.storage.mini_batches(1, 1)))
        stats = ppo._update_mini_batch(batch)
        results.append((stats, {k: v.clone() for k, v in ppo.policy.state_dict().items()}, ppo.learning_rate))
    (s0, p0, lr0), (s1, p1, lr1) = results
    for key in p0:
        torch.testing.assert_close(p1[key], p0[key], atol=1e-6, rtol=1e-5, msg=key)
    for key in ("surrogate", "value", "kl", "entropy"):
        torch.testing.assert_close(s1[key], s0[key], atol=1e-6, rtol=1e-5)
    assert lr0 == lr1


def test_default_micro_batches_follow_the_activation_budget():
    from rslkit.algorithms.ppo import MICRO_BATCH_BYTES

    small = _rollout(PolicyCfg(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64)), PPOCfg())
    wide_cfg = PolicyCfg(actor_hidden_dims=(256,) * 3, critic_hidden_dims=(256,) * 3)
    wide = _rollout(wide_cfg, PPOCfg(), steps=8, num_envs=1024)
    assert small._default_micro_batch_size() >= 24576  # the benchmark's 64-64 mini-batches stay whole
    assert wide._default_micro_batch_size() == MICRO_BATCH_BYTES // (4 * 2 * 1536) == 5461
    batch = next(iter(wide.storage.mini_batches(1, 1)))
    assert [b.advantages.shape[0] for b in wide._micro_batches(batch)] == [5461, 8192 - 5461]
    wide.cfg.micro_batch_size = 0
    assert len(wide._micro_batches(batch)) == 1


@pytest.mark.parametrize("rnn_type", ["none", "gru"])
def test_parallel_update_gives_the_same_update(rnn_type):
    # Actor and critic losses backpropagated on two threads: exactly the gradients of the joint loss.
    policy_cfg = PolicyCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,), rnn_type=rnn_type, rnn_hidden_dim=8)
    results = []
    for parallel in (False, True):
        ppo = _rollout(policy_cfg, PPOCfg(num_mini_batches=2, num_learning_epochs=2, parallel_update=parallel))
        torch.manual_seed(3)
        torch.set_num_threads(2)
        try:
            stats = ppo.update()
            assert torch.get_num_threads() == 2  # the update restores the caller's thread count
        finally:
            torch.set_num_threads(1)
        results.append((stats, {k: v.clone() for k, v in ppo.policy.state_dict().items()}))
    (s0, p0), (s1, p1) = results
    for key in p0:
        torch.testing.assert_close(p1[key], p0[key], atol=0, rtol=0, msg=key)
    assert s0 == s1


def test_parallel_update_is_refused_on_gpu_devices():
    ppo = _rollout(PolicyCfg(actor_hidden_dims=(8,), critic_hidden_dims=(8,)), PPOCfg(parallel_update=True))
    ppo.device = torch.device("cuda")
    with pytest.raises(ValueError, match="two CPU threads"):
        ppo._use_parallel_update(2)
