"""rslkit against datasets written by lerobot 0.4.4 itself (tests/data/fixtures, made by make_lerobot_fixtures.py).

The three defects found with real lerobot datasets: tasks in pandas' index column, image/video features skipped
silently, and episodes metadata lerobot could not append to.
"""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from rslkit.data import Episode, read_lerobot_dataset, write_lerobot_dataset
from rslkit.data.stats import image_stats

FIXTURES = Path(__file__).parent / "fixtures"
LEROBOT = FIXTURES / "lerobot_dataset"
APPENDED = FIXTURES / "rslkit_then_lerobot"
TASK_A, TASK_B = "pick up the red cube", "push the blue cube to the left"
LENGTHS = (3, 4, 5)


def picture(episode: int, frame: int, height: int = 32, width: int = 48) -> np.ndarray:
    """``make_lerobot_fixtures.image`` (that script imports lerobot, so the tests keep a copy)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    rgb = [40 + 4 * x + 15 * frame, 30 + 5 * y + 20 * episode, 220 - 2 * x - 2 * y + 7 * frame]
    return np.clip(np.stack(rgb, -1), 0, 255).astype(np.uint8)


def _sources(demos, height=32, width=48):
    frames = [np.arange(int(b - a)) for a, b in zip(demos.episode_from, demos.episode_to)]
    pairs = zip(demos.episode_index.tolist(), np.concatenate(frames).tolist())
    return np.stack([picture(e, t, height, width) for e, t in pairs])


def _schema(path):
    return [(f.name, str(f.type)) for f in pq.read_schema(path)]


def test_tasks_from_lerobots_index_column():
    table = pq.read_table(LEROBOT / "meta/tasks.parquet")
    assert table.schema.field("__index_level_0__").type == pa.large_string()  # what lerobot writes
    demos = read_lerobot_dataset(LEROBOT)
    assert demos.tasks == [TASK_A, TASK_B]
    assert demos.task_index.tolist() == [0] * 3 + [1] * 4 + [0] * 5
    # lerobot rewrote the tasks of the rslkit dataset it appended to: a 'task' index column, now large_string
    assert pq.read_schema(APPENDED / "meta/tasks.parquet").field("task").type == pa.large_string()
    assert read_lerobot_dataset(APPENDED).tasks == [TASK_A, TASK_B]


def test_tasks_without_a_string_column_are_an_error(tmp_path):
    import shutil

    root = shutil.copytree(LEROBOT, tmp_path / "ds")
    pq.write_table(pa.table({"task_index": [0, 1], "name": [1, 2]}), root / "meta/tasks.parquet")
    with pytest.raises(ValueError, match=r"task string in a 'task' or '__index_level_0__' string column"):
        read_lerobot_dataset(root)
    (root / "meta/tasks.parquet").unlink()
    with pytest.raises(ValueError, match="has no meta/tasks.parquet"):
        read_lerobot_dataset(root)


def test_state_action_and_done_exactly():
    demos = read_lerobot_dataset(LEROBOT)
    assert demos.num_episodes == 3 and demos.episode_to.tolist() == [3, 7, 12] and demos.fps == 10
    t = torch.cat([torch.arange(n) for n in LENGTHS]).float()
    ep = demos.episode_index.float()
    expected_obs = torch.stack([ep + 0.1 * t + 0.01 * k for k in range(3)], -1)
    torch.testing.assert_close(demos.observations, expected_obs)
    torch.testing.assert_close(demos.actions, expected_obs[:, :2] - 1.0)
    assert demos.dones.nonzero().squeeze(-1).tolist() == [2, 6, 11] and demos.rewards is None


def test_cameras_are_ignored_unless_asked_for():
    demos = read_lerobot_dataset(LEROBOT)
    assert demos.images == {} and demos.available_cameras == ["front", "wrist"]
    with pytest.raises(ValueError, match=r"no camera 'top'; its cameras are \['front', 'wrist'\]"):
        read_lerobot_dataset(LEROBOT, cameras=["top"])


def test_image_feature_is_lossless():
    demos = read_lerobot_dataset(LEROBOT, cameras=["wrist"])
    np.testing.assert_array_equal(demos.images["wrist"].numpy(), 255 - _sources(demos, 16, 16))


@pytest.mark.parametrize("root", [LEROBOT, APPENDED], ids=["lerobot", "rslkit_then_lerobot"])
def test_video_feature_decodes_as_lerobot_decodes_it(root):
    demos = read_lerobot_dataset(root, cameras=["front"])
    frames = demos.images["front"].numpy().astype(np.float64)
    error = np.abs(frames - _sources(demos)).reshape(len(frames), -1).mean(1)
    assert error.max() < 4
    theirs = json.loads((FIXTURES / "lerobot_decoding.json").read_text())[root.name]
    np.testing.assert_allclose(error, theirs["mean_abs_error"], atol=1e-3)
    np.testing.assert_allclose(frames.reshape(len(frames), -1, 3).mean(1), theirs["channel_means"], atol=1e-3)


def test_dataset_lerobot_appended_to():
    demos = read_lerobot_dataset(APPENDED, cameras=["front"])
    assert demos.num_episodes == 3 and demos.episode_to.tolist() == [3, 7, 10]
    assert demos.task_index.tolist() == [0] * 7 + [1] * 3
    episodes = pq.read_table(APPENDED / "meta/episodes/chunk-000/file-001.parquet")
    assert episodes["videos/observation.images.front/file_index"].to_pylist() == [1]  # decoded from file-001.mp4
    ours, theirs = (_schema(APPENDED / f"meta/episodes/chunk-000/file-00{i}.parquet") for i in (0, 1))
    assert ours == theirs  # rslkit's episodes file (file-000) and lerobot's (file-001) share one schema


def _like_the_lerobot_fixture(tmp_path):
    """The fixture's episodes written by rslkit (its ``wrist`` image feature aside: rslkit writes videos)."""
    episodes = []
    for e, n in enumerate(LENGTHS):
        t = torch.arange(n, dtype=torch.float32)
        obs = torch.stack([e + 0.1 * t + 0.01 * k for k in range(3)], -1)
        dones = torch.arange(n) == n - 1
        front = torch.from_numpy(np.stack([picture(e, i) for i in range(n)]))
        task = TASK_B if e == 1 else TASK_A
        episodes.append(Episode(obs, obs[:, :2] - 1, dones=dones, task=task, images={"front": front}))
    names = {"obs_names": ["x", "y", "z"], "action_names": ["vx", "vy"]}
    return write_lerobot_dataset(tmp_path / "ours", episodes, fps=10, robot_type="toy", **names)


def test_rslkit_writes_what_lerobot_writes(tmp_path):
    ours = _like_the_lerobot_fixture(tmp_path)

    def without_wrist(fields):
        return [f for f in fields if "observation.images.wrist" not in f[0]]

    episodes_file, data_file = "meta/episodes/chunk-000/file-000.parquet", "data/chunk-000/file-000.parquet"
    assert _schema(ours / episodes_file) == without_wrist(_schema(LEROBOT / episodes_file))
    assert _schema(ours / data_file) == without_wrist(_schema(LEROBOT / data_file))
    info, lerobot_info = (json.loads((r / "meta/info.json").read_text()) for r in (ours, LEROBOT))
    lerobot_info["features"].pop("observation.images.wrist")
    assert info["features"] == lerobot_info["features"]
    same = ("codebase_version", "fps", "total_episodes", "total_frames", "total_tasks", "data_path", "video_path")
    assert {k: info[k] for k in same} == {k: lerobot_info[k] for k in same}
    stats, lerobot_stats = (json.loads((r / "meta/stats.json").read_text()) for r in (ours, LEROBOT))
    assert set(stats) == set(lerobot_stats) - {"observation.images.wrist"}
    assert stats["next.done"]["min"] == [False] and stats["frame_index"]["max"] == lerobot_stats["frame_index"]["max"]
    episodes = pq.read_table(ours / episodes_file)
    lerobot_episodes = pq.read_table(LEROBOT / episodes_file)
    assert episodes["tasks"].to_pylist() == lerobot_episodes["tasks"].to_pylist()
    for column in ("length", "dataset_from_index", "dataset_to_index", "videos/observation.images.front/to_timestamp"):
        assert episodes[column].to_pylist() == pytest.approx(lerobot_episodes[column].to_pylist()), column


def test_image_stats_against_lerobots():
    """lerobot computes camera stats from the source pictures; rslkit matches its min, max, mean and sample count.
    lerobot 0.4.4's std is 0 (it squares uint8 pixels, which overflow); rslkit writes the true std."""
    table = pq.read_table(LEROBOT / "meta/episodes/chunk-000/file-000.parquet")
    for e, n in enumerate(LENGTHS):
        ours = image_stats(np.stack([picture(e, t) for t in range(n)]))
        theirs = {k: np.array(table[f"stats/observation.images.front/{k}"][e].as_py()) for k in ours}
        for stat in ("min", "max", "mean", "count"):
            np.testing.assert_allclose(np.array(ours[stat]), theirs[stat], rtol=1e-12, err_msg=stat)
        for stat in ("q01", "q10", "q50", "q90", "q99"):  # lerobot: histogram estimates of pixels in steps of 4-5
            np.testing.assert_allclose(np.array(ours[stat]), theirs[stat], atol=5 / 255, err_msg=stat)
        assert (theirs["std"] == 0).all() and (np.array(ours["std"]) > 0.05).all()
