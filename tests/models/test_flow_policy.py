"""Flow policy: velocity net, sampler, objectives, EMA, chunk execution, and behaviour cloning of a bimodal toy."""

import math

import pytest
import torch
from tensordict import TensorDict

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg
from rslkit.models.flow import (
    EMA,
    ChunkExecutor,
    FlowPolicy,
    FlowPolicyCfg,
    euler_sample,
    rectified_flow_loss,
    shortcut_loss,
    time_grid,
)
from rslkit.models.mlp import make_mlp


def _policy(objective="rectified_flow", horizon=3, action_dim=2, obs_dim=4, **kw):
    cfg = FlowPolicyCfg(horizon=horizon, hidden_dim=32, num_blocks=1, objective=objective, **kw)
    return FlowPolicy(obs_dim, action_dim, cfg)


def test_shapes_and_step_conditioning():
    policy = _policy()
    x, obs = torch.randn(5, 3, 2), torch.randn(5, 4)
    assert policy.velocity(x, torch.rand(5), obs).shape == (5, 3, 2)
    assert policy.act_chunk(obs).shape == (5, 3, 2)
    shortcut = _policy("shortcut")
    assert shortcut.step_conditioned and not policy.step_conditioned
    with pytest.raises(ValueError, match="pass the step size d"):
        shortcut.net(x, torch.rand(5), obs)
    with pytest.raises(ValueError, match="Unknown flow objective"):
        _policy("ddpm")


def test_time_grid_and_euler():
    assert time_grid(4).tolist() == [0.0, 0.25, 0.5, 0.75]
    with pytest.raises(ValueError, match="K must be >= 1"):
        time_grid(0)
    # dx/dt = t integrates exactly to the left Riemann sum sum_k t_k / K.
    x = euler_sample(lambda x, t: t.view(-1, 1).expand_as(x), torch.zeros(2, 1), 4)
    assert x[0, 0].item() == pytest.approx((0 + 0.25 + 0.5 + 0.75) / 4)


def test_act_chunk_stays_in_the_data_range():
    policy = _policy()
    policy.action_normalizer.set_stats(torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0]))
    for p in policy.net.parameters():
        p.data.mul_(50)  # wild velocities
    chunk = policy.act_chunk(torch.randn(64, 4))
    assert chunk[..., 0].abs().max() <= 2.0 and chunk[..., 1].min() >= 0.0 and chunk[..., 1].max() <= 1.0


def test_objectives_train_their_terms():
    torch.manual_seed(0)
    policy = _policy()
    x1, obs = torch.randn(32, 3, 2), torch.randn(32, 4)
    loss = rectified_flow_loss(policy, obs, x1)
    loss.backward()
    assert loss.item() > 0 and all(p.grad is not None for p in policy.net.parameters())
    shortcut = _policy("shortcut")
    total, terms = shortcut_loss(shortcut, obs, x1, bootstrap_fraction=0.25)
    assert set(terms) == {"flow_matching", "self_consistency"}
    assert total.item() == pytest.approx(0.75 * terms["flow_matching"].item() + 0.25 * terms["self_consistency"].item())
    with pytest.raises(ValueError, match="step-conditioned"):
        shortcut_loss(policy, obs, x1)


def test_ema_tracks_weights():
    model = torch.nn.Linear(2, 2)
    ema = EMA(model, decay=0.9)
    before = ema.model.weight.clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update(model)  # warm-up decay min(0.9, 2/11)
    expected = before + (1 - 2 / 11) * 1.0
    torch.testing.assert_close(ema.model.weight, expected)
    assert not ema.model.weight.requires_grad
    restored = EMA(torch.nn.Linear(2, 2), 0.9)
    restored.load_state_dict(ema.state_dict())
    assert restored.num_updates == 1 and torch.equal(restored.model.weight, ema.model.weight)


def test_ema_leaves_frozen_weights_alone():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[0].requires_grad_(False)  # a frozen backbone
    ema = EMA(model, decay=0.9)
    frozen, trained = ema.model[0].weight.clone(), ema.model[1].weight.clone()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    ema.update(model)
    assert torch.equal(ema.model[0].weight, frozen), "a frozen weight is not averaged"
    torch.testing.assert_close(ema.model[1].weight, trained + (1 - 2 / 11))


def test_chunk_executor_runs_chunks_and_resets():
    calls = []

    def chunk_fn(obs):
        calls.append(obs.batch_size[0])
        base = obs["policy"][:, :1].unsqueeze(1)  # [M, 1, 1]
        return base + torch.arange(3.0).view(1, 3, 1)  # chunk = obs + (0, 1, 2)

    run = ChunkExecutor(chunk_fn, horizon=3)
    obs = TensorDict({"policy": torch.tensor([[10.0], [20.0]])}, batch_size=[2])
    assert [run(obs)[:, 0].tolist() for _ in range(3)] == [[10, 20], [11, 21], [12, 22]]
    run.reset(torch.tensor([False, True]))
    obs = TensorDict({"policy": torch.tensor([[30.0], [40.0]])}, batch_size=[2])
    assert run(obs)[:, 0].tolist() == [30, 40]  # env 0's chunk was used up, env 1 was reset
    assert run(obs)[:, 0].tolist() == [31, 41]
    run.reset(torch.tensor([True, False]))
    assert run(obs)[:, 0].tolist() == [30, 42]
    assert calls == [2, 2, 1]


def test_chunk_executor_receding_horizon_replans_after_execute_steps():
    calls = []

    def chunk_fn(obs):
        calls.append(obs.batch_size[0])
        return obs["policy"][:, :1].unsqueeze(1) + torch.arange(4.0).view(1, 4, 1)  # chunk = obs + (0, 1, 2, 3)

    run = ChunkExecutor(chunk_fn, horizon=4, execute_steps=2)
    seen = []
    for t in range(5):
        obs = TensorDict({"policy": torch.tensor([[100.0 * t]])}, batch_size=[1])
        seen.append(run(obs)[0, 0].item())
    # a fresh chunk from the current observation every 2 steps; the last 2 actions of each chunk are never executed
    assert seen == [0, 1, 200, 201, 400]
    assert calls == [1, 1, 1]
    for bad in (-1, 5):
        with pytest.raises(ValueError, match="execute_steps"):
            ChunkExecutor(chunk_fn, horizon=4, execute_steps=bad)


def test_chunk_executor_temporal_ensembling_averages_the_predictions_of_each_step():
    horizon, m = 3, 0.5
    calls = []

    def chunk_fn(obs):
        calls.append(obs.batch_size[0])
        return obs["policy"][:, :1].unsqueeze(1) + torch.arange(float(horizon)).view(1, horizon, 1)

    run = ChunkExecutor(chunk_fn, horizon=horizon, ensemble_coeff=m)
    values = [0.0, 10.0, 20.0, 30.0, 40.0]
    seen = [run(TensorDict({"policy": torch.tensor([[v]])}, batch_size=[1]))[0, 0].item() for v in values]
    # step t averages the chunks of steps max(0, t-2)..t; the chunk of step s predicts values[s] + (t - s) for t,
    # and the i-th oldest of them weighs exp(-m i)
    for t, got in enumerate(seen):
        preds = [values[s] + (t - s) for s in range(max(0, t - horizon + 1), t + 1)]
        weights = [math.exp(-m * i) for i in range(len(preds))]
        assert got == pytest.approx(sum(w * p for w, p in zip(weights, preds)) / sum(weights), abs=1e-5)
    assert calls == [1] * len(values)  # a chunk every step
    run.reset(torch.tensor([True]))  # a new episode forgets the old predictions
    assert run(TensorDict({"policy": torch.tensor([[100.0]])}, batch_size=[1]))[0, 0].item() == pytest.approx(100.0)
    with pytest.raises(ValueError, match="execute_steps"):
        ChunkExecutor(chunk_fn, horizon=horizon, execute_steps=2, ensemble_coeff=0.01)
    with pytest.raises(ValueError, match="finite"):
        ChunkExecutor(chunk_fn, horizon=horizon, ensemble_coeff=float("nan"))


def _bimodal(n=2048, seed=0):
    """2-D actions from two well separated modes; the observation carries no information about the mode."""
    g = torch.Generator().manual_seed(seed)
    modes = torch.tensor([[0.6, 0.6], [-0.6, -0.6]])
    which = torch.randint(0, 2, (n,), generator=g)
    actions = modes[which] + 0.05 * torch.randn(n, 2, generator=g)
    return torch.zeros(n, 1), actions, modes


def test_flow_bc_covers_both_modes_where_mse_averages():
    torch.manual_seed(0)
    obs, actions, modes = _bimodal()
    policy = FlowPolicy(1, 2, FlowPolicyCfg(horizon=1, hidden_dim=64, num_blocks=2))
    policy.action_normalizer.set_stats(torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 1.0]))
    bc = FlowBC(policy, FlowBCCfg(learning_rate=2e-3, batch_size=256, ema_decay=0.99))
    g = torch.Generator().manual_seed(1)
    for _ in range(600):
        idx = torch.randint(0, obs.shape[0], (256,), generator=g)
        bc.update(obs[idx], actions[idx].unsqueeze(1))
    with torch.no_grad():
        samples = bc.ema.model.act_chunk(torch.zeros(1000, 1), num_steps=8)[:, 0]
    near = torch.cdist(samples, modes) < 0.25  # [1000, 2]
    assert near[:, 0].float().mean() > 0.35 and near[:, 1].float().mean() > 0.35
    assert near.any(-1).float().mean() > 0.85
    assert (samples.norm(dim=-1) < 0.3).float().mean() < 0.1  # few samples at the midpoint

    # A Gaussian (MSE) regressor predicts the conditional mean: the midpoint, far from both modes.
    regressor = make_mlp(1, (64, 64), 2)
    opt = torch.optim.Adam(regressor.parameters(), lr=1e-2)
    for _ in range(200):
        idx = torch.randint(0, obs.shape[0], (256,), generator=g)
        loss = ((regressor(obs[idx]) - actions[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        mean_prediction = regressor(torch.zeros(1, 1))
    assert torch.cdist(mean_prediction, modes).min() > 0.6


def test_the_flow_loss_trains_on_the_policys_time_distribution():
    """``rectified_flow_loss`` draws t from ``policy.sample_time``: uniform for rslkit's policies (the same numbers
    as ``torch.rand``), LeRobot's ``1 - Beta(1.5, 1)`` for SmolVLA (mean 0.4 in rslkit's direction)."""
    from rslkit.models.flow.objectives import uniform_time
    from rslkit.models.smolvla.policy import SmolVLAPolicy

    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(uniform_time(64, g1), torch.rand(64, generator=g2))
    t = SmolVLAPolicy.sample_time(None, 200_000, torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    assert 0.0 <= float(t.min()) and float(t.max()) <= 0.999
    assert abs(float(t.mean()) - 0.4) < 0.005

    seen = []

    class Recording(FlowPolicy):
        def sample_time(self, batch, generator=None, device=None):
            seen.append(batch)
            return torch.full((batch,), 0.5)

    policy = Recording(3, 1, FlowPolicyCfg(horizon=4, hidden_dim=16, num_blocks=1))
    rectified_flow_loss(policy, torch.zeros(5, 3), torch.zeros(5, 4, 1))
    assert seen == [5]
