"""PPO symmetry: augmentation doubles a mini-batch with its mirror image, the mirror loss is zero for a symmetric
policy (and stays zero through augmented updates), user mirrors load as plug-ins, bad settings are refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rslkit.algorithms.ppo import PPO, PPOCfg
from rslkit.algorithms.symmetry import SymmetryCfg, augment, make_mirror, mirror_loss
from rslkit.envs import make_env
from rslkit.envs.mirror import ColumnMirror
from rslkit.models.actor_critic import ActorCritic, PolicyCfg
from rslkit.utils.validation import ConfigError, validate
from tests.algorithms.test_staleness import _collect

PLUGIN = "tests.algorithms.test_symmetry:pendulum_mirror"


def pendulum_rule(name: str) -> tuple[str, float]:
    """The pendulum's mirror theta -> -theta: sin, angular velocity and torque change sign."""
    return name, -1.0 if name in ("sin_theta", "theta_dot", "torque_normalized") else 1.0


def pendulum_mirror(env: Any) -> ColumnMirror:
    """A user's mirror factory, loaded by name (``module:attribute``)."""
    return ColumnMirror(env.observation_names, env.action_names, pendulum_rule)


def rsl_rl_style_mirror(env: Any, obs: Any = None, actions: Any = None) -> tuple[Any, Any]:
    """An rsl_rl / Isaac Lab ``data_augmentation_func``: originals followed by their mirror images."""
    sign = torch.tensor([1.0, -1.0, -1.0])
    obs_out = None if obs is None else torch.cat((obs, obs.apply(lambda x: x * sign)))
    return obs_out, None if actions is None else torch.cat((actions, -actions))


def _symmetry(**kw: Any) -> SymmetryCfg:
    return SymmetryCfg(data_augmentation_func=PLUGIN, **kw)


def _rollout(sym: SymmetryCfg, symmetric_actor: bool = False, steps: int = 8, **ppo: Any) -> PPO:
    """A pendulum rollout of a PPO with ``sym``; ``symmetric_actor``: a linear actor with pi(-s) = -pi(s)."""
    torch.manual_seed(0)
    env = make_env("pendulum", num_envs=16, episode_length=5)
    obs = env.get_observations()
    policy_cfg = PolicyCfg(actor_hidden_dims=(), critic_hidden_dims=(16,), obs_normalization=False)
    policy = ActorCritic(obs, env.num_actions, policy_cfg)
    layer = policy.actor[-1]
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.5, -0.7, 0.3]]))
        layer.bias.fill_(0.2)
        if symmetric_actor:  # W <- (W + M_a W M_o) / 2, b <- (b + M_a b) / 2
            layer.weight[:, 0] = 0.0
            layer.bias.zero_()
    cfg = PPOCfg(num_mini_batches=2, num_learning_epochs=2, symmetry_cfg=sym, **ppo)
    ppo = PPO(policy, cfg, steps, obs, "cpu", mirror=make_mirror(sym, env) if sym.enabled else None)
    _collect(ppo, env, steps)
    return ppo


def test_augmentation_doubles_the_batch_with_mirrored_samples() -> None:
    ppo = _rollout(_symmetry(use_data_augmentation=True))
    batch = next(iter(ppo.storage.mini_batches(2, 1)))
    n = batch.advantages.shape[0]
    doubled = augment(batch, ppo.mirror)  # type: ignore[arg-type]
    assert doubled.obs.batch_size[0] == doubled.actions.shape[0] == 2 * n
    sign = torch.tensor([1.0, -1.0, -1.0])
    torch.testing.assert_close(doubled.obs["policy"][:n], batch.obs["policy"], atol=0, rtol=0)
    torch.testing.assert_close(doubled.obs["policy"][n:], batch.obs["policy"] * sign, atol=0, rtol=0)
    torch.testing.assert_close(doubled.actions[n:], -batch.actions, atol=0, rtol=0)
    for name in ("log_probs", "values", "returns", "advantages", "versions"):
        x, y = getattr(batch, name), getattr(doubled, name)
        assert torch.equal(y, torch.cat((x, x))), name
    assert all(p is q for p, q in zip(doubled.dist_params, batch.dist_params))  # KL over the original samples


def test_mirror_loss_is_zero_for_a_symmetric_policy_and_not_otherwise() -> None:
    for symmetric in (True, False):
        ppo = _rollout(_symmetry(use_data_augmentation=True), symmetric_actor=symmetric)
        obs = ppo.storage.obs.flatten(0, 1)
        actor = ppo.policy.actor
        with torch.no_grad():
            loss = mirror_loss(actor(ppo.mirror.observations(obs)["policy"]), actor(obs["policy"]), ppo.mirror)  # type: ignore[union-attr]
        assert (float(loss) < 1e-12) if symmetric else (float(loss) > 1e-3)


def test_augmented_gradients_of_a_symmetric_policy_are_symmetric() -> None:
    # Mirrored samples give mirrored gradients: the components that would break pi(-s) = -pi(s) (the weight on
    # cos theta, the bias) cancel, and the logged mirror loss is zero.
    sym = _symmetry(use_data_augmentation=True, use_mirror_loss=True, mirror_loss_coeff=1.0)
    ppo = _rollout(sym, symmetric_actor=True)
    batch = next(iter(ppo.storage.mini_batches(1, 1)))
    stats = ppo._accumulate_gradients(batch, 1.0)
    assert float(stats["symmetry"]) < 1e-12
    layer = ppo.policy.actor[-1]
    assert layer.weight.grad is not None and layer.bias.grad is not None
    scale = layer.weight.grad[0, 1:].abs().max()
    assert scale > 1e-3
    assert layer.weight.grad[0, 0].abs() < 1e-6 * scale and layer.bias.grad.abs().max() < 1e-6 * scale
    plain = _rollout(_symmetry(use_mirror_loss=True, mirror_loss_coeff=1.0), symmetric_actor=True)
    plain._accumulate_gradients(next(iter(plain.storage.mini_batches(1, 1))), 1.0)
    assert plain.policy.actor[-1].weight.grad[0, 0].abs() > 1e-4 * scale  # without augmentation they do not cancel


def test_mirror_loss_alone_makes_the_policy_more_symmetric() -> None:
    sym = _symmetry(use_mirror_loss=True, mirror_loss_coeff=10.0)
    losses = []
    ppo = _rollout(sym, schedule="fixed", learning_rate=1e-2)
    for _ in range(6):
        losses.append(ppo.update()["symmetry"])
        _collect(ppo, make_env("pendulum", num_envs=16, episode_length=5))
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.6 * losses[0]


def test_an_rsl_rl_augmentation_function_serves_as_the_mirror() -> None:
    ppo = _rollout(_symmetry(use_data_augmentation=True))
    env = make_env("pendulum", num_envs=2)
    theirs = make_mirror(SymmetryCfg(data_augmentation_func="tests.algorithms.test_symmetry:rsl_rl_style_mirror"), env)
    batch = next(iter(ppo.storage.mini_batches(2, 1)))
    ours = ppo.mirror
    assert ours is not None
    assert torch.equal(theirs.observations(batch.obs)["policy"], ours.observations(batch.obs)["policy"])
    assert torch.equal(theirs.actions(batch.actions), ours.actions(batch.actions))


def test_bad_settings_are_refused_with_the_flag_to_change() -> None:
    with pytest.raises(ConfigError, match="symmetry_cfg.data_augmentation_func"):
        validate(PPOCfg(symmetry_cfg=SymmetryCfg(use_data_augmentation=True)), "agent.algorithm")
    with pytest.raises(ConfigError, match="symmetry_cfg.mirror_loss_coeff"):
        validate(PPOCfg(symmetry_cfg=_symmetry(use_mirror_loss=True)), "agent.algorithm")
    env = make_env("pendulum", num_envs=2)
    with pytest.raises(ValueError, match="data_augmentation_func no_such_module:f"):
        make_mirror(SymmetryCfg(data_augmentation_func="no_such_module:f"), env)
    obs = env.get_observations()
    sym = _symmetry(use_data_augmentation=True)
    for policy_cfg, match in ((PolicyCfg(rnn_type="gru"), "rnn_type none"), (PolicyCfg(distribution="beta"), "beta")):
        policy = ActorCritic(obs, env.num_actions, policy_cfg)
        with pytest.raises(ValueError, match=match):
            PPO(policy, PPOCfg(symmetry_cfg=sym), 4, obs, "cpu", mirror=make_mirror(sym, env))
    with pytest.raises(ValueError, match="got no mirror"):
        PPO(ActorCritic(obs, env.num_actions, PolicyCfg()), PPOCfg(symmetry_cfg=sym), 4, obs, "cpu")
