"""MP4 camera streams with PyAV: encode ``[F, H, W, 3]`` uint8 frames, decode the frames at given timestamps.

Encoding follows LeRobot's defaults: AV1 (``libsvtav1``, preset 12), ``yuv420p``, a keyframe every 2 frames, CRF 30,
one frame every ``1 / fps`` seconds from 0. A LeRobotDataset keeps many episodes back to back in one file per camera;
frame ``t`` of an episode lies at ``from_timestamp + timestamp`` in it, which is how :func:`decode_frames` is asked.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_CODEC = "libsvtav1"
"""LeRobot's default encoder (AV1)."""
PIX_FMT = "yuv420p"
GOP = 2
"""Frames between keyframes: cheap random access, as LeRobot writes."""
CRF = 30
TIMESTAMP_TOLERANCE_S = 1e-4
"""How far a decoded frame's time may lie from the requested one (LeRobot's ``tolerance_s``)."""
VIDEO_EXTRA_HINT = "install PyAV with `pip install -e '.[video]'` (or `pip install av`)"


def import_av() -> Any:
    """The ``av`` module (PyAV).

    Raises:
        ImportError: when PyAV is not installed, saying how to install it.
    """
    try:
        import av
    except ImportError as err:
        raise ImportError(f"Video features of a LeRobotDataset need PyAV; {VIDEO_EXTRA_HINT}.") from err
    return av


def _codec_options(codec: str) -> dict[str, str]:
    options = {"g": str(GOP)}
    if codec in ("libsvtav1", "libx264", "h264", "libx265", "hevc"):
        options["crf"] = str(CRF)
    if codec == "libsvtav1":
        options["preset"] = "12"
    return options


def check_encoder(codec: str) -> None:
    """Raise unless PyAV is installed and has the video encoder ``codec`` (check before a long recording).

    Raises:
        ImportError: when PyAV is missing.
        ValueError: for an unknown or non-video encoder, naming the ones to use instead.
    """
    av = import_av()
    try:
        found = av.codec.Codec(codec, "w")
    except ValueError as err:  # UnknownCodecError
        raise ValueError(
            f"This PyAV build has no video encoder '{codec}'. PyAV wheels from PyPI (>= 12) bundle 'libsvtav1' "
            f"(LeRobot's default), 'libx264' and 'mpeg4': pass one of them as the codec or reinstall PyAV "
            f"(`pip install -e '.[video]'`)."
        ) from err
    if found.type != "video":
        raise ValueError(f"'{codec}' is a {found.type} codec; pass a video encoder such as '{DEFAULT_CODEC}'.")


@contextlib.contextmanager
def _calling_thread_scheduling_kept() -> Iterator[None]:
    """Restore the calling thread's scheduling policy afterwards: SVT-AV1, run as root, switches the thread that
    opens the encoder to real-time ``SCHED_FIFO`` (measured with PyAV 18 / SVT-AV1 4.1), which would leave a recording
    process, or a control loop in it, able to starve the machine."""
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, param)


def encode_video(
    path: str | Path, frames: np.ndarray | Sequence[np.ndarray], fps: int, codec: str = DEFAULT_CODEC
) -> None:
    """Write ``frames`` as an MP4 video, frame ``i`` at time ``i / fps``.

    Args:
        path: the ``.mp4`` file to create (its folder is created).
        frames: ``[F, H, W, 3]`` uint8 RGB, ``F >= 1``; ``H`` and ``W`` even (``yuv420p`` halves the colour planes).
            A sequence of such arrays (e.g. one per episode) is written back to back without being concatenated.
        fps: frames per second.
        codec: PyAV encoder name; ``libsvtav1`` (AV1) is LeRobot's default, ``libx264`` (H.264) another choice.
            Only the codec asked for is used: a missing encoder is an error, never a silent fallback.

    Raises:
        ValueError: for frames of another shape or dtype, odd sizes, a missing encoder, or one that refuses the size.
        ImportError: when PyAV is missing.
    """
    av = import_av()
    chunks = [frames] if isinstance(frames, np.ndarray) else list(frames)
    for chunk in chunks:
        if chunk.ndim != 4 or chunk.shape[-1] != 3 or chunk.dtype != np.uint8 or chunk.shape[0] == 0:
            raise ValueError(
                f"Video frames must be uint8 [F, H, W, 3] with F >= 1, got {chunk.dtype} {list(chunk.shape)}."
            )
    sizes = {tuple(chunk.shape[1:3]) for chunk in chunks}
    if len(sizes) != 1:
        raise ValueError(f"All frames of one video need one size, got {sorted(sizes)}.")
    height, width = sizes.pop()
    if height % 2 or width % 2:
        raise ValueError(f"Video frames need an even height and width ({PIX_FMT}), got {height}x{width}; crop or pad.")
    check_encoder(codec)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _calling_thread_scheduling_kept(), av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=int(fps), options=_codec_options(codec))
        stream.width, stream.height, stream.pix_fmt = width, height, PIX_FMT
        time_base = Fraction(1, int(fps))
        try:
            for i, image in enumerate(image for chunk in chunks for image in chunk):
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
                frame.pts, frame.time_base = i, time_base
                container.mux(stream.encode(frame))
            container.mux(stream.encode())
        except av.error.FFmpegError as err:
            raise ValueError(
                f"Encoder '{codec}' failed on {height}x{width} frames ({err}); try another codec."
            ) from None


def video_info(path: str | Path) -> dict[str, Any]:
    """The ``info`` entry LeRobot stores with a video feature in ``meta/info.json`` (read from the file)."""
    av = import_av()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {
            "video.height": int(stream.height),
            "video.width": int(stream.width),
            "video.codec": stream.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(stream.base_rate),
            "video.channels": 3,
            "has_audio": len(container.streams.audio) > 0,
        }


def decode_frames(path: str | Path, timestamps: np.ndarray, tolerance_s: float = TIMESTAMP_TOLERANCE_S) -> np.ndarray:
    """Frames of an MP4 file at ``timestamps`` (seconds from the file's start).

    Decodes from the keyframe before the earliest timestamp to the latest one, keeping only requested frames, so
    memory is that of the output.

    Args:
        path: the video file.
        timestamps: ``[K]`` seconds, any order (repeats allowed).
        tolerance_s: largest distance between a requested time and the decoded frame's time.

    Returns:
        ``[K, H, W, 3]`` uint8 RGB.

    Raises:
        ValueError: for no timestamps, when a requested time has no frame within ``tolerance_s`` (the file does not
            match the dataset's episode metadata), or the file cannot be decoded.
    """
    av = import_av()
    times = np.asarray(timestamps, dtype=np.float64).reshape(-1)
    if times.size == 0:
        raise ValueError(f"No timestamps to decode from '{path}'; ask for at least one frame.")
    order = np.argsort(times, kind="stable")
    wanted = times[order]
    out: np.ndarray | None = None
    filled = np.zeros(len(times), dtype=bool)
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            if wanted[0] > tolerance_s:
                container.seek(int((wanted[0] - tolerance_s) / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                t = float(frame.pts * stream.time_base)
                lo = np.searchsorted(wanted, t - tolerance_s, side="left")
                hi = np.searchsorted(wanted, t + tolerance_s, side="right")
                if hi > lo:
                    image = frame.to_ndarray(format="rgb24")
                    if out is None:
                        out = np.empty((len(times), *image.shape), dtype=np.uint8)
                    out[order[lo:hi]] = image
                    filled[order[lo:hi]] = True
                if t > wanted[-1] + tolerance_s:
                    break
    except av.error.FFmpegError as err:
        raise ValueError(f"Cannot decode video '{path}' ({err}); re-download or re-record the dataset.") from err
    if not filled.all() or out is None:
        missing = times[~filled][:5].round(4).tolist()
        raise ValueError(
            f"Video '{path}' has no frame within {tolerance_s} s of times {missing} (seconds from its start) that the "
            "episodes metadata asks for; the video does not match meta/episodes (re-download or re-record the dataset)."
        )
    return out
