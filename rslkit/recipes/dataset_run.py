"""Behaviour cloning from a dataset alone, with no simulator: ``train.py --algo vla-bc --dataset DIR``.

The dataset's :class:`~rslkit.data.dataset_spec.DatasetSpec` (sizes, names, cameras, instructions, control rate from
``meta/``) stands in for the env; the agent config is the algorithm's default with what the dataset decides (a VLA
reads every camera of the dataset at its recorded size) and a validation split, then the command line's overrides.
Checkpoints carry the spec (``dataset_spec``), so :func:`rslkit.recipes.run.load_run` rebuilds the run without
the dataset (export, deployment).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rslkit.data.dataset_spec import DatasetSpec
from rslkit.recipes.algorithms import get_algorithm
from rslkit.runners.base import BaseRunner
from rslkit.runners.bc_data import BCRunCfg
from rslkit.utils.config import apply_overrides, apply_settings, from_dict
from rslkit.utils.distributed import DistInfo
from rslkit.utils.seeding import seed_everything

DATASET_SPEC_KEY = "dataset_spec"
"""Checkpoint entry of a run trained from a dataset alone: its :meth:`DatasetSpec.to_dict`."""
DATASET_VAL_FRACTION = 0.1
"""Episodes held out for validation by default when there is no simulator to evaluate in."""


def bc_algorithm(algo: str) -> tuple[type[BCRunCfg], Callable[..., BaseRunner]]:
    """Config and runner class of a behaviour-cloning ``algo``.

    Raises:
        ValueError: an unknown algorithm, or one that trains in a simulator (names ``--task``).
    """
    cfg_cls, runner_cls = get_algorithm(algo)
    if not issubclass(cfg_cls, BCRunCfg):
        raise ValueError(
            f"--algo {algo} trains in a simulator: pass --task NAME. Only behaviour cloning (flow-bc, vla-bc) trains "
            "from --dataset DIR alone."
        )
    return cfg_cls, runner_cls


def read_spec(dataset: str | Path) -> DatasetSpec:
    """The spec of ``dataset`` (:meth:`DatasetSpec.read`), with errors naming ``--dataset``.

    Raises:
        ValueError: the directory is missing or is not a LeRobotDataset v3.0 with state and action vectors.
    """
    try:
        return DatasetSpec.read(dataset)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--dataset {dataset}: {err}") from err


def dataset_settings(spec: DatasetSpec, agent: BCRunCfg) -> dict[str, Any]:
    """What the dataset decides of a fresh agent config: the dataset itself, a validation split and, for a policy
    with camera inputs (``policy.cameras``), every camera of the dataset at its recorded size."""
    settings: dict[str, Any] = {"dataset": spec.dataset, "val_fraction": DATASET_VAL_FRACTION}
    policy = getattr(agent, "policy", None)
    if policy is not None and hasattr(policy, "cameras") and spec.cameras:
        settings["policy.cameras"] = tuple(spec.cameras)
        sizes = {tuple(size) for size in spec.cameras.values()}
        if len(sizes) == 1:
            settings["policy.image_size"] = sizes.pop()
    return settings


def assemble_dataset_run(
    spec: DatasetSpec,
    agent: BCRunCfg,
    runner_cls: Callable[..., BaseRunner],
    *,
    seed: int,
    overrides: Sequence[str],
    max_iterations: int | None,
    device: str | torch.device,
    log_dir: str | Path | None,
    dist_info: DistInfo | None,
) -> tuple[DatasetSpec, BaseRunner]:
    """The runner of ``agent`` over ``spec`` (``--agent.*`` overrides applied; ``--env.*`` has no env to apply to).

    Raises:
        ValueError: a bad override.
    """
    if max_iterations is not None:
        agent.max_iterations = max_iterations
    apply_overrides({"agent": agent}, list(overrides))
    seed_everything(seed)
    run_info = {"seed": seed, DATASET_SPEC_KEY: spec.to_dict()}
    return spec, runner_cls(spec, agent, log_dir, device, dist_info, run_info)


def build_dataset_run(
    dataset: str | Path,
    algo: str,
    overrides: Sequence[str] = (),
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    max_iterations: int | None = None,
    agent_fields: dict[str, Any] | None = None,
    log_dir: str | Path | None = None,
    dist_info: DistInfo | None = None,
) -> tuple[DatasetSpec, BaseRunner]:
    """A fresh behaviour-cloning run of ``algo`` from ``dataset`` alone (see the module docstring).

    Args:
        dataset: a LeRobotDataset v3.0 directory.
        algo: ``flow-bc`` or ``vla-bc``.
        overrides: ``--agent.<field> value`` tokens.
        seed: seeds every RNG and the validation split.
        agent_fields: typed agent fields set before ``overrides`` (as :func:`~rslkit.recipes.run.build_run`).

    Returns:
        ``(spec, runner)``; call ``runner.learn()``.

    Raises:
        ValueError: a non-BC algorithm, a directory that is not a v3.0 dataset (both name their flag), a bad field.
    """
    cfg_cls, runner_cls = bc_algorithm(algo)
    spec = read_spec(dataset)
    agent = cfg_cls()
    apply_settings(agent, {**dataset_settings(spec, agent), **(agent_fields or {})}, "agent")
    return assemble_dataset_run(
        spec,
        agent,
        runner_cls,
        seed=seed,
        overrides=overrides,
        max_iterations=max_iterations,
        device=device,
        log_dir=log_dir,
        dist_info=dist_info,
    )


def load_dataset_run(
    path: Path,
    saved: dict[str, Any],
    *,
    task: str | None,
    num_envs: int | None,
    seed: int | None,
    overrides: Sequence[str],
    max_iterations: int | None,
    device: str | torch.device,
    log_dir: str | Path | None,
    dist_info: DistInfo | None,
    runner_cls: Callable[..., BaseRunner] | None,
) -> tuple[DatasetSpec, BaseRunner]:
    """The run of a checkpoint ``saved`` (read from ``path``) trained from a dataset alone, rebuilt from its
    ``dataset_spec`` (the dataset itself is read only to train on); the caller loads the checkpoint into it.

    Raises:
        ValueError: a ``task`` asked for (the checkpoint was trained on none).
    """
    if task is not None:
        raise ValueError(f"Checkpoint '{path}' was trained from a dataset alone, not on task '{task}'; drop --task.")
    cfg_cls, default_runner = bc_algorithm(str(saved["algorithm"]))
    return assemble_dataset_run(
        DatasetSpec.from_dict(saved[DATASET_SPEC_KEY], num_envs or 1),
        from_dict(cfg_cls, saved["agent_cfg"]),
        runner_cls or default_runner,
        seed=int(saved.get("seed", 0)) if seed is None else seed,
        overrides=overrides,
        max_iterations=max_iterations,
        device=device,
        log_dir=log_dir,
        dist_info=dist_info,
    )
