"""``python -m rslkit.plot RUN_DIR [RUN_DIR ...] [--out PNG] [--metrics ...]``: a run's learning curves as a PNG.

Reads the ``metrics.csv`` every run directory holds (written by :class:`rslkit.utils.logger.RunLogger`: one row per
iteration, a column per metric, empty cells where a metric was not logged that iteration) and draws one panel per
metric with every run overlaid. Headless: matplotlib's Agg backend, no display needed.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

from rslkit.cli.common import run_cli

DEFAULT_METRICS = (
    "Train/mean_return",
    "Eval/mean_return",
    "Train/success_rate",
    "Train/mean_episode_length",
    "Loss/surrogate",  # PPO, ReinFlow
    "Loss/value",  # PPO, ReinFlow (value loss), SAC (critic loss)
    "Loss/actor",  # SAC
    "Loss/alpha",  # SAC temperature loss
    "Loss/flow",  # flow-bc
)
"""Drawn when ``--metrics`` is not given, those that any of the runs logged, in this order."""

ENV_STEPS = "Perf/total_env_steps"
"""The column of cumulative env steps (absent in runs that do not step envs, e.g. flow-bc)."""


def read_metrics(run_dir: str | Path, skipped: list[str] | None = None) -> dict[str, list[float]]:
    """The columns of a run's ``metrics.csv``: ``{"iteration": [...], "Train/mean_return": [...], ...}``.

    Each line is one row (RunLogger writes no quoted line breaks), so a damaged line (a stray quote, a cut-off last
    line of a killed run, a cell that is not a number) spoils that row only, never the rows after it.

    Args:
        run_dir: a run directory, or the ``metrics.csv`` itself.
        skipped: where to list malformed rows (``"'<file>' line <n>: <what is wrong>"``) and skip them; None: the
            first malformed row is an error.

    Returns:
        One list per column, a float per row; NaN where the row has no value.

    Raises:
        FileNotFoundError: no ``metrics.csv`` there (naming the sub-folders that have one).
        ValueError: the file has no header or no well-formed row, or (``skipped`` None) a malformed row, naming
            the file and line.
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(_missing_csv_message(Path(run_dir)))
    with path.open(newline="") as f:
        lines = f.read().splitlines()
    keys = _parse_line(lines[0]) if lines else None
    if not keys:
        raise ValueError(f"'{path}' has no header line; is it a metrics.csv written by train.py?")
    rows: list[list[float]] = []
    bad: list[str] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            rows.append(_parse_row(line, len(keys)))
        except ValueError as err:
            bad.append(f"'{path}' line {number}: {err}")
            if skipped is None:
                raise ValueError(f"Malformed row in {bad[0]}.") from None
    if skipped is not None:
        skipped += bad
    if not rows:
        detail = f" ({len(bad)} malformed: {bad[0]})" if bad else "; plot it after the run's first iteration"
        raise ValueError(f"'{path}' has no readable rows{detail}.")
    return {key: [row[i] for row in rows] for i, key in enumerate(keys)}


def _parse_line(line: str) -> list[str] | None:
    """The fields of one CSV line, or None when it is not valid CSV (e.g. an unmatched quote)."""
    try:
        return next(csv.reader([line], strict=True))
    except csv.Error:
        return None


def _parse_row(line: str, width: int) -> list[float]:
    """One data line as floats (NaN for empty cells).

    Raises:
        ValueError: saying what is wrong: not valid CSV, a field count other than the header's, a non-number.
    """
    fields = _parse_line(line)
    if fields is None:
        raise ValueError(f"not valid CSV ({line[:60]!r})")
    if len(fields) != width:
        raise ValueError(f"{len(fields)} fields, the header has {width}")
    values = []
    for column, text in enumerate(fields, start=1):
        try:
            values.append(float(text) if text else math.nan)
        except ValueError:
            raise ValueError(f"field {column} is not a number ({text[:40]!r})") from None
    return values


def _missing_csv_message(run_dir: Path) -> str:
    if not run_dir.exists():
        return f"'{run_dir}' does not exist; pass a run directory such as logs/<task>/<run>."
    runs = sorted(p.parent for p in run_dir.glob("*/metrics.csv")) if run_dir.is_dir() else []
    hint = f"; its runs: {' '.join(str(p) for p in runs[-5:])}" if runs else "; pass a run directory of train.py"
    return f"'{run_dir}' has no metrics.csv{hint}."


def resolve_metrics(requested: list[str] | None, runs: list[dict[str, list[float]]]) -> list[str]:
    """The metric columns to draw: ``requested`` (full names or unambiguous short names), or the defaults.

    Args:
        requested: e.g. ``["Train/mean_return", "value"]``; None for :data:`DEFAULT_METRICS` present in a run.
        runs: :func:`read_metrics` of every run.

    Raises:
        ValueError: a metric no run logged (the message lists the available ones), or an ambiguous short name.
    """
    available = sorted({key for run in runs for key, col in run.items() if _has_values(col)} - {"iteration"})
    if requested is None:
        chosen = [key for key in DEFAULT_METRICS if key in available]
        if not chosen:  # a runner with other names: draw its losses rather than nothing
            chosen = [key for key in available if key.startswith("Loss/") and key != "Loss/learning_rate"]
        if not chosen:
            raise ValueError(f"None of the default metrics was logged; pass --metrics from: {', '.join(available)}.")
        return chosen
    return [_match_metric(name, available) for name in requested]


def _has_values(column: list[float]) -> bool:
    return any(not math.isnan(v) for v in column)


def _match_metric(name: str, available: list[str]) -> str:
    if name in available:
        return name
    matches = [key for key in available if key.split("/", 1)[-1] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ValueError(f"Metric '{name}' is ambiguous: {', '.join(matches)}; pass the full name.")
    raise ValueError(f"No run logged metric '{name}'; available: {', '.join(available)}.")


def run_labels(run_dirs: list[Path]) -> list[str]:
    """Legend labels: the run folders' names, with their parent folder (the task) when names repeat."""
    names = [p.resolve().name if p.name != "metrics.csv" else p.resolve().parent.name for p in run_dirs]
    if len(set(names)) == len(names):
        return names
    dirs = [p.resolve() if p.name != "metrics.csv" else p.resolve().parent for p in run_dirs]
    return [f"{d.parent.name}/{d.name}" for d in dirs]


def plot_runs(
    run_dirs: list[str | Path],
    out: str | Path,
    metrics: list[str] | None = None,
    x: str = "auto",
    labels: list[str] | None = None,
) -> list[str]:
    """Draw one panel per metric with every run overlaid and write the figure to ``out`` (PNG).

    Args:
        run_dirs: run directories (or their ``metrics.csv``).
        out: the image to write (parent folders are created).
        metrics: columns to draw (see :func:`resolve_metrics`); None for the defaults.
        x: ``"iteration"``, ``"env_steps"`` (``Perf/total_env_steps``), or ``"auto"``: env steps when every run
            logged them, else iterations.
        labels: legend entries, one per run (default: :func:`run_labels`).

    Malformed rows of a ``metrics.csv`` are skipped with a warning on stderr naming each (file and line) and how
    many were skipped (see :func:`read_metrics`).

    Returns:
        The metric columns drawn.

    Raises:
        ValueError: unknown metric or ``x``, ``labels`` of the wrong length, ``env_steps`` a run did not log.
        FileNotFoundError: a run without ``metrics.csv``.
    """
    if x not in ("auto", "iteration", "env_steps"):
        raise ValueError(f"x must be 'auto', 'iteration' or 'env_steps', got '{x}'.")
    paths = [Path(p) for p in run_dirs]
    if not paths:
        raise ValueError("Pass at least one run directory.")
    labels = labels or run_labels(paths)
    if len(labels) != len(paths):
        raise ValueError(f"Got {len(labels)} labels for {len(paths)} runs; pass one label per run.")
    skipped: list[str] = []
    runs = [read_metrics(p, skipped) for p in paths]
    if skipped:
        shown = "; ".join(skipped[:5]) + (f"; and {len(skipped) - 5} more" if len(skipped) > 5 else "")
        print(f"warning: skipped {len(skipped)} malformed row(s) of metrics.csv: {shown}", file=sys.stderr)
    chosen = resolve_metrics(metrics, runs)
    has_steps = [_has_values(run.get(ENV_STEPS, [])) for run in runs]
    if x == "env_steps" and not all(has_steps):
        missing = [str(p) for p, ok in zip(paths, has_steps) if not ok]
        raise ValueError(f"{', '.join(missing)} logged no {ENV_STEPS}; use --x iteration.")
    use_steps = x == "env_steps" or (x == "auto" and all(has_steps))
    _draw(runs, labels, chosen, ENV_STEPS if use_steps else "iteration", Path(out))
    return chosen


def _draw(runs: list[dict[str, list[float]]], labels: list[str], metrics: list[str], x_key: str, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # headless: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    cols = min(len(metrics), 2)
    rows = math.ceil(len(metrics) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.2 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes.flat, metrics):
        for i, (run, label) in enumerate(zip(runs, labels)):
            points = [(a, b) for a, b in zip(run[x_key], run.get(metric, [])) if not (math.isnan(a) or math.isnan(b))]
            if points:  # sparse metrics (evaluations every k iterations) are joined across the gaps
                xs, ys = zip(*points)
                marker = "o" if len(points) < 20 else None
                ax.plot(xs, ys, label=label, color=colors[i % len(colors)], marker=marker, markersize=3)
        ax.set_title(metric, fontsize="medium")
        ax.set_xlabel("env steps" if x_key == ENV_STEPS else "iteration")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
    for ax in axes.flat[len(metrics) :]:
        ax.set_visible(False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> Path:
    """Parse the command line, draw the curves and print where the image went."""
    parser = argparse.ArgumentParser(
        prog="python -m rslkit.plot",
        description="Plot the learning curves of one or more runs (their metrics.csv) into a PNG.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (logs/<task>/<run>)")
    parser.add_argument("--out", help="PNG to write (default: RUN_DIR/curves.png for one run, curves.png for more)")
    parser.add_argument(
        "--metrics",
        nargs="+",
        help="metric columns, full (Train/mean_return) or short (mean_return) names; default: return, success rate, "
        "episode length and the algorithm's losses",
    )
    parser.add_argument("--x", choices=("auto", "iteration", "env_steps"), default="auto", help="x-axis")
    parser.add_argument("--labels", nargs="+", help="legend entries, one per run (default: the run folders' names)")
    args = parser.parse_args(argv)
    first = Path(args.runs[0])
    default_out = (first if first.is_dir() else first.parent) / "curves.png" if len(args.runs) == 1 else "curves.png"
    out = Path(args.out or default_out)
    chosen = plot_runs(args.runs, out, args.metrics, args.x, args.labels)
    print(f"Wrote {out} ({len(args.runs)} run{'s' if len(args.runs) > 1 else ''}: {', '.join(chosen)}).")
    return out


def run(argv: list[str] | None = None) -> None:
    """:func:`main` for the command line: bad input ends with its message and exit code 2, not a traceback."""
    run_cli(lambda: main(argv))


if __name__ == "__main__":
    run()
