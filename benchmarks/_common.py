"""Helpers shared by the benchmark scripts: machine info, child processes, memory, tables, JSON output.

Every measured run executes in a fresh child process (``python <script> --child <spec-json> --result <file>``)
so that peak RSS is per run and no state (allocator caches, thread pools, RNG) leaks between runs.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------------------------------------- machine info
def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (falls back to platform.processor())."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_info(packages: Sequence[str]) -> dict[str, Any]:
    """Date, host, CPU, cores, load, torch threads, package versions and the rslkit git state."""
    import torch

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    try:
        import psutil

        mem_gib = psutil.virtual_memory().total / 2**30
    except ImportError:
        mem_gib = float("nan")
    dirty = _git("status", "--porcelain", "--", "rslkit")
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "memory_gib": round(mem_gib, 1),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "torch": torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "packages": {p: _version(p) for p in packages},
        "rslkit_git_commit": _git("rev-parse", "--short", "HEAD"),
        "rslkit_uncommitted_files": len(dirty.splitlines()) if dirty else 0,
        "rslkit_git_status": dirty.splitlines() if dirty else [],
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }


def print_machine_info(info: dict[str, Any]) -> None:
    print("=" * 100)
    print(f"date          {info['date']}")
    print(f"cpu           {info['cpu_model']}  ({info['cpus_usable']} usable of {info['cpu_count']} logical cores)")
    print(f"memory        {info['memory_gib']} GiB   load average at start {info['loadavg_at_start']}")
    print(f"python/torch  {info['python']} / torch {info['torch']} ({info['torch_num_threads']} intra-op threads)")
    print("packages      " + ", ".join(f"{k} {v}" for k, v in info["packages"].items()))
    print(f"rslkit        git {info['rslkit_git_commit']} (+{info['rslkit_uncommitted_files']} uncommitted files)")
    if "code_snapshot" in info:
        print(f"code          snapshot {info['code_snapshot']} (rslkit fingerprint {info['rslkit_fingerprint']})")
    if "run_threads" in info:
        print(f"runs          torch intra-op threads per run: {info['run_threads']}")
    print(f"command       {info['command']}")
    print("=" * 100, flush=True)


# ---------------------------------------------------------------------------------------------- code snapshot
def code_fingerprint(package_dir: str | Path) -> str:
    """Short SHA-256 over the relative paths and contents of every ``.py`` file under ``package_dir``."""
    root = Path(package_dir)
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        if "__pycache__" in f.parts:
            continue
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def snapshot_code() -> tuple[Path, str]:
    """Copy ``rslkit/`` and ``benchmarks/*.py`` to a temporary folder; children import rslkit from there.

    Other people may edit rslkit while a benchmark runs; without a snapshot, later runs would measure different
    code than earlier ones. Returns the folder (to put first on ``PYTHONPATH``) and the code fingerprint.
    """
    snap = Path(tempfile.mkdtemp(prefix="rslkit_bench_snapshot_"))
    ignore = shutil.ignore_patterns("__pycache__", "results", "*.pyc")
    shutil.copytree(REPO_ROOT / "rslkit", snap / "rslkit", ignore=ignore)
    shutil.copytree(Path(__file__).resolve().parent, snap / "benchmarks", ignore=ignore)
    return snap, code_fingerprint(snap / "rslkit")


def imported_rslkit() -> dict[str, str]:
    """Where the running process imported rslkit from, and that code's fingerprint (call in a child)."""
    import rslkit

    pkg = Path(rslkit.__file__).resolve().parent
    return {"rslkit_path": str(pkg), "rslkit_fingerprint": code_fingerprint(pkg)}


# ---------------------------------------------------------------------------------------------- train.py flags
TRAIN_FLAGS_HELP = (
    "Everything after `--` is passed unchanged to every training run the benchmark starts (train.py flags: "
    "`-- --agent.algorithm.learning_rate 3e-4 --env.episode_length 100`)."
)
"""The epilog of every benchmark that forwards flags (:func:`split_train_flags`)."""


def split_train_flags(argv: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """``(the benchmark's own arguments, train.py flags)`` of ``argv`` (default: the command line): the one way a
    benchmark takes extra train.py flags is everything after the first ``--``, passed to every training run."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        return args, []
    cut = args.index("--")
    return args[:cut], args[cut + 1 :]


# ---------------------------------------------------------------------------------------------- env wrapper
class EpisodeReturnRecorder:
    """Pass-through VecEnv wrapper that records the returns of finished *complete* episodes, the time spent in
    ``step`` and (with ``steps_per_env``) the start time of every iteration, i.e. of every ``steps_per_env``-th step
    call, which gives per-iteration wall times measured identically under any runner.

    An episode is complete when it terminated or ran ``max_episode_length`` steps as counted by the wrapper. This
    leaves out the first, artificially short episode of each env when a runner randomizes the initial episode
    lengths (``init_at_random_ep_len``): its return covers only a few steps and would flatter the mean.

    Works under rslkit's and rsl_rl's runners: attributes not defined here are forwarded to the wrapped env, and
    ``episode_length_buf`` is forwarded in both directions (runners assign it).
    """

    def __init__(self, env: Any, window: int, steps_per_env: int | None = None) -> None:
        import torch

        self._env = env
        self._returns = torch.zeros(env.num_envs, device=env.device)
        self._lengths = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
        self.finished: deque[float] = deque(maxlen=window)
        self.num_finished = 0
        self.num_partial = 0
        self.step_time = 0.0
        self.num_steps = 0
        self.steps_per_env = steps_per_env
        self.iteration_starts: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    @property
    def episode_length_buf(self) -> Any:
        return self._env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: Any) -> None:
        self._env.episode_length_buf = value

    def get_observations(self) -> Any:
        return self._env.get_observations()

    def step(self, actions: Any) -> tuple:
        import torch

        t0 = time.perf_counter()
        if self.steps_per_env and self.num_steps % self.steps_per_env == 0:
            self.iteration_starts.append(t0)
        obs, rewards, dones, extras = self._env.step(actions)
        self.step_time += time.perf_counter() - t0
        self.num_steps += 1
        self._returns += rewards
        self._lengths += 1
        ids = dones.nonzero().squeeze(-1)
        if ids.numel() > 0:
            max_len = self._env.max_episode_length
            max_len = max_len[ids] if isinstance(max_len, torch.Tensor) else max_len
            complete = self._lengths[ids] >= max_len
            time_outs = extras.get("time_outs")
            if time_outs is not None:
                complete |= ~time_outs[ids].bool()
            keep = ids[complete]
            self.finished.extend(self._returns[keep].tolist())
            self.num_finished += keep.numel()
            self.num_partial += ids.numel() - keep.numel()
            self._returns[ids] = 0.0
            self._lengths[ids] = 0
        return obs, rewards, dones, extras

    def mean_return(self) -> float | None:
        return sum(self.finished) / len(self.finished) if self.finished else None


# ---------------------------------------------------------------------------------------------- memory
def rss_mib() -> float:
    """Current resident set size of this process (MiB)."""
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (MiB); ``ru_maxrss`` is in KiB on Linux."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def seed_all(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------- child processes
def run_child(
    script: str,
    spec: dict[str, Any],
    timeout_s: float,
    log_dir: Path | None = None,
    snapshot: Path | None = None,
) -> dict[str, Any]:
    """Run ``script --child <spec> --result <tmp>`` in a fresh interpreter; return its JSON result.

    With ``snapshot`` (from :func:`snapshot_code`) the child runs the snapshot's copy of ``script`` and imports
    rslkit from the snapshot.

    The child's console output goes to a log file (kept under ``log_dir`` if given) and its tail is shown when the
    child fails. A failed or timed-out child returns ``{"error": ...}`` instead of raising, so one bad run does not
    lose the others.
    """
    with tempfile.TemporaryDirectory(prefix="rslkit_bench_") as tmp:
        result_path = Path(tmp) / "result.json"
        log_path = (log_dir / f"{spec['run_id']}.log") if log_dir is not None else Path(tmp) / "child.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if snapshot is not None:
            script = str(snapshot / "benchmarks" / Path(script).name)
            env["PYTHONPATH"] = os.pathsep.join([str(snapshot), *filter(None, [os.environ.get("PYTHONPATH")])])
        cmd = [sys.executable, script, "--child", json.dumps(spec), "--result", str(result_path)]
        t0 = time.perf_counter()
        with log_path.open("w") as log:
            try:
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, env=env)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = None
        wall = time.perf_counter() - t0
        if rc == 0 and result_path.exists():
            out = json.loads(result_path.read_text())
            out["process_wall_s"] = wall
            return out
        tail = log_path.read_text(errors="replace")[-3000:]
        why = "timed out" if rc is None else f"exit code {rc}"
        print(f"\n!! child run {spec['run_id']} failed ({why}); last output:\n{tail}\n", flush=True)
        return {"error": why, "log_tail": tail, "process_wall_s": wall}


def run_children_in_lanes(
    script: str,
    specs: Sequence[dict[str, Any]],
    lanes: int,
    timeout_s: Callable[[dict[str, Any]], float],
    on_result: Callable[[dict[str, Any], dict[str, Any]], None],
    log_dir: Path | None = None,
    snapshot: Path | None = None,
) -> None:
    """Run ``specs`` as children on ``lanes`` CPUs at once, each child pinned to its lane's CPU (``spec["cpu"]``).

    A queue in the order of ``specs``: whenever a lane's run ends, the lane starts the next spec. ``on_result(spec,
    result)`` is called (under a lock, in the order the runs finish) as each run ends, so the caller can write its
    results after every run and an interrupted benchmark keeps what finished. Pinning one single-threaded run per
    core keeps two runs from disturbing each other's caches and scheduling more than sharing the machine must.
    """
    import threading

    usable = sorted(os.sched_getaffinity(0))
    if lanes < 1 or lanes > len(usable):
        raise ValueError(f"lanes must be in [1, {len(usable)}] (the CPUs this process may use), got {lanes}")
    queue = list(specs)
    lock = threading.Lock()

    def lane(cpu: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                spec = {**queue.pop(0), "cpu": cpu}
            result = run_child(script, spec, timeout_s(spec), log_dir, snapshot)
            with lock:
                on_result(spec, result)

    threads = [threading.Thread(target=lane, args=(cpu,), daemon=True) for cpu in usable[:lanes]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def success_rate(env: Any, runner: Any) -> float:
    """Fraction of one episode per env of a fresh ``env`` that ended in ``extras["success"]`` under ``runner``'s
    deterministic policy (:func:`rslkit.runners.evaluation.evaluate_episodes`)."""
    from rslkit.runners.evaluation import evaluate_episodes

    episodes = evaluate_episodes(env, runner.inference_policy(), runner.reset_inference, runner.device, reset=False)
    return float(episodes.success.float().mean())


def lane_child(spec: dict[str, Any], result_path: str, run: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """A lane's child: pinned to ``spec["cpu"]``, one torch thread, seeded with ``spec["seed"]``; writes
    ``{**spec, **run(spec), "peak_rss_mib": ...}`` to ``result_path``."""
    import torch

    pin_to_cpu(spec.get("cpu"))
    torch.set_num_threads(1)
    seed_all(spec["seed"])
    result = run(spec)
    result["peak_rss_mib"] = peak_rss_mib()
    write_child_result(result_path, {**spec, **result})


def pin_to_cpu(cpu: int | None) -> None:
    """In a child: run on ``cpu`` only (None: leave the affinity alone)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def write_child_result(path: str, result: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(result))


def check_fingerprints(runs: Sequence[dict[str, Any]], expected: str | None) -> list[str]:
    """Distinct rslkit fingerprints seen by the children; warn when they differ or differ from ``expected``."""
    seen = sorted({r["rslkit_fingerprint"] for r in runs if "rslkit_fingerprint" in r})
    if len(seen) > 1 or (expected is not None and seen and seen != [expected]):
        print(f"WARNING: runs used different rslkit code: fingerprints {seen} (snapshot {expected})")
    return seen


# ---------------------------------------------------------------------------------------------- reporting
def median(values: Sequence[float]) -> float:
    vals = [v for v in values if v is not None and v == v]
    return statistics.median(vals) if vals else float("nan")


def fmt(value: Any, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec) if isinstance(value, float) or "f" not in spec else format(float(value), spec)
    return str(value)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Print (and return) a plain-text table."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    lines = [
        "  ".join(str(h).rjust(w) for h, w in zip(headers, widths)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in rows]
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def write_results(name: str, payload: dict[str, Any], out: str | None = None) -> Path:
    path = Path(out) if out else RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path
