"""ReinFlow over a VLA policy: the noisy chain's exact log-likelihood over observation tokens, its deterministic path
(the VLA sampler), the first PPO ratio, and the asymmetric critic on a privileged group."""

import pytest
import torch
from tensordict import TensorDict
from torch.distributions import Normal

from rslkit.algorithms.reinflow import ReinFlowCfg, make_chain
from rslkit.algorithms.reinflow_vla import VLAReinFlow
from rslkit.envs.action_chunk import ActionChunkWrapper
from rslkit.models.flow import BoundedNoiseNet, FlowPolicy, FlowPolicyCfg, NoisyFlowChain
from rslkit.models.vla import INSTRUCTION_GROUP, VLAPolicy, VLAPolicyCfg
from tests.runners.instructed_point import TARGETS, InstructedPointEnv

SMALL = dict(d_model=32, num_heads=4, num_layers=2, cnn_channels=(8, 16), token_grid=2, time_embed_dim=16)
EMBEDDINGS = torch.randn(2, 8, generator=torch.Generator().manual_seed(3))
"""A fixed raw "sentence embedding" per instruction (no text encoder needed here)."""


def _policy(k: int = 3, objective: str = "rectified_flow") -> VLAPolicy:
    torch.manual_seed(0)
    cfg = VLAPolicyCfg(cameras=("front",), image_size=(16, 16), language_dim=8, horizon=4, num_inference_steps=k,
                       objective=objective, **SMALL)  # fmt: skip
    policy = VLAPolicy(2, 2, cfg)
    policy.obs_normalizer.set_stats(-torch.ones(2), torch.ones(2))
    policy.action_normalizer.set_stats(-torch.ones(2), torch.ones(2))
    policy.set_instruction_stats(EMBEDDINGS)
    return policy


def _obs(env: InstructedPointEnv) -> TensorDict:
    """The env's groups plus the instruction embedding and a privileged ``critic`` group (position and target)."""
    obs = env.get_observations().clone(recurse=False)
    obs.set(INSTRUCTION_GROUP, EMBEDDINGS[obs["goal"]])
    obs.set("critic", torch.cat((obs["policy"], TARGETS[obs["goal"]]), -1))
    return obs


def _noisy_chain(k: int, objective: str = "rectified_flow") -> NoisyFlowChain:
    policy = _policy(k, objective)
    noise = BoundedNoiseNet(policy.noise_feature_dim, 4, 2, 0.1, 0.3, hidden_dims=(16,))
    for p in noise.mlp.parameters():  # leave the neutral start so sigma varies across inputs
        torch.nn.init.normal_(p, std=0.5)
    return NoisyFlowChain(policy, k, noise_net=noise)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("objective", ["rectified_flow", "shortcut"])
def test_vla_chain_log_prob_is_the_sum_of_its_gaussian_steps(k, objective):
    chain = _noisy_chain(k, objective)
    inputs = chain.policy.normalize_inputs(_obs(InstructedPointEnv(num_envs=5, seed=1)))
    samples = chain.sample(inputs)
    assert samples.shape == (5, k + 1, 4, 2)
    log_prob, entropy = chain.log_prob(inputs, samples)
    tokens = chain.policy.conditioning(inputs)
    pooled = tokens.mean(1)
    expected = Normal(0.0, 1.0).log_prob(samples[:, 0]).sum((1, 2))
    expected_entropy = torch.zeros(5)
    for step in range(k):
        t = torch.full((5,), step / k)
        x = samples[:, step]
        d = torch.full((5,), 1.0 / k) if objective == "shortcut" else None
        step_dist = Normal(x + chain.policy.net(x, t, tokens, d) / k, chain.noise_net(x, t, pooled))
        expected += step_dist.log_prob(samples[:, step + 1]).sum((1, 2))
        expected_entropy += step_dist.entropy().sum((1, 2))
    torch.testing.assert_close(log_prob, expected)
    torch.testing.assert_close(entropy, expected_entropy)
    normalized, _ = chain.normalized_log_prob(inputs, samples)
    torch.testing.assert_close(normalized, expected / ((k + 1) * 4 * 2))


@pytest.mark.parametrize("k", [1, 4])
def test_the_mean_chain_is_the_vla_sampler(k):
    policy = _policy(k)
    chain = make_chain(policy, ReinFlowCfg(sigma_min=1e-6, sigma_max=0.2, noise_hidden_dims=(16,)))
    assert chain.noise_net is not None
    last = chain.noise_net.mlp[-1]
    torch.nn.init.constant_(last.bias, -50.0)  # tanh saturates at -1: every sigma is sigma_min
    inputs = policy.normalize_inputs(_obs(InstructedPointEnv(num_envs=6, seed=2)))
    x0 = torch.randn(6, 4, 2)
    with torch.no_grad():
        deterministic = chain.sample(inputs, deterministic=True, x0=x0)
        ode = policy.sample_normalized(inputs, x0, k)
        noisy = chain.sample(inputs, x0=x0)
        _, log_var = chain.transitions(inputs, noisy)
    torch.testing.assert_close(deterministic[:, -1], ode, rtol=0, atol=0)  # the same graph: bit for bit
    torch.testing.assert_close(torch.exp(0.5 * log_var), torch.full_like(log_var, 1e-6))
    torch.testing.assert_close(noisy, deterministic, rtol=0, atol=1e-4)


def _rollout(k: int = 2, steps: int = 4, **cfg_kw) -> VLAReinFlow:
    policy = _policy(k)
    env = InstructedPointEnv(num_envs=8, seed=0)
    cfg = ReinFlowCfg(critic_hidden_dims=(32,), noise_hidden_dims=(16,), num_mini_batches=2, num_learning_epochs=2,
                      clip_param=0.05, **cfg_kw)  # fmt: skip
    alg = VLAReinFlow(make_chain(policy, cfg), cfg, steps, _obs(env), "critic")
    chunk_env = ActionChunkWrapper(env, 4, cfg.gamma)
    with torch.inference_mode():
        for _ in range(steps):
            _, rewards, dones, extras = chunk_env.step(alg.act(_obs(env)))
            alg.process_env_step(rewards, dones, extras)
        alg.compute_returns(_obs(env))
    return alg


def test_first_ratio_is_exactly_one_and_the_rollout_keeps_what_the_actor_reads():
    alg = _rollout()
    assert set(alg.storage.obs.keys()) == {"policy", INSTRUCTION_GROUP, "camera_front", "critic"}
    assert alg.storage.obs["camera_front"].dtype == torch.uint8
    batch = next(iter(alg.storage.mini_batches(2, 1)))
    log_prob, _ = alg.chain.normalized_log_prob(alg.normalized_obs(batch.obs), batch.actions.view(-1, 3, 4, 2))
    assert torch.equal(log_prob, batch.log_probs)  # same function, same tokens, same grid: bit-identical
    stats = alg.update()
    assert stats["first_ratio"] == 1.0 and stats["first_ratio_max_dev"] == 0.0
    assert stats["mini_batches"] == 4


def test_the_critic_reads_the_privileged_group_with_its_own_statistics():
    alg = _rollout(w2_coef=1.0)
    assert alg.critic_normalizer is not None and float(alg.critic_normalizer.count) == 4 * 8  # every decision
    first = alg.critic[1][0]
    assert isinstance(first, torch.nn.Linear) and first.in_features == 4  # position and target, not the camera
    actor = {k: v.clone() for k, v in alg.chain.state_dict().items()}
    alg.update(update_actor=False)  # critic warm-up: the actor stays the pretrained policy
    assert all(torch.equal(v, alg.chain.state_dict()[k]) for k, v in actor.items())
    obs = alg.storage.obs[0]
    value = alg.value(obs)
    torch.testing.assert_close(value, alg.critic[1](alg.critic_normalizer(obs["critic"])).squeeze(-1))
    assert 0.1 <= alg.mean_sigma(obs) <= 0.24


def test_bad_inputs_are_refused():
    cfg = ReinFlowCfg()
    env = InstructedPointEnv(num_envs=2)
    flow = FlowPolicy(2, 2, FlowPolicyCfg(horizon=4, hidden_dim=16, num_blocks=1))
    with pytest.raises(ValueError, match="fine-tunes a VLAPolicy"):
        VLAReinFlow(make_chain(flow, cfg), cfg, 2, _obs(env), "critic")
    chain = make_chain(_policy(), cfg)
    with pytest.raises(ValueError, match=r"\['camera_front'\] missing"):
        VLAReinFlow(chain, cfg, 2, _obs(env).exclude("camera_front"), "critic")
    with pytest.raises(ValueError, match="critic reads the observation group 'state'"):
        VLAReinFlow(chain, cfg, 2, _obs(env), "state")
