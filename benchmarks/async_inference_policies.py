"""Train and export the two SO-101 flow chunk policies of ``benchmarks/async_inference.py``.

Both are behaviour-cloned (``flow-bc``) from the same demonstrations with ``train.py``; the second is trained with
VLASH future-state offsets (``delta`` in ``0..D``, future state = the commanded joint targets, observation columns
0-4) and exported with a ``future_state`` input. Both use ``so101-reach``'s registered ``flow-bc`` config
(``so101_reach_flow_bc_cfg``) through ``train.py``'s entry point; any ``train.py`` override can follow ``--``
(e.g. ``-- --agent.max_iterations 10``).

Usage::

    python benchmarks/async_inference_policies.py --dataset DEMOS --out_dir OUT [--max_offset 20]

writes ``OUT/plain.onnx`` and ``OUT/vlash.onnx`` (and the training runs under ``OUT/logs``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

from rslkit.cli import train  # noqa: E402
from rslkit.deploy.export import export_checkpoint  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=C.TRAIN_FLAGS_HELP)
    parser.add_argument("--dataset", required=True, help="so101-reach demonstrations (python -m rslkit.record)")
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--max_offset", type=int, default=20, help="D of the future-state offsets (ticks)")
    parser.add_argument("--only", choices=("plain", "vlash"), default=None)
    own, extra = C.split_train_flags(argv)
    args = parser.parse_args(own)
    out = Path(args.out_dir)
    common = ["--task", "so101-reach", "--algo", "flow-bc", "--dataset", args.dataset, "--threads", "1"]
    common += ["--num_envs", "32", "--logdir", str(out / "logs"), "--env.sim_threads", "1"]
    common += ["--env.episode_length", "100", "--env.init_noise", "0.6"]
    variants = {
        "plain": [],
        "vlash": [
            "--agent.policy.max_future_offset",
            str(args.max_offset),
            "--agent.policy.future_state_slice",
            "0,5",
            "--agent.policy.future_state_source",
            "action",
        ],
    }
    for name, flags in variants.items():
        if args.only not in (None, name):
            continue
        runner = train.main([*common, "--run_name", name, *flags, *extra])
        assert runner.log_dir is not None
        checkpoint = runner.log_dir / f"model_{runner.iteration}.pt"
        meta = export_checkpoint(checkpoint, out / f"{name}.onnx")
        fs = f"future_state {meta.future_state_slice}, D {meta.max_future_offset}"
        print(f"{name}: {checkpoint} -> {out / f'{name}.onnx'} ({fs})")


if __name__ == "__main__":
    main()
