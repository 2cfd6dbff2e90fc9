"""benchmarks/results_index.py: every results file is cited in docs/benchmarks.md, every cited one exists, the index
is current."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "results_index.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_index", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ri = _load()

DOC = """# Benchmarks

| a | [1](#1-ppo-vs-x-ppo_xpy) |

## 1. PPO vs X (`ppo_x.py`)

Results: `benchmarks/results/ppo_x.json` and its plot ![](../benchmarks/results/ppo_x.png).

## 2. SAC

Rows in `sac_a.json`.
"""


def _results(tmp_path: Path, names: list[str]) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    for name in names:
        record = {"machine": {"date": "2026-12-01", "cpu_model": "Test CPU", "command": "python benchmarks/ppo_x.py"}}
        (results / name).write_text(json.dumps(record) if name.endswith(".json") else "png")
    return results


def test_the_repository_results_and_docs_match():
    """The real check: every file in benchmarks/results/ cited, every citation a file, INDEX.md current."""
    index = ri.RESULTS_DIR / ri.INDEX_NAME
    index_text = index.read_text() if index.is_file() else None
    found = ri.problems(ri.RESULTS_DIR, ri.DOC_PATH.read_text(), index_text)
    assert found == [], "\n".join(found)


def test_matching_results_and_docs_have_no_problems(tmp_path):
    results = _results(tmp_path, ["ppo_x.json", "ppo_x.png", "sac_a.json"])
    index = ri.render_index(ri.build_entries(results, DOC))
    assert ri.problems(results, DOC, index) == []


def test_a_results_file_named_nowhere_is_reported(tmp_path):
    results = _results(tmp_path, ["ppo_x.json", "ppo_x.png", "sac_a.json", "ppo_x_quick.json"])
    index = ri.render_index(ri.build_entries(results, DOC))
    found = ri.problems(results, DOC, index)
    assert len(found) == 1 and found[0].startswith("ppo_x_quick.json: named in no section")


def test_a_named_file_that_does_not_exist_is_reported(tmp_path):
    results = _results(tmp_path, ["ppo_x.json", "ppo_x.png"])
    index = ri.render_index(ri.build_entries(results, DOC))
    found = ri.problems(results, DOC, index)
    assert found == ["docs/benchmarks.md names benchmarks/results/sac_a.json, which does not exist"]


def test_a_stale_index_and_a_broken_anchor_are_reported(tmp_path):
    results = _results(tmp_path, ["ppo_x.json", "ppo_x.png", "sac_a.json"])
    doc = DOC.replace("(#1-ppo-vs-x-ppo_xpy)", "(#1-ppo-vs-y)")
    found = ri.problems(results, doc, "# an old index\n")
    assert found == [
        "docs/benchmarks.md links to #1-ppo-vs-y, which is no heading",
        "benchmarks/results/INDEX.md is stale: run python benchmarks/results_index.py",
    ]


def test_the_index_names_section_script_date_cpu_and_command(tmp_path):
    results = _results(tmp_path, ["ppo_x.json", "ppo_x.png", "sac_a.json"])
    (results / "sac_a.json").write_text(json.dumps({"date": "2026-12-04 05:12 UTC", "cpu": "AMD EPYC", "command": "x"}))
    entries = {e.name: e for e in ri.build_entries(results, DOC)}
    assert [s.heading for s in entries["ppo_x.png"].sections] == ["1. PPO vs X (`ppo_x.py`)"]
    assert entries["ppo_x.png"].script == "benchmarks/ppo_x.py"  # a plot takes what its JSON records
    assert (entries["sac_a.json"].date, entries["sac_a.json"].cpu) == ("2026-12-04 05:12 UTC", "AMD EPYC")
    line = next(row for row in ri.render_index(list(entries.values())).splitlines() if row.startswith("| `ppo_x.json`"))
    assert line == (
        "| `ppo_x.json` | [1](../../docs/benchmarks.md#1-ppo-vs-x-ppo_xpy) | benchmarks/ppo_x.py | 2026-12-01 | "
        "Test CPU | `python benchmarks/ppo_x.py` |"
    )


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("7. ROS 2: state -> command (`ros2_latency.py`)", "7-ros-2-state---command-ros2_latencypy"),
        ("20. Go2 (`go2-flat`) throughput", "20-go2-go2-flat-throughput"),
    ],
)
def test_github_anchor(heading, anchor):
    assert ri.github_anchor(heading) == anchor


def test_a_name_inside_a_longer_name_does_not_count():
    assert not ri.names_file("see ppo_async_seed1.json", "async_seed1.json")
    assert not ri.names_file("see ppo_async.json.bak", "ppo_async.json.b")
    assert ri.names_file("(`ppo_async.json`, seed 0)", "ppo_async.json")


def test_a_glob_cites_a_family_of_runs_and_must_match(tmp_path):
    results = _results(tmp_path, ["ppo_x.json", "ppo_x.png", "sac_a.json", "sac_b_u20.json", "sac_b_u50.json"])
    doc = DOC + "\nThe sweep: `sac_b_*.json`.\n"
    entries = {e.name: e for e in ri.build_entries(results, doc)}
    assert [s.heading for s in entries["sac_b_u50.json"].sections] == ["2. SAC"]
    assert ri.problems(results, doc, ri.render_index(list(entries.values()))) == []
    doc = doc.replace("`sac_b_*.json`", "`sac_c_*.json`")
    found = ri.problems(results, doc, ri.render_index(ri.build_entries(results, doc)))
    assert "docs/benchmarks.md cites `sac_c_*.json`, which matches no results file" in found
    assert any(line.startswith("sac_b_u20.json: named in no section") for line in found)
