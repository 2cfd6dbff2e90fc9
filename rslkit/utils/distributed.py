"""Multi-process training with ``torchrun``: gloo on CPU, NCCL on CUDA."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    """Rank layout of this process."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Only the main process logs and saves."""
        return self.rank == 0


def init_distributed(device: str) -> tuple[DistInfo, str]:
    """Join the process group when started by ``torchrun`` (``WORLD_SIZE > 1``).

    Returns:
        ``(info, device)``; on CUDA each process takes ``cuda:<local_rank>``.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo(), device
    info = DistInfo(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")), world_size)
    if device.startswith("cuda"):
        torch.cuda.set_device(info.local_rank)
        device = f"cuda:{info.local_rank}"
        backend = "nccl"
    else:
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=info.rank, world_size=world_size)
    return info, device


def shutdown_distributed() -> None:
    """Leave the process group if one was joined."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
