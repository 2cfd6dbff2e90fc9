"""Checkpoints are plain data read with torch's restricted unpickler: a crafted file is refused without running its
payload, anything but plain data is refused at save time, and version-1 files (a NumPy RNG array) still load."""

from __future__ import annotations

import pickle
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from rslkit.runners.episode_stats import EpisodeStats
from rslkit.runners.run_state import capture_run_state, restore_run_state
from rslkit.utils.checkpoint import load_checkpoint, load_plain, save_checkpoint


class CreatesFile:
    """Unpickling this opens (creates) ``marker``: the stand-in for any code a crafted checkpoint would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


class _NoEnvState:
    """An env without ``state_dict``: :func:`capture_run_state` records only RNG and statistics."""


def test_crafted_checkpoint_is_refused_without_running_its_payload(tmp_path: Path) -> None:
    live = tmp_path / "live"
    pickle.loads(pickle.dumps(CreatesFile(live)))  # the payload is real: plain unpickling runs it
    assert live.exists()
    marker = tmp_path / "pwned"
    path = tmp_path / "model_1.pt"
    torch.save({"rslkit_checkpoint_version": 2, "algorithm": "ppo", "alg": CreatesFile(marker)}, path)
    with pytest.raises(ValueError, match=r"Refused to load checkpoint .*io\.open.*nothing from it was run"):
        load_checkpoint(path)
    assert not marker.exists()


def test_plain_payload_round_trips(tmp_path: Path) -> None:
    payload = {
        "algorithm": "ppo",
        "iteration": 3,
        "alg": {"policy": {"w": torch.arange(4.0)}},
        "agent_cfg": {"hidden": (16, 16), "name": "x", "lr": 1e-3, "flag": True, "none": None},
        "returns": [1.0, 2.5],
    }
    save_checkpoint(tmp_path / "c.pt", payload)
    data = load_checkpoint(tmp_path / "c.pt")
    assert data["rslkit_checkpoint_version"] == 2
    assert torch.equal(data["alg"]["policy"]["w"], torch.arange(4.0))
    assert data["agent_cfg"] == payload["agent_cfg"] and data["returns"] == [1.0, 2.5]


@pytest.mark.parametrize(
    "value,entry",
    [
        (np.zeros(3), "replay.rows"),
        (np.float64(1.0), "replay.rows"),
        ([1, {"deep": Path("x")}], "replay.rows[1].deep"),
    ],
)
def test_save_refuses_what_is_not_plain_data(tmp_path: Path, value: object, entry: str) -> None:
    with pytest.raises(TypeError, match=rf"Checkpoint entry '{re.escape(entry)}' is a .*only tensors"):
        save_checkpoint(tmp_path / "c.pt", {"replay": {"rows": value}})
    assert list(tmp_path.iterdir()) == []


def test_rng_state_round_trips_as_plain_data(tmp_path: Path) -> None:
    stats = EpisodeStats(2, torch.device("cpu"))
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    save_checkpoint(tmp_path / "c.pt", capture_run_state(_NoEnvState(), stats))  # type: ignore[arg-type]
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    restore_run_state(load_checkpoint(tmp_path / "c.pt"), _NoEnvState(), stats)  # type: ignore[arg-type]
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])


def test_version_1_checkpoint_with_numpy_rng_state_still_loads(tmp_path: Path) -> None:
    stats = EpisodeStats(2, torch.device("cpu"))
    np.random.seed(5)
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    expected = np.random.rand()
    old = {"rslkit_checkpoint_version": 1, "rng": state, "env_state": None, "episode_stats": stats.state_dict()}
    torch.save(old, tmp_path / "old.pt")  # as rslkit wrote it before safe loading
    np.random.seed(9)
    restore_run_state(load_checkpoint(tmp_path / "old.pt"), _NoEnvState(), stats)  # type: ignore[arg-type]
    assert np.random.rand() == expected


def test_load_plain_refuses_a_crafted_file_without_a_checkpoint_envelope(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    torch.save([CreatesFile(marker)], tmp_path / "optimizer.pt")
    with pytest.raises(ValueError, match=r"Refused to load checkpoint .*io\.open"):
        load_plain(tmp_path / "optimizer.pt")
    assert not marker.exists()
    torch.save({"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1}]}, tmp_path / "ok.pt")
    assert load_plain(tmp_path / "ok.pt")["param_groups"] == [{"lr": 0.1}]


def test_a_chain_runner_reads_its_checkpoint_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ReinFlow's load reads the file once, both to recognise a behaviour-cloning checkpoint and to resume."""
    import rslkit.utils.checkpoint as checkpoint
    from rslkit.envs import make_env
    from rslkit.models.flow import FlowPolicyCfg
    from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg

    policy = FlowPolicyCfg(horizon=2, num_inference_steps=2, hidden_dim=16, num_blocks=1)
    cfg = ReinFlowRunnerCfg(policy=policy, num_steps_per_env=4, eval_interval=0, logger=())
    runner = ReinFlowRunner(make_env("pendulum", num_envs=2, episode_length=8, seed=0), cfg, None)
    runner.save(tmp_path / "model_0.pt")
    reads = []
    read = checkpoint.load_plain
    monkeypatch.setattr(checkpoint, "load_plain", lambda *a: reads.append(a) or read(*a))
    runner.load(tmp_path / "model_0.pt")
    assert len(reads) == 1 and runner.initialized
