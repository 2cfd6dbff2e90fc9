"""Train a :class:`~rslkit.rewards.progress_model.ProgressModel` on demonstrations (pairs of :mod:`.pairs`).

Loss per batch, with ``delta = tanh(h(a, b) - h(b, a))`` and ``p = sigmoid(d(f_b, g))``::

    L = mean_k m_k (delta_k - y_k)^2  +  done_weight * BCE(p, done)

(``m`` masks samples whose progress is unknown: failed episodes). Images of the two frames are shifted at random
by up to ``augment_shift`` pixels, independently, so that a stagnant pair is not two identical inputs.
Checkpoints (the model as safetensors, the optimizer beside it) are written every ``eval_every`` steps and at the
end; ``resume`` continues from them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tensordict import TensorDict
from tqdm import tqdm

from rslkit.envs.camera_groups import CAMERA_PREFIX
from rslkit.rewards.goal_examples import GOAL_EXAMPLES, goal_examples, save_goal_examples
from rslkit.rewards.pairs import PairBatch, PairSampler, PairSamplerCfg, ProgressData
from rslkit.rewards.progress_model import ProgressModel, load_progress_model, save_progress_model
from rslkit.utils.atomic_write import atomic_open
from rslkit.utils.checkpoint import load_plain


@dataclass
class ProgressTrainCfg:
    """Optimisation of a progress critic."""

    steps: int = 3000
    batch_size: int = 128
    learning_rate: float = 3e-4
    weight_decay: float = 1e-4
    done_weight: float = 0.5
    augment_shift: int = 4
    """Random image shift in pixels (0: off)."""
    eval_every: int = 500
    """Steps between evaluations on held-out episodes and checkpoints."""
    seed: int = 0
    sampler: PairSamplerCfg = field(default_factory=PairSamplerCfg)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 8 or self.eval_every < 1:
            raise ValueError("steps and eval_every must be >= 1 and batch_size >= 8.")


def shift_images(images: torch.Tensor, shift: int, generator: torch.Generator) -> torch.Tensor:
    """Each image of ``images [B, H, W, 3]`` (uint8) translated by up to ``shift`` pixels, edges replicated."""
    if shift == 0:
        return images
    b, h, w, _ = images.shape
    padded = torch.nn.functional.pad(images.permute(0, 3, 1, 2).float(), (shift,) * 4, mode="replicate")
    dy, dx = (torch.randint(0, 2 * shift + 1, (2, b), generator=generator)).unbind(0)
    rows = (dy[:, None] + torch.arange(h)[None]).view(b, 1, h, 1).expand(b, 3, h, w + 2 * shift)
    out = padded.gather(2, rows)
    cols = (dx[:, None] + torch.arange(w)[None]).view(b, 1, 1, w).expand(b, 3, h, w)
    return out.gather(3, cols).round().to(torch.uint8).permute(0, 2, 3, 1)


def _frames(data: ProgressData, index: torch.Tensor, shift: int, generator: torch.Generator) -> TensorDict:
    frames = data.frames[index].clone()
    for key in list(frames.keys()):
        if str(key).startswith(CAMERA_PREFIX):
            frames[key] = shift_images(frames[key], shift, generator)
    return frames


def progress_loss(model: ProgressModel, batch: PairBatch, a: TensorDict, b: TensorDict, done_weight: float) -> dict:
    """The loss of the module docstring and its parts (tensors)."""
    f_a, f_b = model.encoder(a), model.encoder(b)
    g = model.goal_features(batch.goals)
    delta = torch.tanh(model.pair_logits(f_a, f_b, g))
    delta_loss = (batch.delta_mask * (delta - batch.delta) ** 2).sum() / batch.delta_mask.sum().clamp_min(1.0)
    done_loss = torch.nn.functional.binary_cross_entropy_with_logits(model.done_logits(f_b, g), batch.done)
    return {"loss": delta_loss + done_weight * done_loss, "delta_loss": delta_loss, "done_loss": done_loss}


def train_progress_model(
    model: ProgressModel,
    data: ProgressData,
    cfg: ProgressTrainCfg,
    out: str | Path | None = None,
    evaluate: Callable[[ProgressModel], dict[str, float]] | None = None,
    resume: bool = False,
) -> list[dict[str, float]]:
    """Fit ``model`` (goals and state statistics first, then ``cfg.steps`` Adam steps).

    Args:
        model: a fresh model (or the one saved at ``out`` when ``resume``).
        data: training episodes.
        cfg: optimisation settings.
        out: where the model is saved (``model.safetensors``), with ``optimizer.pt``, ``history.json`` and the goal
            examples of its done head (``goal_examples.safetensors``, :mod:`rslkit.rewards.goal_examples`).
        evaluate: called every ``eval_every`` steps with the model; its metrics join the history.
        resume: continue the run saved at ``out``.

    Returns:
        The history: one dict per evaluation (step, losses, metrics, seconds).
    """
    out_dir = Path(out) if out is not None else None
    step, history = 0, []
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    if resume:
        if out_dir is None or not (out_dir / "model.safetensors").is_file():
            raise FileNotFoundError(f"Nothing to resume in '{out_dir}': no model.safetensors there.")
        saved, extra = load_progress_model(out_dir / "model.safetensors")
        model.goal_table.embeddings = torch.zeros_like(saved.goal_table.embeddings)
        model.load_state_dict(saved.state_dict())
        model.goal_table.goals = saved.goal_table.goals
        optimizer.load_state_dict(load_plain(out_dir / "optimizer.pt"))
        step, history = int(extra["step"]), list(extra["history"])
    else:
        model.fit_goals([*data.goals, *cfg.sampler.distractor_goals])
        if model.cfg.state_group is not None:
            model.encoder.fit_state_stats(data.frames[model.cfg.state_group].float())
    model.encoder.check(data.frames[:1])
    if out_dir is not None:  # the done head's labels, for refits on online data (rslkit.rewards.done_refit)
        examples = goal_examples(data, cfg.sampler.done_frames, seed=cfg.seed)
        save_goal_examples(examples, out_dir / GOAL_EXAMPLES)
    sampler = PairSampler(data, cfg.sampler, seed=cfg.seed + step)
    augment = torch.Generator().manual_seed(cfg.seed + 1 + step)
    model.train()
    t0, running = time.time(), {"loss": 0.0, "delta_loss": 0.0, "done_loss": 0.0}
    refresh = 0.1 if sys.stderr.isatty() else 10.0  # a log file gets a line every 10 s, not every step
    with tqdm(total=cfg.steps, initial=step, desc="progress critic", dynamic_ncols=True, mininterval=refresh) as bar:
        while step < cfg.steps:
            batch = sampler.sample(cfg.batch_size)
            a = _frames(data, batch.index_a, cfg.augment_shift, augment)
            b = _frames(data, batch.index_b, cfg.augment_shift, augment)
            losses = progress_loss(model, batch, a, b, cfg.done_weight)
            optimizer.zero_grad(set_to_none=True)
            losses["loss"].backward()
            optimizer.step()
            step += 1
            for k in running:
                running[k] += losses[k].item() / cfg.eval_every
            bar.update(1)
            bar.set_postfix(loss=f"{losses['loss'].item():.4f}")
            if step % cfg.eval_every == 0 or step == cfg.steps:
                entry = {"step": float(step), "seconds": time.time() - t0, **running}
                if evaluate is not None:
                    entry.update(evaluate(model))
                    model.train()
                history.append(entry)
                tqdm.write(json.dumps({k: round(v, 4) for k, v in entry.items()}))
                running = dict.fromkeys(running, 0.0)
                if out_dir is not None:
                    _checkpoint(model, optimizer, out_dir, step, history, cfg)
    return history


def _checkpoint(model, optimizer, out_dir: Path, step: int, history: list, cfg: ProgressTrainCfg) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = {"step": step, "history": history, "train_cfg": asdict(cfg)}
    with atomic_open(out_dir / "optimizer.pt") as f:
        torch.save(optimizer.state_dict(), f)
    save_progress_model(model, out_dir / "model.safetensors", extra)
    (out_dir / "history.json").write_text(json.dumps(history, indent=1))
