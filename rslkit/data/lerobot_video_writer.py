"""Camera streams of recorded episodes as LeRobot ``video`` features: one MP4 per camera, episodes back to back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from rslkit.data.demonstrations import Episode
from rslkit.data.lerobot_cameras import camera_key
from rslkit.data.lerobot_format import VIDEO_PATH
from rslkit.data.video import PIX_FMT, encode_video, video_info


def camera_frames(episodes: Sequence[Episode]) -> dict[str, list[np.ndarray]]:
    """``{feature key: [frames [T, H, W, 3] uint8 of each episode]}``, cameras in the first episode's order.

    Raises:
        ValueError: when episodes have different cameras, or a camera changes its image size or has an odd one.
    """
    names = list(episodes[0].images)
    out: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for i, ep in enumerate(episodes):
        if sorted(ep.images) != sorted(names):
            raise ValueError(
                f"Episode {i} has cameras {sorted(ep.images)} but episode 0 has {sorted(names)}; every episode of a "
                "dataset needs the same cameras (record them all, or drop the extra ones)."
            )
        for name in names:
            frames = ep.images[name].detach().cpu().numpy()
            first = out[name][0] if out[name] else frames
            if frames.shape[1:] != first.shape[1:]:
                raise ValueError(
                    f"Camera '{name}' has {frames.shape[1]}x{frames.shape[2]} images in episode {i} but "
                    f"{first.shape[1]}x{first.shape[2]} in episode 0; one camera keeps one image size."
                )
            if frames.shape[1] % 2 or frames.shape[2] % 2:
                raise ValueError(
                    f"Camera '{name}' has {frames.shape[1]}x{frames.shape[2]} images; videos ({PIX_FMT}) need an even "
                    "height and width: render at an even size, or crop."
                )
            out[name].append(frames)
    return {camera_key(name): frames for name, frames in out.items()}


def write_videos(
    root: Path, cameras: dict[str, list[np.ndarray]], fps: int, codec: str
) -> tuple[dict[str, dict], dict[str, pa.Array]]:
    """Encode each camera to ``videos/<key>/chunk-000/file-000.mp4``.

    Args:
        root: the dataset folder.
        cameras: ``{feature key: frames of each episode}`` from :func:`camera_frames`.
        fps: frames per second.
        codec: PyAV encoder (see :func:`rslkit.data.video.encode_video`).

    Returns:
        ``(features, columns)``: the ``video`` features of ``meta/info.json`` and the episodes-metadata columns
        ``videos/<key>/{chunk_index, file_index, from_timestamp, to_timestamp}`` (episode ``e`` spans
        ``[from, to)`` seconds of the file).
    """
    features: dict[str, dict] = {}
    columns: dict[str, pa.Array] = {}
    for key, episodes in cameras.items():
        path = root / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
        encode_video(path, episodes, fps, codec)
        height, width = episodes[0].shape[1:3]
        features[key] = {
            "dtype": "video",
            "shape": [int(height), int(width), 3],
            "names": ["height", "width", "channels"],
            "info": video_info(path),
        }
        lengths = np.array([len(frames) for frames in episodes])
        ends = np.cumsum(lengths)
        zeros = np.zeros(len(episodes), dtype=np.int64)
        columns[f"videos/{key}/chunk_index"] = pa.array(zeros)
        columns[f"videos/{key}/file_index"] = pa.array(zeros)
        columns[f"videos/{key}/from_timestamp"] = pa.array((ends - lengths) / fps, pa.float64())
        columns[f"videos/{key}/to_timestamp"] = pa.array(ends / fps, pa.float64())
    return features, columns
