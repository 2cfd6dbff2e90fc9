"""Cart-pole swing-up: physics against Gymnasium's equations, walls, dm_control reward, bookkeeping and learning."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rslkit.envs import make_env
from rslkit.envs.tasks.cartpole_swingup import CartpoleSwingupCfg, CartpoleSwingupTask

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TERMS = ("upright", "centered", "small_control", "small_velocity", "wall")


def _random_actions(num_envs: int, steps: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(steps, num_envs, 1, generator=g) * 2.4 - 1.2


def _rollout(env: CartpoleSwingupTask, actions: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    out = []
    for a in actions:
        obs, rew, dones, extras = env.step(a.to(env.device))
        out.append((obs["policy"].cpu(), rew.cpu(), dones.cpu(), extras["time_outs"].cpu()))
    return out


def _assert_same(a: list[tuple[torch.Tensor, ...]], b: list[tuple[torch.Tensor, ...]]) -> None:
    for step_a, step_b in zip(a, b, strict=True):
        for x, y in zip(step_a, step_b, strict=True):
            assert torch.equal(x, y)


@pytest.mark.parametrize("device", DEVICES)
def test_shapes_and_initial_state(device: str) -> None:
    env = CartpoleSwingupTask(CartpoleSwingupCfg(num_envs=16), device)
    assert isinstance(env.action_space, gym.spaces.Box) and env.action_space.shape == (1,) and env.num_actions == 1
    obs = env.get_observations()["policy"]
    assert obs.shape == (16, 5) and obs.device.type == device
    assert bool((obs[:, 2] < -0.99).all())  # cos theta: hanging down
    assert bool((obs[:, [0, 1, 4]].abs() <= 0.05).all())
    obs, rew, dones, extras = env.step(torch.zeros(16, 1, device=device))
    assert rew.shape == (16,) and dones.shape == (16,) and extras["time_outs"].shape == (16,)
    assert bool((rew >= 0).all()) and bool((rew < 0.01).all())  # hanging: almost no reward


def test_physics_matches_gymnasium_semi_implicit() -> None:
    """Two 0.01 s semi-implicit steps of Gymnasium's CartPole at +-force_mag equal one control step here."""
    n = 6
    env = CartpoleSwingupTask(CartpoleSwingupCfg(num_envs=n, seed=2))
    refs = []
    for i in range(n):
        ref = gym.make("CartPole-v1").unwrapped
        ref.reset(seed=i)
        ref.kinematics_integrator, ref.tau, ref.x_threshold = "semi-implicit", 0.01, 1e9
        ref.state = env.state[i].double().numpy().copy()
        refs.append(ref)
    g = torch.Generator().manual_seed(0)
    for _ in range(25):
        push = torch.randint(0, 2, (n,), generator=g)
        obs, _, _, _ = env.step((push.float() * 2 - 1).unsqueeze(-1))
        for i, ref in enumerate(refs):
            ref.steps_beyond_terminated = None  # the pole is far past CartPole's termination angle
            ref.step(int(push[i]))
            ref.steps_beyond_terminated = None
            x, x_dot, theta, theta_dot = ref.step(int(push[i]))[0]
            expected = np.array([x, x_dot, math.cos(theta), math.sin(theta), theta_dot])
            np.testing.assert_allclose(obs["policy"][i].numpy(), expected, atol=1e-4, rtol=1e-5)


def test_reward_is_dm_control_product_logged_per_term() -> None:
    env = CartpoleSwingupTask(CartpoleSwingupCfg(num_envs=3, episode_length=1))
    env.state.zero_()  # upright, centered, at rest
    env.state[1] = torch.tensor([1.0, 0.0, 0.5, 2.0])
    env.state[2, 2] = math.pi
    actions = torch.tensor([[0.0], [0.6], [0.0]])
    _, rew, _, extras = env.step(actions)
    assert rew[0].item() == pytest.approx(1.0, abs=1e-3)  # upright and still: full reward
    assert rew[2].item() == pytest.approx(0.0, abs=1e-3)  # hanging: none
    assert rew[1].item() < rew[0].item()
    assert set(extras["log"]) == {f"Episode_Reward/{t}" for t in TERMS}
    total = sum(extras["log"][f"Episode_Reward/{t}"] for t in TERMS)
    assert total.item() == pytest.approx(rew.mean().item(), abs=1e-6)


def test_reward_formula() -> None:
    env = CartpoleSwingupTask(CartpoleSwingupCfg(num_envs=1))
    env.state[0] = torch.tensor([1.0, 0.0, 0.5, 2.0])
    a = torch.tensor([[0.6]])
    terms = env._reward_terms(a)
    upright = (math.cos(0.5) + 1) / 2
    centered = (1 + 0.1 ** ((1.0 / 2.0) ** 2)) / 2
    small_control = (4 + (1 - 0.6**2)) / 5
    small_velocity = (1 + 0.1 ** ((2.0 / 5.0) ** 2)) / 2
    total = sum(t.item() for t in terms.values())
    assert total == pytest.approx(upright * centered * small_control * small_velocity, rel=1e-5)
    assert terms["upright"].item() == pytest.approx(upright, rel=1e-6)
    assert all(terms[t].item() <= 0 for t in TERMS[1:])


def test_wall_stops_cart_and_kicks_pole() -> None:
    cfg = CartpoleSwingupCfg(num_envs=2, force_mag=0.0)
    env = CartpoleSwingupTask(cfg)
    env.state[0] = torch.tensor([2.395, 2.0, 0.0, 0.0])
    env.state[1] = torch.tensor([0.0, 0.0, 0.0, 0.0])
    _, rew, dones, extras = env.step(torch.zeros(2, 1))
    x, x_dot, theta, theta_dot = env.state[0]
    assert x.item() == pytest.approx(cfg.x_threshold) and abs(x_dot.item()) < 0.1
    # Stopping the cart (dx_dot = -2) tips the upright pole forward: theta_dot += 3 * 2 / (4 * 0.5) = 3.
    assert theta_dot.item() == pytest.approx(3.0, abs=0.1)
    assert not bool(dones.any())
    assert env._reward_terms(torch.zeros(2, 1))["wall"].tolist() == pytest.approx([-cfg.wall_weight, 0.0])
    assert rew[0] < rew[1]


def test_time_outs_no_termination() -> None:
    env = CartpoleSwingupTask(CartpoleSwingupCfg(num_envs=8, episode_length=40))
    actions = torch.ones(40, 8, 1) * 5.0  # full force into the wall
    for t, a in enumerate(actions):
        _, _, dones, extras = env.step(a)
        if t < 39:
            assert not bool(dones.any())
    assert bool(extras["time_outs"].all()) and bool(dones.all())
    assert extras["log"]["Episode_Reward/wall"].item() < 0
    assert bool((env.get_observations()["policy"][:, 2] < -0.99).all())  # reset to hanging


def test_seeded_determinism() -> None:
    cfg = dict(num_envs=16, episode_length=50)
    actions = _random_actions(16, 120)
    a = _rollout(CartpoleSwingupTask(CartpoleSwingupCfg(seed=5, **cfg)), actions)
    b = _rollout(CartpoleSwingupTask(CartpoleSwingupCfg(seed=5, **cfg)), actions)
    _assert_same(a, b)
    c = _rollout(CartpoleSwingupTask(CartpoleSwingupCfg(seed=6, **cfg)), actions)
    assert not torch.equal(a[0][0], c[0][0])


def test_state_dict_round_trip() -> None:
    cfg = dict(num_envs=16, episode_length=30)
    env = CartpoleSwingupTask(CartpoleSwingupCfg(seed=1, **cfg))
    _rollout(env, _random_actions(16, 45, seed=2))
    state = env.state_dict()
    later = _random_actions(16, 60, seed=3)
    expected = _rollout(env, later)
    other = CartpoleSwingupTask(CartpoleSwingupCfg(seed=42, **cfg))
    other.load_state_dict(state)
    _assert_same(_rollout(other, later), expected)


def test_registered() -> None:
    env = make_env("cartpole-swingup", num_envs=4)
    assert isinstance(env, CartpoleSwingupTask) and env.max_episode_length == 500


@pytest.mark.slow
def test_ppo_learns_to_swing(tmp_path, learn_until) -> None:
    """Default config, seed 0: a random policy (N(0, 1) actions) returns ~28, a swinging one >= 80 (36 iterations,
    ~10 s; balancing, >= 200, takes 50-70).

    Measured on seeds 0-5, each with AVX-512 and AVX2 kernels: return >= 80 first at iterations 10-25 (seed 0: 12),
    91-124 at 30; slow runs sit at 70-80 for a while, so the test leaves them 11 more iterations.
    """
    returns = learn_until("cartpole-swingup", tmp_path, lambda curve: max(curve, default=0) >= 80, max_iterations=36)
    assert max(returns) >= 80, [round(r) for r in returns]
