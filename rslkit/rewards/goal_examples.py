"""A progress critic's goal examples: its demonstrations' done frames (label 1) and a sample of their other frames
(label 0), saved beside the critic as ``goal_examples.safetensors`` by
:func:`~rslkit.rewards.training.train_progress_model`. They are what VICE calls the goal examples: the positives
of the done head's refits on the learner's own visits (:mod:`rslkit.rewards.done_refit`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tensordict import TensorDict

from rslkit.rewards.pairs import ProgressData

GOAL_EXAMPLES = "goal_examples.safetensors"
"""File name of the goal examples, in the critic's directory."""
FORMAT = "rslkit-goal-examples-v1"


@dataclass
class GoalExamples:
    """``M`` labelled frames for the done head."""

    frames: TensorDict
    """``[M]``: the observation groups the critic reads."""
    goals: list[str]
    """The goal of each frame (its episode's)."""
    done: torch.Tensor
    """``[M]`` float: 1 for a done frame, 0 for another frame of the same demonstrations."""

    def __post_init__(self) -> None:
        m = int(self.frames.batch_size[0])
        if len(self.goals) != m or self.done.shape != (m,):
            raise ValueError(f"Goal examples disagree in size: {m} frames, {len(self.goals)} goals, {self.done.shape}.")
        if not bool((self.done == 1).any()):
            raise ValueError("Goal examples need done frames: train the critic on successful demonstrations.")


def goal_examples(data: ProgressData, done_frames: int, max_other: int = 2048, seed: int = 0) -> GoalExamples:
    """The last ``done_frames`` frames of each successful episode of ``data`` (done) and at most ``max_other`` of
    its other frames, drawn uniformly (not done): the labels the critic's done head was trained with."""
    done = torch.zeros(int(data.frames.batch_size[0]), dtype=torch.bool)
    goal_of = torch.full(done.shape, -1, dtype=torch.long)
    for e, (start, end) in enumerate(zip(data.starts.tolist(), data.ends.tolist())):
        goal_of[start:end] = e
        if bool(data.success[e]):
            done[max(start, end - done_frames) : end] = True
    other = (~done & (goal_of >= 0)).nonzero().squeeze(-1)
    if other.numel() > max_other:
        pick = torch.randperm(other.numel(), generator=torch.Generator().manual_seed(seed))[:max_other]
        other = other[pick.sort().values]
    index = torch.cat([done.nonzero().squeeze(-1), other])
    return GoalExamples(
        frames=data.frames[index].clone(),
        goals=[data.goals[int(goal_of[i])] for i in index.tolist()],
        done=done[index].float(),
    )


def save_goal_examples(examples: GoalExamples, path: str | Path) -> Path:
    """Write ``examples`` as safetensors (frames under their group names, ``done``), goals in the header."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    for key in examples.frames.keys():
        tensors[f"frames.{key}"] = torch.as_tensor(examples.frames[key]).contiguous()
    tensors["done"] = examples.done.contiguous()
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": FORMAT, "goals": json.dumps(examples.goals)})
    tmp.replace(path)
    return path


def load_goal_examples(path: str | Path) -> GoalExamples:
    """The examples written by :func:`save_goal_examples`.

    Raises:
        FileNotFoundError: no file at ``path`` (the message says how to get one).
        ValueError: a file of another kind.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No goal examples at '{path}': `python -m rslkit.rewards train` writes them beside model.safetensors "
            "(critics trained before they existed: train again)."
        )
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != FORMAT:
        raise ValueError(f"'{path}' holds no rslkit goal examples (format {meta.get('format')!r}, want {FORMAT}).")
    state = load_file(str(path))
    done = state.pop("done")
    frames = TensorDict({k[len("frames.") :]: v for k, v in state.items()}, [int(done.shape[0])])
    return GoalExamples(frames, list(json.loads(meta["goals"])), done)
