"""``python -m rslkit.realworld``: readable help, clear errors for bad input, and ``local`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transport_helpers import needs_netns

from rslkit.cli.realworld import main
from rslkit.realworld.rewards import load_reward
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", ["learner", "actor", "local"])
def test_help_of_every_command(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--task" in out and "--logdir" in out


def test_bad_input_is_refused_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["learner", "--task", "pendulum", "--pretrained", "bc.pt"])
    assert "--pretrained is for --algo reinflow" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Unknown config field 'learner.actor_envs'"):
        main(["learner", "--task", "pendulum", "--learner.actor_envs", "4"])  # a SAC actor drives one robot
    with pytest.raises(ValueError, match="pass --pretrained CKPT"):
        main(["learner", "--task", "pendulum", "--algo", "reinflow"])
    with pytest.raises(ValueError, match="Bad value for 'learner.publish'"):
        main(["learner", "--task", "pendulum", "--learner.publish", "pickle"])
    with pytest.raises(ValueError, match="Unknown config field 'actor.max_episode'"):
        main(["actor", "--task", "pendulum", "--actor.max_episode", "3"])
    with pytest.raises(ValueError, match="package.module:attribute"):
        load_reward("not_a_reference")
    with pytest.raises(ValueError, match="has no attribute 'no_such_function'"):
        load_reward("math:no_such_function")
    assert load_reward("numpy:ones_like") is not None


@needs_netns
def test_local_runs_learner_and_actor_and_stops_both(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "rslkit.realworld", "local", "--task", "pendulum", "--logdir", str(tmp_path),
        "--max_iterations", "100000", "--agent.logger", "", "--actor.max_episodes", "2", "--actor.realtime", "false",
        "--learner.iteration_timeout_s", "0.3", "--agent.learning_starts", "50",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run_dir,) = (tmp_path / "pendulum").iterdir()
    summary = json.loads((run_dir / "actor-0" / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["unacked"] == 0
    saved = load_checkpoint(latest_checkpoint(run_dir))
    assert saved["algorithm"] == "sac" and saved["total_env_steps"] == 400  # the learner stored both episodes
    assert not (run_dir / "learner.json").exists()  # removed when the learner stopped


def test_resume_picks_the_newest_real_world_run_not_a_train_run(tmp_path: Path) -> None:
    from argparse import Namespace

    from rslkit.cli.realworld import _latest_learner_run

    for name in ("2026-01-01_00-00-00_realworld", "2026-01-02_00-00-00_realworld_b", "2026-01-03_00-00-00"):
        (tmp_path / "pendulum" / name).mkdir(parents=True)
        (tmp_path / "pendulum" / name / "model_1.pt").touch()
    args = Namespace(logdir=str(tmp_path), task="pendulum", run_dir=None)
    assert _latest_learner_run(args).name == "2026-01-02_00-00-00_realworld_b"
    with pytest.raises(FileNotFoundError, match="no real-world learner run"):
        _latest_learner_run(Namespace(logdir=str(tmp_path), task="so101-reach", run_dir=None))


def test_a_refused_bind_creates_nothing(tmp_path: Path) -> None:
    """A bind refused for missing TLS is refused before the run directory (and its journal) exists."""
    with pytest.raises(ValueError, match="--tls_cert CERT.pem --tls_key KEY.pem") as refused:
        main(["learner", "--task", "pendulum", "--bind", "10.1.2.3:50051", "--logdir", str(tmp_path)])
    assert "--allow_insecure_remote" in str(refused.value) and "=True" not in str(refused.value)
    assert not any(tmp_path.iterdir())


def test_actor_target_errors_name_flags_and_come_first(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A target is HOST:PORT without a scheme; a remote one needs --tls_ca; both are said before anything is built
    (no unrelated robot warning first)."""
    logdir = ["--logdir", str(tmp_path)]
    with pytest.raises(ValueError, match="HOST:PORT without a scheme"):
        main(["actor", "--task", "pendulum", "--actor.learner", "http://10.1.2.3:50051", *logdir])
    with pytest.raises(ValueError, match="Pass --actor.tls_ca CA.pem") as refused:
        main(["actor", "--task", "pendulum", "--actor.learner", "10.1.2.3:50051", *logdir])
    assert "--actor.allow_insecure_remote" in str(refused.value) and "=True" not in str(refused.value)
    with pytest.raises(ValueError, match="Pass --actor.tls_ca CA.pem"):
        main(["actor", "--task", "pendulum", "--algo", "ppo", "--actor.learner", "10.1.2.3:50051", *logdir])
    assert "Cannot read the joints" not in caplog.text and not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "command, old, new",
    [
        ("actor", "--target", "--actor.learner"),
        ("actor", "--actor_id", "--actor.id"),
        ("actor", "--tls_ca", "--actor.tls_ca"),
        ("actor", "--tls_server_name", "--actor.tls_server_name"),
        ("actor", "--token_file", "--actor.token_file"),
        ("actor", "--allow_insecure_remote", "--actor.allow_insecure_remote"),
        ("local", "--num_envs", "--learner.actor_envs"),
        ("learner", "--max_staleness", "--learner.max_staleness"),
        ("local", "--actors", "--learner.rollouts_per_update"),
    ],
)
def test_old_connection_and_shortcut_flags_name_their_one_spelling(command: str, old: str, new: str) -> None:
    """One spelling of every setting: the actor's connection is ``--actor.*`` (as on the ROS 2 node), the on-policy
    loop's sizes ``--learner.*``; an old flag exits naming the new one before anything is built."""
    with pytest.raises(ValueError, match=f"^{old} was renamed: use {new}.$"):
        main([command, "--task", "pendulum", "--algo", "ppo", f"{old}=x"])


def test_without_grpc_the_loop_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # as if grpcio were not installed
    assert main(["learner", "--task", "pendulum"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'rslkit[realworld]'" in err
