"""``python -m rslkit.realworld learner | actor | local --algo ppo | reinflow``: the asynchronous on-policy loop.

- ``learner`` trains PPO (naive, decoupled or M2PO: ``--agent.algorithm.staleness.*``) or ReinFlow on the rollouts
  of its actors, admitting each rollout by AReaL's rule with ``--max_staleness`` (``--learner.max_staleness``).
- ``actor`` steps ``--num_envs`` simulated envs of the task and collects one rollout per permit.
- ``local`` starts one learner and ``--actors`` actor processes on this machine and stops them all when the learner
  is done.

``--learner.*`` overrides :class:`~rslkit.realworld.onpolicy_config.OnPolicyLearnerCfg`, ``--actor.*``
:class:`~rslkit.realworld.onpolicy_config.OnPolicyActorCfg`, ``--agent.*`` and ``--env.*`` the run as in train.py.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rslkit.cli.realworld import (
    LEARNER_FILE,
    _latest_learner_run,
    _new_run_dir,
    _split,
    _stop,
    _stopping_on_signals,
    _token,
    _wait_for_port,
    _write_json,
    serve_and_learn,
)
from rslkit.realworld import transport
from rslkit.realworld.onpolicy_actor import OnPolicyActor
from rslkit.realworld.onpolicy_codec import codec_for
from rslkit.realworld.onpolicy_config import OnPolicyActorCfg, OnPolicyLearnerCfg
from rslkit.realworld.onpolicy_learner import PPOLearner, ReinFlowLearner
from rslkit.realworld.rollout_client import RolloutClient
from rslkit.recipes import build_run, load_run
from rslkit.utils.checkpoint import latest_checkpoint, load_checkpoint
from rslkit.utils.config import apply_overrides, from_dict
from rslkit.utils.validation import validate

ALGOS = ("ppo", "reinflow")
LEARNERS: dict[str, type[PPOLearner] | type[ReinFlowLearner]] = {"ppo": PPOLearner, "reinflow": ReinFlowLearner}


def run(args: argparse.Namespace, overrides: list[str]) -> Any:
    """Run ``args.command`` of the on-policy loop."""
    if args.algo == "reinflow" and not args.pretrained and not getattr(args, "resume", False):
        raise ValueError("--algo reinflow fine-tunes a flow-bc policy: pass --pretrained CKPT (learner and actors).")
    command = {"learner": run_learner, "actor": run_actor, "local": run_local}[args.command]
    return command(args, overrides)


def _shorthands(args: argparse.Namespace) -> list[str]:
    """``--num_envs``, ``--max_staleness``, ``--actors`` and ``--pretrained`` as the overrides they stand for."""
    out: list[str] = []
    if args.num_envs is not None:
        out += ["--learner.actor_envs", str(args.num_envs)]
    if getattr(args, "max_staleness", None) is not None:
        out += ["--learner.max_staleness", str(args.max_staleness)]
    if getattr(args, "actors", None) is not None:
        out += ["--learner.rollouts_per_update", str(args.actors)]
    return out


def _agent_overrides(args: argparse.Namespace, rest: list[str]) -> list[str]:
    return (["--agent.pretrained", args.pretrained] if args.pretrained else []) + rest


# ---------------------------------------------------------------------------------------------------- learner
def _learner_cfg(saved: dict[str, Any] | None, overrides: list[str]) -> OnPolicyLearnerCfg:
    rw = (saved or {}).get("realworld") or {}
    saved_cfg = rw.get("onpolicy_learner_cfg")
    cfg = from_dict(OnPolicyLearnerCfg, saved_cfg) if saved_cfg else OnPolicyLearnerCfg()
    apply_overrides({"learner": cfg}, overrides)
    validate(cfg, "learner")
    return cfg


def run_learner(args: argparse.Namespace, overrides: list[str]) -> Any:
    """``learner``: build or resume the run, serve, train until ``max_iterations`` or Ctrl-C / SIGTERM."""
    learner_over, rest = _split([*_shorthands(args), *overrides], "learner")
    _, rest = _split(rest, "actor")
    common: dict[str, Any] = dict(num_envs=1, device=args.device, max_iterations=args.max_iterations)
    if args.resume:
        ckpt = Path(args.checkpoint) if args.checkpoint else latest_checkpoint(_latest_learner_run(args))
        cfg = _learner_cfg(load_checkpoint(ckpt), learner_over)
        factory = functools.partial(LEARNERS[args.algo], learner_cfg=cfg)
        _, runner, _ = load_run(
            ckpt, seed=args.seed, overrides=rest, resume=True, task=args.task, algo=args.algo, runner_cls=factory,
            **common,
        )  # fmt: skip
        print(f"Resumed {ckpt} at iteration {runner.iteration}.")
    else:
        cfg = _learner_cfg(None, learner_over)
        factory = functools.partial(LEARNERS[args.algo], learner_cfg=cfg)
        run_dir = Path(args.run_dir) if args.run_dir else _new_run_dir(args)
        seed = 0 if args.seed is None else args.seed
        _, runner = build_run(
            args.task, args.algo, _agent_overrides(args, rest), seed=seed, log_dir=run_dir, runner_cls=factory,
            **common,
        )  # fmt: skip
        if args.checkpoint:
            runner.load(args.checkpoint, weights_only=True)
            print(f"Initialized policy weights from {args.checkpoint}.")
    assert isinstance(runner, (PPOLearner, ReinFlowLearner)) and runner.log_dir is not None
    c = runner.learner_cfg
    title = (
        f"Learner ({args.algo}, max staleness {c.max_staleness}, {c.rollouts_per_update} rollouts of "
        f"{c.actor_envs} envs per update)"
    )
    serve_and_learn(runner, args, title, f"--algo {args.algo} --task {args.task}")
    return runner


# ---------------------------------------------------------------------------------------------------- actor
def run_actor(args: argparse.Namespace, overrides: list[str]) -> dict[str, Any]:
    """``actor``: build the task with ``--num_envs`` envs, connect, collect rollouts until the learner is gone."""
    actor_over, rest = _split(overrides, "actor")
    _, rest = _split(rest, "learner")
    cfg = OnPolicyActorCfg()
    apply_overrides({"actor": cfg}, actor_over)
    validate(cfg, "actor")
    seed = 0 if args.seed is None else args.seed
    num_envs = args.num_envs if args.num_envs is not None else OnPolicyLearnerCfg().actor_envs
    _, runner = build_run(
        args.task, args.algo, _agent_overrides(args, rest), num_envs=num_envs, seed=seed, device="cpu"
    )
    codec = codec_for(runner)
    tls = transport.ClientTLS.from_files(args.tls_ca, args.tls_server_name) if args.tls_ca else None
    client = RolloutClient(
        args.target, args.actor_id, codec.schema(num_envs), token=_token(args), tls=tls,
        allow_insecure_remote=args.allow_insecure_remote, seed=seed,
    )  # fmt: skip
    actor = OnPolicyActor(codec, client, cfg, seed=seed)

    def stop() -> None:
        actor.stop_requested = True
        client.interrupt()

    print(f"Actor {args.actor_id} ({args.algo}) on {args.task} x {num_envs} envs, learner {args.target}", flush=True)
    try:
        with _stopping_on_signals(stop, "the actor stops after this rollout"):
            summary = actor.run().to_json()
    finally:
        client.close()
    if args.actor_dir:
        Path(args.actor_dir).mkdir(parents=True, exist_ok=True)
        _write_json(Path(args.actor_dir) / "summary.json", summary)
    print(f"Actor {args.actor_id} done: {summary['rollouts']} rollouts, {summary['env_steps']} env steps "
          f"({summary['stopped_because']})", flush=True)  # fmt: skip
    return summary


# ---------------------------------------------------------------------------------------------------- local
def run_local(args: argparse.Namespace, overrides: list[str]) -> int:
    """``local``: one learner and ``--actors`` actors as processes of this machine; stops all when the learner ends
    (or when every actor has)."""
    actors = args.actors or 2
    run_dir = _latest_learner_run(args) if args.resume else _new_run_dir(args)
    run_dir.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "rslkit.realworld"]
    shared = ["--task", args.task, "--algo", args.algo, "--logdir", args.logdir, "--threads", str(args.threads)]
    shared += ["--seed", str(args.seed)] if args.seed is not None else []
    shared += ["--token_file", args.token_file] if args.token_file else []
    shared += ["--pretrained", args.pretrained] if args.pretrained else []
    shared += ["--num_envs", str(args.num_envs)] if args.num_envs is not None else []
    learner_cmd = [*base, "learner", *shared, "--device", args.device, "--run_dir", str(run_dir)]
    learner_cmd += ["--bind", "127.0.0.1:0", "--actors", str(actors)]
    learner_cmd += ["--max_staleness", str(args.max_staleness)] if args.max_staleness is not None else []
    learner_cmd += ["--max_iterations", str(args.max_iterations)] if args.max_iterations is not None else []
    learner_cmd += ["--resume"] if args.resume else []
    (run_dir / LEARNER_FILE).unlink(missing_ok=True)
    _, learner_over = _split(overrides, "actor")
    learner = subprocess.Popen([*learner_cmd, *learner_over])
    procs: list[subprocess.Popen] = []
    try:
        port = _wait_for_port(run_dir / LEARNER_FILE, learner)
        seed = 0 if args.seed is None else args.seed
        for i in range(actors):
            cmd = [*base, "actor", *_without_flag(shared, "--seed"), "--target", f"127.0.0.1:{port}"]
            cmd += ["--seed", str(seed + 1 + i), "--actor_id", f"actor-{i}"]
            procs.append(subprocess.Popen([*cmd, "--actor_dir", str(run_dir / f"actor-{i}"), *overrides]))
        return _supervise(learner, procs)
    finally:
        _stop(*procs, learner)


def _without_flag(cmd: list[str], flag: str) -> list[str]:
    """``cmd`` without ``flag`` and its value."""
    out, skip = [], False
    for token in cmd:
        if skip:
            skip = False
        elif token == flag:
            skip = True
        else:
            out.append(token)
    return out


def _supervise(learner: subprocess.Popen, actors: list[subprocess.Popen]) -> int:
    """Wait for the learner (or for every actor) to end, then stop the rest."""
    try:
        while learner.poll() is None and any(a.poll() is None for a in actors):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    _stop(learner)
    _stop(*actors)
    return max([learner.returncode or 0, *[a.returncode or 0 for a in actors if a.returncode not in (None, -15)]])
