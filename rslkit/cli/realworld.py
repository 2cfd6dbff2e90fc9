"""``python -m rslkit.realworld learner | actor | local``: the asynchronous actor/learner loop (docs/realworld.md).

- ``learner`` trains on what actors send (a GPU or CPU box); serves gRPC on ``--bind``. ``--algo sac`` (default):
  SAC fed transitions by actors that drive one robot each; ``--algo ppo | reinflow``: PPO (naive, decoupled or M2PO:
  ``--agent.algorithm.staleness.*``) or ReinFlow on the rollouts of its actors, admitted by AReaL's rule with
  ``--learner.max_staleness``.
- ``actor`` drives one robot (a simulated task paced in real time, or a real one through the ROS 2 node's actor
  mode, ``python -m rslkit.deploy.ros2 --actor.learner ...``), spools and streams transitions and takes weights; with
  ``--algo ppo | reinflow`` it steps ``--learner.actor_envs`` simulated envs and collects one rollout per permit.
- ``local`` starts the learner and its actors (one; ``--learner.rollouts_per_update`` for ppo / reinflow) on this
  machine as processes, and stops them all when the learner (or every actor) is done.

Every flag of ``train.py`` that applies works the same way; ``--agent.*`` and ``--env.*`` override the agent and env
configs, ``--learner.*`` the learner's loop (:class:`~rslkit.realworld.learner_config.LearnerCfg`, or
:class:`~rslkit.realworld.onpolicy_config.OnPolicyLearnerCfg`) and ``--actor.*`` the actor's
(:class:`~rslkit.realworld.actor_config.ActorCfg`, or :class:`~rslkit.realworld.onpolicy_config.OnPolicyActorCfg`),
its connection to the learner included (``--actor.learner``, ``--actor.id``, ``--actor.tls_ca`` ...: the ROS 2 node's
spelling). The token is a secret: ``--token_file`` (the learner's), ``--actor.token_file`` or the ``RSLKIT_TOKEN``
environment variable, never a flag. The loop's transport (grpcio) is an extra: ``pip install 'rslkit[realworld]'``.
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
from rslkit.recipes import build_run, load_run, task_dir_name
from rslkit.utils.atomic_write import atomic_write_json
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint
from rslkit.utils.config import apply_overrides, from_dict, refuse_renamed
from rslkit.utils.python_command import python_command
from rslkit.utils.validation import validate

LEARNER_FILE = "learner.json"
"""Written into the learner's run directory once it serves: ``{"address", "port", "pid"}``."""
INSTALL_HINT = "the real-world loop needs gRPC: pip install 'rslkit[realworld]'"
ON_POLICY = ("ppo", "reinflow")
RENAMED = {
    "--target": "--actor.learner",
    "--actor_id": "--actor.id",
    "--tls_ca": "--actor.tls_ca",
    "--tls_server_name": "--actor.tls_server_name",
    "--num_envs": "--learner.actor_envs",
    "--max_staleness": "--learner.max_staleness",
    "--actors": "--learner.rollouts_per_update",
}
"""Flags of earlier versions -> their one spelling now (the learner's own --token_file and --allow_insecure_remote
stay; an actor's are --actor.token_file and --actor.allow_insecure_remote)."""
ACTOR_RENAMED = {"--token_file": "--actor.token_file", "--allow_insecure_remote": "--actor.allow_insecure_remote"}


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
    parser.add_argument("--pretrained", help="reinflow: the flow-bc checkpoint to fine-tune (learner and actors)")


def _token_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token_file", help="file holding the shared token (or set RSLKIT_TOKEN); actors without it are refused"
    )


def _learner_parser(sub: Any) -> None:
    p = sub.add_parser("learner", help="train on what actors send", epilog=ON_POLICY_HELP)
    _common(p)
    _token_file(p)
    p.add_argument("--max_iterations", type=int, help="total learner iterations (learner.updates_per_iteration each)")
    p.add_argument("--run_name", default="", help="suffix of the run directory name")
    p.add_argument("--run_dir", help="run directory (default: <logdir>/<task>/<date>_realworld[_<run_name>])")
    p.add_argument("--resume", action="store_true", help="continue a learner run (buffer, journal, weights)")
    p.add_argument("--checkpoint", help="checkpoint to resume (with --resume) or to initialize the weights from")
    p.add_argument("--bind", help="HOST:PORT to serve (default 127.0.0.1:50051)")
    p.add_argument("--tls_cert", help="the learner's PEM certificate (needed to bind a non-loopback address)")
    p.add_argument("--tls_key", help="its private key")
    p.add_argument("--tls_client_ca", help="require actor certificates signed by this CA")
    p.add_argument("--allow_insecure_remote", action="store_true", help="serve a non-loopback address in plain text")


def _actor_parser(sub: Any) -> None:
    p = sub.add_parser("actor", help="drive one (simulated) robot for a learner", epilog=ACTOR_HELP)
    _common(p)
    p.add_argument("--actor_dir", help="spool and episode log (default: <logdir>/<task>/actors/<actor.id>)")


def _local_parser(sub: Any) -> None:
    p = sub.add_parser("local", help="learner and actor on this machine (simulation)", epilog=ON_POLICY_HELP)
    _common(p)
    _token_file(p)
    p.add_argument("--max_iterations", type=int, help="learner iterations")
    p.add_argument("--run_name", default="", help="suffix of the run directory name")
    p.add_argument("--resume", action="store_true", help="resume the latest local run of the task")


ON_POLICY_HELP = """ppo / reinflow: --learner.actor_envs N (envs of every actor, default 64),
--learner.rollouts_per_update B (rollouts per update; local: the actor processes, default 2),
--learner.max_staleness ETA (0: synchronous)."""
ACTOR_HELP = """the learner: --actor.learner HOST:PORT (default 127.0.0.1:50051), --actor.id ID (default actor-0),
--actor.token_file FILE, --actor.tls_ca CA.pem, --actor.tls_server_name NAME, --actor.allow_insecure_remote true;
ppo / reinflow: --learner.actor_envs N (the learner's)."""


def main(argv: list[str] | None = None) -> Any:
    """Parse ``learner | actor | local`` and run it."""
    parser = make_parser(__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _learner_parser(sub)
    _actor_parser(sub)
    _local_parser(sub)
    args, overrides = parser.parse_known_args(argv)
    refuse_renamed(overrides, RENAMED | (ACTOR_RENAMED if args.command == "actor" else {}))
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    try:
        import grpc  # noqa: F401
    except ImportError:
        print(f"error: {INSTALL_HINT}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    if args.algo == "sac" and args.pretrained:
        parser.error("--pretrained is for --algo reinflow")
    if args.algo == "reinflow" and not args.pretrained and not getattr(args, "resume", False):
        raise ValueError("--algo reinflow fine-tunes a flow-bc policy: pass --pretrained CKPT (learner and actors).")
    command = {"learner": run_learner, "actor": run_actor, "local": run_local}[args.command]
    return command(args, overrides)


def _agent_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The agent settings a run starts from, before the user's ``--agent.*``: the real-world defaults (SAC) or
    ``--pretrained`` (ReinFlow)."""
    from rslkit.realworld.defaults import agent_defaults

    if args.algo == "sac":
        return agent_defaults(args.task)
    return {"pretrained": args.pretrained} if args.pretrained else {}


# ---------------------------------------------------------------------------------------------------- learner
def _learner_cfg(algo: str, saved: dict[str, Any] | None, overrides: list[str]) -> Any:
    """The learner's settings: those of the checkpoint resumed (if any), then ``--learner.*``."""
    from rslkit.realworld.learner_config import LearnerCfg
    from rslkit.realworld.onpolicy_config import OnPolicyLearnerCfg

    cls, key = (LearnerCfg, "learner_cfg") if algo == "sac" else (OnPolicyLearnerCfg, "onpolicy_learner_cfg")
    rw = (saved or {}).get("realworld") or {}
    cfg = from_dict(cls, rw[key]) if rw.get(key) else cls()
    apply_overrides({"learner": cfg}, overrides)
    validate(cfg, "learner")
    return cfg


def _learner_class(algo: str) -> Any:
    from rslkit.realworld.learner import RealWorldLearner
    from rslkit.realworld.onpolicy_learner import PPOLearner, ReinFlowLearner

    return {"sac": RealWorldLearner, "ppo": PPOLearner, "reinflow": ReinFlowLearner}[algo]


def _server_tls(args: argparse.Namespace) -> Any:
    """The learner's TLS from ``--tls_cert``/``--tls_key``, after refusing a bind it cannot serve (before anything is
    created: a refused bind leaves no run directory behind)."""
    from rslkit.link import transport

    args.bind = args.bind or transport.DEFAULT_ADDRESS
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls_cert and --tls_key go together.")
    transport.require_tls_off_loopback(
        args.bind, bool(args.tls_cert), args.allow_insecure_remote, "serve", transport.SERVER_TLS
    )
    return transport.ServerTLS.from_files(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert else None


def run_learner(args: argparse.Namespace, overrides: list[str]) -> Any:
    """``learner``: build or resume the run, serve, train until ``max_iterations`` or Ctrl-C / SIGTERM."""
    from rslkit.link import transport

    tls, token = _server_tls(args), transport.read_token(args.token_file, "--token_file")
    learner_over, rest = _split(overrides, "learner")
    _, rest = _split(rest, "actor")  # local mode passes one set of flags to both
    common: dict[str, Any] = dict(num_envs=1, device=args.device, max_iterations=args.max_iterations)
    runner: Any
    if args.resume:
        ckpt = Path(args.checkpoint) if args.checkpoint else latest_checkpoint(_latest_learner_run(args))
        cfg = _learner_cfg(args.algo, load_checkpoint(ckpt), learner_over)
        factory = functools.partial(_learner_class(args.algo), learner_cfg=cfg)
        _, runner, _ = load_run(
            ckpt, seed=args.seed, overrides=rest, resume=True, task=args.task, algo=args.algo, runner_cls=factory,
            **common,
        )  # fmt: skip
        print(f"Resumed {ckpt} at iteration {runner.iteration}.")
    else:
        cfg = _learner_cfg(args.algo, None, learner_over)
        factory = functools.partial(_learner_class(args.algo), learner_cfg=cfg)
        run_dir = Path(args.run_dir) if args.run_dir else _new_run_dir(args)
        seed = 0 if args.seed is None else args.seed
        _, runner = build_run(
            args.task, args.algo, rest, seed=seed, log_dir=run_dir, runner_cls=factory,
            agent_fields=_agent_fields(args), **common,
        )  # fmt: skip
        if args.checkpoint:
            runner.load(args.checkpoint, weights_only=True)
            print(f"Initialized policy weights from {args.checkpoint}.")
    assert runner.log_dir is not None
    title = "Learner"
    if args.algo in ON_POLICY:
        c = runner.learner_cfg
        title = (
            f"Learner ({args.algo}, max staleness {c.max_staleness}, {c.rollouts_per_update} rollouts of "
            f"{c.actor_envs} envs per update)"
        )
    server = runner.serve(args.bind, token=token, tls=tls, allow_insecure_remote=args.allow_insecure_remote)
    where = {"address": server.address, "port": server.port, "pid": os.getpid()}
    atomic_write_json(runner.log_dir / LEARNER_FILE, where, indent=1)
    print(f"{title} serving on {server.address}; logging to {runner.log_dir}", flush=True)
    try:
        runner.learn()
    finally:
        runner.stop_serving()
        (runner.log_dir / LEARNER_FILE).unlink(missing_ok=True)
    if runner.interrupted:
        flags = f"--task {args.task}" if args.algo == "sac" else f"--algo {args.algo} --task {args.task}"
        print(f"Resume with: {python_command()} -m rslkit.realworld learner {flags} --resume", flush=True)
    return runner


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


# ---------------------------------------------------------------------------------------------------- actor
def _actor_dir(args: argparse.Namespace, actor_id: str) -> Path:
    if args.actor_dir:
        return Path(args.actor_dir)
    return Path(args.logdir) / task_dir_name(args.task) / "actors" / actor_id


def _actor_cfg(args: argparse.Namespace, actor_over: list[str]) -> Any:
    """The actor's settings: SAC's (:class:`ActorCfg`, with the task's real-world defaults) or the on-policy loop's,
    then ``--actor.*``."""
    from rslkit.link.transport import ActorLinkCfg
    from rslkit.realworld.defaults import actor_cfg
    from rslkit.realworld.onpolicy_config import OnPolicyActorCfg

    cfg: ActorLinkCfg
    if args.algo == "sac":
        cfg = actor_cfg(args.task, actor_over)
    else:
        cfg = OnPolicyActorCfg()
        apply_overrides({"actor": cfg}, actor_over)
    validate(cfg, "actor")
    return cfg


def run_actor(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    """``actor``: connect to the learner and act until a limit, a signal or (ppo / reinflow) the learner is gone."""
    actor_over, rest = _split(overrides, "actor")
    learner_over, rest = _split(rest, "learner")  # the on-policy actor reads --learner.actor_envs
    cfg = _actor_cfg(args, actor_over)
    link = (cfg.client_tls(), cfg.read_token())  # the learner's address is checked before anything is built
    if args.algo in ON_POLICY:
        actor, client, stop_text, closing = _onpolicy_actor(args, cfg, rest, learner_over, *link)
    else:
        actor, client, stop_text, closing = _sac_actor(args, cfg, rest, *link)

    def stop() -> None:
        actor.stop_requested = True
        if args.algo in ON_POLICY:  # end its bounded waits now (a SAC actor still drains its spool)
            client.interrupt()

    try:
        with _stopping_on_signals(stop, stop_text):
            summary = actor.run().to_json()
    finally:
        client.close()
        closing()
    actor_dir = _actor_dir(args, cfg.id)
    if args.algo == "sac":
        stats = getattr(actor.env, "stats", None)
        if callable(stats):
            summary["robot"] = stats()
        atomic_write_json(actor_dir / "summary.json", summary, indent=1)
        print(f"Actor done: {summary['episodes']} episodes, {summary['env_steps']} env steps; {actor_dir}")
    else:
        if args.actor_dir:
            atomic_write_json(actor_dir / "summary.json", summary, indent=1)
        print(f"Actor {cfg.id} done: {summary['rollouts']} rollouts, {summary['env_steps']} env steps "
              f"({summary['stopped_because']})", flush=True)  # fmt: skip
    return summary


def _interventions(cfg: Any, task: str, env: Any, seed: int) -> Any:
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


def _sac_actor(args: argparse.Namespace, cfg: Any, rest: list[str], tls: Any, token: Any) -> tuple:
    """The SAC actor of one (paced) env: ``(actor, client, what a signal does, what closes after the client)``."""
    from rslkit.link.client import ActorClient
    from rslkit.link.episodes import EpisodeNumbers
    from rslkit.link.spool import Spool
    from rslkit.models.sac_networks import SACModel
    from rslkit.realworld.actor import STATE_FILE, Actor, restart_seed
    from rslkit.realworld.rewards import load_reward
    from rslkit.realworld.sim_robot import RealTimeRobot
    from rslkit.realworld.task_schema import transition_schema

    reward_fn = load_reward(cfg.reward, cfg.learned_reward)
    seed = 0 if args.seed is None else args.seed
    actor_dir = _actor_dir(args, cfg.id)
    env_seed = restart_seed(seed, EpisodeNumbers(actor_dir / STATE_FILE).next_episode)  # a restart: new randomness
    sim, runner = build_run(
        args.task, "sac", rest, num_envs=1, seed=env_seed, device="cpu", agent_fields=_agent_fields(args)
    )
    model = runner.policy
    if not isinstance(model, SACModel):
        raise ValueError(f"--algo sac built a {type(model).__name__}, not SAC networks.")
    schema = transition_schema(sim, model.obs_groups)
    env: Any = RealTimeRobot(sim, cfg.robot) if cfg.realtime else sim
    spool = Spool(actor_dir / "spool", cfg.id, schema)
    try:
        client = ActorClient(
            cfg.learner, cfg.id, spool, token=token, tls=tls, allow_insecure_remote=cfg.allow_insecure_remote,
            seed=seed,
        )  # fmt: skip
        actor = Actor(
            env, model, client, cfg, actor_dir, interventions=_interventions(cfg, args.task, env, seed),
            reward_fn=reward_fn, owed_updates=_owed_updates(runner.cfg), seed=seed,
        )  # fmt: skip
    except BaseException:
        spool.close()
        raise
    print(f"Actor {cfg.id} on {args.task}, learner {cfg.learner}; spool {spool.directory}", flush=True)
    return actor, client, "the actor stops after this tick", spool.close


def _onpolicy_actor(
    args: argparse.Namespace, cfg: Any, rest: list[str], learner_over: list[str], tls: Any, token: Any
) -> tuple:
    """The on-policy actor of ``--learner.actor_envs`` envs: ``(actor, client, what a signal does, what closes
    after)``."""
    from rslkit.link.client import ActorClient
    from rslkit.realworld.onpolicy_actor import OnPolicyActor
    from rslkit.realworld.onpolicy_codec import codec_for

    seed = 0 if args.seed is None else args.seed
    num_envs = _learner_cfg(args.algo, None, learner_over).actor_envs
    _, runner = build_run(
        args.task, args.algo, rest, num_envs=num_envs, seed=seed, device="cpu", agent_fields=_agent_fields(args)
    )
    codec = codec_for(runner)
    client = ActorClient(
        cfg.learner, cfg.id, schema=codec.schema(num_envs), token=token, tls=tls,
        allow_insecure_remote=cfg.allow_insecure_remote, seed=seed,
    )  # fmt: skip
    print(f"Actor {cfg.id} ({args.algo}) on {args.task} x {num_envs} envs, learner {cfg.learner}", flush=True)
    actor = OnPolicyActor(codec, client, cfg, seed=seed)
    return actor, client, "the actor stops after this rollout", lambda: None


# ---------------------------------------------------------------------------------------------------- local
def run_local(args: argparse.Namespace, overrides: list[str]) -> int:
    """``local``: the learner and its actors (one for sac; ``--learner.rollouts_per_update``, default 2, for ppo /
    reinflow) as processes of this machine; stops all when the learner ends (or when every actor has)."""
    learner_flags = _split(overrides, "learner")[0]
    actors = 1 if args.algo == "sac" else _learner_cfg(args.algo, None, learner_flags).rollouts_per_update
    run_dir = _latest_learner_run(args) if args.resume else _new_run_dir(args)
    run_dir.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "rslkit.realworld"]
    shared = ["--task", args.task, "--algo", args.algo, "--logdir", args.logdir, "--threads", str(args.threads)]
    shared += ["--pretrained", args.pretrained] if args.pretrained else []
    learner_cmd = [*base, "learner", *shared, "--device", args.device, "--run_dir", str(run_dir)]
    learner_cmd += ["--bind", "127.0.0.1:0"]
    learner_cmd += ["--token_file", args.token_file] if args.token_file else []
    learner_cmd += ["--seed", str(args.seed)] if args.seed is not None else []
    learner_cmd += ["--max_iterations", str(args.max_iterations)] if args.max_iterations is not None else []
    learner_cmd += ["--resume"] if args.resume else []
    (run_dir / LEARNER_FILE).unlink(missing_ok=True)
    _, learner_over = _split(overrides, "actor")  # actors take all flags and ignore --learner.*
    learner = subprocess.Popen([*learner_cmd, *learner_over])
    procs: list[subprocess.Popen] = []
    try:
        port = _wait_for_port(run_dir / LEARNER_FILE, learner)
        seed = 0 if args.seed is None else args.seed
        for i in range(actors):
            cmd = [*base, "actor", *shared, "--actor.learner", f"127.0.0.1:{port}", "--actor.id", f"actor-{i}"]
            cmd += ["--actor.token_file", args.token_file] if args.token_file else []
            if args.algo in ON_POLICY:  # each on-policy actor explores with its own seed
                cmd += ["--seed", str(seed + 1 + i)]
            elif args.seed is not None:
                cmd += ["--seed", str(args.seed)]
            procs.append(subprocess.Popen([*cmd, "--actor_dir", str(run_dir / f"actor-{i}"), *overrides]))
        return _supervise(learner, procs)
    finally:
        _stop(*procs, learner)


def _wait_for_port(path: Path, learner: subprocess.Popen, timeout_s: float = 300.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return int(json.loads(path.read_text())["port"])
        if learner.poll() is not None:
            raise RuntimeError(f"the learner exited with code {learner.returncode} before serving.")
        time.sleep(0.1)
    raise RuntimeError(f"the learner did not serve within {timeout_s:.0f} s.")


def _supervise(learner: subprocess.Popen, actors: list[subprocess.Popen]) -> int:
    """Wait for the learner (or for every actor) to end, then stop the rest (SIGTERM: all save what they have)."""
    try:
        while learner.poll() is None and any(a.poll() is None for a in actors):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    _stop(*actors, learner)
    return max([learner.returncode or 0, *[a.returncode or 0 for a in actors if a.returncode not in (None, -15)]])


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
