"""Full-size SmolVLA cost on CUDA with bf16 autocast: ``benchmarks/smolvla_cost.py``'s measurements (parameters,
peak RSS and GPU memory, seconds per BC update at batch 4 for full / expert-only / LoRA, chunk latency at batch 1
with and without the KV cache) on a GPU, under 10 minutes on one H100-class card::

    PYTHONPATH=$PWD python benchmarks/gpu_smolvla.py --repeats 5

Prepared, not yet run (no GPU in the session that wrote it); writes benchmarks/results/gpu_smolvla.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import smolvla_cost  # noqa: E402


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_smolvla.py needs a CUDA device; on CPU run benchmarks/smolvla_cost.py.")
    smolvla_cost.main(sys.argv[1:], device="cuda", bf16=True, name="gpu_smolvla")


if __name__ == "__main__":
    main()
