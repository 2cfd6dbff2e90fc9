"""``python -m rslkit.realworld local --algo ppo``: learner and 2 actor processes end to end, a checkpoint that the
synchronous runner (play.py, export) loads, and a resumed run that continues it."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import torch
from transport_helpers import needs_netns

from rslkit.recipes import load_run
from rslkit.runners.on_policy_runner import OnPolicyRunner

pytestmark = needs_netns
LOCAL = [sys.executable, "-m", "rslkit.realworld", "local", "--task", "point-reach", "--algo", "ppo",
         "--learner.rollouts_per_update", "2", "--learner.max_staleness", "1", "--learner.actor_envs", "8",
         "--agent.num_steps_per_env", "8",
         "--actor.give_up_s", "5"]  # fmt: skip


def _local(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [*LOCAL, "--logdir", str(tmp_path), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def test_local_ppo_end_to_end_and_resume(tmp_path: Path) -> None:
    done = _local(tmp_path, "--max_iterations", "4")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run_dir,) = (tmp_path / "point-reach").glob("*_realworld")
    assert (run_dir / "model_4.pt").is_file()
    assert {p.name for p in run_dir.glob("actor-*")} == {"actor-0", "actor-1"}
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and max(float(r["Staleness/staleness_max"]) for r in rows) <= 1
    assert "Staleness/frac_1" in rows[0] and "Perf/updates_per_s" in rows[0]
    _, runner, data = load_run(run_dir / "model_4.pt", num_envs=4)  # what play.py and export build
    assert type(runner) is OnPolicyRunner and data["iteration"] == 4
    saved = data["alg"]["policy"]
    assert all(torch.equal(v, saved[k]) for k, v in runner.policy.state_dict().items())

    again = _local(tmp_path, "--max_iterations", "6", "--resume")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "Resumed" in again.stdout and (run_dir / "model_6.pt").is_file()


def test_help_names_the_on_policy_flags() -> None:
    out = subprocess.run([*LOCAL[:4], "--help"], capture_output=True, text=True, timeout=60).stdout
    for flag in ("--algo", "--learner.rollouts_per_update", "--learner.max_staleness", "--learner.actor_envs",
                 "--pretrained"):  # fmt: skip
        assert flag in out
