"""The flow-bc runner with VLASH future-state offsets: offset batches in training, the default path untouched."""

import torch

from rslkit.algorithms.flow_bc import FlowBCCfg
from rslkit.data import record_episodes, write_lerobot_dataset
from rslkit.envs import make_env
from rslkit.envs.tasks.pendulum import pendulum_expert
from rslkit.models.flow import FlowPolicyCfg
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.pretrain_runner import PretrainRunner
from rslkit.utils.seeding import seed_everything


def _runner(dataset: str, **policy) -> PretrainRunner:
    seed_everything(0)
    env = make_env("pendulum", num_envs=2, episode_length=10)
    cfg = FlowBCRunnerCfg(
        dataset=dataset,
        algorithm=FlowBCCfg(batch_size=16),
        policy=FlowPolicyCfg(horizon=3, num_inference_steps=1, hidden_dim=16, num_blocks=1, **policy),
        updates_per_iteration=3,
        eval_interval=0,
        logger=(),
    )
    return PretrainRunner(env, cfg)


def test_offset_training_samples_offset_batches(tmp_path, monkeypatch):
    episodes = record_episodes(make_env("pendulum", num_envs=4, episode_length=10), pendulum_expert, 4, 0.3)
    dataset = str(write_lerobot_dataset(tmp_path / "demos", episodes, fps=20))
    runner = _runner(dataset, max_future_offset=4, future_state_slice=(2, 3), future_state_source="action")
    runner.load_dataset()
    data = runner.data.dataset
    assert data is not None
    assert (data.max_offset, data.state_slice, data.future_state_source) == (4, slice(2, 3), "action")
    seen = []
    original = runner.alg.update

    def update(obs, actions, future_state=None):
        seen.append(future_state)
        return original(obs, actions, future_state)

    monkeypatch.setattr(runner.alg, "update", update)
    runner.learn(1)
    assert len(seen) == 3 and all(f is not None and f.shape == (16, 1) for f in seen)
    plain = _runner(dataset)
    plain.load_dataset()
    assert plain.data.dataset is not None and plain.data.dataset.max_offset == 0
    monkeypatch.setattr(plain.alg, "update", update)
    seen.clear()
    plain.learn(1)
    assert seen == [None, None, None]
    assert torch.isfinite(runner.policy.act_chunk(torch.zeros(1, 3))).all()
