"""Mirror symmetries of observations and actions as signed permutations of named columns.

A left-right mirror of a robot maps every observation column to one column (itself or its partner, e.g. the left
leg's joint to the right leg's) times a sign (+1 or -1). A task describes it once, per column name, with a rule
``name -> (partner name, sign)``; :func:`column_mirror` turns the rule into index and sign tensors, checked to be an
involution, and :class:`ColumnMirror` applies them to each observation group and to actions. Symmetry augmentation
and the mirror loss of PPO (:mod:`rslkit.algorithms.symmetry`) read observations and actions only through this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDict

MirrorRule = Callable[[str], tuple[str, float]]
"""``rule(column name) -> (partner column name, sign)``; raises ``KeyError`` for a name it does not know."""


@dataclass
class SignedPermutation:
    """``y[..., i] = sign[i] * x[..., index[i]]``: a mirror of one group of columns."""

    index: torch.Tensor
    """``[D]`` int64: the partner of each column."""
    sign: torch.Tensor
    """``[D]`` float: +1 or -1."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Mirror ``x [..., D]``."""
        return x.index_select(-1, self.index.to(x.device)) * self.sign.to(x.device, x.dtype)


def column_mirror(names: Sequence[str], rule: MirrorRule, what: str) -> SignedPermutation:
    """The signed permutation of the columns ``names`` under ``rule``.

    Args:
        names: column names in order (an observation group's, or the actions').
        rule: the mirror of one name.
        what: what the columns are (``observation group 'policy'``), named in errors.

    Raises:
        ValueError: a name the rule does not know, a partner that is not a column, or a rule that is not an
            involution (the partner's partner must be the column itself, with the same sign).
    """
    position = {name: i for i, name in enumerate(names)}
    index, sign = [], []
    for name in names:
        try:
            partner, s = rule(name)
        except KeyError as err:
            raise ValueError(
                f"The mirror does not know the column {name!r} of the {what}; give a mirror that does with "
                "--agent.algorithm.symmetry_cfg.data_augmentation_func package.module:factory."
            ) from err
        if partner not in position:
            raise ValueError(f"The mirror maps {name!r} of the {what} to {partner!r}, which is not one of its columns.")
        back, s_back = rule(partner)
        if back != name or s_back != s:
            raise ValueError(f"The mirror of the {what} is not an involution at {name!r} -> {partner!r} -> {back!r}.")
        index.append(position[partner])
        sign.append(float(s))
    return SignedPermutation(torch.tensor(index, dtype=torch.long), torch.tensor(sign))


class ColumnMirror:
    """The mirror of a task's observation groups and actions, built from their column names.

    Args:
        observation_names: ``{group: column names}`` (the env's ``observation_names``).
        action_names: the env's ``action_names``.
        rule: the mirror of one column name (observations and actions share it).
    """

    def __init__(self, observation_names: Mapping[str, Sequence[str]], action_names: Sequence[str], rule: MirrorRule):
        self.groups = {
            group: column_mirror(names, rule, f"observation group {group!r}")
            for group, names in observation_names.items()
        }
        self.action = column_mirror(action_names, rule, "actions")

    def observations(self, obs: TensorDict) -> TensorDict:
        """The mirrored observation groups of ``obs`` (groups without a mirror are refused)."""
        groups = [str(g) for g in obs.keys()]
        missing = [g for g in groups if g not in self.groups]
        if missing:
            raise ValueError(
                f"The mirror has no rule for the observation groups {missing}; it knows {list(self.groups)}."
            )
        return TensorDict({g: self.groups[g](obs[g]) for g in groups}, batch_size=obs.batch_size, device=obs.device)

    def actions(self, actions: torch.Tensor) -> torch.Tensor:
        """The mirrored actions ``[..., A]``."""
        return self.action(actions)
