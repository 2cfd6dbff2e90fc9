"""Environments: the VecEnv contract, the task registry and torch-native tasks."""

from rslkit.envs.registry import TaskSpec, get_task, make_env, register_task, task_names
from rslkit.envs.torch_task import TaskCfg, TorchTask
from rslkit.envs.vec_env import VecEnv

__all__ = ["TaskSpec", "TaskCfg", "TorchTask", "VecEnv", "get_task", "make_env", "register_task", "task_names"]
