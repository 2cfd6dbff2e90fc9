"""The local VLAC-style progress critic: frames and a language goal in, signed progress and done probability out.

``delta(a, b) = tanh(h(a, b) - h(b, a))`` with ``h`` an MLP over ``[f_a, f_b, f_b - f_a, g]`` (frame features ``f``
from :class:`~rslkit.rewards.frame_encoder.FrameEncoder`, goal feature ``g`` from the normalised sentence embedding),
so swapping the two observations flips the sign exactly and a frame compared with itself scores 0.
``done(b) = sigmoid(d(f_b, g))``. Trained by :mod:`rslkit.rewards.training`; saved as safetensors with its config
and goals in the header (no pickle).

One-shot mode (``reference`` frames of a demonstration of the goal): each observation is placed on the
demonstration by soft nearest neighbour in feature space (its expected position in ``[0, 1]``); the difference of
the two positions is mixed with the model's delta by ``reference_weight``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from rslkit.models.text_encoder import MINILM, GoalTable, SentenceEncoder
from rslkit.rewards.contract import ProgressScore, check_pair, goals_for_batch
from rslkit.rewards.frame_encoder import FrameEncoder

FORMAT = "rslkit-progress-critic-v1"


@dataclass
class ProgressModelCfg:
    """Inputs and sizes of a :class:`ProgressModel`."""

    cameras: tuple[str, ...] = ("front",)
    """Bare camera names the critic looks at (groups ``camera_<name>``); empty: state only."""
    image_size: tuple[int, int] = (64, 64)
    """``(H, W)`` of every camera image."""
    state_group: str | None = None
    """Observation group of the proprioceptive state the critic also reads (e.g. ``policy``); None: images only."""
    state_dim: int = 0
    state_columns: tuple[int, ...] = ()
    """Columns of the state group the critic reads (:func:`~rslkit.envs.columns.select_state_columns`;
    e.g. the positions without the velocities and the last action); empty: all ``state_dim``."""
    channels: tuple[int, ...] = (32, 64, 64, 64)
    feature_dim: int = 256
    goal_dim: int = 64
    hidden_dims: tuple[int, ...] = (256, 256)
    vision_backbone: str | None = None
    """A local ``transformers`` vision model directory to use frozen instead of the CNN."""
    text_encoder: str = MINILM
    """Sentence encoder of the goals (``minilm``: the bundled all-MiniLM-L6-v2; else a local model directory)."""
    text_dim: int = 384
    reference_weight: float = 0.5
    """Weight of the demonstration-alignment delta when ``reference`` frames are given."""
    reference_temperature: float = 0.1


def _mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class ProgressModel(nn.Module):
    """A :class:`~rslkit.rewards.contract.ProgressCritic` that trains on a laptop CPU."""

    def __init__(self, cfg: ProgressModelCfg | None = None) -> None:
        super().__init__()
        cfg = cfg or ProgressModelCfg()
        self.cfg = cfg
        self.encoder = FrameEncoder(
            cfg.cameras, cfg.image_size, cfg.state_group, cfg.state_dim, cfg.channels, cfg.feature_dim,
            cfg.vision_backbone, cfg.state_columns,
        )  # fmt: skip
        self.goal_table = GoalTable(cfg.text_dim)
        self.goal_proj = nn.Sequential(nn.Linear(cfg.text_dim, cfg.goal_dim), nn.LayerNorm(cfg.goal_dim))
        f, g = cfg.feature_dim, cfg.goal_dim
        self.pair_head = _mlp([3 * f + g, *cfg.hidden_dims, 1])
        self.done_head = _mlp([f + g, *cfg.hidden_dims, 1])
        self._text: SentenceEncoder | None = None

    @property
    def device(self) -> torch.device:
        """Where the weights live."""
        return next(self.parameters()).device

    # ------------------------------------------------------------------ training-time pieces
    def goal_features(self, goals: Sequence[str]) -> torch.Tensor:
        """``[B, goal_dim]`` for ``B`` known goals."""
        return self.goal_proj(self.goal_table.lookup(goals).to(self.device))

    def pair_logits(self, f_a: torch.Tensor, f_b: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """``h(a, b) - h(b, a)`` ``[B]`` from frame features ``[B, F]`` and goal features ``[B, G]``."""
        forward = self.pair_head(torch.cat([f_a, f_b, f_b - f_a, g], -1))
        backward = self.pair_head(torch.cat([f_b, f_a, f_a - f_b, g], -1))
        return (forward - backward).squeeze(-1)

    def done_logits(self, f_b: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Done logit ``[B]`` of frames with features ``f_b [B, F]`` under goals ``g [B, G]``."""
        return self.done_head(torch.cat([f_b, g], -1)).squeeze(-1)

    # ------------------------------------------------------------------ the contract
    @torch.no_grad()
    def score(
        self,
        obs_a: TensorDict,
        obs_b: TensorDict,
        goal: str | Sequence[str],
        reference: TensorDict | None = None,
    ) -> ProgressScore:
        """See :meth:`rslkit.rewards.contract.ProgressCritic.score`."""
        batch = check_pair(obs_a, obs_b)
        goals = goals_for_batch(goal, batch)
        self.encoder.check(obs_a)
        was_training = self.training
        self.eval()
        device = self.device
        f_a, f_b = self.encoder(obs_a.to(device)), self.encoder(obs_b.to(device))
        g = self.goal_features(goals)
        delta = torch.tanh(self.pair_logits(f_a, f_b, g))
        if reference is not None:
            w = self.cfg.reference_weight
            delta = (1 - w) * delta + w * self._reference_delta(f_a, f_b, reference.to(device))
        done = torch.sigmoid(self.done_logits(f_b, g))
        self.train(was_training)
        return ProgressScore(delta=delta.cpu(), done=done.cpu())

    def _reference_delta(self, f_a: torch.Tensor, f_b: torch.Tensor, reference: TensorDict) -> torch.Tensor:
        if len(reference.batch_size) != 1 or reference.batch_size[0] < 2:
            raise ValueError(
                f"reference must hold >= 2 frames of a demonstration in time order, got {reference.batch_size}."
            )
        self.encoder.check(reference)
        f_r = nn.functional.normalize(self.encoder(reference), dim=-1)
        steps = torch.linspace(0.0, 1.0, f_r.shape[0], device=f_r.device)

        def position(f: torch.Tensor) -> torch.Tensor:
            weights = torch.softmax(nn.functional.normalize(f, dim=-1) @ f_r.T / self.cfg.reference_temperature, -1)
            return weights @ steps

        return position(f_b) - position(f_a)

    # ------------------------------------------------------------------ goals
    def text_encoder(self) -> SentenceEncoder:
        """The sentence encoder of :attr:`ProgressModelCfg.text_encoder` (loaded once)."""
        if self._text is None:
            self._text = SentenceEncoder(self.cfg.text_encoder)
        return self._text

    def fit_goals(self, goals: Sequence[str]) -> None:
        """Embed ``goals`` (the training goals and distractors) and fit the per-dimension normalisation on them."""
        goals = list(dict.fromkeys(goals))
        self.goal_table.fit(goals, self.text_encoder().encode(goals))

    def add_goals(self, goals: Sequence[str]) -> None:
        """Embed new goals with the fitted normalisation (a new instruction at deployment time)."""
        new = [g for g in dict.fromkeys(goals) if g not in self.goal_table.goals]
        if new:
            self.goal_table.add(new, self.text_encoder().encode(new))


def add_goals(model: ProgressModel, goals: Sequence[str]) -> None:
    """Teach ``model`` the embeddings of new ``goals`` (see :meth:`ProgressModel.add_goals`)."""
    model.add_goals(goals)


def default_goal(model: ProgressModel, extra: dict) -> str:
    """The one goal ``model`` was trained on (its known goals minus the training distractors, from ``extra``).

    Raises:
        ValueError: it was trained on several goals (pick one).
    """
    distractors = set(extra.get("train_cfg", {}).get("sampler", {}).get("distractor_goals", ()))
    goals = [g for g in model.goal_table.goals if g not in distractors]
    if len(goals) != 1:
        raise ValueError(
            f"The critic was trained on the goals {goals}; pick one (--reward.goal for train.py, "
            "--actor.learned_reward.goal for the actor)."
        )
    return goals[0]


def save_progress_model(model: ProgressModel, path: str | Path, extra: dict | None = None) -> Path:
    """Write ``model`` as safetensors (weights) with its config, goals and ``extra`` JSON in the header (atomic)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    meta = {"format": FORMAT, "cfg": json.dumps(asdict(model.cfg)), "goals": json.dumps(model.goal_table.goals)}
    meta["extra"] = json.dumps(extra or {})
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)
    return path


def load_progress_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[ProgressModel, dict]:
    """The model saved by :func:`save_progress_model` and its ``extra`` dict.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a progress critic written by rslkit.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No progress critic at '{path}'; train one with `python -m rslkit.rewards train`.")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as err:  # safetensors raises its own error types for a damaged header
        raise ValueError(
            f"'{path}' is not a safetensors file ({err}); pass a model written by rslkit.rewards."
        ) from err
    if meta.get("format") != FORMAT:
        raise ValueError(f"'{path}' is not an rslkit progress critic (format {meta.get('format')!r}, want {FORMAT}).")
    raw = json.loads(meta["cfg"])
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    cfg = ProgressModelCfg(**fields)
    model = ProgressModel(cfg)
    state = load_file(str(path))
    model.goal_table.embeddings = torch.zeros_like(state["goal_table.embeddings"])
    model.load_state_dict(state)
    model.goal_table.goals = list(json.loads(meta["goals"]))
    return model.to(device).eval(), json.loads(meta.get("extra", "{}"))
