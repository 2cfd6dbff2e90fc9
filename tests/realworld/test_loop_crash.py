"""The whole loop as users run it (``python -m rslkit.realworld learner`` and ``actor`` processes, a real-time
pendulum): kill -9 the learner and the actor mid-run, restart them, and count that every transition the actor
spooled is in the learner's final buffer exactly once; stop the learner and check the actor missed no tick."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from transport_helpers import needs_netns, wait_until

from rslkit.link.spool import Spool
from rslkit.link.transitions import TransitionSchema
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint

pytestmark = needs_netns
ROOT = Path(__file__).resolve().parents[2]
FAST_LEARNER = [
    "--agent.logger", "", "--learner.updates_per_iteration", "20", "--learner.iteration_timeout_s", "0.3",
    "--learner.checkpoint_every_s", "0", "--agent.save_interval", "100000", "--agent.algorithm.utd_ratio", "1",
    "--agent.learning_starts", "50",
]  # fmt: skip
"""Cheap learner settings, and no checkpoint but the first (at serve) and the last (at SIGTERM): what a killed
learner acknowledged survives only in its journal."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "rslkit.realworld", *args],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def learner(run_dir: Path, port: int, log: Path, resume: bool = False) -> subprocess.Popen:
    args = ["learner", "--task", "pendulum", "--run_dir", str(run_dir), "--bind", f"127.0.0.1:{port}", *FAST_LEARNER]
    proc = start(args + (["--resume"] if resume else []), log)
    wait_until(lambda: (run_dir / "learner.json").exists() or proc.poll() is not None, 120, "the learner to serve")
    assert proc.poll() is None, log.read_text()[-3000:]
    return proc


def actor(actor_dir: Path, port: int, log: Path, steps: int, hz: float = 200.0, *extra: str) -> subprocess.Popen:
    args = [
        "actor", "--task", "pendulum", "--actor.learner", f"127.0.0.1:{port}", "--actor_dir", str(actor_dir),
        "--actor.max_env_steps", str(steps), "--actor.spool_every_s", "0.5", "--actor.robot.control_hz", str(hz),
        "--actor.robot.min_reset_s", "0.05", "--actor.robot.settle_s", "0", "--actor.first_weights_timeout_s", "1",
        *extra,
    ]  # fmt: skip
    return start(args, log)


def finish(proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"process did not end in {timeout_s} s:\n{log.read_text()[-3000:]}") from None
    assert proc.returncode == 0, log.read_text()[-3000:]


def acked(actor_dir: Path) -> int:
    """The actor's acknowledged watermark (-1 before its spool exists)."""
    try:
        return int(json.loads((actor_dir / "spool" / "spool.json").read_text())["acked"])
    except (FileNotFoundError, json.JSONDecodeError):
        return -1


def spooled(actor_dir: Path) -> int:
    """Transitions the actor ever spooled (its next seq)."""
    meta = json.loads((actor_dir / "spool" / "spool.json").read_text())
    spool = Spool(actor_dir / "spool", "actor-0", TransitionSchema.from_json(meta["schema"]))
    try:
        return spool.next_seq
    finally:
        spool.close()


def stored_keys(run_dir: Path) -> list[tuple[int, int]]:
    data = load_checkpoint(latest_checkpoint(run_dir))
    keys = data["realworld"]["row_keys"]["keys"].numpy()
    return sorted((int(a), int(s)) for a, s, _ in keys)


def test_kill_9_learner_and_actor_lose_nothing_and_store_nothing_twice(tmp_path: Path) -> None:
    port, run_dir, actor_dir, log = free_port(), tmp_path / "run", tmp_path / "actor", tmp_path / "log.txt"
    lrn = learner(run_dir, port, log)
    act = actor(actor_dir, port, log, 2400)
    wait_until(lambda: acked(actor_dir) >= 100, 120, "the learner to acknowledge 100 transitions")
    lrn.send_signal(signal.SIGKILL)  # mid-run: transitions in its journal, some unacknowledged in the spool
    lrn.wait()
    (run_dir / "learner.json").unlink(missing_ok=True)
    time.sleep(1.0)  # the actor keeps acting and spooling meanwhile
    lrn = learner(run_dir, port, log, resume=True)
    before = acked(actor_dir)
    wait_until(lambda: acked(actor_dir) >= before + 100, 120, "the resumed learner to acknowledge 100 more")
    act.send_signal(signal.SIGKILL)  # mid-episode
    act.wait()
    act = actor(actor_dir, port, log, 300)  # resumes from its spool, continues the episode numbering
    finish(act, log)
    lrn.send_signal(signal.SIGTERM)  # saves a final checkpoint
    finish(lrn, log)
    assert "transitions replayed from the journal" in log.read_text()
    total = spooled(actor_dir)
    assert total > 400, log.read_text()[-3000:]
    assert stored_keys(run_dir) == [(0, s) for s in range(total)]  # every spooled transition, exactly once
    episodes = [int(line.split(",")[0]) for line in (actor_dir / "episodes.csv").read_text().splitlines()[1:]]
    assert episodes == sorted(set(episodes))  # the restarted actor did not reuse an episode number


def test_actor_misses_no_tick_while_the_learner_is_stopped(tmp_path: Path) -> None:
    port, run_dir, actor_dir, log = free_port(), tmp_path / "run", tmp_path / "actor", tmp_path / "log.txt"
    lrn = learner(run_dir, port, log)
    act = actor(actor_dir, port, log, 250, 50.0, "--actor.robot.max_tick_lateness_s", "0.01")
    try:
        time.sleep(1.5)
        lrn.send_signal(signal.SIGSTOP)  # hung learner: the stream stalls, the actor's ticks must not
        time.sleep(2.0)
        lrn.send_signal(signal.SIGCONT)
        finish(act, log)
    finally:
        lrn.send_signal(signal.SIGCONT)
        lrn.send_signal(signal.SIGTERM)
        lrn.wait(120)
    summary = json.loads((actor_dir / "summary.json").read_text())
    assert summary["robot"]["ticks"] == 250
    # A loop that waited on the stalled stream would miss ~100 ticks (2 s at 50 Hz); allow the odd tick that a
    # loaded 2-core machine's scheduler makes late by more than 10 ms.
    assert summary["robot"]["missed_ticks"] <= 2, summary["robot"]
    assert summary["unacked"] == 0  # caught up once the learner came back
