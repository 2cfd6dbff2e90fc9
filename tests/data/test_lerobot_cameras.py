"""Camera features in rslkit's LeRobotDataset writer and reader: video round trip, layout, statistics, bad input."""

import json
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from rslkit.data import Episode, read_lerobot_dataset, write_lerobot_dataset
from rslkit.data.stats import image_stats

FPS = 10
LENGTHS = (3, 5, 4)
SIZES = {"front": (16, 24), "wrist": (8, 12)}


def _picture(episode, t, height, width):
    y, x = np.mgrid[0:height, 0:width]
    rgb = [20 + 3 * x + 15 * t, 40 + 5 * y + 30 * episode, 200 - 2 * x - 3 * y]
    return np.clip(np.stack(rgb, -1), 0, 255).astype(np.uint8)


def _episodes(cameras=("front", "wrist")):
    out = []
    for e, n in enumerate(LENGTHS):
        t = torch.arange(n, dtype=torch.float32)
        images = {c: torch.from_numpy(np.stack([_picture(e, i, *SIZES[c]) for i in range(n)])) for c in cameras}
        out.append(Episode(torch.stack([t, t + e], -1), t[:, None] * 0.1, task=f"goal {e % 2}", images=images))
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    episodes = _episodes()
    return write_lerobot_dataset(tmp_path_factory.mktemp("cams") / "ds", episodes, fps=FPS), episodes


def test_video_round_trip(dataset):
    root, episodes = dataset
    demos = read_lerobot_dataset(root, cameras="all")
    assert demos.available_cameras == ["front", "wrist"] and sorted(demos.images) == ["front", "wrist"]
    for camera, (height, width) in SIZES.items():
        source = np.concatenate([ep.images[camera].numpy() for ep in episodes])
        frames = demos.images[camera].numpy()
        assert frames.shape == (sum(LENGTHS), height, width, 3) and frames.dtype == np.uint8
        diff = np.abs(frames.astype(np.int16) - source)
        assert diff.mean() < 4 and diff.max() < 40, (camera, diff.mean(), diff.max())
    assert demos.tasks == ["goal 0", "goal 1"] and demos.task_index.tolist() == [0] * 3 + [1] * 5 + [0] * 4
    only_front = read_lerobot_dataset(root, cameras=["observation.images.front"])
    assert list(only_front.images) == ["front"]


def test_timestamps_and_layout_match_lerobot(dataset):
    root, _ = dataset
    info = json.loads((root / "meta/info.json").read_text())
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    feature = info["features"]["observation.images.front"]
    assert feature["dtype"] == "video" and feature["shape"] == [16, 24, 3]
    assert feature["names"] == ["height", "width", "channels"]
    assert feature["info"]["video.codec"] == "av1" and feature["info"]["video.fps"] == FPS
    assert (root / "videos/observation.images.wrist/chunk-000/file-000.mp4").is_file()
    assert "observation.images.front" not in pq.read_schema(root / "data/chunk-000/file-000.parquet").names
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    assert episodes["videos/observation.images.front/from_timestamp"].to_pylist() == pytest.approx([0.0, 0.3, 0.8])
    assert episodes["videos/observation.images.front/to_timestamp"].to_pylist() == pytest.approx([0.3, 0.8, 1.2])
    assert episodes["videos/observation.images.front/file_index"].to_pylist() == [0, 0, 0]
    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert data["timestamp"].to_pylist()[3:6] == pytest.approx([0.0, 0.1, 0.2])


def test_image_stats_as_lerobot_computes_them(dataset):
    root, episodes = dataset
    table = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    mean = np.array(table["stats/observation.images.front/mean"].to_pylist())
    assert mean.shape == (3, 3, 1, 1) and ((mean > 0) & (mean < 1)).all()
    source = episodes[1].images["front"].numpy()
    expected = source.reshape(-1, 3).astype(np.float64) / 255
    np.testing.assert_allclose(mean[1].reshape(-1), expected.mean(0))
    np.testing.assert_allclose(
        np.array(table["stats/observation.images.front/std"][1].as_py()).reshape(-1), expected.std(0)
    )
    assert table["stats/observation.images.front/count"].to_pylist() == [[3], [5], [4]]
    stats = json.loads((root / "meta/stats.json").read_text())["observation.images.front"]
    everything = np.concatenate([ep.images["front"].numpy() for ep in episodes]).reshape(-1, 3) / 255
    np.testing.assert_allclose(np.array(stats["mean"]).reshape(-1), everything.mean(0))
    np.testing.assert_allclose(np.array(stats["std"]).reshape(-1), everything.std(0))
    assert stats["count"] == [12] and np.array(stats["min"]).shape == (3, 1, 1)


def test_image_stats_sample_like_lerobot():
    assert image_stats(np.zeros((1000, 4, 4, 3), np.uint8))["count"] == [177]  # F^0.75 frames of long episodes
    assert image_stats(np.zeros((60, 4, 4, 3), np.uint8))["count"] == [60]  # every frame of short ones
    striped = np.zeros((2, 320, 400, 3), np.uint8)
    striped[:, :, 1::2] = 255  # odd columns: sides of 300 px or more keep every int(400 / 150) = 2nd column only
    assert image_stats(striped)["max"] == [[[0.0]]] * 3


def test_state_only_callers_get_no_frames(dataset):
    demos = read_lerobot_dataset(dataset[0])
    assert demos.images == {} and demos.available_cameras == ["front", "wrist"]
    assert demos.observations.shape == (12, 2)


def test_missing_camera_lists_the_ones_there(dataset):
    with pytest.raises(ValueError, match=r"no camera 'side'; its cameras are \['front', 'wrist'\]"):
        read_lerobot_dataset(dataset[0], cameras=["front", "side"])


def _copy(root, tmp_path):
    import shutil

    return shutil.copytree(root, tmp_path / "copy")


def test_missing_video_file_says_what_to_do(dataset, tmp_path):
    root = _copy(dataset[0], tmp_path)
    (root / "videos/observation.images.wrist/chunk-000/file-000.mp4").unlink()
    assert read_lerobot_dataset(root, cameras=["front"]).images["front"].shape[0] == 12
    with pytest.raises(ValueError, match=r"Video file .*wrist.*file-000.mp4' .* is missing; download the dataset"):
        read_lerobot_dataset(root, cameras=["wrist"])


def test_frames_of_another_size_than_declared(dataset, tmp_path):
    root = _copy(dataset[0], tmp_path)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["observation.images.front"]["shape"] = [24, 16, 3]
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=r"declares frames \[24, 16, 3\] .* holds \[16, 24, 3\]; correct the feature"):
        read_lerobot_dataset(root, cameras=["front"])
    info["features"]["observation.images.front"]["shape"] = [16, 24, 1]
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="1 channels; rslkit reads RGB"):
        read_lerobot_dataset(root, cameras=["front"])


def test_video_shorter_than_its_episodes(dataset, tmp_path):
    from rslkit.data.video import encode_video

    root = _copy(dataset[0], tmp_path)
    encode_video(
        root / "videos/observation.images.front/chunk-000/file-000.mp4", np.zeros((10, 16, 24, 3), np.uint8), FPS
    )
    with pytest.raises(ValueError, match=r"no frame within .* of times \[1.0, 1.1\].*does not match meta/episodes"):
        read_lerobot_dataset(root, cameras=["front"])


def test_missing_pyav_is_an_import_error_naming_the_extra(dataset, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)
    assert read_lerobot_dataset(dataset[0]).images == {}  # state only: no PyAV needed
    with pytest.raises(ImportError, match=r"pip install -e '\.\[video\]'"):
        read_lerobot_dataset(dataset[0], cameras=["front"])


def test_writer_refuses_bad_cameras(tmp_path):
    ok = _episodes(("front",))
    with pytest.raises(ValueError, match=r"Episode 1 has cameras \[\] but episode 0 has \['front'\]"):
        write_lerobot_dataset(tmp_path / "a", [ok[0], _episodes(())[1]], fps=FPS)
    bigger = Episode(ok[1].observations, ok[1].actions, images={"front": torch.zeros(5, 20, 24, 3, dtype=torch.uint8)})
    with pytest.raises(ValueError, match="'front' has 20x24 images in episode 1 but 16x24 in episode 0"):
        write_lerobot_dataset(tmp_path / "b", [ok[0], bigger], fps=FPS)
    odd = Episode(ok[0].observations, ok[0].actions, images={"front": torch.zeros(3, 15, 24, 3, dtype=torch.uint8)})
    with pytest.raises(ValueError, match="15x24 images; videos .* need an even height and width"):
        write_lerobot_dataset(tmp_path / "c", [odd], fps=FPS)
    with pytest.raises(ValueError, match="no video encoder 'libnope'"):
        write_lerobot_dataset(tmp_path / "d", ok, fps=FPS, video_codec="libnope")
    assert not any((tmp_path / name).exists() for name in "abcd")  # nothing half-written


@pytest.mark.parametrize(
    "frames, match",
    [
        (torch.zeros(3, 16, 24, 3), r"torch.float32 \[3, 16, 24, 3\]"),
        (torch.zeros(2, 16, 24, 3, dtype=torch.uint8), r"torch.uint8 \[2, 16, 24, 3\]"),
        (torch.zeros(3, 16, 24, dtype=torch.uint8), r"torch.uint8 \[3, 16, 24\]"),
        (torch.zeros(3, 3, 16, 24, dtype=torch.uint8), r"torch.uint8 \[3, 3, 16, 24\]"),
        (torch.zeros(3, 0, 24, 3, dtype=torch.uint8), r"torch.uint8 \[3, 0, 24, 3\]"),
    ],
    ids=["float", "length", "no_channels", "channels_first", "empty"],
)
def test_episode_checks_its_frames(frames, match):
    with pytest.raises(ValueError, match=r"Camera 'front' must hold uint8 frames \[3, H, W, 3\] .*, got " + match):
        Episode(torch.zeros(3, 2), torch.zeros(3, 1), images={"front": frames})


def test_h264_when_asked(tmp_path):
    root = write_lerobot_dataset(tmp_path / "ds", _episodes(("front",)), fps=FPS, video_codec="libx264")
    info = json.loads((root / "meta/info.json").read_text())
    assert info["features"]["observation.images.front"]["info"]["video.codec"] == "h264"
    assert read_lerobot_dataset(root, cameras=["front"]).images["front"].shape == (12, 16, 24, 3)
