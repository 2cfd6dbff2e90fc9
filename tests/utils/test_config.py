"""Command-line overrides of typed dataclass configs."""

import pytest

from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.utils.config import apply_overrides, from_dict, to_dict


def test_overrides_parse_types():
    cfg = PPORunnerCfg()
    apply_overrides(
        {"agent": cfg},
        [
            "--agent.algorithm.learning_rate",
            "3e-4",
            "--agent.policy.actor_hidden_dims=128,64",
            "--agent.policy.obs_normalization",
            "false",
            "--agent.policy.rnn_type",
            "gru",
            "--agent.num_steps_per_env",
            "16",
        ],
    )
    assert cfg.algorithm.learning_rate == 3e-4
    assert cfg.policy.actor_hidden_dims == (128, 64)
    assert cfg.policy.obs_normalization is False
    assert cfg.policy.rnn_type == "gru"
    assert cfg.num_steps_per_env == 16


def test_unknown_field_suggests_close_match():
    expected = "Unknown config field .agent.algorithm.learning_rat.. Did you mean: agent.algorithm.learning_rate"
    with pytest.raises(ValueError, match=expected):
        apply_overrides({"agent": PPORunnerCfg()}, ["--agent.algorithm.learning_rat", "1"])


@pytest.mark.parametrize(
    "args,match",
    [
        (["--agent.num_steps_per_env", "many"], "expected an integer"),
        (["--agent.policy.rnn_type", "transformer"], "expected one of"),
        (["--agent.algorithm", "1"], "group of settings"),
        (["--foo.bar", "1"], "Unknown option"),
        (["--agent.max_iterations"], "needs a value"),
    ],
)
def test_bad_overrides(args, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides({"agent": PPORunnerCfg()}, args)


def test_dict_round_trip():
    cfg = PPORunnerCfg()
    cfg.policy.actor_hidden_dims = (3, 4)
    assert from_dict(PPORunnerCfg, to_dict(cfg)) == cfg
