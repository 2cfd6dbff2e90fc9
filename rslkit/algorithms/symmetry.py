"""Symmetry for PPO (rsl_rl's ``symmetry_cfg``; Mittal et al. 2024, "Symmetry Considerations for Learning Task
Symmetric Robot Policies"): data augmentation with mirrored samples and a mirror loss.

- **Data augmentation** (``use_data_augmentation``): every mini-batch is doubled with its mirror image (mirrored
  observations and actions; the same old log-probs, values, returns and advantages), so actor and critic learn both
  sides from each sample. Entropy and the KL of the adaptive learning rate are taken over the original samples.
- **Mirror loss** (``use_mirror_loss``): ``mirror_loss_coeff * E[|mu(M_o s) - M_a mu(s)|^2]`` on the actor's mean
  actions, the target ``M_a mu(s)`` held fixed. Logged as ``Loss/symmetry`` whenever symmetry is on.

The mirror (``data_augmentation_func``) is a registered name (:data:`BUILTIN_MIRRORS`: ``go2``) or a user's
``package.module:factory`` with ``factory(env) -> Mirror`` (:class:`Mirror`: ``observations(TensorDict)`` and
``actions(Tensor)``, e.g. :class:`rslkit.envs.mirror.ColumnMirror` over the env's column names). An rsl_rl / Isaac
Lab ``data_augmentation_func(env, obs, actions)`` named the same way is used as it is (:class:`AugmentationFunc`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch
from tensordict import TensorDict

from rslkit.storage.rollout_storage import MiniBatch
from rslkit.utils.plugins import load_plugin
from rslkit.utils.validation import expect, finite

FLAG = "--agent.algorithm.symmetry_cfg.data_augmentation_func"
BUILTIN_MIRRORS = {"go2": "rslkit.envs.tasks.go2_symmetry:go2_mirror"}
"""Registered mirror names -> the ``package.module:factory`` that builds the mirror of an env."""


@dataclass
class SymmetryCfg:
    """rsl_rl's ``symmetry_cfg``. CLI: ``--agent.algorithm.symmetry_cfg.<field>``. Off unless one of the two uses
    is on."""

    use_data_augmentation: bool = False
    """Double every mini-batch with its mirrored samples."""
    use_mirror_loss: bool = False
    """Add ``mirror_loss_coeff`` times the mirror loss to the actor's loss."""
    mirror_loss_coeff: float = 0.0
    data_augmentation_func: str = ""
    """The mirror: ``go2`` (:data:`BUILTIN_MIRRORS`) or ``package.module:factory`` (``factory(env) -> Mirror``)."""

    @property
    def enabled(self) -> bool:
        """Whether PPO uses the mirror at all."""
        return self.use_data_augmentation or self.use_mirror_loss

    def check(self) -> None:
        """Raise :class:`~rslkit.utils.validation.ConfigError` for settings symmetry cannot run with."""
        coeff = self.mirror_loss_coeff
        expect(finite(coeff) and coeff >= 0, "mirror_loss_coeff", f"must be a finite number >= 0, got {coeff}")
        if self.use_mirror_loss:
            expect(coeff > 0, "mirror_loss_coeff", "must be > 0 with use_mirror_loss true (0 adds nothing)")
        if self.enabled:
            expect(
                bool(self.data_augmentation_func),
                "data_augmentation_func",
                "must name the mirror: go2 (the Go2's left-right mirror) or package.module:factory",
            )


class Mirror(Protocol):
    """A symmetry of a task: an involution of its observations and of its (raw) actions."""

    def observations(self, obs: TensorDict) -> TensorDict:
        """The mirrored observation groups ``[B]``."""

    def actions(self, actions: torch.Tensor) -> torch.Tensor:
        """The mirrored actions ``[B, A]``."""


class AugmentationFunc:
    """An rsl_rl / Isaac Lab ``data_augmentation_func(env=, obs=, actions=)`` as a :class:`Mirror`.

    Such a function returns the samples followed by their symmetric images (``[k B]``, the originals first); the
    mirror is the first image, ``[B : 2B]`` (further images, such as a front-back flip, are not used).
    """

    def __init__(self, func: Callable[..., tuple[Any, Any]], env: Any) -> None:
        self.func = func
        self.env = env

    def observations(self, obs: TensorDict) -> TensorDict:
        n = obs.batch_size[0]
        return self.func(env=self.env, obs=obs, actions=None)[0][n : 2 * n]

    def actions(self, actions: torch.Tensor) -> torch.Tensor:
        n = actions.shape[0]
        return self.func(env=self.env, obs=None, actions=actions)[1][n : 2 * n]


def _is_augmentation_func(obj: Any) -> bool:
    """Whether ``obj`` takes rsl_rl's ``data_augmentation_func`` keywords ``env``, ``obs`` and ``actions``."""
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
    return {"env", "obs", "actions"} <= set(params)


def make_mirror(cfg: SymmetryCfg, env: Any) -> Mirror:
    """The mirror ``cfg.data_augmentation_func`` names, built for ``env``.

    Raises:
        ValueError: a name that does not load, or a factory whose result lacks ``observations`` / ``actions``.
    """
    name = cfg.data_augmentation_func
    factory = load_plugin(BUILTIN_MIRRORS.get(name, name), FLAG)
    if not callable(factory):
        raise ValueError(f"{FLAG} {name}: names a {type(factory).__name__}; name a factory f(env) -> mirror.")
    mirror = AugmentationFunc(factory, env) if _is_augmentation_func(factory) else factory(env)
    if not (callable(getattr(mirror, "observations", None)) and callable(getattr(mirror, "actions", None))):
        raise ValueError(f"{FLAG} {name}: the factory returned {type(mirror).__name__}, which lacks observations() "
                         "and actions() (see rslkit.envs.mirror.ColumnMirror).")  # fmt: skip
    return mirror


def check_policy(distribution: str, recurrent: bool) -> None:
    """Refuse policies whose raw actions a sign-and-swap mirror does not map (raises ``ValueError``)."""
    if recurrent:
        raise ValueError("Symmetry needs a feed-forward policy; set --agent.policy.rnn_type none.")
    if distribution not in ("gaussian", "tanh_gaussian"):
        raise ValueError(
            f"Symmetry mirrors raw actions by sign flips and swaps, which --agent.policy.distribution {distribution} "
            "does not allow; use gaussian or tanh_gaussian."
        )


def augment(batch: MiniBatch, mirror: Mirror) -> MiniBatch:
    """``batch`` followed by its mirror image ``[2B]``: mirrored observations and actions, the rest repeated.

    ``dist_params`` stay those of the original samples (the KL of the adaptive learning rate is taken over them).
    """

    def twice(x: torch.Tensor) -> torch.Tensor:
        return torch.cat((x, x))

    obs: TensorDict = torch.cat((batch.obs, mirror.observations(batch.obs)))  # type: ignore[assignment]
    return replace(
        batch,
        obs=obs,
        actions=torch.cat((batch.actions, mirror.actions(batch.actions))),
        log_probs=twice(batch.log_probs),
        values=twice(batch.values),
        returns=twice(batch.returns),
        advantages=twice(batch.advantages),
        proximal_log_probs=None if batch.proximal_log_probs is None else twice(batch.proximal_log_probs),
        versions=None if batch.versions is None else twice(batch.versions),
    )


def mirror_loss(mirrored_mean: torch.Tensor, mean: torch.Tensor, mirror: Mirror) -> torch.Tensor:
    """``E[|mu(M_o s) - M_a mu(s)|^2]`` (mean over samples and action dimensions), the target held fixed.

    Args:
        mirrored_mean: the actor's mean raw actions ``[B, A]`` on the mirrored observations (with gradient).
        mean: its mean raw actions ``[B, A]`` on the original observations.
        mirror: the task's mirror.
    """
    return ((mirrored_mean - mirror.actions(mean.detach())) ** 2).mean()
