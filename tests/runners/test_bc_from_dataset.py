"""Behaviour cloning from a dataset alone (no simulator): the dataset's spec stands in for the env, a validation split
by episodes is evaluated (``Val/*``), the learning rate follows LeRobot's warm-up + cosine schedule, checkpoints
export, and the same seed gives the same run."""

import csv
import math
from pathlib import Path

import pytest
import torch

from rslkit.algorithms.lr_schedule import LRScheduleCfg
from rslkit.data import record_episodes, write_lerobot_dataset
from rslkit.data.dataset_spec import DatasetSpec
from rslkit.data.episode_split import select_episodes, split_episodes
from rslkit.data.lerobot_reader import read_lerobot_dataset
from rslkit.deploy.export import export_checkpoint
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.recipes import load_run
from rslkit.recipes.dataset_run import build_dataset_run
from rslkit.runners.pretrain_runner import PretrainRunner
from tests.runners.instructed_point import INSTRUCTIONS, InstructedPointEnv, expert

TINY_FLOW = [
    "--agent.policy.hidden_dim",
    "32",
    "--agent.policy.num_blocks",
    "1",
    "--agent.policy.horizon",
    "4",
    "--agent.algorithm.batch_size",
    "16",
]
TINY_VLA = ["--agent.policy.d_model", "16", "--agent.policy.num_heads", "2", "--agent.policy.num_layers", "1",
            "--agent.policy.cnn_channels", "4,8", "--agent.policy.token_grid", "2", "--agent.policy.horizon", "4",
            "--agent.policy.time_embed_dim", "8", "--agent.algorithm.batch_size", "16"]  # fmt: skip
SHORT = ["--agent.updates_per_iteration", "3", "--agent.eval_interval", "1", "--agent.logger="]


def _task(obs):
    return [INSTRUCTIONS[int(g)] for g in obs["goal"]]


@pytest.fixture(scope="module")
def state_dataset(tmp_path_factory):
    """Ten episodes of states, actions and instructions (no camera)."""
    episodes = record_episodes(InstructedPointEnv(num_envs=10, seed=0), expert, 10, task=_task)
    return write_lerobot_dataset(tmp_path_factory.mktemp("bc") / "state", episodes, fps=25)


@pytest.fixture(scope="module")
def camera_dataset(tmp_path_factory):
    """Six episodes with the ``front`` camera (video) and two instructions."""
    episodes = record_episodes(InstructedPointEnv(num_envs=6, seed=0), expert, 6, task=_task, cameras=["front"])
    return write_lerobot_dataset(tmp_path_factory.mktemp("bc") / "camera", episodes, fps=10)


def test_the_split_is_by_whole_episodes_and_the_same_for_the_same_seed(state_dataset):
    train, val = split_episodes(10, 0.2, seed=3)
    assert len(val) == 2 and sorted(train.tolist() + val.tolist()) == list(range(10))
    assert torch.equal(split_episodes(10, 0.2, seed=3)[1], val)
    assert any(not torch.equal(split_episodes(10, 0.2, seed=s)[1], val) for s in range(4, 8))
    assert len(split_episodes(10, 0.01, seed=0)[1]) == 1  # a fraction > 0 holds out at least one episode
    with pytest.raises(ValueError, match="--agent.val_fraction"):
        split_episodes(1, 0.5, seed=0)
    demos = read_lerobot_dataset(state_dataset)
    held_out = select_episodes(demos, val)
    assert held_out.num_episodes == 2 and held_out.num_frames == 20
    assert torch.equal(held_out.episode_index.unique(), demos.episode_index[demos.episode_from[val]])
    first = int(demos.episode_from[val[0]])
    torch.testing.assert_close(held_out.actions[:10], demos.actions[first : first + 10])
    assert held_out.task_index is not None and held_out.episode_from.tolist() == [0, 10]


def test_the_schedule_warms_up_linearly_then_decays_by_a_cosine():
    cfg = LRScheduleCfg(name="cosine_decay_with_warmup", num_warmup_steps=10, num_decay_steps=100, decay_lr=1e-5)
    peak = 1e-3
    assert cfg.factor(0, peak, 1000) == pytest.approx(1 / 11)
    assert cfg.factor(5, peak, 1000) == pytest.approx(1 / 11 + (10 / 11) * 0.5)
    alpha = 1e-5 / peak
    for step in (10, 50, 100):  # the cosine counts from step 0, as LeRobot's does
        expected = (1 - alpha) * 0.5 * (1 + math.cos(math.pi * step / 100)) + alpha
        assert cfg.factor(step, peak, 1000) == pytest.approx(expected)
    assert cfg.factor(500, peak, 1000) == pytest.approx(alpha)
    # a run shorter than the decay: warm-up and decay shrink to fit it (LeRobot's auto-scaling)
    assert cfg.factor(0, peak, 50) == pytest.approx(1 / 6)
    assert cfg.factor(50, peak, 50) == pytest.approx(alpha)
    assert LRScheduleCfg().factor(7, peak, 10) == 1.0


def _flow_run(dataset, path, seed=0, extra=()):
    return build_dataset_run(dataset, "flow-bc", [*TINY_FLOW, *SHORT, *extra], seed=seed, max_iterations=3,
                             log_dir=path)  # fmt: skip


def test_flow_bc_from_a_dataset_alone_validates_follows_the_schedule_and_repeats(state_dataset, tmp_path):
    schedule = ["--agent.lr_schedule.name", "cosine_decay_with_warmup", "--agent.lr_schedule.num_warmup_steps", "3",
                "--agent.lr_schedule.num_decay_steps", "9", "--agent.lr_schedule.decay_lr", "1e-5"]  # fmt: skip
    spec, runner = _flow_run(state_dataset, tmp_path / "a", extra=schedule)
    assert isinstance(spec, DatasetSpec) and not runner.rollouts and runner.cfg.val_fraction == 0.1
    metrics = runner.learn()
    held_out = runner.data.val_episodes
    assert held_out is not None and held_out.tolist() == split_episodes(10, 0.1, seed=0)[1].tolist()
    train_eps = set(runner.data.dataset.demos.episode_index.tolist())
    assert not train_eps & set(held_out.tolist()) and len(train_eps) == 9
    assert metrics["Val/flow_loss"] > 0 and "Eval/success_rate" not in metrics
    assert {"Val/action_mae/0", "Val/action_mse_norm/1", "Val/action_mae"} <= set(metrics)
    rows = list(csv.DictReader((tmp_path / "a" / "metrics.csv").open()))
    assert len(rows) == 3 and all(r["Val/flow_loss"] for r in rows)
    # the rate of the last step of each iteration (steps 2, 5, 8 of 9): warm-up, then cosine from step 0
    lrs = [float(r["Loss/learning_rate"]) for r in rows]
    peak = runner.cfg.algorithm.learning_rate
    assert lrs[0] == pytest.approx(peak * (0.25 + 0.75 * 2 / 3))
    assert lrs[1] == pytest.approx(1e-5 + (peak - 1e-5) * 0.5 * (1 + math.cos(math.pi * 5 / 9)))
    assert lrs[2] == pytest.approx(1e-5 + (peak - 1e-5) * 0.5 * (1 + math.cos(math.pi * 8 / 9)))
    # the same seed gives the same run: bit for bit on the same thread count; on another, torch's CPU kernels split
    # their sums differently (the last float bits), nothing of the run's own (sampling, split, noise) changes
    _, again = _flow_run(state_dataset, tmp_path / "b", extra=schedule)
    assert _without_timing(again.learn()) == _without_timing(metrics)
    for a, b in zip(runner.policy.state_dict().values(), again.policy.state_dict().values()):
        assert torch.equal(a, b)
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        other_threads = _flow_run(state_dataset, None, extra=schedule)[1].learn()
    finally:
        torch.set_num_threads(threads)
    assert _without_timing(other_threads) == pytest.approx(_without_timing(metrics), rel=1e-5)


def _without_timing(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not k.startswith("Perf/")}


def test_a_dataset_run_resumes_and_its_checkpoint_exports_without_the_dataset(state_dataset, tmp_path):
    _, runner = _flow_run(state_dataset, tmp_path / "run")
    runner.learn(2)
    env, resumed, _ = load_run(tmp_path / "run" / "model_2.pt", resume=True)
    assert isinstance(env, DatasetSpec) and resumed.iteration == 2 and resumed.cfg.dataset == str(state_dataset)
    finished = resumed.learn()
    uninterrupted = _flow_run(state_dataset, None)[1].learn()
    assert finished["Val/flow_loss"] == uninterrupted["Val/flow_loss"]
    meta = export_checkpoint(tmp_path / "run" / "model_3.pt", tmp_path / "flow.onnx")
    assert meta.algorithm == "flow-bc" and meta.control_rate_hz == 25.0 and meta.task is None
    obs = read_lerobot_dataset(state_dataset).observations[:3]
    noise = torch.randn(3, 4, 2)
    got = OnnxPolicy(tmp_path / "flow.onnx")({"policy": obs.numpy()}, noise.numpy())
    with torch.no_grad():
        expected = resumed.policy.act_chunk(obs, noise)
    assert abs(got - expected.numpy()).max() < 1e-4


def test_vla_bc_from_a_dataset_alone_takes_cameras_instructions_and_rate_from_it(camera_dataset, tmp_path):
    spec, runner = build_dataset_run(camera_dataset, "vla-bc", [*TINY_VLA, *SHORT, "--agent.val_fraction", "0.3"],
                                     max_iterations=1, log_dir=tmp_path / "run")  # fmt: skip
    assert runner.cfg.policy.cameras == ("front",) and runner.cfg.policy.image_size == (16, 16)
    assert set(spec.instructions) == set(INSTRUCTIONS)
    assert spec.step_dt == pytest.approx(0.1) and spec.num_actions == 2 and spec.state_dim == 2
    metrics = runner.learn()
    assert runner.data.val_episodes is not None and len(runner.data.val_episodes) == 2
    assert metrics["Val/flow_loss"] > 0 and "Val/action_mae_norm/1" in metrics
    meta = export_checkpoint(tmp_path / "run" / "model_1.pt", tmp_path / "vla.onnx")
    assert meta.obs_groups["camera_front"] == [16, 16, 3] and meta.control_rate_hz == pytest.approx(10.0)
    assert set(meta.instruction["texts"]) == set(INSTRUCTIONS)
    policy = OnnxPolicy(tmp_path / "vla.onnx")
    assert policy.instructions is not None and set(policy.instructions.texts) == set(INSTRUCTIONS)


def test_a_dataset_written_by_lerobot_gives_its_names_cameras_and_tasks(tmp_path):
    root = Path(__file__).resolve().parents[1] / "data" / "fixtures" / "lerobot_dataset"
    spec = DatasetSpec.read(root)
    assert (spec.state_dim, spec.num_actions, spec.fps) == (3, 2, 10.0)
    assert spec.action_names == ["vx", "vy"] and spec.observation_names == {"policy": ["x", "y", "z"]}
    assert spec.cameras == {"front": [32, 48], "wrist": [16, 16]} and len(spec.instructions) == 2
    obs = spec.get_observations()
    assert obs["policy"].shape == (1, 3) and obs["camera_wrist"].shape == (1, 16, 16, 3)
    with pytest.raises(ValueError, match="no simulator to step: pass --task NAME"):
        spec.step(torch.zeros(1, 2))
    assert DatasetSpec.from_dict(spec.to_dict(), num_envs=4).get_observations().batch_size == (4,)
    _, runner = build_dataset_run(root, "flow-bc", [*TINY_FLOW, *SHORT, "--agent.val_fraction", "0.34"],
                                  max_iterations=1, log_dir=tmp_path)  # fmt: skip
    metrics = runner.learn()
    assert (
        "Val/action_mae/vy" in metrics and runner.data.val_episodes is not None and len(runner.data.val_episodes) == 1
    )


def test_beside_a_task_the_rollouts_run_with_the_validation(state_dataset):
    _, runner = _flow_run(state_dataset, None)
    cfg = runner.cfg
    cfg.max_iterations, cfg.val_fraction = 1, 0.2
    with_task = PretrainRunner(InstructedPointEnv(num_envs=4, seed=1), cfg, None, run_info={"seed": 0})
    assert with_task.rollouts
    metrics = with_task.learn()
    assert "Val/flow_loss" in metrics and "Eval/success_rate" in metrics and "Eval/success/0" in metrics
    assert with_task.data.val_episodes is not None and len(with_task.data.val_episodes) == 2
