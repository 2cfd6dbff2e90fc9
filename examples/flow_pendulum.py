"""Flow policies end to end on the pendulum: imperfect demos -> LeRobotDataset -> behaviour cloning -> ReinFlow.

Run: .venv/bin/python examples/flow_pendulum.py [OUT_DIR]      (~1 minute on 2 CPU cores)

The same pipeline from the command line (with a PPO policy as the demonstrator instead of the scripted one):

    python train.py --task pendulum --max_iterations 40
    python -m rslkit.record --task pendulum --checkpoint logs/pendulum/<run>/model_40.pt --episodes 64 \\
        --action_noise 0.5 --out demos/pendulum
    python train.py --task pendulum --algo flow-bc --dataset demos/pendulum --num_envs 64
    python train.py --task pendulum --algo reinflow --pretrained logs/pendulum/<bc run>/model_<n>.pt --num_envs 64
    python play.py --task pendulum --checkpoint logs/pendulum/<reinflow run>/model_<n>.pt
"""

import sys
import tempfile
from pathlib import Path

import torch

from rslkit.algorithms.flow_bc import FlowBCCfg
from rslkit.algorithms.reinflow import ReinFlowCfg
from rslkit.data import read_lerobot_dataset, record_episodes, write_lerobot_dataset
from rslkit.envs import make_env
from rslkit.envs.tasks.pendulum import pendulum_expert
from rslkit.models.flow import FlowPolicyCfg
from rslkit.runners.evaluation import evaluate_episodes
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.pretrain_runner import PretrainRunner
from rslkit.runners.reinflow_runner import ReinFlowRunner, ReinFlowRunnerCfg


def deterministic_return(runner) -> float:
    """Mean return of the noise-free policy over 256 fixed start states."""
    env = make_env("pendulum", num_envs=256, seed=123)
    torch.manual_seed(5)
    episodes = evaluate_episodes(env, runner.inference_policy(), runner.reset_inference)
    return float(episodes.returns.mean())


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.manual_seed(0)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="flow_pendulum_"))

    # 1. Imperfect demonstrations: a scripted swing-up controller with action noise, saved as LeRobotDataset v3.0.
    episodes = record_episodes(make_env("pendulum", num_envs=64), pendulum_expert, 64, action_noise=0.8)
    write_lerobot_dataset(out / "demos", episodes, fps=20, robot_type="pendulum", overwrite=True)
    demo_return = read_lerobot_dataset(out / "demos").episode_returns().mean()
    print(f"demonstrations: {len(episodes)} episodes, mean return {demo_return:.1f}")

    # 2. Behaviour cloning of a rectified-flow policy over 4-action chunks.
    bc_cfg = FlowBCRunnerCfg(
        dataset=str(out / "demos"),
        algorithm=FlowBCCfg(learning_rate=2e-3, batch_size=1024),
        policy=FlowPolicyCfg(horizon=4, num_inference_steps=4, hidden_dim=64, num_blocks=2),
        max_iterations=10,
        updates_per_iteration=100,
        eval_interval=5,
        logger=(),
    )
    bc = PretrainRunner(make_env("pendulum", num_envs=64, seed=1), bc_cfg, out / "bc")
    bc.learn()
    print(f"behaviour cloning: deterministic return {deterministic_return(bc):.1f}")

    # 3. ReinFlow: PPO over the noisy 4-step Euler chain, starting from the BC checkpoint.
    rl_cfg = ReinFlowRunnerCfg(
        pretrained=str(out / "bc" / "model_10.pt"),
        algorithm=ReinFlowCfg(
            gamma=0.95, reward_scale=0.1, critic_hidden_dims=(64, 64), actor_lr=3e-4, critic_lr=1e-3, clip_param=0.02
        ),
        num_steps_per_env=25,
        max_iterations=30,
        eval_interval=10,
        logger=(),
    )
    rl = ReinFlowRunner(make_env("pendulum", num_envs=64, seed=2), rl_cfg, out / "reinflow")
    rl.learn()
    print(f"ReinFlow: deterministic return {deterministic_return(rl):.1f}  (checkpoints in {out})")
