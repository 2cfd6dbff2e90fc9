"""ReinFlow's noisy chain: exact log-likelihood, bounded noise, and the deterministic path."""

import math

import pytest
import torch
from torch.distributions import Normal

from rslkit.models.flow import BoundedNoiseNet, FlowPolicy, FlowPolicyCfg, NoisyFlowChain


def _chain(k=4, objective="rectified_flow", sigma=(0.1, 0.24)):
    torch.manual_seed(0)
    policy = FlowPolicy(3, 2, FlowPolicyCfg(horizon=2, hidden_dim=32, num_blocks=1, objective=objective))
    noise = BoundedNoiseNet(3, 2, 2, *sigma, hidden_dims=(16,))
    for p in noise.mlp.parameters():  # leave the neutral start so sigma varies across inputs
        torch.nn.init.normal_(p, std=0.5)
    return NoisyFlowChain(policy, k, noise_net=noise)


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("objective", ["rectified_flow", "shortcut"])
def test_log_prob_matches_torch_distributions(k, objective):
    chain = _chain(k, objective)
    obs = torch.randn(6, 3)
    samples = chain.sample(obs)
    assert samples.shape == (6, k + 1, 2, 2)
    log_prob, entropy = chain.log_prob(obs, samples)
    expected = Normal(0.0, 1.0).log_prob(samples[:, 0]).sum((1, 2))
    expected_entropy = torch.zeros(6)
    d = torch.full((6,), 1.0 / k)
    for step in range(k):
        t = torch.full((6,), step / k)
        x = samples[:, step]
        velocity = chain.policy.net(x, t, obs, d if objective == "shortcut" else None)
        step_dist = Normal(x + velocity / k, chain.noise_net(x, t, obs))
        expected += step_dist.log_prob(samples[:, step + 1]).sum((1, 2))
        expected_entropy += step_dist.entropy().sum((1, 2))
    torch.testing.assert_close(log_prob, expected)
    torch.testing.assert_close(entropy, expected_entropy)
    normalized, normalized_entropy = chain.normalized_log_prob(obs, samples)
    torch.testing.assert_close(normalized, expected / ((k + 1) * 4))
    torch.testing.assert_close(normalized_entropy, expected_entropy / (k * 4))


def test_sigma_stays_within_bounds():
    chain = _chain(sigma=(0.05, 0.3))
    for p in chain.noise_net.parameters():
        p.data.mul_(100)  # saturate the network
    x, obs = torch.randn(512, 2, 2) * 100, torch.randn(512, 3) * 100
    sigma = chain.noise_net(x, torch.rand(512), obs)
    assert sigma.min() >= 0.05 * (1 - 1e-5) and sigma.max() <= 0.3 * (1 + 1e-5)
    assert sigma.min() < 0.06 and sigma.max() > 0.29  # both bounds are reached, not just approached by chance
    fresh = BoundedNoiseNet(3, 2, 2, 0.1, 0.4)
    sigma0 = fresh(torch.randn(4, 2, 2), torch.rand(4), torch.randn(4, 3))
    torch.testing.assert_close(sigma0, torch.full_like(sigma0, math.sqrt(0.1 * 0.4)))
    with pytest.raises(ValueError, match="sigma_min <= sigma_max"):
        BoundedNoiseNet(3, 2, 2, 0.3, 0.1)


@pytest.mark.parametrize("k", [1, 4, 10])
def test_deterministic_path_is_the_pretrained_ode(k):
    chain = _chain(k)
    obs, x0 = torch.randn(8, 3), torch.randn(8, 2, 2)
    deterministic = chain.sample(obs, deterministic=True, x0=x0)
    assert torch.equal(deterministic[:, 0], x0)
    torch.testing.assert_close(deterministic[:, -1], chain.policy.sample_normalized(obs, x0, k), atol=0, rtol=0)
    torch.testing.assert_close(chain.deterministic_actions(obs, x0), deterministic[:, -1])


def test_fixed_noise_chain():
    policy = FlowPolicy(3, 2, FlowPolicyCfg(horizon=2, hidden_dim=16, num_blocks=1))
    chain = NoisyFlowChain(policy, 10, fixed_sigma=0.2)
    obs = torch.randn(4, 3)
    samples = chain.sample(obs)
    _, entropy = chain.log_prob(obs, samples)
    torch.testing.assert_close(
        entropy, torch.full((4,), 10 * 4 * (0.5 * math.log(2 * math.pi * math.e) + math.log(0.2)))
    )
    with pytest.raises(ValueError, match="either a noise network or a fixed sigma"):
        NoisyFlowChain(policy, 4)
    with pytest.raises(ValueError, match="Stored chains have 10 steps"):
        NoisyFlowChain(policy, 4, fixed_sigma=0.2).log_prob(obs, samples)
