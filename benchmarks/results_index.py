"""Index of ``benchmarks/results/``: each results file, the docs/benchmarks.md section using it, what it records.

Run (writes ``benchmarks/results/INDEX.md``)::

    .venv/bin/python benchmarks/results_index.py            # regenerate the index
    .venv/bin/python benchmarks/results_index.py --check    # exit 1 and list the problems instead

A results file counts as used when its file name appears in docs/benchmarks.md, or when a section cites a family of
runs with a glob in backticks (``learned_reward_rl_positions_*.json``: every file it matches is that section's).
A name counts as a reference to a results file when it follows ``benchmarks/results/`` or stands alone in backticks
ending in ``.json`` or ``.png``; every reference must exist and every glob must match a file. ``--check`` also fails
when a ``(#anchor)`` link in docs/benchmarks.md names no heading, or when INDEX.md differs from what this script
writes. Standard library only, so it runs without the venv.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
DOC_PATH = REPO_ROOT / "docs" / "benchmarks.md"
INDEX_NAME = "INDEX.md"
RESULT_SUFFIXES = (".json", ".png")

_PATH_REF = re.compile(r"benchmarks/results/([A-Za-z0-9_.-]+)")
_BARE_REF = re.compile(r"`([A-Za-z0-9_.-]+\.(?:json|png))`")
_GLOB_REF = re.compile(r"`([A-Za-z0-9_.-]*\*[A-Za-z0-9_.*-]*\.(?:json|png))`")
_ANCHOR_LINK = re.compile(r"\]\(#([^)\s]+)\)")
_SCRIPT = re.compile(r"benchmarks/([A-Za-z0-9_]+\.py)")


@dataclass(frozen=True)
class Section:
    """One ``## `` section of docs/benchmarks.md: its heading text, GitHub anchor and body."""

    heading: str
    anchor: str
    body: str


@dataclass(frozen=True)
class Entry:
    """What the index says about one results file (empty strings where the file records nothing)."""

    name: str
    sections: tuple[Section, ...]
    script: str
    date: str
    cpu: str
    command: str


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces turned into hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def parse_sections(doc: str) -> list[Section]:
    """Split docs/benchmarks.md into its ``## `` sections (the text before the first one is not a section)."""
    sections = []
    parts = re.split(r"^## (.+)$", doc, flags=re.MULTILINE)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        sections.append(Section(heading.strip(), github_anchor(heading), body))
    return sections


def all_anchors(doc: str) -> set[str]:
    """The anchors of every heading of any level in ``doc``."""
    return {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", doc, flags=re.MULTILINE)}


def referenced_names(doc: str) -> set[str]:
    """File names that ``doc`` presents as results files (see the module docstring for the rule)."""
    names = set(_PATH_REF.findall(doc))
    names.update(_BARE_REF.findall(doc))
    return {n.rstrip(".") for n in names if n.rstrip(".").endswith(RESULT_SUFFIXES)}


def cited_globs(text: str) -> set[str]:
    """The backticked globs of results files in ``text`` (``learned_reward_rl_*.json``)."""
    return set(_GLOB_REF.findall(text))


def result_files(results_dir: Path) -> list[str]:
    """Names of the results files (``*.json``, ``*.png``) in ``results_dir``, sorted."""
    return sorted(p.name for p in results_dir.iterdir() if p.is_file() and p.suffix in RESULT_SUFFIXES)


def names_file(text: str, name: str) -> bool:
    """Whether ``text`` contains the file name ``name`` as a whole name (not inside a longer one)."""
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def _record(data: Any) -> dict[str, Any]:
    """The flat mapping of date / cpu / command fields of a results JSON (top level, ``machine`` or ``meta``)."""
    if not isinstance(data, dict):
        return {}
    record: dict[str, Any] = {}
    for key in ("meta", "machine"):
        if isinstance(data.get(key), dict):
            record.update(data[key])
    record.update({k: v for k, v in data.items() if k in ("date", "cpu", "command", "benchmark")})
    return record


def describe(results_dir: Path, name: str) -> tuple[str, str, str, str]:
    """(script, date, cpu, command) recorded by results file ``name``; a PNG takes those of its JSON."""
    path = results_dir / name
    if path.suffix == ".png":
        path = path.with_suffix(".json")
    if not path.is_file():
        return "", "", "", ""
    record = _record(json.loads(path.read_text()))
    command = " ".join(str(record.get("command", "")).split())
    cpu = str(record.get("cpu") or record.get("cpu_model") or "")
    match = _SCRIPT.search(command)
    script = f"benchmarks/{match.group(1)}" if match else ""
    if not script and record.get("benchmark"):
        script = f"benchmarks/{record['benchmark']}.py"
    return script, str(record.get("date", "")), cpu, command


def build_entries(results_dir: Path, doc: str) -> list[Entry]:
    """One entry per results file, with the docs sections that name it."""
    sections = parse_sections(doc)
    entries = []
    for name in result_files(results_dir):
        using = tuple(
            s
            for s in sections
            if names_file(s.body, name)
            or names_file(s.heading, name)
            or any(fnmatch.fnmatchcase(name, g) for g in cited_globs(s.body))
        )
        entries.append(Entry(name, using, *describe(results_dir, name)))
    return entries


def _cell(text: str) -> str:
    """``text`` made safe for a markdown table cell."""
    return text.replace("|", "\\|") if text else "-"


def _number(heading: str) -> str:
    """The section number of a heading such as ``"12. PPO on ..."``, or the whole heading when it has none."""
    first = heading.split(" ", 1)[0]
    return first.rstrip(".") if first.rstrip(".").isdigit() else heading


def render_index(entries: list[Entry]) -> str:
    """The markdown of INDEX.md for ``entries``."""
    lines = [
        "# Index of benchmarks/results",
        "",
        "Written by `benchmarks/results_index.py` (run it after adding, renaming or deleting a results file; "
        "`tests/benchmarks/test_results_index.py` fails when this file is stale). Each file is used by the "
        'docs/benchmarks.md section(s) named; script, date, CPU and command are what the file records ("-": not '
        "recorded).",
        "",
        "| file | section in docs/benchmarks.md | script | date | CPU | command |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        links = ", ".join(f"[{_number(s.heading)}](../../docs/benchmarks.md#{s.anchor})" for s in e.sections)
        command = f"`{e.command}`" if e.command else ""
        row = [f"`{e.name}`", links, e.script, e.date, e.cpu, command]
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def problems(results_dir: Path, doc: str, index_text: str | None) -> list[str]:
    """Everything that keeps the results and the docs from matching; empty when they match."""
    found = []
    files = result_files(results_dir)
    entries = build_entries(results_dir, doc)
    for e in entries:
        if not e.sections:
            found.append(
                f"{e.name}: named in no section of docs/benchmarks.md; cite it in the section it belongs to, "
                "or delete it if a later run supersedes it"
            )
    for name in sorted(referenced_names(doc) - set(files)):
        found.append(f"docs/benchmarks.md names benchmarks/results/{name}, which does not exist")
    for glob in sorted(cited_globs(doc)):
        if not fnmatch.filter(files, glob):
            found.append(f"docs/benchmarks.md cites `{glob}`, which matches no results file")
    anchors = all_anchors(doc)
    for anchor in sorted(set(_ANCHOR_LINK.findall(doc)) - anchors):
        found.append(f"docs/benchmarks.md links to #{anchor}, which is no heading")
    if index_text != render_index(entries):
        found.append(f"benchmarks/results/{INDEX_NAME} is stale: run python benchmarks/results_index.py")
    return found


def main(argv: list[str] | None = None) -> int:
    """Write INDEX.md, or with ``--check`` list the problems and return 1 if there are any."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="check instead of writing; exit 1 on any problem")
    args = parser.parse_args(argv)
    doc = DOC_PATH.read_text()
    index_path = RESULTS_DIR / INDEX_NAME
    if args.check:
        index_text = index_path.read_text() if index_path.is_file() else None
        found = problems(RESULTS_DIR, doc, index_text)
        for line in found:
            print(line, file=sys.stderr)
        return 1 if found else 0
    index_path.write_text(render_index(build_entries(RESULTS_DIR, doc)))
    print(f"wrote {index_path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
