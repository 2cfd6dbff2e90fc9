"""A small flow-bc checkpoint of pendulum for the fine-tuning tests (Flow-SDE, DSRL)."""

from pathlib import Path

from rslkit.algorithms.flow_bc import FlowBCCfg
from rslkit.data import record_episodes, write_lerobot_dataset
from rslkit.envs import make_env
from rslkit.envs.tasks.pendulum import pendulum_expert
from rslkit.models.flow import FlowPolicyCfg
from rslkit.runners.flow_bc_data import FlowBCRunnerCfg
from rslkit.runners.pretrain_runner import PretrainRunner
from rslkit.utils.seeding import seed_everything


def flow_bc_checkpoint(root: Path) -> str:
    """Four noisy expert episodes cloned for one short iteration (chunks of 4, K = 2); the checkpoint's path."""
    episodes = record_episodes(make_env("pendulum", num_envs=4, episode_length=20), pendulum_expert, 4, 0.3)
    dataset = write_lerobot_dataset(root / "demos", episodes, fps=20)
    cfg = FlowBCRunnerCfg(
        dataset=str(dataset),
        algorithm=FlowBCCfg(batch_size=32),
        policy=FlowPolicyCfg(horizon=4, num_inference_steps=2, hidden_dim=16, num_blocks=1),
        updates_per_iteration=5,
        eval_interval=0,
        save_interval=1,
        logger=(),
    )
    seed_everything(0)
    PretrainRunner(make_env("pendulum", num_envs=2, episode_length=20, seed=0), cfg, root / "bc").learn(1)
    return str(root / "bc" / "model_1.pt")
