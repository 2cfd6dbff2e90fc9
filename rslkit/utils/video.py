"""Write RGB frames to an H.264 mp4 (imageio with its bundled ffmpeg, from the ``render`` extra)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

_INSTALL_HINT = "install the video writer with `pip install -e '.[render]'` (imageio, imageio-ffmpeg)"


class Mp4Writer:
    """Streams frames ``[H, W, 3]`` uint8 (all the same, even size) to ``path`` at ``fps`` frames per second.

    Use as a context manager; :attr:`frames` counts the frames written.

    Raises:
        ValueError: the path does not end in ``.mp4``, ``fps`` is not positive, or a frame has the wrong shape,
            dtype or an odd size (H.264 in yuv420p needs even sizes).
        ImportError: imageio / imageio-ffmpeg are missing (the message says how to install them).
    """

    def __init__(self, path: str | Path, fps: float) -> None:
        self.path = Path(path)
        if self.path.suffix.lower() != ".mp4":
            raise ValueError(f"Video path must end in .mp4, got '{self.path}'.")
        if fps <= 0:
            raise ValueError(f"fps must be > 0, got {fps}.")
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401  (the ffmpeg binary imageio's FFMPEG plugin runs)
        except ImportError as err:
            raise ImportError(f"Writing mp4 needs imageio and imageio-ffmpeg ({err}); {_INSTALL_HINT}.") from err
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fps = fps
        self.frames = 0
        self._shape: tuple[int, ...] | None = None
        self._writer = imageio.get_writer(
            str(self.path), format="FFMPEG", fps=fps, codec="libx264", macro_block_size=1, quality=7
        )

    def append(self, frame: np.ndarray) -> None:
        """Add one RGB frame ``[H, W, 3]`` uint8."""
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"Frames must be [H, W, 3] uint8, got {list(frame.shape)} {frame.dtype}.")
        if self._shape is None:
            if frame.shape[0] % 2 or frame.shape[1] % 2:
                raise ValueError(f"Frame size must be even for H.264, got {frame.shape[1]}x{frame.shape[0]}.")
            self._shape = frame.shape
        elif frame.shape != self._shape:
            raise ValueError(f"All frames must have shape {list(self._shape)}, got {list(frame.shape)}.")
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        """Finish the file (it is only a valid mp4 after this)."""
        self._writer.close()

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
