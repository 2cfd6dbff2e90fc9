"""Demonstration datasets: record rollouts, read/write the LeRobotDataset v3.0 layout, chunked training samples."""

from rslkit.data.checks import check_matches_env
from rslkit.data.chunking import ChunkDataset, chunk_indices
from rslkit.data.demonstrations import ACTION_KEY, OBS_KEY, Demonstrations, Episode
from rslkit.data.lerobot_reader import read_lerobot_dataset, recompute_stats
from rslkit.data.lerobot_writer import write_lerobot_dataset
from rslkit.data.normalizer import MinMaxNormalizer
from rslkit.data.recorder import episode_stats, record_episodes
from rslkit.data.transitions import load_demonstrations

__all__ = [
    "ACTION_KEY",
    "OBS_KEY",
    "ChunkDataset",
    "Demonstrations",
    "Episode",
    "MinMaxNormalizer",
    "check_matches_env",
    "episode_stats",
    "chunk_indices",
    "load_demonstrations",
    "read_lerobot_dataset",
    "recompute_stats",
    "record_episodes",
    "write_lerobot_dataset",
]
