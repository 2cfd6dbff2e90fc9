"""Flow policies with a future-state input (VLASH): config checks, conditioning, and learning to use it."""

import pytest
import torch

from rslkit.algorithms.flow_bc import FlowBC, FlowBCCfg
from rslkit.models.flow import FlowPolicy, FlowPolicyCfg


def _cfg(**kw) -> FlowPolicyCfg:
    return FlowPolicyCfg(**{"horizon": 3, "num_inference_steps": 2, "hidden_dim": 32, "num_blocks": 1, **kw})


def test_default_policy_has_no_future_state_input():
    policy = FlowPolicy(4, 2, _cfg())
    assert policy.max_future_offset == 0 and policy.state_slice is None
    assert policy.net.input.in_features == 3 * 2 + 4 + 32
    with pytest.raises(ValueError, match="no future-state input"):
        policy.act_chunk(torch.zeros(1, 4), future_state=torch.zeros(1, 2))


def test_future_state_input_changes_the_chunk_and_defaults_to_the_observed_state():
    torch.manual_seed(0)
    policy = FlowPolicy(4, 2, _cfg(max_future_offset=3, future_state_slice=(1, 3))).eval()
    assert policy.net.input.in_features == 3 * 2 + 4 + 2 + 32
    obs, x0 = torch.randn(5, 4), torch.randn(5, 3, 2)
    observed = policy.act_chunk(obs, x0, future_state=obs[:, 1:3])
    torch.testing.assert_close(policy.act_chunk(obs, x0), observed)
    moved = policy.act_chunk(obs, x0, future_state=obs[:, 1:3] + 0.5)
    assert (moved - observed).abs().max() > 1e-3


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(max_future_offset=2), "future_state_slice must be"),
        (dict(max_future_offset=2, future_state_slice=(3, 6)), "future_state_slice must be"),
        (dict(future_state_slice=(0, 2)), "max_future_offset is 0"),
        (dict(max_future_offset=-1), "max_future_offset must be >= 0"),
    ],
)
def test_bad_future_state_configs_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        FlowPolicy(4, 2, _cfg(**kw))


def test_flow_bc_learns_to_plan_from_the_future_state():
    """Chunks continue from the future state (``a_i = s' + 0.1 (i + 1)``), whatever the observation says: the
    trained policy must follow the state it is given, not the observed one."""
    torch.manual_seed(0)
    policy = FlowPolicy(2, 1, _cfg(max_future_offset=4, future_state_slice=(0, 1), hidden_dim=64))
    stats = {"observation.state": {"min": [-1.0, -1.0], "max": [1.0, 1.0]}, "action": {"min": [-1.5], "max": [1.5]}}
    policy.set_normalization(stats)
    bc = FlowBC(policy, FlowBCCfg(batch_size=128, learning_rate=3e-3, ema_decay=0.9))
    steps = 0.1 * torch.arange(1, 4, dtype=torch.float32).view(1, 3, 1)
    for _ in range(400):
        obs = torch.rand(128, 2) * 2 - 1
        future = (obs[:, :1] + 0.3 * (torch.rand(128, 1) * 2 - 1)).clamp(-1, 1)
        bc.update(obs, future.unsqueeze(1) + steps, future)
    obs = torch.tensor([[0.0, 0.5], [0.2, -0.5]])
    future = torch.tensor([[0.25], [-0.1]])
    chunk = bc.ema.model.act_chunk(obs, torch.zeros(2, 3, 1), future_state=future)
    torch.testing.assert_close(chunk, future.unsqueeze(1) + steps, atol=0.06, rtol=0)
