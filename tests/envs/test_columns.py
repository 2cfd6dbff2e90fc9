"""Column specs -> indices (:mod:`rslkit.envs.columns`), and named columns as experts read them."""

import numpy as np
import pytest

from rslkit.envs.columns import Columns, select_state_columns

NAMES = ["j0.pos", "j1.pos", "j0.vel", "j1.vel", "ee.x", "ee.y", "last_action.j0", "last_action.j1"]


def test_indices_ranges_and_globs_select_sorted_distinct_columns():
    assert select_state_columns("", 8, NAMES) == tuple(range(8))
    assert select_state_columns("4:6, 1,0", 8) == (0, 1, 4, 5)
    assert select_state_columns(":2", 8) == (0, 1) and select_state_columns("6:", 8) == (6, 7)
    assert select_state_columns("*.pos,ee.*", 8, NAMES) == (0, 1, 4, 5)
    assert select_state_columns("j1.*,1", 8, NAMES) == (1, 3)


def test_bad_specs_get_a_clear_error():
    with pytest.raises(ValueError, match="matches none"):
        select_state_columns("target.*", 8, NAMES)
    with pytest.raises(ValueError, match="have no names"):
        select_state_columns("ee.*", 8)
    with pytest.raises(ValueError, match=r"outside the state's 8 columns .*valid indices are 0..7"):
        select_state_columns("6:10", 8)
    with pytest.raises(ValueError, match=r"outside the state's 8 columns \(-1\)"):
        select_state_columns("-1", 8)
    with pytest.raises(ValueError, match="selects no column"):
        select_state_columns("5:2", 8)
    with pytest.raises(ValueError, match="3 state column names"):
        select_state_columns("0", 8, NAMES[:3])


def test_a_bad_range_says_the_valid_range_and_some_names_not_every_index():
    names = [f"c{i}" for i in range(25)]
    with pytest.raises(ValueError) as err:
        select_state_columns("0:1000", 25, names)
    message = str(err.value)
    assert "valid indices are 0..24" in message and "975 columns from 25 to 999" in message
    assert "c0, c1" in message and "(17 more)" in message and "998" not in message and len(message) < 300


def test_named_columns_read_an_observation_by_name():
    cols = Columns(NAMES)
    obs = np.arange(8.0)
    assert obs[cols["ee.*"]].tolist() == [4.0, 5.0] and cols.one("last_action.j1") == 7
    with pytest.raises(ValueError, match="selects 2 columns"):
        cols.one("ee.*")
    cols.check(8, "an expert")
    with pytest.raises(ValueError, match="an expert reads an observation group 'policy' of 8 columns"):
        cols.check(9, "an expert")
