"""Your own SO-101 recordings -> a VLA policy, with no simulator -> an ONNX policy for the robot.

Run: .venv/bin/python examples/so101_dataset_vla_bc.py DATASET_DIR [OUT_DIR]
     .venv/bin/python examples/so101_dataset_vla_bc.py --stand_in [OUT_DIR]

``DATASET_DIR`` is a LeRobotDataset v3.0 recorded on your arm (``lerobot-record``: ``observation.state``, ``action``,
``observation.images.<camera>`` videos and a task per episode). The state and action sizes, their names, the cameras
and their sizes, the instructions (``meta/tasks.parquet``) and the control rate (``fps``) come from its
``meta/info.json``: nothing about the robot is configured here. ``--stand_in`` first records 24 episodes of the
simulated so101-pick-place expert with its table camera, so the script runs without an arm (tens of minutes on 2 CPU
cores).

Training holds out 10 % of the episodes (``--agent.val_fraction``) and logs, at each evaluation, their flow loss and
the error of sampled chunks against the recorded actions (``Val/*`` in metrics.csv and TensorBoard), with LeRobot's
SmolVLA learning-rate schedule (linear warm-up, cosine decay). The same from the command line:

    python train.py --algo vla-bc --dataset DATASET_DIR --agent.lr_schedule.name cosine_decay_with_warmup \\
        --agent.algorithm.learning_rate 1e-4 --agent.algorithm.max_grad_norm 10 --agent.algorithm.weight_decay 1e-10
    python -m rslkit.export --checkpoint logs/dataset_<name>/<run> --out policy.onnx
"""

import sys
import tempfile
from pathlib import Path

import torch

from rslkit import record
from rslkit.deploy.export import export_checkpoint
from rslkit.recipes.dataset_run import build_dataset_run

LEROBOT_FINE_TUNING = [
    "--agent.lr_schedule.name", "cosine_decay_with_warmup",  # warm-up then cosine decay to 2.5e-6 (SmolVLA's)
    "--agent.algorithm.max_grad_norm", "10",
    "--agent.algorithm.weight_decay", "1e-10",
]  # fmt: skip
"""LeRobot's SmolVLA optimiser settings; its peak rate (1e-4) suits a pretrained model, a policy trained from
scratch as here keeps rslkit's 1e-3."""
SMALL_POLICY = ["--agent.policy.horizon", "16", "--agent.policy.image_tokens", "keypoints",
                "--agent.updates_per_iteration", "50", "--agent.eval_interval", "5"]  # fmt: skip


def stand_in_dataset(out: Path) -> Path:
    """A dataset shaped like a user's: the so101-pick-place expert seen by the table camera, an instruction per
    episode (``python -m rslkit.record --task so101-pick-place --expert ...``)."""
    root = out / "so101_stand_in"
    record.main(["--task", "so101-pick-place", "--expert", "--episodes", "24", "--out", str(root), "--camera", "table",
                 "--env.cameras", "table", "--obs_group", "proprio", "--overwrite"])  # fmt: skip
    return root


if __name__ == "__main__":
    torch.set_num_threads(1)
    args = sys.argv[1:]
    stand_in = "--stand_in" in args
    args = [a for a in args if a != "--stand_in"]
    if not args and not stand_in:
        sys.exit(__doc__)
    out = Path(args[-1]) if len(args) > (0 if stand_in else 1) else Path(tempfile.mkdtemp(prefix="so101_vla_"))
    dataset = stand_in_dataset(out) if stand_in else Path(args[0])

    spec, runner = build_dataset_run(dataset, "vla-bc", LEROBOT_FINE_TUNING + SMALL_POLICY, max_iterations=20,
                                     log_dir=out / "run")  # fmt: skip
    names = f" {spec.action_names}" if spec.action_names else ""
    print(f"{spec.dataset}: state {spec.state_dim}, actions {spec.num_actions}{names}, cameras {spec.cameras}, "
          f"{len(spec.instructions)} instruction(s), {spec.fps:g} Hz")  # fmt: skip
    metrics = runner.learn()
    print(
        f"validation: flow loss {metrics['Val/flow_loss']:.3f}, action MAE {metrics['Val/action_mae']:.4f} (raw units)"
    )

    meta = export_checkpoint(out / "run" / "model_20.pt", out / "policy.onnx")
    print(f"exported {out / 'policy.onnx'}: {meta.obs_groups} -> chunks of {meta.chunk_length} x {meta.action_dim}")
