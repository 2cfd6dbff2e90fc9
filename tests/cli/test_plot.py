"""``python -m rslkit.plot``: a PNG of a run's curves, several runs overlaid; clear errors for bad requests."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from rslkit.cli import plot

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def write_run(run_dir: Path, rows: list[dict[str, float]]) -> Path:
    """A ``metrics.csv`` as RunLogger writes it: a column per metric, empty cells where one was not logged."""
    run_dir.mkdir(parents=True)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with (run_dir / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    return run_dir


def ppo_rows(scale: float) -> list[dict[str, float]]:
    rows: list[dict[str, float]] = []
    for it in range(6):
        row = {"iteration": it, "Loss/value": scale / (it + 1), "Loss/surrogate": -0.01, "Loss/learning_rate": 1e-3}
        row["Perf/total_env_steps"] = 128.0 * (it + 1)
        if it >= 2:  # the first episodes end at iteration 2
            row["Train/mean_return"] = -1000.0 + 100 * it * scale
        rows.append(row)
    return rows


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG header."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_two_runs_are_overlaid_with_a_legend(tmp_path, monkeypatch):
    a = write_run(tmp_path / "pendulum" / "run_a", ppo_rows(1.0))
    b = write_run(tmp_path / "pendulum" / "run_b", ppo_rows(2.0))
    drawn = []
    real_draw = plot._draw

    def spy(runs, labels, metrics, x_key, out):
        drawn.append((labels, metrics, x_key))
        real_draw(runs, labels, metrics, x_key, out)

    monkeypatch.setattr(plot, "_draw", spy)
    out = plot.main([str(a), str(b), "--out", str(tmp_path / "img" / "curves.png")])
    width, height = image_size(out)
    assert width > 500 and height > 300
    labels, metrics, x_key = drawn[0]
    assert labels == ["run_a", "run_b"]
    assert metrics == ["Train/mean_return", "Loss/surrogate", "Loss/value"]  # defaults present, learning rate not
    assert x_key == "Perf/total_env_steps"


def test_figure_has_one_line_per_run_in_each_panel(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    a = write_run(tmp_path / "a", ppo_rows(1.0))
    b = write_run(tmp_path / "b", ppo_rows(2.0))
    monkeypatch.setattr(plt, "close", lambda fig: None)  # keep the figure to inspect it
    plot.plot_runs([a, b], tmp_path / "c.png", metrics=["mean_return", "Loss/value"], x="iteration")
    fig = plt.gcf()
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["Train/mean_return", "Loss/value"]
    for ax in axes:
        assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
        assert ax.get_xlabel() == "iteration"
    xs = axes[0].get_lines()[0].get_xdata()
    assert list(xs) == [2, 3, 4, 5]  # rows without a return are skipped, not drawn as zeros
    plt.close(fig)


def test_a_real_pendulum_run_plots(tmp_path):
    from rslkit.recipes import build_run

    _, runner = build_run("pendulum", "ppo", num_envs=4, max_iterations=2, log_dir=tmp_path / "run")
    runner.learn()
    columns = plot.read_metrics(tmp_path / "run")
    assert columns["iteration"] == [0.0, 1.0]
    chosen = plot.plot_runs([tmp_path / "run"], tmp_path / "run" / "curves.png")
    assert "Loss/value" in chosen and image_size(tmp_path / "run" / "curves.png")[0] > 0


def test_same_run_names_are_told_apart_by_their_task(tmp_path):
    dirs = [tmp_path / "pendulum" / "run", tmp_path / "cartpole" / "run"]
    assert plot.run_labels(dirs) == ["pendulum/run", "cartpole/run"]


def test_unknown_metric_lists_the_available_ones(tmp_path):
    a = write_run(tmp_path / "a", ppo_rows(1.0))
    with pytest.raises(ValueError, match=r"'reward'.*available: Loss/learning_rate, Loss/surrogate, Loss/value"):
        plot.plot_runs([a], tmp_path / "x.png", metrics=["reward"])


def test_directory_without_metrics_names_its_runs(tmp_path):
    write_run(tmp_path / "logs" / "pendulum" / "2026-01-01_10-00-00", ppo_rows(1.0))
    with pytest.raises(FileNotFoundError, match=r"has no metrics.csv; its runs: .*2026-01-01_10-00-00"):
        plot.read_metrics(tmp_path / "logs" / "pendulum")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plot.read_metrics(tmp_path / "nowhere")


def test_env_steps_axis_needs_env_steps(tmp_path):
    rows = [{"iteration": i, "Loss/flow": 1.0 / (i + 1)} for i in range(3)]  # flow-bc steps no env
    bc = write_run(tmp_path / "bc", rows)
    assert plot.plot_runs([bc], tmp_path / "bc.png") == ["Loss/flow"]  # auto: iterations
    with pytest.raises(ValueError, match="use --x iteration"):
        plot.plot_runs([bc], tmp_path / "bc.png", x="env_steps")


def test_command_line_writes_beside_the_run_and_errors_exit_2(tmp_path):
    a = write_run(tmp_path / "a", ppo_rows(1.0))
    done = subprocess.run([sys.executable, "-m", "rslkit.plot", str(a)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"Wrote {a / 'curves.png'}" in done.stdout and image_size(a / "curves.png")[0] > 0
    bad = subprocess.run([sys.executable, "-m", "rslkit.plot", str(tmp_path / "b")], capture_output=True, text=True)
    assert bad.returncode == 2 and "error:" in bad.stderr and "does not exist" in bad.stderr

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "metrics.csv").write_text('iteration,Loss/value\n0,1.0\n1,"0.5\n2,0.3\n')
    warned = subprocess.run([sys.executable, "-m", "rslkit.plot", str(tmp_path / "c")], capture_output=True, text=True)
    assert warned.returncode == 0, warned.stderr
    assert "warning: skipped 1 malformed row" in warned.stderr and "metrics.csv' line 3" in warned.stderr


def _damaged_run(tmp_path: Path) -> Path:
    """Six PPO rows, then three damaged lines: a stray quote (which once swallowed every later row), a cell that is
    not a number, and a last line cut off by a killed run."""
    run = write_run(tmp_path / "damaged", ppo_rows(1.0))
    lines = (run / "metrics.csv").read_text().splitlines()
    width = len(lines[0].split(","))
    lines.insert(3, '2,"0.25' + "," * (width - 2))  # line 4
    lines.insert(5, "4,abc" + "," * (width - 2))  # line 6
    lines.append("6,0.1")  # line 10: 2 of the header's fields
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    return run


def test_malformed_rows_are_named_and_skipped_never_silently(tmp_path, capsys):
    run = _damaged_run(tmp_path)
    skipped: list[str] = []
    columns = plot.read_metrics(run, skipped)
    assert columns["iteration"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # every well-formed row, also after the quote
    assert [s.split(": ")[0] for s in skipped] == [f"'{run / 'metrics.csv'}' line {n}" for n in (4, 6, 10)]
    assert "not valid CSV" in skipped[0] and "field 2 is not a number ('abc')" in skipped[1]
    assert "2 fields, the header has" in skipped[2]
    with pytest.raises(ValueError, match=r"Malformed row in '.*metrics.csv' line 4: not valid CSV"):
        plot.read_metrics(run)  # without a list to report them in, the first one is an error
    assert plot.plot_runs([run], tmp_path / "d.png") == ["Train/mean_return", "Loss/surrogate", "Loss/value"]
    err = capsys.readouterr().err
    assert "warning: skipped 3 malformed row(s)" in err and "line 4" in err and "line 10" in err
    (run / "metrics.csv").write_text("iteration,Loss/value\n0,x\n")
    with pytest.raises(ValueError, match=r"no readable rows \(1 malformed: .*line 2: field 2 is not a number"):
        plot.plot_runs([run], tmp_path / "d.png")


def test_plot_command_loads_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, rslkit.cli.plot; assert 'torch' not in sys.modules, 'rslkit.plot imports torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
