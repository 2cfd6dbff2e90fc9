"""The per-iteration console line shows each algorithm's own losses."""

from __future__ import annotations

import math

from rslkit.utils.logger import format_summary

PPO = {
    "Perf/steps_per_s": 12345.6,
    "Train/mean_return": -150.123,
    "Train/mean_episode_length": 200.0,
    "Loss/surrogate": -0.0123,
    "Loss/value": 12.5,
    "Loss/entropy": 1.4,
    "Policy/mean_std": 0.8,
    "Loss/learning_rate": 1e-3,
}
SAC = {  # keys of OffPolicyRunner._metrics
    "Perf/steps_per_s": 900.0,
    "Loss/value": 3.25,
    "Loss/actor": -12.0,
    "Loss/alpha": -0.5,
    "Policy/alpha": 0.12,
    "Policy/mean_q": 15.5,
    "Policy/mean_target_q": 15.4,
    "Loss/learning_rate": 3e-4,
}
FLOW_BC = {"Loss/flow": 0.0421, "Loss/grad_norm": 0.3, "Loss/learning_rate": 1e-4, "Perf/updates_per_s": 250.0}
REINFLOW = {
    "Loss/surrogate": 0.01,
    "Loss/value": 4.0,
    "Loss/w2": 0.002,
    "Policy/mean_std": 0.05,
    "Train/mean_return": -200.0,
    "Eval/mean_return": -180.0,
    "Loss/learning_rate": 1e-5,
}


def test_ppo_line_keeps_its_figures():
    line = format_summary(4, 100, PPO)
    assert line == (
        "it     5/100 | steps/s 12,346 | return -150.12 | len 200.0 | surr -0.0123 | v_loss 12.5 | std 0.800 "
        "| lr 1.00e-03"
    )


def test_sac_line_shows_critic_actor_alpha_and_q():
    line = format_summary(0, 10, SAC)
    assert line == (
        "it     1/10 | steps/s 900 | critic 3.25 | actor -12 | alpha_loss -0.5 | alpha 0.12 | Q 15.5 | lr 3.00e-04"
    )


def test_flow_bc_line_shows_its_bc_loss_and_update_rate():
    assert format_summary(0, 10, FLOW_BC) == "it     1/10 | upd/s 250 | bc_loss 0.0421 | lr 1.00e-04"
    evaluated = {**FLOW_BC, "Eval/mean_return": -170.0, "Train/mean_return": -170.0}  # its episodes are the eval
    assert "| return -170.00 |" in format_summary(0, 10, evaluated)
    assert "eval" not in format_summary(0, 10, evaluated)


def test_reinflow_line_shows_policy_and_value_losses_and_its_evaluation():
    line = format_summary(0, 10, REINFLOW)
    assert line == (
        "it     1/10 | return -200.00 | eval -180.00 | surr 0.01 | v_loss 4 | w2 0.002 | std 0.050 | lr 1.00e-05"
    )


def test_missing_and_nan_metrics_are_left_out():
    assert format_summary(0, 1, {"Loss/value": math.nan}) == "it     1/1"


def test_a_real_sac_iteration_shows_its_losses():
    from rslkit.recipes import build_run

    overrides = ["--agent.learning_starts", "1", "--agent.random_steps", "1", "--agent.algorithm.batch_size", "16"]
    _, runner = build_run("pendulum", "sac", overrides, num_envs=4, max_iterations=1)
    line = format_summary(0, 1, runner.learn())
    for label in ("critic", "actor", "alpha_loss", "alpha", "Q"):
        assert f"| {label} " in line


def test_a_log_file_gets_summary_lines_and_no_progress_bar(capsys):
    """Off a terminal (pytest captures stderr) the bar is off and each iteration is one summary line."""
    from rslkit.utils.logger import RunLogger

    logger = RunLogger(None, total_iterations=3)
    for it in range(3):
        logger.log(it, PPO, format_summary(it, 3, PPO))
    logger.close()
    out, err = capsys.readouterr()
    assert out.count("it ") == 3 and out.count("\n") == 3
    assert "\r" not in out + err and "it/s" not in err
