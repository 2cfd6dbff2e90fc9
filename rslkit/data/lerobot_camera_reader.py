"""Load the camera frames of a LeRobotDataset v3.0: ``image`` features (PNG in the data parquet) and ``video``
features (MP4 files, episodes back to back, decoded with PyAV).

Frames are loaded eagerly into one ``[F, H, W, 3]`` uint8 array per camera (``F * H * W * 3`` bytes: 10k frames
of 96 x 96 are 276 MB), in the order of the loaded state frames.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

from rslkit.data.lerobot_cameras import declared_frame_shape
from rslkit.data.lerobot_format import VIDEO_PATH
from rslkit.data.video import decode_frames

REDOWNLOAD_HINT = (
    "download the dataset with its videos (LeRobotDataset(repo_id, download_videos=True), or "
    "`hf download REPO --repo-type dataset`), or read it without this camera"
)


def _check_shape(root: Path, key: str, got: tuple[int, ...], declared: tuple[int, int, int], where: str) -> None:
    if tuple(got) != declared:
        raise ValueError(
            f"Camera feature '{key}' of '{root}' declares frames {list(declared)} (H, W, C) in meta/info.json but "
            f"{where} holds {list(got)}; correct the feature's 'shape' in meta/info.json, or re-encode the camera."
        )


def _decode_png(root: Path, key: str, cell: dict | None) -> np.ndarray:
    from PIL import Image

    data = (cell or {}).get("bytes")
    if data is None:
        path = Path((cell or {}).get("path") or "")
        path = path if path.is_absolute() else root / path
        if not path.is_file():
            raise ValueError(
                f"A frame of image feature '{key}' in '{root}' has no embedded bytes and its file '{path}' is missing; "
                "re-download the dataset (LeRobot embeds images in the data files)."
            )
        data = path.read_bytes()
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def read_image_feature(root: Path, key: str, feature: dict, frames: pa.Table) -> np.ndarray:
    """``[F, H, W, 3]`` uint8 frames of an ``image`` feature (a ``struct<bytes, path>`` column of PNG files).

    Raises:
        ValueError: for a missing column or file, or images of another size than ``meta/info.json`` declares.
    """
    if key not in frames.column_names:
        raise ValueError(
            f"Data files of '{root}' have no '{key}' column although meta/info.json lists it; re-download."
        )
    shape = declared_frame_shape(root, key, feature)
    out = np.empty((frames.num_rows, *shape), dtype=np.uint8)
    for i, cell in enumerate(frames[key].to_pylist()):
        image = _decode_png(root, key, cell)
        _check_shape(root, key, image.shape, shape, f"frame index {frames['index'][i].as_py()}")
        out[i] = image
    return out


def _video_rows(root: Path, key: str, episodes: pa.Table, row_from: np.ndarray, row_to: np.ndarray) -> dict:
    """``{(chunk, file): [(rows, from_timestamp)]}``: where each episode's frames of camera ``key`` lie."""
    prefix = f"videos/{key}/"
    needed = [prefix + c for c in ("chunk_index", "file_index", "from_timestamp")]
    missing = [c for c in needed if c not in episodes.column_names]
    if missing:
        raise ValueError(
            f"Episodes metadata of '{root}' lacks {missing} for video feature '{key}'; the dataset is incomplete "
            "(re-download it, or read it without this camera)."
        )
    chunks, files, starts = (episodes[c].to_numpy() for c in needed)
    where: dict[tuple[int, int], list[tuple[slice, float]]] = defaultdict(list)
    for c, f, t0, a, b in zip(chunks, files, starts, row_from, row_to):
        where[(int(c), int(f))].append((slice(int(a), int(b)), float(t0)))
    return where


def read_video_feature(
    root: Path,
    info: dict,
    key: str,
    episodes: pa.Table,
    frames: pa.Table,
    bounds: tuple[np.ndarray, np.ndarray],
    tolerance_s: float,
) -> np.ndarray:
    """``[F, H, W, 3]`` uint8 frames of a ``video`` feature; frame ``t`` of an episode is decoded at
    ``from_timestamp + timestamp`` of its file.

    Args:
        bounds: ``(row_from, row_to)`` rows of each episode (of ``episodes``) in ``frames``.
        tolerance_s: largest distance between a frame's time and the one asked for.

    Raises:
        ValueError: for a missing video file or metadata, frames of another size than declared, or a video that
            lacks frames the metadata asks for.
        ImportError: when PyAV is missing.
    """
    shape = declared_frame_shape(root, key, info["features"][key])
    template = info.get("video_path") or VIDEO_PATH
    timestamps = frames["timestamp"].to_numpy().astype(np.float64)
    out = np.empty((frames.num_rows, *shape), dtype=np.uint8)
    for (chunk, file), parts in _video_rows(root, key, episodes, *bounds).items():
        path = root / template.format(video_key=key, chunk_index=chunk, file_index=file)
        if not path.is_file():
            raise ValueError(f"Video file '{path}' of camera feature '{key}' is missing; {REDOWNLOAD_HINT}.")
        rows = np.concatenate([np.arange(s.start, s.stop) for s, _ in parts])
        times = np.concatenate([timestamps[s] + t0 for s, t0 in parts])
        decoded = decode_frames(path, times, tolerance_s)
        _check_shape(root, key, decoded.shape[1:], shape, f"video '{path}'")
        out[rows] = decoded
    return out
