"""``train.py`` without ``--task``: behaviour cloning from ``--dataset`` alone, and the errors that name the flag to
fix (a non-BC algorithm, no dataset, a directory that is not a dataset, a dataset without the policy's cameras)."""

import pytest

from rslkit.cli import train
from rslkit.data import record_episodes, write_lerobot_dataset
from tests.runners.instructed_point import InstructedPointEnv, expert


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Four episodes of states and actions, no camera and no instruction."""
    episodes = record_episodes(InstructedPointEnv(num_envs=4, seed=0), expert, 4)
    return str(write_lerobot_dataset(tmp_path_factory.mktemp("cli") / "demos", episodes, fps=30))


def _error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        train.main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algo", "ppo"], "--algo ppo trains in a simulator: pass --task NAME"),
        (["--algo", "vla-bc"], "--algo vla-bc without --task trains from a dataset alone: pass --dataset DIR"),
        (["--algo", "flow-bc", "--dataset", "DATASET", "--sim", "warp"], "--sim applies to a run with a simulated"),
        (["--algo", "flow-bc", "--dataset", "DATASET", "--env.num_envs", "2"], "--env.num_envs applies to a run"),
    ],
)
def test_train_without_a_task_names_the_flag_to_fix(capsys, dataset, argv, message):
    argv = [dataset if a == "DATASET" else a for a in argv]
    assert message in _error(capsys, [*argv, "--logdir", "/nonexistent"])


def test_a_directory_without_meta_info_is_refused_naming_dataset(capsys, tmp_path):
    err = _error(capsys, ["--algo", "vla-bc", "--dataset", str(tmp_path), "--logdir", str(tmp_path / "logs")])
    assert f"--dataset {tmp_path}" in err and "meta/info.json" in err


def test_flow_bc_trains_from_a_dataset_alone_and_a_vla_without_cameras_is_refused(capsys, dataset, tmp_path):
    tiny = [
        "--agent.updates_per_iteration",
        "2",
        "--agent.policy.hidden_dim",
        "16",
        "--agent.algorithm.batch_size",
        "8",
    ]
    runner = train.main(["--algo", "flow-bc", "--dataset", dataset, "--logdir", str(tmp_path), "--max_iterations", "1",
                         *tiny, "--agent.val_fraction", "0.25", "--agent.logger="])  # fmt: skip
    out = capsys.readouterr().out
    assert f"Dataset {dataset} | no simulator" in out and "Val/flow_loss" not in out
    assert (runner.log_dir / "model_1.pt").is_file() and "Val/flow_loss" in (runner.log_dir / "metrics.csv").read_text()
    assert runner.log_dir.parent.name == "dataset_demos"
    ckpt = str(runner.log_dir / "model_1.pt")
    assert "--resume without --task needs --checkpoint" in _error(capsys, ["--algo", "flow-bc", "--resume"])
    resumed = train.main(["--algo", "flow-bc", "--resume", "--checkpoint", ckpt, "--max_iterations", "2"])
    assert resumed.iteration == 2 and (runner.log_dir / "model_2.pt").is_file()
    with pytest.raises(ValueError, match="has no camera 'wrist'.*--agent.policy.cameras"):
        train.main(["--algo", "vla-bc", "--dataset", dataset, "--logdir", str(tmp_path), "--max_iterations", "1",
                    "--agent.policy.cameras", "wrist", "--agent.logger="])  # fmt: skip
