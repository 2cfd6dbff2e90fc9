"""pi_RL's Flow-SDE chain: its one stochastic step's log-probability against hand-computed Gaussians, zero noise is
the deterministic sampler, and ReinFlow's PPO runs on it (first ratio 1) for state and VLA policies."""

import math

import pytest
import torch
from torch.distributions import Normal

from rslkit.algorithms.reinflow import ReinFlowCfg, make_chain
from rslkit.models.flow import FlowPolicy, FlowPolicyCfg, FlowSDEChain
from rslkit.utils.validation import ConfigError
from tests.algorithms.test_reinflow import _rollout
from tests.algorithms.test_vla_reinflow import _obs, _policy
from tests.runners.instructed_point import InstructedPointEnv


class _LinearField(torch.nn.Module):
    """A one-number chain policy with the velocity ``u = 2 - x`` (towards the data point 2)."""

    obs_dim, horizon, action_dim = 1, 1, 1

    def chain_context(self, inputs):
        return inputs

    def chain_velocity(self, x, t, context, num_steps):
        return 2.0 - x


def _record(k, step, chain_values):
    values = torch.tensor([float(step), *chain_values]).view(1, k + 2, 1, 1)
    return values


def test_log_prob_of_a_two_step_chain_by_hand():
    """K = 2, a = 0.5, D = 0.5. Step 0 (pi_RL time s = 1, 1 - s taken as D): sigma = 0.5 sqrt(1 / 0.5), std = 0.5,
    x0_hat = x + u, x1_hat = x, mean = 0.5 x0_hat + (0.5 - 0.5^2 * 2 * 0.5 / 2) x1_hat = 0.5 (x + u) + 0.375 x.
    Step 1 (s = 0.5): sigma = 0.5, std = sqrt(0.5) 0.5, x0_hat = x + 0.5 u, x1_hat = x - 0.5 u,
    mean = x0_hat + (0 - 0.25 * 0.5 / 1) x1_hat."""
    chain = FlowSDEChain(_LinearField(), 2, noise_level=0.5)
    obs = torch.zeros(1, 1)
    # j = 0 from a_0 = 0.4 (u = 1.6): mean 0.5 * 2.0 + 0.375 * 0.4 = 1.15, std 0.5; a_1 = 1.0 is drawn there
    log_prob, entropy = chain.log_prob(obs, _record(2, 0, [0.4, 1.0, 1.5]))
    torch.testing.assert_close(log_prob, Normal(1.15, 0.5).log_prob(torch.tensor([1.0])))
    torch.testing.assert_close(entropy, Normal(1.15, 0.5).entropy().view(1))
    # j = 1 from a_1 = 1.0 (u = 1.0): x0_hat 1.5, x1_hat 0.5, mean 1.5 - 0.125 * 0.5 = 1.4375, std sqrt(0.5) / 2
    log_prob, _ = chain.log_prob(obs, _record(2, 1, [0.4, 1.0, 1.3]))
    torch.testing.assert_close(log_prob, Normal(1.4375, math.sqrt(0.5) / 2).log_prob(torch.tensor([1.3])))
    normalized, _ = chain.normalized_log_prob(obs, _record(2, 1, [0.4, 1.0, 1.3]))
    torch.testing.assert_close(normalized, log_prob)  # Ta A = 1


def _flow_policy(k):
    torch.manual_seed(0)
    return FlowPolicy(3, 2, FlowPolicyCfg(horizon=2, num_inference_steps=k, hidden_dim=32, num_blocks=1))


@pytest.mark.parametrize("k", [1, 2, 4])
def test_log_prob_matches_pi_rl_formula_in_its_own_time(k):
    """Sampled records: the ODE before and after step j, and log N at j written in pi_RL's convention
    (time s = 1 - t, velocity v = -u, 1 - s taken as the next grid time at s = 1)."""
    policy = _flow_policy(k)
    chain = FlowSDEChain(policy, k, noise_level=0.5)
    obs = torch.randn(8, 3)
    record = chain.sample(obs)
    assert record.shape == (8, k + 2, 2, 2) and chain.chain_dim == (k + 2) * 4
    j = chain.stochastic_step(record)
    timesteps = torch.cat((torch.linspace(1, 1 / k, k), torch.zeros(1)))
    safe = torch.where(timesteps == 1, timesteps[1], timesteps)
    sigmas = 0.5 * torch.sqrt(timesteps / (1 - safe))[:-1]
    expected = torch.zeros(8)
    for i in range(8):
        a = record[i, 1:]
        for step in range(k):
            t = torch.full((1,), step / k)
            u = policy.velocity(a[step : step + 1], t, obs[i : i + 1], k)
            if step != int(j[i]):
                torch.testing.assert_close(a[step + 1 : step + 2], a[step : step + 1] + u / k)
                continue
            s, d, sig, v = timesteps[step], timesteps[step] - timesteps[step + 1], sigmas[step], -u
            x0_pred, x1_pred = a[step] - v * s, a[step] + v * (1 - s)
            mean = x0_pred * (1 - (s - d)) + x1_pred * (s - d - sig**2 * d / (2 * s))
            expected[i] = Normal(mean, torch.sqrt(d) * sig).log_prob(a[step + 1]).sum()
    log_prob, _ = chain.log_prob(obs, record)
    torch.testing.assert_close(log_prob, expected)


@pytest.mark.parametrize("k", [1, 3, 4])
def test_zero_noise_is_the_deterministic_sampler(k):
    policy = _flow_policy(k)
    obs, x0 = torch.randn(6, 3), torch.randn(6, 2, 2)
    ode = policy.sample_normalized(obs, x0, k)
    silent = FlowSDEChain(policy, k, noise_level=0.0).sample(obs, x0=x0)
    torch.testing.assert_close(silent[:, -1], ode, rtol=1e-6, atol=1e-6)  # the SDE mean at sigma 0 is the Euler step
    noisy = FlowSDEChain(policy, k, noise_level=0.5)
    assert torch.equal(noisy.sample(obs, deterministic=True, x0=x0)[:, -1], ode)
    assert torch.equal(noisy.deterministic_actions(obs, x0), ode)
    with pytest.raises(ValueError, match="noise_level > 0"):
        FlowSDEChain(policy, k, noise_level=0.0).log_prob(obs, silent)


def test_reinflow_with_flow_sde_has_first_ratio_one_and_learns():
    cfg = ReinFlowCfg(critic_hidden_dims=(32,), num_mini_batches=2, num_learning_epochs=2, clip_param=0.05,
                      noise_method="flow_sde", critic_warmup_iterations=0)  # fmt: skip
    alg = _rollout(2, cfg)
    assert isinstance(alg.chain, FlowSDEChain)
    before = {k: v.clone() for k, v in alg.chain.state_dict().items()}
    stats = alg.update()
    assert stats["first_ratio"] == 1.0 and stats["first_ratio_max_dev"] == 0.0
    assert not all(torch.equal(v, alg.chain.state_dict()[k]) for k, v in before.items())
    assert math.isfinite(stats["surrogate"])


def test_flow_sde_on_a_vla_policy():
    policy = _policy(3)
    chain = make_chain(policy, ReinFlowCfg(noise_method="flow_sde", noise_level=0.5))
    assert isinstance(chain, FlowSDEChain)
    inputs = policy.normalize_inputs(_obs(InstructedPointEnv(num_envs=5, seed=1)))
    x0 = torch.randn(5, 4, 2)
    with torch.no_grad():
        assert torch.equal(
            chain.sample(inputs, deterministic=True, x0=x0)[:, -1], chain.deterministic_actions(inputs, x0)
        )
        torch.testing.assert_close(chain.deterministic_actions(inputs, x0), policy.sample_normalized(inputs, x0, 3))
        record = chain.sample(inputs, x0=x0)
        log_prob, entropy = chain.log_prob(inputs, record)
    assert log_prob.shape == (5,) and torch.isfinite(log_prob).all() and torch.isfinite(entropy).all()


@pytest.mark.parametrize(("field", "value"), [("noise_method", "flow_ode"), ("noise_level", 0.0)])
def test_config_names_the_flag(field, value):
    cfg = ReinFlowCfg(**{field: value})
    with pytest.raises(ConfigError, match=field):
        cfg.check()
