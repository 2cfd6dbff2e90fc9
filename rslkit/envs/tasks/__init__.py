"""Torch-native batched tasks, one module each with its ``TASK`` spec (:data:`rslkit.envs.registry.BUILTIN_TASKS`
names them); importing this package loads none of them."""
