"""The link layer runs on a robot computer without torch, and a user who trains only in simulation needs no gRPC:
checked in fresh interpreters (what a module imports at the top is what a user pays for)."""

from __future__ import annotations

import json
import subprocess
import sys

LINK_MODULES = (
    "wire", "transitions", "rollouts", "segment_log", "spool", "journal", "spool_writer", "episodes", "transport",
    "server", "sink", "client",
)  # fmt: skip


def _loaded_after(statement: str) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_link_imports_no_torch_and_nothing_above_utils() -> None:
    modules = _loaded_after("\n".join(f"import rslkit.link.{m}" for m in LINK_MODULES))
    assert "torch" not in modules and "tensordict" not in modules
    rslkit = [m for m in modules if m.startswith("rslkit.")]
    assert all(m.split(".")[1] in ("link", "utils") for m in rslkit), rslkit


def test_simulation_training_imports_no_grpc() -> None:
    modules = _loaded_after("import rslkit.recipes\nimport rslkit.runners\nimport rslkit.cli.train")
    assert "grpc" not in modules and not any(m.startswith("rslkit.link") for m in modules)
