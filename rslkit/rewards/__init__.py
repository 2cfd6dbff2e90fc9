"""Learned rewards: VLAC-style progress critics (a local model, a served-model adapter), value recursion, metrics.

Contract: :class:`ProgressCritic` (``score(obs_a, obs_b, goal) -> ProgressScore(delta, done)``). ``python -m
rslkit.rewards train | eval`` trains and grades the local critic; ``train.py --reward learned:PATH`` trains a policy
on its reward (:class:`LearnedRewardEnv`). See docs/rewards.md.
"""

from rslkit.rewards.contract import ProgressCritic, ProgressScore
from rslkit.rewards.learned_reward_env import LearnedRewardEnv
from rslkit.rewards.pairs import PairSamplerCfg, ProgressData
from rslkit.rewards.progress_model import ProgressModel, ProgressModelCfg, load_progress_model, save_progress_model
from rslkit.rewards.served import ServedCriticCfg, ServedCriticError, ServedProgressCritic
from rslkit.rewards.value import ValueCfg, value_step, value_trajectory

__all__ = [
    "LearnedRewardEnv",
    "PairSamplerCfg",
    "ProgressCritic",
    "ProgressData",
    "ProgressModel",
    "ProgressModelCfg",
    "ProgressScore",
    "ServedCriticCfg",
    "ServedCriticError",
    "ServedProgressCritic",
    "ValueCfg",
    "load_progress_model",
    "save_progress_model",
    "value_step",
    "value_trajectory",
]
