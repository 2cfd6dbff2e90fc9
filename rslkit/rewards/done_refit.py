"""Refits of a progress critic's done head on the learner's own visits: negatives from online data, as VICE (Fu et
al. 2018) trains its event classifier and HIL-SERL retrains its success classifier.

A critic fitted to demonstrations alone has never seen what a learning policy does, and an RL agent finds states
off the demonstrations that its done head calls success (docs/benchmarks.md, section 10: so101-reach from a
behaviour-cloned start drifts to where the critic is satisfied, short of the target). Every ``every`` control
steps, ``updates`` Adam steps minimise the binary cross-entropy of the done head on batches that are half goal
examples' done frames (label 1) and half negatives (label 0): the newest ``buffer`` frames the policy visited and,
one in ``1 / demo_negatives``, the demonstrations' other frames::

    L = - E_{x ~ done frames} log D(x, g) - E_{x ~ visits, other demo frames} log (1 - D(x, g))

As in VICE the policy's own successes enter as negatives: where the policy's visits match the demonstrated done
frames the classifier falls towards the ratio of the two densities, so the reward stays highest at the
demonstrated goal while the states the policy found off the demonstrations lose theirs. A classifier strong enough
to tell demonstrations from visits then calls every visit not done, successes included (measured on so101-reach:
docs/benchmarks.md section 10). With ``visit_prior = pi > 0`` the visits are unlabeled instead, a fraction ``pi``
of them done, and the visits' part of the loss is the non-negative positive-unlabeled risk (nnPU, Kiryo et al.
2017)::

    L = pi R_p^+ + max(0, R_u^- - pi R_p^-)      R_p^+- = E_{done frames} BCE(D, 1 | 0),  R_u^- = E_visits BCE(D, 0)

so the classifier may keep calling the fraction ``pi`` of visits most like the done frames done. The frame encoder
stays as trained (``encoder=True`` trains it with the head), so the progress head is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from rslkit.envs.camera_groups import CAMERA_PREFIX
from rslkit.rewards.goal_examples import GoalExamples
from rslkit.rewards.progress_model import ProgressModel
from rslkit.rewards.training import shift_images
from rslkit.utils.validation import expect, validate


@dataclass
class DoneRefitCfg:
    """When and how the done head is refitted. CLI: ``train.py --reward.refit.<field>``."""

    every: int = 0
    """Control steps between refits (0: never: the critic stays as trained)."""
    updates: int = 20
    """Adam steps per refit."""
    batch_size: int = 256
    learning_rate: float = 3e-4
    buffer: int = 50_000
    """Visited frames kept (the newest)."""
    demo_negatives: float = 0.25
    """Fraction of the negatives drawn from the demonstrations' other frames (the rest: visits)."""
    visit_prior: float = 0.0
    """0: visits are negatives (VICE). ``pi > 0``: visits are unlabeled, a fraction ``pi`` of them done, and the
    loss is the non-negative positive-unlabeled risk of Kiryo et al. 2017 (see the module doc)."""
    encoder: bool = False
    """Train the frame encoder too (it is shared with the progress head)."""
    augment_shift: int = 4
    """Random image shift in pixels of camera frames (as in the critic's training)."""

    def check(self) -> None:
        """Raise ``ConfigError`` for a setting the refits cannot run with (``validate(cfg, "reward.refit")`` names
        ``--reward.refit.<field>``)."""
        for name in ("every", "updates", "buffer", "augment_shift"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value >= 0, name, f"must be an integer >= 0, got {value!r}")
        if self.every > 0:
            for name, least in (("updates", 1), ("buffer", 1), ("batch_size", 2)):
                expect(getattr(self, name) >= least, name, f"must be >= {least} for refits, got {getattr(self, name)}")
        expect(0.0 <= self.demo_negatives <= 1.0, "demo_negatives", f"must be in [0, 1], got {self.demo_negatives}")
        expect(self.learning_rate > 0, "learning_rate", f"must be > 0, got {self.learning_rate}")
        expect(0.0 <= self.visit_prior < 1.0, "visit_prior", f"must be in [0, 1), got {self.visit_prior}")


class DoneRefitter:
    """Keeps the policy's visits and refits ``model``'s done head on them against ``examples`` (see module doc).

    Args:
        model: the critic in use (refitted in place; it keeps scoring between refits).
        examples: its goal examples (:func:`~rslkit.rewards.goal_examples.load_goal_examples`).
        cfg: settings.
        seed: seed of the batch draws and augmentation.

    Raises:
        ValueError: goal examples that lack a group the critic reads, or goals the critic does not know.
    """

    def __init__(self, model: ProgressModel, examples: GoalExamples, cfg: DoneRefitCfg, seed: int = 0) -> None:
        validate(cfg, "reward.refit")
        model.encoder.check(examples.frames[:1])
        unknown = sorted(set(examples.goals) - set(model.goal_table.goals))
        if unknown:
            raise ValueError(f"The goal examples name goals the critic does not know: {unknown[:3]}.")
        self.model, self.cfg = model, cfg
        self.keys = list(examples.frames.keys())
        self.positives = examples.frames[examples.done == 1]
        self.positive_goals = [g for g, d in zip(examples.goals, examples.done.tolist()) if d == 1]
        self.demo_negatives = examples.frames[examples.done == 0]
        self.demo_negative_goals = [g for g, d in zip(examples.goals, examples.done.tolist()) if d == 0]
        self.generator = torch.Generator().manual_seed(seed)
        params = list(model.done_head.parameters()) + (list(model.encoder.parameters()) if cfg.encoder else [])
        self.optimizer = torch.optim.Adam(params, lr=cfg.learning_rate)
        self._visits: TensorDict | None = None
        self._visit_goals = torch.zeros(cfg.buffer, dtype=torch.long)
        self._goal_names: list[str] = []
        self._next, self._size = 0, 0
        self.refits = 0

    @property
    def num_visits(self) -> int:
        """Visited frames held."""
        return self._size

    def add(self, frames: TensorDict, goals: str | Sequence[str]) -> None:
        """Keep ``frames [K]`` (visited observations; the groups the critic reads are kept) under ``goals``."""
        with torch.inference_mode(False):  # runners step envs in inference mode; the buffer must feed autograd
            self._add(frames, goals)

    def _add(self, frames: TensorDict, goals: str | Sequence[str]) -> None:
        k = int(frames.batch_size[0])
        if k == 0:
            return
        names = [goals] * k if isinstance(goals, str) else list(goals)
        kept = frames.select(*self.keys).to("cpu").clone()
        if self._visits is None:
            self._visits = kept[:1].expand(self.cfg.buffer).clone()
        k = min(k, self.cfg.buffer)
        kept, names = kept[-k:], names[-k:]
        slots = (self._next + torch.arange(k)) % self.cfg.buffer
        self._visits[slots] = kept
        for name in set(names):
            if name not in self._goal_names:
                self._goal_names.append(name)
        self._visit_goals[slots] = torch.tensor([self._goal_names.index(n) for n in names])
        self._next = int((self._next + k) % self.cfg.buffer)
        self._size = min(self._size + k, self.cfg.buffer)

    def _draw(self, frames: TensorDict, goals: list[str], n: int) -> tuple[TensorDict, list[str]]:
        idx = torch.randint(int(frames.batch_size[0]), (n,), generator=self.generator)
        return frames[idx], [goals[i] for i in idx.tolist()]

    def _augment(self, frames: TensorDict) -> TensorDict:
        for key in list(frames.keys()):
            if str(key).startswith(CAMERA_PREFIX):
                frames[key] = shift_images(frames[key], self.cfg.augment_shift, self.generator)
        return frames

    def refit(self) -> dict[str, float]:
        """``updates`` steps of the loss of the module doc; its monitors (``Learned_Reward/refit_*``): loss, the
        done probability of the batches' positives and of their visits before each step. Runs with autograd on
        (also when called from an env step inside a runner's inference mode)."""
        with torch.inference_mode(False), torch.enable_grad():
            return self._refit()

    def _refit(self) -> dict[str, float]:
        c, model = self.cfg, self.model
        half = c.batch_size // 2
        if self._size == 0 and not self.demo_negative_goals:
            return {}  # nothing to contrast the done frames with yet
        if self._size == 0:
            n_demo = half
        elif not self.demo_negative_goals:
            n_demo = 0
        else:
            n_demo = int(round(half * c.demo_negatives))
        n_visit = half - n_demo
        was_training = model.training
        model.train()
        model.encoder.train(c.encoder)
        sums = {"refit_loss": 0.0, "refit_done_positives": 0.0, "refit_done_visits": 0.0}
        for _ in range(c.updates):
            pos, pos_goals = self._draw(self.positives, self.positive_goals, half)
            parts, goals = [pos], list(pos_goals)
            if n_demo:
                neg, neg_goals = self._draw(self.demo_negatives, self.demo_negative_goals, n_demo)
                parts.append(neg)
                goals += neg_goals
            if n_visit:
                assert self._visits is not None
                idx = torch.randint(self._size, (n_visit,), generator=self.generator)
                parts.append(self._visits[idx])
                goals += [self._goal_names[i] for i in self._visit_goals[idx].tolist()]
            frames = self._augment(torch.cat(parts).clone()).to(model.device)  # type: ignore[arg-type]
            labels = torch.cat([torch.ones(half), torch.zeros(n_demo + n_visit)]).to(model.device)
            with torch.set_grad_enabled(c.encoder):
                features = model.encoder(frames)
            logits = model.done_logits(features, model.goal_features(goals).detach())
            loss = self._loss(logits, labels, half, n_demo)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            p = torch.sigmoid(logits.detach())
            sums["refit_loss"] += float(loss.detach()) / c.updates
            sums["refit_done_positives"] += float(p[:half].mean()) / c.updates
            if n_visit:
                sums["refit_done_visits"] += float(p[half + n_demo :].mean()) / c.updates
        model.train(was_training)
        self.refits += 1
        return {f"Learned_Reward/{k}": v for k, v in sums.items()}

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor, half: int, n_demo: int) -> torch.Tensor:
        """BCE with visits as negatives, or (``visit_prior > 0``) the non-negative PU risk over the visits."""
        pi = self.cfg.visit_prior
        if pi == 0.0:
            return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        pos, demo, visit = logits[:half], logits[half : half + n_demo], logits[half + n_demo :]
        loss = bce(pos, torch.ones_like(pos)) * (pi if visit.numel() else 1.0)
        if demo.numel():
            loss = loss + bce(demo, torch.zeros_like(demo)) * n_demo / half
        if visit.numel():  # R_u^- - pi R_p^-, clipped at 0 (the visits' estimated negative risk)
            negative_risk = bce(visit, torch.zeros_like(visit)) - pi * bce(pos, torch.zeros_like(pos))
            loss = loss + negative_risk.clamp_min(0.0) * visit.numel() / half
        return loss

    def state_dict(self) -> dict[str, Any]:
        """The refitted weights, the optimizer and the draws' generator (the visits are not kept: they refill)."""
        return {
            "model": {k: v.clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "refits": self.refits,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.refits = int(state["refits"])
