"""Command-line overrides of typed dataclass configs."""

import pytest

from rslkit.runners.ppo_config import PPORunnerCfg
from rslkit.utils.config import apply_overrides, apply_settings, from_dict, to_dict


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


def test_apply_settings_sets_typed_values_and_names_bad_ones():
    cfg = PPORunnerCfg()
    apply_settings(cfg, {"algorithm.learning_rate": 3e-4, "policy.actor_hidden_dims": (8, 8), "max_iterations": 3})
    assert cfg.algorithm.learning_rate == 3e-4 and cfg.policy.actor_hidden_dims == (8, 8) and cfg.max_iterations == 3
    apply_settings(cfg, {"algorithm.learning_rate": 1})  # an int is a fine float
    with pytest.raises(ValueError, match=r"Bad value for 'agent.max_iterations': 3.0 is not of its type int"):
        apply_settings(cfg, {"max_iterations": 3.0}, "agent")
    with pytest.raises(ValueError, match=r"Bad value for 'agent.policy.actor_hidden_dims'"):
        apply_settings(cfg, {"policy.actor_hidden_dims": ("8",)}, "agent")
    with pytest.raises(ValueError, match=r"Bad value for 'agent.policy.obs_normalization'"):
        apply_settings(cfg, {"policy.obs_normalization": 1}, "agent")
    with pytest.raises(ValueError, match=r"Unknown config field 'agent.algorithm.gama'. Did you mean"):
        apply_settings(cfg, {"algorithm.gama": 0.9}, "agent")
    with pytest.raises(ValueError, match=r"'agent.algorithm' is a group of settings"):
        apply_settings(cfg, {"algorithm": None}, "agent")
