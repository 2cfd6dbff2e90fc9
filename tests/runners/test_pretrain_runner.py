"""Flow-bc and ReinFlow runners: checkpoints, exact resume, play.py/train.py integration, clear errors."""

import pytest
import torch

from rslkit.algorithms.flow_bc import FlowBCCfg
from rslkit.algorithms.reinflow import ReinFlowCfg
from rslkit.cli import play, train
from rslkit.data import record_episodes, write_lerobot_dataset
from rslkit.envs import make_env
from rslkit.envs.tasks.pendulum import pendulum_expert
from rslkit.models.flow import FlowPolicyCfg
from rslkit.recipes import catalog
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.pretrain_runner import PretrainRunner
from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg
from rslkit.utils.checkpoint import load_checkpoint
from rslkit.utils.config import from_dict
from rslkit.utils.seeding import seed_everything
from rslkit.utils.validation import ConfigError

POLICY = FlowPolicyCfg(horizon=4, num_inference_steps=2, hidden_dim=16, num_blocks=1)


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    root = tmp_path_factory.mktemp("demos") / "pendulum"
    episodes = record_episodes(make_env("pendulum", num_envs=8, episode_length=20), pendulum_expert, 8, 0.3)
    return str(write_lerobot_dataset(root, episodes, fps=20))


def _bc_cfg(dataset="", **kw):
    base = dict(algorithm=FlowBCCfg(batch_size=32), policy=POLICY, updates_per_iteration=5, eval_interval=1, logger=())
    return FlowBCRunnerCfg(dataset=dataset, **{**base, **kw})


def _bc(dataset, log_dir=None, seed=0, **kw):
    seed_everything(seed)
    env = make_env("pendulum", num_envs=4, episode_length=20, seed=seed)
    return PretrainRunner(env, _bc_cfg(dataset, **kw), log_dir, run_info={"task": "pendulum"})


def _rl_cfg(pretrained="", **kw):
    alg = ReinFlowCfg(critic_hidden_dims=(16,), num_mini_batches=2, num_learning_epochs=1, critic_warmup_iterations=1)
    base = dict(algorithm=alg, num_steps_per_env=3, eval_interval=1, logger=())
    return ReinFlowRunnerCfg(pretrained=pretrained, **{**base, **kw})


def _rl(pretrained, log_dir=None, seed=0, cfg=None):
    seed_everything(seed)
    env = make_env("pendulum", num_envs=4, episode_length=20, seed=seed)
    return ReinFlowRunner(env, cfg or _rl_cfg(pretrained), log_dir, run_info={"task": "pendulum"})


def _state(module):
    return {k: v.clone() for k, v in module.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bc_checkpoints_and_exact_resume(tmp_path, demos):
    straight = _bc(demos, tmp_path / "a")
    metrics = straight.learn(3)
    assert {"Loss/flow", "Eval/mean_return", "Train/mean_return"} <= set(metrics)
    assert (tmp_path / "a/model_3.pt").exists() and len((tmp_path / "a/metrics.csv").read_text().splitlines()) == 4
    part = _bc(demos, tmp_path / "b")
    part.learn(2)
    resumed = _bc(demos, tmp_path / "b", seed=7)
    resumed.load(tmp_path / "b/model_2.pt")
    assert resumed.iteration == 2
    resumed.learn(1)
    assert _same(_state(straight.alg.policy), _state(resumed.alg.policy))
    assert _same(_state(straight.policy), _state(resumed.policy))


def test_bc_errors(tmp_path, demos):
    with pytest.raises(ValueError, match="pass --dataset PATH"):
        _bc("").learn(1)
    env = make_env("cartpole", num_envs=2)
    with pytest.raises(ValueError, match="'observation.state' has 3 dims but the env observes 4"):
        PretrainRunner(env, _bc_cfg(demos), None).learn(1)
    runner = _bc(demos, tmp_path)
    runner.learn(1)
    with pytest.raises(ValueError, match="written by 'flow-bc', not by reinflow .pass a flow-bc checkpoint"):
        _rl("").load(tmp_path / "model_1.pt")


def test_reinflow_starts_at_the_pretrained_policy_and_resumes_exactly(tmp_path, demos):
    bc = _bc(demos, tmp_path / "bc")
    bc.learn(2)
    ckpt = str(tmp_path / "bc/model_2.pt")
    straight = _rl(ckpt, tmp_path / "a")
    g = torch.Generator().manual_seed(0)  # leave the global RNG alone: the runs below must match exactly
    obs, x0 = torch.rand(5, 3, generator=g) * 2 - 1, torch.randn(5, 4, 1, generator=g)
    torch.testing.assert_close(straight.policy.act_chunk(obs, x0, 2), bc.policy.act_chunk(obs, x0, 2))
    assert straight.cfg.policy == POLICY  # architecture taken from the checkpoint
    metrics = straight.learn(3)
    assert metrics["Loss/first_ratio"] == 1.0 and "Eval/mean_return" in metrics and "Policy/mean_std" in metrics
    part = _rl(ckpt, tmp_path / "b")
    part.learn(2)
    saved = load_checkpoint(tmp_path / "b/model_2.pt")
    assert saved["agent_cfg"]["pretrained"] == "" and saved["pretrained_from"] == ckpt
    # The checkpoint is self-contained: resuming needs no pretrained file (train.py rebuilds the config like this).
    resumed = _rl("", tmp_path / "b", seed=9, cfg=from_dict(ReinFlowRunnerCfg, saved["agent_cfg"]))
    resumed.load(tmp_path / "b/model_2.pt")
    resumed.learn(1)
    assert _same(_state(straight.alg.chain), _state(resumed.alg.chain))
    assert _same(_state(straight.alg.critic), _state(resumed.alg.critic))


def test_reinflow_errors(tmp_path):
    with pytest.raises(ValueError, match="pass --pretrained PATH"):
        _rl("").learn(1)
    ppo = train.main(
        [
            "--task",
            "pendulum",
            "--logdir",
            str(tmp_path),
            "--max_iterations",
            "1",
            "--num_envs",
            "8",
            "--agent.logger",
            "",
        ]
    )
    ckpt = tmp_path / "pendulum" / next((tmp_path / "pendulum").iterdir()).name / "model_1.pt"
    assert ppo.iteration == 1
    with pytest.raises(ValueError, match="written by 'ppo'; ReinFlow starts from a flow-bc checkpoint"):
        _rl(str(ckpt))


def test_execute_steps_replans_in_evaluation_and_is_checked(tmp_path, demos, monkeypatch):
    """``execute_steps`` 2 of chunks of 4 asks the policy for twice as many chunks in a 20-step evaluation, temporal
    ensembling for one every step."""
    calls = {"n": 0}
    counts = {}
    for execute in (0, 2, "ensemble"):
        kw = {"temporal_ensemble_coeff": 0.01} if execute == "ensemble" else {"execute_steps": execute}
        runner = _bc(demos, tmp_path / f"e{execute}", **kw)
        runner.learn(1)
        act_chunk = runner.policy.act_chunk

        def counted(*args, _act=act_chunk, **kwargs):
            calls["n"] += 1
            return _act(*args, **kwargs)

        monkeypatch.setattr(runner.policy, "act_chunk", counted)
        calls["n"] = 0
        runner.evaluate()
        counts[execute] = calls["n"]
    assert counts == {0: 5, 2: 10, "ensemble": 20}  # 20 steps of 4 envs in step: 20/4, 20/2 and 20 chunks
    with pytest.raises(ConfigError, match="execute_steps.*policy.horizon=4"):
        _bc(demos, execute_steps=5)
    with pytest.raises(ConfigError, match="execute_steps.*chunk size"):
        _rl(str(tmp_path / "e0/model_1.pt"), cfg=_rl_cfg(str(tmp_path / "e0/model_1.pt"), execute_steps=5))
    with pytest.raises(ConfigError, match="temporal_ensemble_coeff.*execute_steps=2"):
        _bc(demos, execute_steps=2, temporal_ensemble_coeff=0.01)
    with pytest.raises(ConfigError, match="temporal_ensemble_coeff.*finite"):
        _rl_cfg(temporal_ensemble_coeff=float("inf")).check()


def test_cli_train_flow_bc_reinflow_then_play(tmp_path, demos, monkeypatch, capsys):
    """Recipes (registered here with monkeypatch) make the runners work with train.py and play.py."""
    recipes = {"flow-bc": lambda: _bc_cfg(max_iterations=2), "reinflow": lambda: _rl_cfg(max_iterations=2)}
    monkeypatch.setitem(catalog._REGISTERED, "pendulum", recipes)
    common = ["--task", "pendulum", "--num_envs", "4", "--env.episode_length", "20", "--logdir", str(tmp_path)]
    bc = train.main(common + ["--algo", "flow-bc", "--agent.dataset", demos, "--run_name", "bc"])
    bc_ckpt = next((tmp_path / "pendulum").glob("*_bc/model_2.pt"))
    assert bc.iteration == 2
    rl = train.main(common + ["--algo", "reinflow", "--agent.pretrained", str(bc_ckpt), "--run_name", "rl"])
    rl_ckpt = next((tmp_path / "pendulum").glob("*_rl/model_2.pt"))
    assert rl.iteration == 2
    for ckpt in (bc_ckpt, rl_ckpt):
        stats = play.main(
            ["--task", "pendulum", "--checkpoint", str(ckpt), "--episodes", "3", "--env.episode_length", "20"]
        )
        assert stats["episodes"] == 3 and stats["length_mean"] == 20
    resumed = train.main(
        common + ["--algo", "reinflow", "--resume", "--checkpoint", str(rl_ckpt), "--max_iterations", "3"]
    )
    assert resumed.iteration == 3
