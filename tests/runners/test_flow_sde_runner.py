"""Flow-SDE through the ReinFlow runner (``--agent.algorithm.noise_method flow_sde``): it trains, resumes exactly,
and the same seed gives the same run."""

import pytest
import torch

from rslkit.algorithms.reinflow import ReinFlowCfg
from rslkit.envs import make_env
from rslkit.models.flow import FlowSDEChain
from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg
from rslkit.utils.seeding import seed_everything
from tests.runners.flow_bc_checkpoint import flow_bc_checkpoint


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return flow_bc_checkpoint(tmp_path_factory.mktemp("flow_sde"))


def _runner(path, log_dir=None, seed=0):
    alg = ReinFlowCfg(noise_method="flow_sde", noise_level=0.5, critic_hidden_dims=(16,), num_mini_batches=2,
                      num_learning_epochs=1, critic_warmup_iterations=1)  # fmt: skip
    cfg = ReinFlowRunnerCfg(pretrained=path, algorithm=alg, num_steps_per_env=3, eval_interval=2, save_interval=2,
                            logger=())  # fmt: skip
    seed_everything(seed)
    return ReinFlowRunner(make_env("pendulum", num_envs=4, episode_length=20, seed=seed), cfg, log_dir)


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_flow_sde_runner_trains_resumes_exactly_and_repeats(pretrained, tmp_path):
    """Evaluations every 2 iterations: the interrupted run evaluates where the straight one does (an evaluation
    resets the env)."""
    straight = _runner(pretrained, tmp_path / "a")
    assert isinstance(straight.alg.chain, FlowSDEChain)
    start = {k: v.clone() for k, v in straight.alg.chain.state_dict().items()}
    metrics = straight.learn(4)
    assert metrics["Policy/mean_std"] > 0 and not _same(start, straight.alg.chain.state_dict())
    again = _runner(pretrained)
    again.learn(4)
    assert _same(straight.alg.state_dict()["chain"], again.alg.state_dict()["chain"])
    part = _runner(pretrained, tmp_path / "b")
    part.learn(2)
    resumed = _runner(pretrained, seed=7)
    resumed.load(tmp_path / "b" / "model_2.pt")
    resumed.learn(2)
    assert _same(straight.alg.state_dict()["chain"], resumed.alg.state_dict()["chain"])
    assert _same(straight.alg.state_dict()["critic"], resumed.alg.state_dict()["critic"])
