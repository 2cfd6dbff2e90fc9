"""LeRobotDataset v3.0: write/read round trip, layout details, and the errors a corrupt dataset gets."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from rslkit.data import Episode, check_matches_env, read_lerobot_dataset, recompute_stats, write_lerobot_dataset

LENGTHS = (5, 3, 7)


def _episodes(obs_dim=3, act_dim=2):
    g = torch.Generator().manual_seed(0)
    out = []
    for i, n in enumerate(LENGTHS):
        dones = torch.zeros(n, dtype=torch.bool)
        dones[-1] = True
        out.append(
            Episode(
                observations=torch.randn(n, obs_dim, generator=g),
                actions=torch.rand(n, act_dim, generator=g) * 2 - 1,
                rewards=torch.full((n,), float(i)),
                dones=dones,
                task="reach" if i < 2 else "push",
            )
        )
    return out


@pytest.fixture
def dataset(tmp_path):
    episodes = _episodes()
    return write_lerobot_dataset(tmp_path / "ds", episodes, fps=20, robot_type="toy"), episodes


def test_round_trip(dataset):
    root, episodes = dataset
    demos = read_lerobot_dataset(root)
    torch.testing.assert_close(demos.observations, torch.cat([e.observations for e in episodes]))
    torch.testing.assert_close(demos.actions, torch.cat([e.actions for e in episodes]))
    assert demos.episode_from.tolist() == [0, 5, 8] and demos.episode_to.tolist() == [5, 8, 15]
    assert demos.episode_index.tolist() == [0] * 5 + [1] * 3 + [2] * 7
    assert demos.dones is not None and demos.dones.sum() == 3 and bool(demos.dones[4])
    assert demos.episode_returns().tolist() == [0.0, 3.0, 14.0]
    assert demos.tasks == ["reach", "push"] and demos.fps == 20
    assert demos.stats["action"]["min"] == pytest.approx(demos.actions.min(0).values.tolist())


def test_layout_matches_lerobot_v3(dataset):
    root, _ = dataset
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"], info["fps"]) == (3, 15, 2, 20)
    assert info["features"]["observation.state"] == {"dtype": "float32", "shape": [3], "names": None}
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert info["features"][key]["shape"] == [1]
    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert pa.types.is_fixed_size_list(data.schema.field("observation.state").type)
    assert data.schema.field("observation.state").type.list_size == 3
    assert data["index"].to_pylist() == list(range(15))
    assert data["frame_index"].to_pylist()[5:8] == [0, 1, 2]
    assert data["timestamp"].to_pylist()[:2] == pytest.approx([0.0, 0.05])
    assert data["task_index"].to_pylist() == [0] * 8 + [1] * 7
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    assert episodes["dataset_from_index"].to_pylist() == [0, 5, 8]
    assert episodes["dataset_to_index"].to_pylist() == [5, 8, 15]
    assert episodes["tasks"].to_pylist() == [["reach"], ["reach"], ["push"]]
    assert episodes["stats/action/count"].to_pylist() == [[5], [3], [7]]
    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks["task_index"].to_pylist() == [0, 1] and tasks["task"].to_pylist() == ["reach", "push"]
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]
    stats = json.loads((root / "meta/stats.json").read_text())
    assert {"min", "max", "mean", "std", "count", "q01", "q99"} <= set(stats["observation.state"])
    assert stats["observation.state"]["count"] == [15]


def test_one_dimensional_features_are_scalar_columns(tmp_path):
    root = write_lerobot_dataset(tmp_path / "ds", _episodes(obs_dim=3, act_dim=1), fps=10)
    assert pq.read_table(root / "data/chunk-000/file-000.parquet").schema.field("action").type == pa.float32()
    assert read_lerobot_dataset(root).actions.shape == (15, 1)


def test_missing_or_legacy_dataset(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m rslkit.record"):
        read_lerobot_dataset(tmp_path / "nothing")
    (tmp_path / "legacy/meta").mkdir(parents=True)
    (tmp_path / "legacy/meta/episodes.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="convert_dataset_v21_to_v30"):
        read_lerobot_dataset(tmp_path / "legacy")


def test_wrong_version(dataset):
    root, _ = dataset
    info = json.loads((root / "meta/info.json").read_text())
    info["codebase_version"] = "v2.1"
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="codebase_version 'v2.1'.*convert"):
        read_lerobot_dataset(root)


def test_missing_stats_names_the_fix(dataset):
    root, _ = dataset
    (root / "meta/stats.json").unlink()
    with pytest.raises(ValueError, match="no meta/stats.json.*recompute_stats"):
        read_lerobot_dataset(root)
    recompute_stats(root)
    assert read_lerobot_dataset(root).stats["observation.state"]["count"] == [15]


def test_stats_of_wrong_size(dataset):
    root, _ = dataset
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["action"]["max"] = [1.0]
    (root / "meta/stats.json").write_text(json.dumps(stats))
    with pytest.raises(ValueError, match="'action/max' of size 2.*recompute_stats"):
        read_lerobot_dataset(root)


def test_nan_names_the_episode(dataset):
    root, _ = dataset
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    obs = np.stack(table["observation.state"].to_numpy(zero_copy_only=False)).astype(np.float32)
    obs[9, 1] = np.nan  # frame 1 of episode 2
    column = pa.FixedSizeListArray.from_arrays(pa.array(obs.reshape(-1)), 3)
    pq.write_table(table.set_column(0, "observation.state", column), path)
    with pytest.raises(ValueError, match=r"NaN or inf values in episodes \[2\]; drop those episodes"):
        read_lerobot_dataset(root)


def test_inconsistent_episode_metadata(dataset):
    root, _ = dataset
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    i = table.schema.get_field_index("dataset_to_index")
    pq.write_table(table.set_column(i, "dataset_to_index", pa.array([5, 9, 15])), path)
    with pytest.raises(ValueError, match="Episode 1 .* corrupt"):
        read_lerobot_dataset(root)


def test_missing_feature(dataset):
    root, _ = dataset
    info = json.loads((root / "meta/info.json").read_text())
    del info["features"]["action"]
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="no 'action' feature"):
        read_lerobot_dataset(root)


def _edit_info(root, edit):
    info = json.loads((root / "meta/info.json").read_text())
    edit(info)
    (root / "meta/info.json").write_text(json.dumps(info))


@pytest.mark.parametrize(
    "corrupt, match",
    [
        (lambda p: p.write_text('{"codebase_version": "v3.0", "features": {'), r"is not valid JSON \(.* line 1"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "is not a UTF-8 text file"),
        (lambda p: p.write_text("[1, 2]"), "must hold a JSON object, got a list"),
        (lambda p: _edit_info(p.parents[1], lambda i: i.pop("features")), r"lacks the keys \['features'\]"),
        (lambda p: _edit_info(p.parents[1], lambda i: i.pop("codebase_version")), r"keys \['codebase_version'\]"),
        (lambda p: _edit_info(p.parents[1], lambda i: i.update(features=[])), "'features' must map"),
        (lambda p: _edit_info(p.parents[1], lambda i: i.update(fps="fast")), "'fps' must be a number"),
        (lambda p: _edit_info(p.parents[1], lambda i: i["features"]["action"].pop("shape")), "'dtype' and 'shape'"),
    ],
    ids=["truncated", "binary", "not_object", "no_features", "no_version", "features_list", "fps", "no_shape"],
)
def test_broken_info_json_names_the_file(dataset, corrupt, match):
    root, _ = dataset
    path = root / "meta/info.json"
    corrupt(path)
    with pytest.raises(ValueError, match=match) as err:
        read_lerobot_dataset(root)
    assert str(path) in str(err.value) and "re-create the dataset" in str(err.value)


def test_broken_stats_json_names_the_file(dataset):
    root, _ = dataset
    (root / "meta/stats.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"stats\.json' is not valid JSON.*recompute_stats"):
        read_lerobot_dataset(root)


def test_dims_must_match_env(dataset):
    demos = read_lerobot_dataset(dataset[0])
    check_matches_env(demos, 3, 2)
    with pytest.raises(ValueError, match="'observation.state' has 3 dims but task 'x' observes 4.*same task"):
        check_matches_env(demos, 4, 2, "task 'x'")
    with pytest.raises(ValueError, match="'action' has 2 dims but the env takes 1 actions"):
        check_matches_env(demos, 3, 1)


def test_environment_state_round_trips_with_its_statistics(tmp_path):
    episodes = _episodes()
    g = torch.Generator().manual_seed(1)
    for ep in episodes:
        ep.env_state = torch.randn(len(ep), 4, generator=g)
    root = write_lerobot_dataset(tmp_path / "ds", episodes, fps=20)
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["features"]["observation.environment_state"]["shape"] == [4]
    demos = read_lerobot_dataset(root)
    expected = torch.cat([e.env_state for e in episodes])
    assert demos.env_state is not None
    torch.testing.assert_close(demos.env_state, expected)
    stats = demos.stats["observation.environment_state"]
    assert stats["min"] == pytest.approx(expected.min(0).values.tolist())
    assert read_lerobot_dataset(write_lerobot_dataset(tmp_path / "plain", _episodes(), fps=20)).env_state is None
    episodes[1].env_state = None
    with pytest.raises(ValueError, match="env_state"):
        write_lerobot_dataset(tmp_path / "mixed", episodes, fps=20)
    with pytest.raises(ValueError, match=r"env_state must have shape \[5, E\]"):
        Episode(torch.zeros(5, 3), torch.zeros(5, 2), env_state=torch.zeros(4, 2))


@pytest.mark.parametrize("part", ["data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet"])
def test_truncated_parquet_names_the_file(dataset, part):
    root, _ = dataset
    path = root / part
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"'{path}' is not a readable parquet file .*truncated"):
        read_lerobot_dataset(root)


def test_writer_refuses_bad_input(tmp_path, dataset):
    root, episodes = dataset
    with pytest.raises(ValueError, match="already holds a dataset; choose another --out, or pass --overwrite") as err:
        write_lerobot_dataset(root, episodes, fps=20)
    assert "overwrite=True" not in str(err.value), "the command-line flag, not the Python spelling"
    write_lerobot_dataset(root, episodes[:1], fps=20, overwrite=True)
    assert read_lerobot_dataset(root).num_episodes == 1
    bad = Episode(torch.full((2, 3), float("nan")), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="NaN or inf"):
        write_lerobot_dataset(tmp_path / "bad", [bad], fps=20)
    with pytest.raises(ValueError, match="same T"):
        Episode(torch.zeros(3, 3), torch.zeros(2, 2))


def test_episode_stats_of_every_feature_as_lerobot_types_them(dataset):
    root, episodes = dataset
    info = json.loads((root / "meta/info.json").read_text())
    table = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    stats = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
    expected = [f"stats/{key}/{stat}" for key in info["features"] for stat in stats]
    assert [c for c in table.column_names if c.startswith("stats/")] == expected
    assert table.column_names[-2:] == ["meta/episodes/chunk_index", "meta/episodes/file_index"]
    types = {c: table.schema.field(c).type for c in expected}
    assert all(pa.types.is_list(t) for t in types.values())  # variable-length lists, as lerobot writes them
    assert types["stats/frame_index/min"] == pa.list_(pa.int64()) and types["stats/next.done/max"] == pa.list_(
        pa.bool_()
    )
    assert types["stats/observation.state/mean"] == pa.list_(pa.float64())
    assert table["stats/frame_index/max"].to_pylist() == [[4], [2], [6]]
    assert table["stats/observation.state/min"][1].as_py() == pytest.approx(
        episodes[1].observations.min(0).values.tolist()
    )
