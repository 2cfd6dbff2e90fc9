"""The end-of-run summary: final and best figures, iterations, env steps, wall time, the last checkpoint."""

from __future__ import annotations

import math

from rslkit.runners.run_summary import RunSummary, format_seconds


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_final_and_best_return_and_success_with_their_iterations(tmp_path):
    clock = FakeClock()
    summary = RunSummary(start_iteration=0, clock=clock)
    summary.observe(0, {"Loss/value": 1.0, "Perf/total_env_steps": 1000.0})  # no episode finished yet
    summary.observe(1, {"Train/mean_return": -300.0, "Train/success_rate": 0.5, "Perf/total_env_steps": 2000.0})
    summary.observe(2, {"Train/mean_return": -120.5, "Train/success_rate": 0.9, "Perf/total_env_steps": 3000.0})
    summary.observe(3, {"Train/mean_return": -150.0, "Train/success_rate": math.nan, "Perf/total_env_steps": 4000.0})
    clock.now += 192.4
    text = summary.format(tmp_path / "model_4.pt")
    lines = text.splitlines()
    assert lines[0].startswith("Training finished ---")
    assert lines[1] == "  run           4 iterations, 4,000 env steps in 3 min 12 s"
    assert lines[2] == "  return        final -150 (it 4) | best -120.5 (it 3)"
    assert lines[3] == "  success rate  final 0.9 (it 3) | best 0.9 (it 3)"  # a NaN is not a value
    assert lines[4] == f"  checkpoint    {tmp_path / 'model_4.pt'}"
    assert lines[5].endswith(f"-m rslkit.plot {tmp_path}")


def test_evaluation_returns_are_preferred_and_a_resume_shows_its_range():
    summary = RunSummary(start_iteration=10, clock=FakeClock())
    summary.observe(10, {"Train/mean_return": -5.0})
    summary.observe(11, {"Train/mean_return": -4.0, "Eval/mean_return": -2.0})  # ReinFlow / flow-bc evaluations
    lines = summary.format(interrupted=True).splitlines()
    assert lines[0].startswith("Training stopped early (Ctrl-C / SIGTERM)")
    assert lines[1] == "  run           2 iterations (10 -> 12) in 0.0 s"  # no env steps logged (flow-bc)
    assert lines[2] == "  eval return   final -2 (it 12) | best -2 (it 12)"
    assert len(lines) == 3  # no checkpoint without a run directory


def test_wall_time_reads_at_every_scale():
    assert format_seconds(42.31) == "42.3 s"
    assert format_seconds(192.4) == "3 min 12 s"
    assert format_seconds(2 * 3600 + 5 * 60 + 10) == "2 h 05 min"


def test_learn_prints_the_summary_once_on_the_main_rank(tmp_path, capsys):
    from rslkit.recipes import build_run

    _, runner = build_run("pendulum", "ppo", num_envs=4, max_iterations=2, log_dir=tmp_path)
    runner.learn()
    out = capsys.readouterr().out
    assert out.count("Training finished") == 1
    assert "2 iterations, 256 env steps" in out and f"checkpoint    {tmp_path / 'model_2.pt'}" in out
    assert (tmp_path / "model_2.pt").exists()


def test_stopped_run_summary_says_so_and_names_the_checkpoint_it_saved(tmp_path, capsys):
    import os
    import signal

    from rslkit.recipes import build_run

    _, runner = build_run("pendulum", "ppo", num_envs=4, max_iterations=5, log_dir=tmp_path)
    iteration = runner._iteration

    def iteration_then_ctrl_c():
        metrics = iteration()
        os.kill(os.getpid(), signal.SIGTERM)  # handled by learn(): stop after this iteration (SIGINT may be ignored
        # when the suite runs as a background job, and training then leaves it ignored)
        return metrics

    runner._iteration = iteration_then_ctrl_c
    runner.learn()
    out = capsys.readouterr().out
    assert runner.interrupted and "Training stopped early" in out and "1 iteration," in out
    assert f"checkpoint    {tmp_path / 'model_1.pt'}" in out and (tmp_path / "model_1.pt").exists()


def test_evaluated_success_fits_the_label_column():
    summary = RunSummary(0, clock=lambda: 0.0)
    summary.observe(0, {"Eval/success_rate": 0.75, "Eval/mean_return": -3.0})
    lines = summary.format().splitlines()
    assert lines[2] == "  eval return   final -3 (it 1) | best -3 (it 1)"
    assert lines[3] == "  eval success  final 0.75 (it 1) | best 0.75 (it 1)"
