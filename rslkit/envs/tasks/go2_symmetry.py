"""The Unitree Go2's left-right mirror (reflection through the trunk's sagittal x-z plane), by column name.

Under the reflection ``y -> -y`` of the base frame:

- legs swap sides: ``FL <-> FR``, ``RL <-> RR`` (in joint, foot and contact names);
- hip (abduction) joints turn about the base x axis, so their angles, velocities and actions change sign; thigh and
  calf joints turn about y and keep theirs;
- vectors ``<name>.x|y|z``: polar ones (linear velocity, gravity, forces, positions) negate y; axial ones (angular
  velocity, torques: ``ang_vel*``, ``*torque*``) negate x and z;
- commands: ``command.vy*`` and ``command.yaw*`` change sign, ``command.vx*`` keeps it;
- height samples named ``<stem>.x<dx>_y<dy>`` (metres in the base frame, signs explicit:
  ``height.x+0.30_y-0.10``) swap with the sample at ``-dy``;
- scalars (``base_height``, ``friction``, ``added_mass``, ``mass``, ``terrain_level``) stay.

The rule reads names only, so any Go2 task that names its columns this way (``go2-flat``, ``go2-rough``) has its
mirror: ``--agent.algorithm.symmetry_cfg.data_augmentation_func go2``.
"""

from __future__ import annotations

import re
from typing import Any

from rslkit.envs.mirror import ColumnMirror

LEG_PARTNER = {"FL": "FR", "FR": "FL", "RL": "RR", "RR": "RL"}
_LEG = re.compile(r"(?<![A-Za-z])(FL|FR|RL|RR)(?![A-Za-z])")
_VECTOR = re.compile(r"^(?P<stem>.+)\.(?P<axis>[xyz])$")
_HEIGHT = re.compile(r"^(?P<stem>.+)\.x(?P<x>[+-]?[0-9.]+)_y(?P<y>[+-]?[0-9.]+)$")
INVARIANT_SCALARS = ("base_height", "friction", "added_mass", "mass", "terrain_level")
"""Column names (or their stems before a ``.``) the mirror keeps."""


def _is_axial(stem: str) -> bool:
    return stem.startswith("ang_vel") or "torque" in stem


def _mirror_height(match: re.Match[str]) -> str:
    """The partner of a height sample: its lateral offset, written with an explicit sign, negated."""
    y = match["y"]
    if float(y) == 0.0:
        return match.string
    if y[0] not in "+-":
        raise KeyError(f"{match.string} (write the offsets with an explicit sign: x{{dx:+.2f}}_y{{dy:+.2f}})")
    return f"{match['stem']}.x{match['x']}_y{'-' if y[0] == '+' else '+'}{y[1:]}"


def go2_rule(name: str) -> tuple[str, float]:
    """``(partner column, sign)`` of a Go2 observation or action column under the left-right mirror.

    Raises:
        KeyError: a name the Go2's mirror does not know.
    """
    height = _HEIGHT.match(name)
    if height is not None:
        return _mirror_height(height), 1.0
    partner = _LEG.sub(lambda m: LEG_PARTNER[m.group(1)], name)
    sign = -1.0 if "_hip_joint" in name else 1.0
    vector = _VECTOR.match(name)
    if vector is not None:
        axial = _is_axial(vector["stem"])
        flips = vector["axis"] in ("x", "z") if axial else vector["axis"] == "y"
        return partner, -sign if flips else sign
    if name.startswith("command."):
        field = name.removeprefix("command.")
        if field.startswith(("vy", "yaw")):
            return partner, -1.0
        if field.startswith("vx"):
            return partner, 1.0
        raise KeyError(name)
    if partner != name or name.split(".")[0] in INVARIANT_SCALARS:
        return partner, sign
    raise KeyError(name)


def go2_mirror(env: Any) -> ColumnMirror:
    """The left-right mirror of ``env``'s observation groups and actions (a Go2 task: ``go2-flat``, ``go2-rough``).

    Raises:
        ValueError: an env without ``observation_names`` / ``action_names``, or with a column the rule does not
            know.
    """
    obs_names, action_names = getattr(env, "observation_names", None), getattr(env, "action_names", None)
    if not isinstance(obs_names, dict) or action_names is None:
        raise ValueError(
            "The Go2 mirror reads the env's observation_names and action_names, which this env does not have; give "
            "your own with --agent.algorithm.symmetry_cfg.data_augmentation_func package.module:factory."
        )
    return ColumnMirror(obs_names, action_names, go2_rule)
