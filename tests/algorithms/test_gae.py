"""GAE against hand-computed values, including terminations and time-outs."""

import torch

from rslkit.algorithms.gae import compute_gae


def test_gae_matches_hand_computation():
    gamma, lam = 0.9, 0.8
    # One env, three steps; the episode terminates after step 1 (index 1).
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    dones = torch.tensor([[False], [True], [False]])
    last = torch.tensor([2.0])
    adv, ret = compute_gae(rewards, values, dones, last, gamma, lam)
    d2 = 3.0 + gamma * 2.0 - 1.5  # bootstrap from V(s_3)
    d1 = 2.0 - 1.0  # terminal: no bootstrap
    d0 = 1.0 + gamma * 1.0 - 0.5
    a2 = d2
    a1 = d1  # trace cut at the termination
    a0 = d0 + gamma * lam * a1
    torch.testing.assert_close(adv[:, 0], torch.tensor([a0, a1, a2]))
    torch.testing.assert_close(ret, adv + values)


def test_time_out_bootstrapping_in_ppo_reward():
    """A time-out adds gamma * V(s_t) to the reward; GAE then cuts the trace (rsl_rl convention)."""
    from rslkit.algorithms.ppo import PPO, PPOCfg
    from rslkit.envs import make_env
    from rslkit.models.actor_critic import ActorCritic, PolicyCfg

    env = make_env("pendulum", num_envs=4)
    obs = env.get_observations()
    policy = ActorCritic(obs, 1, PolicyCfg(actor_hidden_dims=(8,), critic_hidden_dims=(8,)))
    ppo = PPO(policy, PPOCfg(gamma=0.9), num_steps=1, obs=obs, device="cpu")
    with torch.inference_mode():
        ppo.act(obs)
        value = ppo._pending[3].clone()
        rewards = torch.ones(4)
        time_outs = torch.tensor([True, False, True, False])
        ppo.process_env_step(rewards, time_outs.clone(), {"time_outs": time_outs})
    expected = rewards + 0.9 * value * time_outs
    torch.testing.assert_close(ppo.storage.rewards[0], expected)
    assert ppo.storage.dones[0].tolist() == [True, False, True, False]
