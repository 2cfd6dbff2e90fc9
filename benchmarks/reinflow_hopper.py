"""ReinFlow on Hopper-v5 from imperfect demonstrations, against Gaussian PPO fine-tuned from a Gaussian BC start,
pi_RL's Flow-SDE and DSRL (noise-space SAC over the frozen flow BC policy), all at equal env steps.

The pipeline of the ReinFlow paper (flow BC from imperfect demos, then RL) sized for 2 CPU cores:

    # 1. the expert: rslkit SAC, 150k env steps, a checkpoint every 10k (~25 min on one core)
    .venv/bin/python train.py --task gym:Hopper-v5 --algo sac --max_iterations 150 --threads 1 \\
        --agent.save_interval 10 --logdir /tmp/bench/expert --run_name hopper_sac
    # 2. demonstrations, BC, fine-tuning (seeds on two lanes, one per core)
    .venv/bin/python benchmarks/reinflow_hopper.py --expert /tmp/bench/expert/<run dir> --seeds 0 1

Per run of the benchmark:
  1. Every checkpoint of the expert's run is evaluated (16 deterministic episodes). The *demonstrator* is the one
     whose return is closest to ``--demo_fraction`` (0.4) of the best checkpoint's: an imperfect, earlier policy,
     as in the paper (its Hopper BC starts at 1432, less than half of a good policy's). ``--demonstrator`` picks
     one by hand.
  2. ``--episodes`` (50) demonstrations of the demonstrator with Gaussian action noise ``--action_noise`` (0.1),
     written as a LeRobotDataset v3.0 (the files a user would have).
  3. Per seed (one process per seed, pinned to a core, one torch thread):
       flow BC      rectified flow, Ta = 4, K = 4, 256-wide residual MLP (3 blocks), EMA weights;
       Gaussian BC  the PPO actor-critic's actor (256x256 ELU, as PPO's default) fitted by MSE to the same
                    (observation, action) pairs, observation normalizer set from the demonstrations, std
                    ``--gauss_std`` (0.1);
       ReinFlow     from the flow BC checkpoint (paper's settings: learned noise sigma in [0.10, 0.24], clip 0.01,
                    actor lr 4.5e-5, critic lr 6.5e-4, 2 critic warm-up iterations, reward scale 0.1);
       Flow-SDE     from the same flow BC checkpoint, ReinFlow's PPO settings, the chain with one random
                    stochastic step (pi_RL's ODE -> SDE conversion, noise level ``--sde_noise_level`` 0.5);
       DSRL         the flow BC policy frozen; SAC (the task's SAC recipe, gamma 0.99^4 per decision, updates per
                    vectorized decision ``--dsrl_utd``, default the recipe's 4) over its initial noise, latent scale
                    ``--latent_scale`` (1.5), N envs x T decisions per iteration: the env steps of the PPO methods;
       Gaussian PPO from the Gaussian BC actor: rslkit PPO (adaptive lr at desired KL 0.01), the same reward scale,
                    the same number of critic warm-up iterations (the actor's weights and its Adam state are put
                    back after each), the same env steps per iteration (N envs x 4 T steps vs N envs x T decisions
                    of 4 steps) and the same number of iterations.
  4. Deterministic evaluation (32 episodes, fixed start seeds) of each BC and each fine-tuned policy, and every
     ``--eval_every`` iterations during fine-tuning.

Reported: BC return, fine-tuned return, net growth (fine-tuned / BC - 1) per seed and method, wall-clock of each
stage. ``--methods`` picks the fine-tuning methods (default all four). Results in
benchmarks/results/reinflow_hopper.json, rewritten after every finished run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

TASK = "gym:Hopper-v5"
EVAL_EPISODES = 32
EVAL_SEED = 10_000
REWARD_SCALE = 0.1
WARMUP = 2


# ------------------------------------------------------------------ evaluation
def evaluate(policy: Any, reset: Any, episodes: int = EVAL_EPISODES) -> float:
    """Mean return of one deterministic episode on each of ``episodes`` fixed start states."""

    from rslkit.envs import make_env
    from rslkit.runners.evaluation import evaluate_episodes

    env = make_env(TASK, num_envs=episodes, seed=EVAL_SEED)
    return float(evaluate_episodes(env, policy, reset).returns.mean())


def evaluate_runner(runner: Any) -> float:
    """:func:`evaluate` of a runner's deterministic policy."""
    return evaluate(runner.inference_policy(), runner.reset_inference)


# ------------------------------------------------------------------ demonstrations
def pick_demonstrator(expert: Path, fraction: float) -> tuple[Path, dict[str, float]]:
    """The checkpoint of ``expert`` whose return is closest to ``fraction`` of the best one's; all returns."""
    from rslkit.recipes.run import load_run

    returns: dict[str, float] = {}
    ckpts = sorted(expert.glob("model_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if not ckpts:
        raise SystemExit(f"--expert {expert}: no model_<iter>.pt in it (train one: see this file's docstring)")
    for ckpt in ckpts:
        _, runner, _ = load_run(ckpt, num_envs=1)
        returns[ckpt.name] = evaluate(runner.inference_policy(), runner.reset_inference, 16)
        print(f"  {ckpt.name}: return {returns[ckpt.name]:.0f}", flush=True)
    target = fraction * max(returns.values())
    name = min(returns, key=lambda k: abs(returns[k] - target))
    return expert / name, returns


def record_demos(demonstrator: Path, episodes: int, noise: float, out: Path) -> dict[str, float]:
    """Record ``episodes`` noisy episodes of ``demonstrator`` into the LeRobot dataset ``out``."""
    import torch

    from rslkit.data import record_episodes, write_lerobot_dataset
    from rslkit.recipes.run import load_run

    env, runner, _ = load_run(demonstrator, num_envs=min(episodes, 16), seed=1)
    torch.manual_seed(0)
    eps = record_episodes(env, runner.inference_policy(), episodes, noise, task="hop forward")
    write_lerobot_dataset(out, eps, fps=125, robot_type=TASK, overwrite=True)
    returns = [float(e.rewards.sum()) for e in eps if e.rewards is not None]
    return {"demo_return": statistics.mean(returns), "demo_frames": float(sum(len(e) for e in eps))}


def load_pairs(dataset: Path) -> tuple[Any, Any]:
    """All (observation.state, action) pairs of a LeRobot dataset, as float tensors."""
    import pyarrow.parquet as pq
    import torch

    tables = [pq.read_table(f) for f in sorted((dataset / "data").rglob("*.parquet"))]
    obs = torch.cat([torch.tensor(t.column("observation.state").to_pylist()) for t in tables]).float()
    act = torch.cat([torch.tensor(t.column("action").to_pylist()) for t in tables]).float()
    return obs, act


# ------------------------------------------------------------------ behaviour cloning
def flow_bc(dataset: Path, seed: int, out: Path, iterations: int) -> Any:
    """Flow BC runner trained on ``dataset`` (checkpoint ``out/model_<iterations>.pt``)."""
    import torch

    from rslkit.algorithms.flow_bc import FlowBCCfg
    from rslkit.envs import make_env
    from rslkit.models.flow import FlowPolicyCfg
    from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
    from rslkit.runners.pretrain_runner import PretrainRunner

    torch.manual_seed(seed)
    cfg = FlowBCRunnerCfg(
        dataset=str(dataset),
        algorithm=FlowBCCfg(learning_rate=1e-3, batch_size=512),
        policy=FlowPolicyCfg(horizon=4, num_inference_steps=4, hidden_dim=256, num_blocks=3),
        max_iterations=iterations,
        updates_per_iteration=100,
        eval_interval=0,
        save_interval=iterations,
        logger=(),
    )
    runner = PretrainRunner(make_env(TASK, num_envs=4, seed=seed + 1), cfg, out)
    runner.learn()
    return runner


class ScaledReward:
    """A VecEnv whose rewards are multiplied by ``scale`` (ReinFlow's ``reward_scale`` for PPO)."""

    def __init__(self, env: Any, scale: float) -> None:
        self._env, self._scale = env, scale

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def step(self, actions: Any) -> Any:
        obs, rewards, dones, extras = self._env.step(actions)
        return obs, rewards * self._scale, dones, extras


def ppo_runner_cls() -> Any:
    """OnPolicyRunner whose first ``WARMUP`` iterations train only the critic (actor weights and Adam state put
    back after each), as ReinFlow's ``critic_warmup_iterations``."""
    from rslkit.runners.on_policy_runner import OnPolicyRunner

    class WarmupRunner(OnPolicyRunner):
        done_iterations = 0

        def _iteration(self) -> dict[str, float]:
            if self.done_iterations >= WARMUP:
                return super()._iteration()
            policy = self.alg.policy
            actor = [*policy.actor.parameters(), *policy.dist.parameters()]
            saved = [p.detach().clone() for p in actor]
            out = super()._iteration()
            for p, s in zip(actor, saved, strict=True):
                p.data.copy_(s)
                self.alg.optimizer.state.pop(p, None)
            self.done_iterations += 1
            return out

    return WarmupRunner


def gaussian_bc(dataset: Path, seed: int, num_envs: int, steps: int, iterations: int, std: float, out: Path) -> Any:
    """PPO runner whose actor mean is fitted to ``dataset`` by MSE (observation normalizer from the demos)."""
    import torch

    from rslkit.algorithms.ppo import PPOCfg
    from rslkit.envs import make_env
    from rslkit.models.actor_critic import PolicyCfg
    from rslkit.runners.ppo_config import PPORunnerCfg

    torch.manual_seed(seed)
    cfg = PPORunnerCfg(
        algorithm=PPOCfg(num_learning_epochs=5, num_mini_batches=4, gamma=0.99, lam=0.95, entropy_coef=0.0),
        policy=PolicyCfg(actor_hidden_dims=(256, 256), critic_hidden_dims=(256, 256, 256), init_std=std),
        num_steps_per_env=steps,
        max_iterations=iterations,
        save_interval=10**9,
        logger=(),
    )
    env = ScaledReward(make_env(TASK, num_envs=num_envs, seed=seed + 2), REWARD_SCALE)
    runner = ppo_runner_cls()(env, cfg, out)
    policy = runner.alg.policy
    obs, act = load_pairs(dataset)
    normalizer = policy.normalizers["policy"]
    normalizer.update(obs)
    x = normalizer(obs).detach()
    params = list(policy.actor.parameters())
    opt = torch.optim.Adam(params, lr=1e-3)
    for _ in range(10_000):
        idx = torch.randint(0, x.shape[0], (512,))
        head = policy.actor(x[idx])
        mean = head[:, : act.shape[1]]
        loss = (mean - act[idx]).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    runner.alg.optimizer.state.clear()  # the std stays at init_std = ``std``
    return runner


# ------------------------------------------------------------------ fine-tuning
def finetune_reinflow(
    checkpoint: str,
    seed: int,
    num_envs: int,
    decisions: int,
    iterations: int,
    every: int,
    out: Path,
    **chain: Any,
) -> tuple[Any, list[tuple[int, float]]]:
    """ReinFlow (or, with ``chain`` settings such as ``noise_method="flow_sde"``, Flow-SDE) from a flow-BC
    checkpoint; returns the runner and (env steps, return) every ``every`` iterations."""
    import torch

    from rslkit.algorithms.reinflow import ReinFlowCfg
    from rslkit.envs import make_env
    from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg

    torch.manual_seed(seed)
    cfg = ReinFlowRunnerCfg(
        pretrained=checkpoint,
        algorithm=ReinFlowCfg(reward_scale=REWARD_SCALE, critic_warmup_iterations=WARMUP, **chain),
        num_steps_per_env=decisions,
        max_iterations=iterations,
        eval_interval=0,
        save_interval=10**9,
        logger=(),
    )
    runner = ReinFlowRunner(make_env(TASK, num_envs=num_envs, seed=seed + 2), cfg, out)
    return runner, _learn_in_chunks(runner, iterations, every, num_envs * decisions * 4)


def finetune_dsrl(
    checkpoint: str, seed: int, args: argparse.Namespace, out: Path
) -> tuple[Any, list[tuple[int, float]]]:
    """DSRL over the frozen flow-BC checkpoint: ``args.num_envs`` x ``args.decisions`` decisions per iteration (the
    env steps of a ReinFlow iteration); returns the runner and its curve."""
    from dataclasses import replace

    import torch

    from rslkit.envs import make_env
    from rslkit.recipes import agent_cfg
    from rslkit.runners.dsrl_runner import DSRLRunner, dsrl_cfg

    torch.manual_seed(seed)
    sac = agent_cfg(TASK, "sac")
    if args.dsrl_utd is not None:
        sac.algorithm = replace(sac.algorithm, utd_ratio=args.dsrl_utd)
    cfg = dsrl_cfg(sac, 4, pretrained=checkpoint, latent_scale=args.latent_scale, num_steps_per_env=args.decisions,
                   max_iterations=args.iterations, save_interval=10**9, logger=())  # fmt: skip
    runner = DSRLRunner(make_env(TASK, num_envs=args.num_envs, seed=seed + 2), cfg, out)
    steps = args.num_envs * args.decisions * 4
    return runner, _learn_in_chunks(runner, args.iterations, args.eval_every, steps)


def _learn_in_chunks(runner: Any, iterations: int, every: int, steps_per_it: int) -> list[tuple[int, float]]:
    curve = []
    done = 0
    while done < iterations:
        n = min(every, iterations - done)
        runner.learn(n)
        done += n
        curve.append((done * steps_per_it, evaluate_runner(runner)))
        print(f"    it {done}: {curve[-1][0]} steps, return {curve[-1][1]:.0f}", flush=True)
    return curve


# ------------------------------------------------------------------ one seed
def run_seed(args: argparse.Namespace, seed: int, dataset: Path, root: Path) -> dict[str, Any]:
    """BC (flow and Gaussian) and fine-tuning (ReinFlow and PPO) of one seed; its figures."""
    out: dict[str, Any] = {"seed": seed}
    t0 = time.perf_counter()
    bc = flow_bc(dataset, seed, root / f"flow_bc_{seed}", args.bc_iterations)
    out["flow_bc_s"] = time.perf_counter() - t0
    out["flow_bc_return"] = evaluate_runner(bc)
    print(f"seed {seed}: flow BC {out['flow_bc_return']:.0f} ({out['flow_bc_s']:.0f} s)", flush=True)
    ckpt = str(root / f"flow_bc_{seed}" / f"model_{args.bc_iterations}.pt")
    flow_methods = {
        "reinflow": {},
        "flow_sde": {"noise_method": "flow_sde", "noise_level": args.sde_noise_level},
        "dsrl": None,
    }
    for method, chain in flow_methods.items():
        if method.replace("_", "-") not in args.methods:
            continue
        t0 = time.perf_counter()
        if chain is None:
            _, curve = finetune_dsrl(ckpt, seed, args, root / f"{method}_{seed}")
        else:
            common = (seed, args.num_envs, args.decisions, args.iterations, args.eval_every, root / f"{method}_{seed}")
            _, curve = finetune_reinflow(ckpt, *common, **chain)
        out[f"{method}_s"] = time.perf_counter() - t0
        out[f"{method}_curve"] = curve
        out[f"{method}_return"] = curve[-1][1]
        print(f"seed {seed}: {method} {out['flow_bc_return']:.0f} -> {out[f'{method}_return']:.0f}", flush=True)
    out["env_steps"] = args.iterations * args.num_envs * args.decisions * 4
    if "ppo" not in args.methods:
        return out
    t0 = time.perf_counter()
    g = gaussian_bc(
        dataset, seed, args.num_envs, 4 * args.decisions, args.iterations, args.gauss_std, root / f"ppo_{seed}"
    )
    out["gauss_bc_s"] = time.perf_counter() - t0
    out["gauss_bc_return"] = evaluate_runner(g)
    print(f"seed {seed}: Gaussian BC {out['gauss_bc_return']:.0f}", flush=True)
    t0 = time.perf_counter()
    out["ppo_curve"] = _learn_in_chunks(g, args.iterations, args.eval_every, args.num_envs * args.decisions * 4)
    out["ppo_s"] = time.perf_counter() - t0
    out["ppo_return"] = out["ppo_curve"][-1][1]
    print(f"seed {seed}: PPO {out['gauss_bc_return']:.0f} -> {out['ppo_return']:.0f}", flush=True)
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means, net growth and the worst seed's change per method."""
    summary: dict[str, Any] = {}
    methods = (("reinflow", "flow_bc_return"), ("flow_sde", "flow_bc_return"), ("dsrl", "flow_bc_return"),
               ("ppo", "gauss_bc_return"))  # fmt: skip
    for method, bc_key in methods:
        mine = [r for r in runs if f"{method}_return" in r]
        if not mine:
            continue
        growth = [r[f"{method}_return"] / r[bc_key] - 1.0 for r in mine]
        summary[method] = {
            "bc_return": statistics.mean(r[bc_key] for r in mine),
            "finetuned_return": statistics.mean(r[f"{method}_return"] for r in mine),
            "net_growth": statistics.mean(growth),
            "worst_change_vs_bc": min(growth),
            "seeds": [r["seed"] for r in mine],
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--expert", help="train.py SAC run directory with model_<iter>.pt files")
    parser.add_argument("--demonstrator", help="one checkpoint to record (default: picked by --demo_fraction)")
    parser.add_argument("--demo_fraction", type=float, default=0.4)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--action_noise", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--bc_iterations", type=int, default=30, help="x 100 updates")
    parser.add_argument("--num_envs", type=int, default=16)
    parser.add_argument("--decisions", type=int, default=32, help="ReinFlow decisions per env and iteration")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--gauss_std", type=float, default=0.1)
    parser.add_argument("--methods", nargs="+", choices=("reinflow", "flow-sde", "dsrl", "ppo"),
                        default=["reinflow", "flow-sde", "dsrl", "ppo"])  # fmt: skip
    parser.add_argument("--sde_noise_level", type=float, default=0.5, help="Flow-SDE's a (pi_RL: 0.5)")
    parser.add_argument("--latent_scale", type=float, default=1.5, help="DSRL: x0 = latent_scale * tanh(...)")
    parser.add_argument("--dsrl_utd", type=float, default=None, help="DSRL: SAC updates per vectorized decision "
                        "(default: the task's SAC recipe's)")  # fmt: skip
    parser.add_argument("--work", default="/tmp/reinflow_hopper", help="datasets and checkpoints")
    parser.add_argument("--out", default=None, help="results JSON path")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one lane: one seed, pinned to its core by the parent
        spec = json.loads(args.child)
        child_args = argparse.Namespace(**spec["args"])
        C.lane_child(spec, args.result, lambda sp: run_seed(child_args, sp["seed"], Path(sp["dataset"]), work_of(sp)))
        return
    if not (args.expert or args.demonstrator):
        parser.error("pass --expert RUN_DIR (a train.py SAC run) or --demonstrator CHECKPOINT")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    dataset = work / "demos"
    info = C.machine_info(["rslkit", "torch", "gymnasium", "mujoco"])
    C.print_machine_info(info)
    t_start = time.perf_counter()
    payload: dict[str, Any] = {"benchmark": "reinflow_hopper", "machine": info, "args": vars(args), "runs": []}
    if args.demonstrator:
        demonstrator, returns = Path(args.demonstrator), dict[str, float]()
    else:
        print("expert checkpoints:", flush=True)
        demonstrator, returns = pick_demonstrator(Path(args.expert), args.demo_fraction)
    payload["expert_returns"] = returns
    payload["demonstrator"] = str(demonstrator)
    payload.update(record_demos(demonstrator, args.episodes, args.action_noise, dataset))
    print(f"demonstrator {demonstrator.name}: demos return {payload['demo_return']:.0f}", flush=True)
    out = C.write_results("reinflow_hopper", payload, args.out)
    specs = [
        {"run_id": f"seed{s}", "seed": s, "dataset": str(dataset), "work": str(work), "args": vars(args)}
        for s in args.seeds
    ]

    def finished(spec: dict[str, Any], result: dict[str, Any]) -> None:
        payload["runs"].append(result)
        payload["summary"] = summarize([r for r in payload["runs"] if "error" not in r])
        payload["total_wall_s"] = time.perf_counter() - t_start
        C.write_results("reinflow_hopper", payload, args.out)
        print(f"seed {spec['seed']} finished: {result.get('error', 'ok')}", flush=True)

    C.run_children_in_lanes(__file__, specs, min(2, len(specs)), lambda _: 3 * 3600.0, finished, log_dir=work / "logs")
    print(json.dumps(payload.get("summary", {}), indent=1))
    print(f"results: {out}")


def work_of(spec: dict[str, Any]) -> Path:
    """The child's folder for checkpoints."""
    return Path(spec["work"]) / spec["run_id"]


if __name__ == "__main__":
    main()
