"""torchrun with 2 CPU processes (gloo): identical parameters and normalizers on every rank, one logger."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, torch
torch.set_num_threads(1)
from rslkit.cli.train import main
import torch.distributed as dist
out = sys.argv[1]
runner = main(["--task", "pendulum", "--num_envs", "64", "--max_iterations", "3", "--logdir", out + "/logs",
               "--agent.num_steps_per_env", "8"])
state = runner.policy.state_dict()
torch.save(state, f"{out}/rank{runner.dist.rank}.pt")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_processes(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        str(script),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s0 = torch.load(tmp_path / "rank0.pt")
    s1 = torch.load(tmp_path / "rank1.pt")
    for key in s0:
        torch.testing.assert_close(s0[key], s1[key], rtol=0, atol=0, msg=key)
    # Both ranks folded 2 x 64 envs x 8 steps x 3 iterations into the normalizer.
    assert s0["normalizers.policy.count"].item() == 2 * 64 * 8 * 3
    runs = list((tmp_path / "logs" / "pendulum").iterdir())
    assert len(runs) == 1, "only rank 0 logs and saves"
    assert (runs[0] / "model_3.pt").exists()
