"""Recipes: which agent config trains which task, and the one way to build or rebuild a run.

The layer above the runners: envs, algorithms and runners know nothing of each other's defaults; a recipe pairs a
task with an algorithm's settings, and :func:`build_run` / :func:`load_run` assemble env and runner for every
entry point (train, play, record, export, benchmarks, the real-world loop).
"""

from rslkit.recipes.algorithms import ALGORITHMS, get_algorithm
from rslkit.recipes.catalog import agent_cfg, recipe_pairs, recipes_of, register_recipe
from rslkit.recipes.run import build_env, build_run, latest_run, load_run, resolve_checkpoint, task_dir_name

__all__ = [
    "ALGORITHMS",
    "agent_cfg",
    "build_env",
    "build_run",
    "get_algorithm",
    "latest_run",
    "load_run",
    "recipe_pairs",
    "recipes_of",
    "register_recipe",
    "resolve_checkpoint",
    "task_dir_name",
]
