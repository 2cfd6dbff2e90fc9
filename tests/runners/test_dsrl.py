"""DSRL (noise-space SAC over a frozen flow policy): the latent action maps to the frozen policy's chunk exactly,
no gradient reaches the frozen weights, chunk-level transitions, exact resume, seeding, clear errors."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.algorithms.sac import SACCfg, SACNetworkCfg
from rslkit.envs import make_env
from rslkit.models.flow import FlowPolicy
from rslkit.runners.dsrl_runner import DSRLRunner, DSRLRunnerCfg, dsrl_cfg
from rslkit.runners.evaluation import evaluate_episodes
from rslkit.runners.latent_action_env import LatentActionEnv
from rslkit.runners.sac_config import SACRunnerCfg
from rslkit.storage.replay_buffer import ReplayCfg
from rslkit.utils.checkpoint import load_checkpoint
from rslkit.utils.seeding import seed_everything
from rslkit.utils.validation import ConfigError
from tests.runners.flow_bc_checkpoint import flow_bc_checkpoint


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return flow_bc_checkpoint(tmp_path_factory.mktemp("dsrl"))


def _cfg(path, **kw):
    base = dict(
        algorithm=SACCfg(batch_size=16, gamma=0.9),
        policy=SACNetworkCfg(actor_hidden_dims=(16,), critic_hidden_dims=(16,)),
        replay=ReplayCfg(capacity=256, save_in_checkpoint=True),
        num_steps_per_env=3,
        random_steps=1,
        learning_starts=1,
        logger=(),
    )
    return DSRLRunnerCfg(pretrained=path, **{**base, **kw})


def _runner(path, log_dir=None, seed=0, **kw):
    seed_everything(seed)
    env = make_env("pendulum", num_envs=4, episode_length=20, seed=seed)
    return DSRLRunner(env, _cfg(path, **kw), log_dir, run_info={"task": "pendulum"})


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_zero_latent_is_the_frozen_policy_and_its_weights_never_change(pretrained):
    runner = _runner(pretrained)
    frozen = runner.frozen
    assert isinstance(frozen, FlowPolicy) and runner.env.num_actions == 4 * 1
    reference = FlowPolicy(3, 1, frozen.cfg)
    reference.load_state_dict(load_checkpoint(pretrained)["alg"]["ema"]["model"])
    obs = runner.env.get_observations()
    zero = runner.latent_env.chunk(obs, torch.zeros(4, 4))
    assert torch.equal(zero, reference.act_chunk(obs["policy"], x0=torch.zeros(4, 4, 1)))
    w = torch.rand(4, 4) * 2 - 1
    steered = runner.latent_env.chunk(obs, w)
    assert torch.equal(steered, reference.act_chunk(obs["policy"], x0=1.5 * w.view(4, 4, 1)))
    assert not torch.equal(steered, zero)
    runner.learn(3)
    assert runner.alg.model.actor.net[0].weight.grad is not None  # SAC did update its actor
    assert all(p.grad is None and not p.requires_grad for p in frozen.parameters())
    assert _same(frozen.state_dict(), reference.state_dict())  # bit-identical after the updates


class _Countdown:
    """Two envs with rewards 1, 2, 3, ...; env 0's episode ends after 6 steps (inside its second chunk)."""

    num_envs, num_actions, device, cfg, max_episode_length = 2, 1, "cpu", None, 100

    def __init__(self):
        self.t = torch.zeros(2)
        self.episode_length_buf = torch.zeros(2, dtype=torch.long)
        self.seen = []

    def get_observations(self):
        return TensorDict({"policy": self.t[:, None].clone()}, batch_size=[2])

    def step(self, actions):
        self.seen.append(actions.clone())
        self.t += 1
        rewards = self.t.clone()
        dones = torch.tensor([bool(self.t[0] == 6), False])
        self.t[0] = torch.where(dones[0], torch.zeros(()), self.t[0])
        return self.get_observations(), rewards, dones, {"time_outs": torch.zeros(2, dtype=torch.bool)}


def test_chunk_transitions_sum_rewards_and_end_inside_a_chunk():
    env = _Countdown()
    starts = []

    def sampler(obs, x0):
        starts.append(obs["policy"][:, 0].clone())
        return x0 + obs["policy"][:, :, None]

    latent = LatentActionEnv(env, 4, 0.5, False, sampler, latent_scale=2.0)
    assert latent.num_actions == 4 and latent.action_space.shape == (4,)
    latent.get_observations()
    w = torch.full((2, 4), 0.25)
    _, r, d, extras = latent.step(w)
    torch.testing.assert_close(r, torch.full((2,), 1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4))
    assert not d.any() and torch.equal(env.seen[0], torch.full((2, 1), 0.5))  # x0 = 2 * 0.25, observation 0
    _, r, d, extras = latent.step(w)
    # env 0 ends at its 6th step: only rewards 5, 6 count, the next decision is discounted by gamma^2 only
    torch.testing.assert_close(r, torch.tensor([5 + 0.5 * 6, 5 + 0.5 * 6 + 0.25 * 7 + 0.125 * 8]))
    assert d.tolist() == [True, False]
    torch.testing.assert_close(extras["discount"], torch.tensor([0.25, 0.0625]))
    assert [s.tolist() for s in starts] == [[0.0, 0.0], [4.0, 4.0]]  # each chunk sampled at its first observation


def test_exact_resume_and_same_seed_same_run(pretrained, tmp_path):
    straight = _runner(pretrained, tmp_path / "a", save_interval=2)
    straight.learn(4)
    again = _runner(pretrained)
    again.learn(4)
    assert _same(straight.alg.state_dict()["model"], again.alg.state_dict()["model"])
    part = _runner(pretrained, tmp_path / "b", save_interval=2)
    part.learn(2)
    resumed = _runner(pretrained, seed=7)
    resumed.load(tmp_path / "b" / "model_2.pt")
    resumed.learn(2)
    assert _same(straight.alg.state_dict()["model"], resumed.alg.state_dict()["model"])


def test_deployed_policy_runs_chunks_of_the_latent_actor(pretrained):
    runner = _runner(pretrained)
    env = make_env("pendulum", num_envs=3, episode_length=10, seed=3)
    obs = env.get_observations()
    start = runner.frozen.act_chunk(obs["policy"], x0=torch.zeros(3, 4, 1))
    assert torch.equal(runner.chunk(obs), start)  # the latent actor starts at w = 0: the BC policy's zero-noise chunk
    runner.learn(1)
    policy = runner.inference_policy()
    first = policy(obs)
    latent = runner.policy.act_inference(obs)
    expected = runner.frozen.act_chunk(obs["policy"], x0=1.5 * latent.view(3, 4, 1))
    assert torch.equal(first, expected[:, 0])
    episodes = evaluate_episodes(env, runner.inference_policy(), runner.reset_inference)
    assert episodes.returns.shape == (3,) and torch.isfinite(episodes.returns).all()


def test_errors_name_the_flag(pretrained, tmp_path):
    with pytest.raises(ValueError, match="--pretrained PATH"):
        _runner("")
    sac = tmp_path / "sac"
    from rslkit.runners.off_policy_runner import OffPolicyRunner

    OffPolicyRunner(make_env("pendulum", num_envs=2), SACRunnerCfg(logger=(), save_interval=1), sac).save(sac / "m.pt")
    with pytest.raises(ValueError, match="written by 'sac'; DSRL steers a flow-bc or vla-bc policy"):
        _runner(str(sac / "m.pt"))
    with pytest.raises(ConfigError, match="latent_scale"):
        _cfg(pretrained, latent_scale=0.0).check()
    cfg = dsrl_cfg(SACRunnerCfg(algorithm=SACCfg(gamma=0.9)), chunk=4)
    assert cfg.algorithm.gamma == pytest.approx(0.9**4) and isinstance(cfg, DSRLRunnerCfg)
