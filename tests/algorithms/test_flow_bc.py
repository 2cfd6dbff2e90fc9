"""Flow behaviour cloning: the loss falls, the shortcut objective trains, state round trip."""

import pytest
import torch

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg
from rslkit.models.flow import FlowPolicy, FlowPolicyCfg


def _data(n=512):
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(n, 2, generator=g) * 2 - 1
    actions = torch.stack((obs.sum(-1), obs[:, 0] - obs[:, 1]), -1).unsqueeze(1).repeat(1, 2, 1) / 2  # [n, 2, 2]
    return obs, actions


@pytest.mark.parametrize("objective", ["rectified_flow", "shortcut"])
def test_loss_falls_and_samples_fit(objective):
    torch.manual_seed(0)
    obs, actions = _data()
    policy = FlowPolicy(2, 2, FlowPolicyCfg(horizon=2, hidden_dim=64, num_blocks=2, objective=objective))
    bc = FlowBC(policy, FlowBCCfg(learning_rate=3e-3, batch_size=128, ema_decay=0.95))
    losses = []
    for _ in range(300):
        idx = torch.randint(0, obs.shape[0], (128,))
        losses.append(bc.update(obs[idx], actions[idx])["flow"])
    assert sum(losses[-20:]) / 20 < 0.5 * sum(losses[:20]) / 20
    with torch.no_grad():
        error = (bc.ema.model.act_chunk(obs[:64]) - actions[:64]).abs().mean()
    assert error < 0.15  # a deterministic target: every sample lands near it


def test_state_round_trip():
    policy = FlowPolicy(2, 2, FlowPolicyCfg(horizon=2, hidden_dim=16, num_blocks=1))
    bc = FlowBC(policy, FlowBCCfg(batch_size=8))
    obs, actions = _data(8)
    bc.update(obs, actions)
    other = FlowBC(FlowPolicy(2, 2, FlowPolicyCfg(horizon=2, hidden_dim=16, num_blocks=1)), FlowBCCfg(batch_size=8))
    other.load_state_dict(bc.state_dict())
    x0 = torch.randn(8, 2, 2)
    torch.testing.assert_close(other.ema.model.act_chunk(obs, x0), bc.ema.model.act_chunk(obs, x0))
    with pytest.raises(ValueError, match="batch_size must be >= 2"):
        FlowBC(policy, FlowBCCfg(batch_size=1))


def test_adamw_takes_lerobots_betas_and_eps_from_the_command_line():
    """``--agent.algorithm.optimizer_betas 0.9,0.95 --agent.algorithm.optimizer_eps 1e-6`` reach AdamW; bad values
    are refused naming the field."""
    from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
    from rslkit.utils.config import apply_overrides
    from rslkit.utils.validation import ConfigError

    cfg = FlowBCRunnerCfg()
    apply_overrides(
        {"agent": cfg}, ["--agent.algorithm.optimizer_betas", "0.9,0.95", "--agent.algorithm.optimizer_eps", "1e-6"]
    )
    assert cfg.algorithm.optimizer_betas == (0.9, 0.95) and cfg.algorithm.optimizer_eps == 1e-6
    bc = FlowBC(FlowPolicy(3, 1, FlowPolicyCfg(hidden_dim=16, num_blocks=1)), cfg.algorithm)
    group = bc.optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.95) and group["eps"] == 1e-6
    with pytest.raises(ConfigError, match="optimizer_betas"):
        FlowBCCfg(optimizer_betas=(0.9, 1.5)).check()
