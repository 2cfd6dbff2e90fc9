"""``python -m rslkit.realworld learner | actor | local``: the asynchronous actor/learner loop (docs/realworld.md).

- ``learner`` trains SAC on what actors send (a GPU or CPU box); serves gRPC on ``--bind``.
- ``actor`` drives one robot: a simulated task paced in real time (or a real one through the ROS 2 node's actor
  mode, ``python -m rslkit.deploy.ros2 --actor.learner ...``), spools and streams transitions, takes weights.
- ``local`` starts both on this machine (two processes) for simulation, and stops both when either is done.

Every flag of ``train.py`` that applies works the same way; ``--agent.*`` and ``--env.*`` override the agent and env
configs, ``--learner.*`` the learner's loop (:class:`~rslkit.realworld.learner_config.LearnerCfg`) and ``--actor.*``
the actor's (:class:`~rslkit.realworld.actor_config.ActorCfg`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from rslkit.cli.common import make_parser
from rslkit.models.sac_networks import SACModel
from rslkit.realworld import transport
from rslkit.realworld.actor import Actor
from rslkit.realworld.actor_config import ActorCfg
from rslkit.realworld.defaults import actor_overrides, realworld_overrides
from rslkit.realworld.learner import RealWorldLearner
from rslkit.realworld.learner_config import LearnerCfg
from rslkit.realworld.sim_robot import RealTimeRobot
from rslkit.realworld.spool import Spool
from rslkit.realworld.task_schema import transition_schema
from rslkit.realworld.transport_client import ActorClient
from rslkit.realworld.transport_server import DEFAULT_BIND
from rslkit.recipes import build_run, load_run, task_dir_name
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint
from rslkit.utils.config import apply_overrides, from_dict
from rslkit.utils.python_command import python_command
from rslkit.utils.validation import validate

LEARNER_FILE = "learner.json"
"""Written into the learner's run directory once it serves: ``{"address", "port", "pid"}``."""


def _split(overrides: list[str], prefix: str) -> tuple[list[str], list[str]]:
    """(``--<prefix>.*`` overrides, the rest), each flag with its value."""
    mine: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(overrides):
        token = overrides[i]
        takes_value = token.startswith("--") and "=" not in token and i + 1 < len(overrides)
        group = overrides[i : i + (2 if takes_value else 1)]
        (mine if token.startswith(f"--{prefix}.") else rest).extend(group)
        i += len(group)
    return mine, rest


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    return os.environ.get("RSLKIT_TOKEN") or None


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name, gym:<EnvId> or package.module:attribute")
    parser.add_argument(
        "--algo",
        default="sac",
        choices=("sac", "ppo", "reinflow"),
        help="sac (off-policy, one robot per actor) or ppo / reinflow (on-policy with bounded staleness: batched "
        "simulated envs per actor, see docs/realworld.md)",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default 0, or the resumed run's)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i] (the learner's; actors act on the CPU)")
    parser.add_argument("--logdir", default="logs", help="root of run directories (default: logs)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument(
        "--token_file", help="file holding the shared token (or set RSLKIT_TOKEN); actors without it are refused"
    )
    parser.add_argument("--num_envs", type=int, help="ppo/reinflow: envs of every actor (--learner.actor_envs)")
    parser.add_argument("--pretrained", help="reinflow: the flow-bc checkpoint to fine-tune (learner and actors)")


def _learner_parser(sub: Any) -> None:
    p = sub.add_parser("learner", help="train on what actors send", description=LearnerCfg.__doc__)
    _common(p)
    p.add_argument("--max_iterations", type=int, help="total learner iterations (learner.updates_per_iteration each)")
    p.add_argument("--run_name", default="", help="suffix of the run directory name")
    p.add_argument("--run_dir", help="run directory (default: <logdir>/<task>/<date>_realworld[_<run_name>])")
    p.add_argument("--resume", action="store_true", help="continue a learner run (buffer, journal, weights)")
    p.add_argument("--checkpoint", help="checkpoint to resume (with --resume) or to initialize the weights from")
    p.add_argument("--bind", default=DEFAULT_BIND, help="HOST:PORT to serve (default 127.0.0.1:50051)")
    p.add_argument("--tls_cert", help="the learner's PEM certificate (needed to bind a non-loopback address)")
    p.add_argument("--tls_key", help="its private key")
    p.add_argument("--tls_client_ca", help="require actor certificates signed by this CA")
    p.add_argument("--allow_insecure_remote", action="store_true", help="serve a non-loopback address in plain text")
    p.add_argument("--max_staleness", type=int, help="ppo/reinflow: eta of the admission rule (0: synchronous)")
    p.add_argument("--actors", type=int, help="ppo/reinflow: rollouts per update (--learner.rollouts_per_update)")


def _actor_parser(sub: Any) -> None:
    p = sub.add_parser("actor", help="drive one (simulated) robot for a learner", description=ActorCfg.__doc__)
    _common(p)
    p.add_argument("--target", default=DEFAULT_BIND, help="the learner's HOST:PORT")
    p.add_argument("--actor_id", default="actor-0", help="this actor's id (one per robot; default actor-0)")
    p.add_argument("--actor_dir", help="spool and episode log (default: <logdir>/<task>/actors/<actor_id>)")
    p.add_argument("--tls_ca", help="PEM certificate(s) to trust for the learner (needed off loopback)")
    p.add_argument("--tls_server_name", help="host name to check the learner's certificate against")
    p.add_argument("--allow_insecure_remote", action="store_true", help="dial a non-loopback learner in plain text")


def _local_parser(sub: Any) -> None:
    p = sub.add_parser("local", help="learner and actor on this machine (simulation)")
    _common(p)
    p.add_argument("--max_iterations", type=int, help="learner iterations")
    p.add_argument("--run_name", default="", help="suffix of the run directory name")
    p.add_argument("--resume", action="store_true", help="resume the latest local run of the task")
    p.add_argument("--actors", type=int, help="ppo/reinflow: actor processes (default 2; rollouts per update)")
    p.add_argument("--max_staleness", type=int, help="ppo/reinflow: eta of the admission rule (0: synchronous)")


def main(argv: list[str] | None = None) -> Any:
    """Parse ``learner | actor | local`` and run it."""
    parser = make_parser(__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _learner_parser(sub)
    _actor_parser(sub)
    _local_parser(sub)
    args, overrides = parser.parse_known_args(argv)
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    if args.algo != "sac":
        from rslkit.cli import realworld_onpolicy  # it builds on this module's helpers

        return realworld_onpolicy.run(args, overrides)
    if (
        args.num_envs is not None
        or args.pretrained
        or any(getattr(args, f, None) is not None for f in ("actors", "max_staleness"))
    ):
        parser.error(
            "--num_envs, --pretrained and --actors are for --algo ppo / reinflow (a SAC actor drives one robot)"
        )
    command = {"learner": run_learner, "actor": run_actor, "local": run_local}[args.command]
    return command(args, overrides)


# ---------------------------------------------------------------------------------------------------- learner
def _learner_cfg(saved: dict[str, Any] | None, overrides: list[str]) -> LearnerCfg:
    rw = (saved or {}).get("realworld") or {}
    cfg = from_dict(LearnerCfg, rw["learner_cfg"]) if rw.get("learner_cfg") else LearnerCfg()
    apply_overrides({"learner": cfg}, overrides)
    return cfg


def _onnx_exporter(cfg: LearnerCfg, task: str) -> Any:
    """``(policy, env) -> {"policy.onnx": ...}`` for ``learner.publish onnx | both`` (the deploy layer's export)."""
    if cfg.publish == "torch":
        return None
    from rslkit.deploy.onnx_weights import onnx_weight_arrays

    return functools.partial(onnx_weight_arrays, task=task)


def run_learner(args: argparse.Namespace, overrides: list[str]) -> RealWorldLearner:
    """``learner``: build or resume the run, serve, train until ``max_iterations`` or Ctrl-C / SIGTERM."""
    learner_over, rest = _split(overrides, "learner")
    common: dict[str, Any] = dict(num_envs=1, device=args.device, max_iterations=args.max_iterations)
    if args.resume:
        ckpt = Path(args.checkpoint) if args.checkpoint else latest_checkpoint(_latest_learner_run(args))
        cfg = _learner_cfg(load_checkpoint(ckpt), learner_over)
        factory = functools.partial(RealWorldLearner, learner_cfg=cfg, onnx_arrays=_onnx_exporter(cfg, args.task))
        _, runner, _ = load_run(
            ckpt, seed=args.seed, overrides=rest, resume=True, task=args.task, algo="sac", runner_cls=factory, **common
        )
        print(f"Resumed {ckpt} at iteration {runner.iteration}.")
    else:
        cfg = _learner_cfg(None, learner_over)
        factory = functools.partial(RealWorldLearner, learner_cfg=cfg, onnx_arrays=_onnx_exporter(cfg, args.task))
        run_dir = Path(args.run_dir) if args.run_dir else _new_run_dir(args)
        overrides = [*realworld_overrides(args.task), *rest]
        seed = 0 if args.seed is None else args.seed
        _, runner = build_run(args.task, "sac", overrides, seed=seed, log_dir=run_dir, runner_cls=factory, **common)
        if args.checkpoint:
            runner.load(args.checkpoint, weights_only=True)
            print(f"Initialized policy weights from {args.checkpoint}.")
    assert isinstance(runner, RealWorldLearner) and runner.log_dir is not None
    serve_and_learn(runner, args, "Learner", f"--task {args.task}")
    return runner


def serve_and_learn(runner: Any, args: argparse.Namespace, title: str, resume_flags: str) -> None:
    """Serve actors with ``args``' bind, token and TLS, write ``learner.json`` (how ``local`` and actors find the
    port), train until done or interrupted, stop serving, and print how to resume an interrupted run.

    Args:
        runner: a learner with ``serve``, ``learn``, ``stop_serving``, ``log_dir`` and ``interrupted``.
        args: the learner's parsed CLI arguments.
        title: the first words of the "serving on" line.
        resume_flags: the flags that rebuild this run, for the resume hint.
    """
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls_cert and --tls_key go together.")
    tls = transport.ServerTLS.from_files(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None
    server = runner.serve(args.bind, token=_token(args), tls=tls, allow_insecure_remote=args.allow_insecure_remote)
    _write_json(runner.log_dir / LEARNER_FILE, {"address": server.address, "port": server.port, "pid": os.getpid()})
    print(f"{title} serving on {server.address}; logging to {runner.log_dir}", flush=True)
    try:
        runner.learn()
    finally:
        runner.stop_serving()
        (runner.log_dir / LEARNER_FILE).unlink(missing_ok=True)
    if runner.interrupted:
        print(f"Resume with: {python_command()} -m rslkit.realworld learner {resume_flags} --resume", flush=True)


def _new_run_dir(args: argparse.Namespace) -> Path:
    name = datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + "_realworld" + (f"_{args.run_name}" if args.run_name else "")
    return Path(args.logdir) / task_dir_name(args.task) / name


def _latest_learner_run(args: argparse.Namespace) -> Path:
    """``--run_dir``, or the newest real-world run of the task (not a train.py run beside it) with a checkpoint."""
    if getattr(args, "run_dir", None):
        return Path(args.run_dir)
    task_dir = Path(args.logdir) / task_dir_name(args.task)
    runs = sorted(p for p in task_dir.glob("*_realworld*") if p.is_dir() and any(p.glob("model_*.pt")))
    if not runs:
        raise FileNotFoundError(
            f"--resume found no real-world learner run with checkpoints under '{task_dir}'; pass --run_dir or "
            "--checkpoint."
        )
    return runs[-1]


@contextlib.contextmanager
def _stopping_on_signals(on_signal: Callable[[], None], what: str) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM print ``what`` and call ``on_signal`` (the previous handlers return)."""

    def stop(signum: int, _frame: Any) -> None:
        print(f"{signal.Signals(signum).name}: {what}", flush=True)
        on_signal()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------- actor
def _interventions(cfg: ActorCfg, task: str, env: Any, seed: int) -> Any:
    """The intervention source ``--actor.interventions`` names (None for ``none``)."""
    kind = cfg.interventions
    if kind == "none":
        return None
    if kind == "scripted":
        from rslkit.realworld.experts import scripted_human_for

        return scripted_human_for(
            task, env.cfg, seed=seed, takeover_prob=cfg.takeover_prob, prob_decay=cfg.takeover_decay
        )
    from rslkit.realworld.teleop import GamepadTeleop, KeyboardTeleop

    return KeyboardTeleop(env.num_actions) if kind == "keyboard" else GamepadTeleop(env.num_actions)


def _owed_updates(agent: Any) -> Any:
    """The learner's rule (``RealWorldLearner._updates_owed``) as a function of the transitions received."""
    utd, starts = agent.algorithm.utd_ratio, agent.learning_starts
    return lambda n: math.floor(utd * n + 1e-9) if n >= starts else 0


def _reward_fn(name: str) -> Any:
    if name == "task":
        return None
    from rslkit.realworld.rewards import load_reward

    return load_reward(name)


def run_actor(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    """``actor``: build the task with one env (paced in real time), connect, act until a limit or a signal."""
    actor_over, rest = _split(overrides, "actor")
    _, rest = _split(rest, "learner")  # local mode passes one set of flags to both
    cfg = ActorCfg()
    apply_overrides({"actor": cfg}, [*actor_overrides(args.task), *actor_over])
    validate(cfg, "actor")
    seed = 0 if args.seed is None else args.seed
    sim, runner = build_run(
        args.task, "sac", [*realworld_overrides(args.task), *rest], num_envs=1, seed=seed, device="cpu"
    )
    model = runner.policy
    if not isinstance(model, SACModel):
        raise ValueError(f"--algo sac built a {type(model).__name__}, not SAC networks.")
    schema = transition_schema(sim, model.obs_groups)
    env: Any = RealTimeRobot(sim, cfg.robot) if cfg.realtime else sim
    actor_dir = (
        Path(args.actor_dir)
        if args.actor_dir
        else Path(args.logdir) / task_dir_name(args.task) / "actors" / args.actor_id
    )
    spool = Spool(actor_dir / "spool", args.actor_id, schema)
    tls = transport.ClientTLS.from_files(args.tls_ca, args.tls_server_name) if args.tls_ca else None
    client = ActorClient(
        args.target,
        args.actor_id,
        spool,
        token=_token(args),
        tls=tls,
        allow_insecure_remote=args.allow_insecure_remote,
        seed=seed,
    )
    actor = Actor(
        env, model, client, cfg, actor_dir, interventions=_interventions(cfg, args.task, env, seed),
        reward_fn=_reward_fn(cfg.reward), owed_updates=_owed_updates(runner.cfg), seed=seed,
    )  # fmt: skip

    def stop() -> None:
        actor.stop_requested = True

    print(f"Actor {args.actor_id} on {args.task}, learner {args.target}; spool {spool.directory}", flush=True)
    try:
        with _stopping_on_signals(stop, "the actor stops after this tick"):
            summary = actor.run().to_json()
    finally:
        client.close()
        spool.close()
    stats = getattr(env, "stats", None)
    if callable(stats):
        summary["robot"] = stats()
    _write_json(actor_dir / "summary.json", summary)
    print(f"Actor done: {summary['episodes']} episodes, {summary['env_steps']} env steps; {actor_dir / 'summary.json'}")
    return summary


# ---------------------------------------------------------------------------------------------------- local
def run_local(args: argparse.Namespace, overrides: list[str]) -> int:
    """``local``: the learner and one actor as two processes of this machine; stops both when either ends."""
    run_dir = _latest_learner_run(args) if args.resume else _new_run_dir(args)
    run_dir.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "rslkit.realworld"]
    shared = ["--task", args.task, "--logdir", args.logdir, "--threads", str(args.threads), "--device", args.device]
    if args.seed is not None:
        shared += ["--seed", str(args.seed)]
    if args.token_file:
        shared += ["--token_file", args.token_file]
    learner_cmd = [*base, "learner", *shared, "--run_dir", str(run_dir), "--bind", "127.0.0.1:0"]
    if args.max_iterations is not None:
        learner_cmd += ["--max_iterations", str(args.max_iterations)]
    if args.resume:
        learner_cmd.append("--resume")
    (run_dir / LEARNER_FILE).unlink(missing_ok=True)
    _, learner_over = _split(overrides, "actor")  # the actor takes all flags and ignores --learner.*
    learner = subprocess.Popen([*learner_cmd, *learner_over])
    actor: subprocess.Popen | None = None
    try:
        port = _wait_for_port(run_dir / LEARNER_FILE, learner)
        actor_cmd = [*base, "actor", *shared, "--target", f"127.0.0.1:{port}", "--actor_dir", str(run_dir / "actor-0")]
        actor = subprocess.Popen([*actor_cmd, *overrides])
        return _supervise(learner, actor)
    finally:
        _stop(actor, learner)


def _wait_for_port(path: Path, learner: subprocess.Popen, timeout_s: float = 300.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return int(json.loads(path.read_text())["port"])
        if learner.poll() is not None:
            raise RuntimeError(f"the learner exited with code {learner.returncode} before serving.")
        time.sleep(0.1)
    raise RuntimeError(f"the learner did not serve within {timeout_s:.0f} s.")


def _supervise(learner: subprocess.Popen, actor: subprocess.Popen) -> int:
    """Wait until one process ends, then stop the other (SIGTERM: both save what they have)."""
    try:
        while learner.poll() is None and actor.poll() is None:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    _stop(actor, learner)
    return max(learner.returncode or 0, actor.returncode or 0)


def _stop(*procs: subprocess.Popen | None, timeout_s: float = 120.0) -> None:
    """SIGTERM each running process in turn (both save what they have), then wait; kill one that hangs."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
