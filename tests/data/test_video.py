"""MP4 camera streams (rslkit.data.video): encode, decode by timestamp, codec choice, and the errors bad input gets."""

import sys
import types

import numpy as np
import pytest

import rslkit.data.video as video_module
from rslkit.data.video import check_encoder, decode_frames, encode_video, import_av, video_info

FPS = 10


def _frames(n=12, height=16, width=24):
    """Smooth pictures whose red level steps by 15 per frame: a frame decoded one step off is far from its source."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack(
        [
            np.clip(np.stack([20 + 3 * x + 15 * t, 40 + 6 * y, 200 - 2 * x - 3 * y + 5 * t], -1), 0, 255)
            for t in range(n)
        ]
    ).astype(np.uint8)


def _close(decoded, source):
    """Lossy codecs (4:2:0 chroma, CRF 30) keep these pictures within a few levels."""
    diff = np.abs(decoded.astype(np.int16) - source.astype(np.int16))
    return diff.mean() < 4 and diff.max() < 40


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    path = tmp_path_factory.mktemp("video") / "front.mp4"
    frames = _frames()
    encode_video(path, frames, FPS)
    return path, frames


def test_round_trip_at_timestamps(video):
    path, frames = video
    times = np.arange(len(frames)) / FPS
    decoded = decode_frames(path, times)
    assert decoded.shape == frames.shape and decoded.dtype == np.uint8
    assert _close(decoded, frames)
    shifted = np.abs(decoded[1:].astype(np.int16) - frames[:-1]).mean()
    assert shifted > 5  # the test can tell a frame from its neighbour


def test_any_order_repeats_and_a_late_start(video):
    path, frames = video
    full = decode_frames(path, np.arange(len(frames)) / FPS)
    picks = np.array([9, 3, 3, 11, 7])
    # float32 timestamps plus an episode's from_timestamp, as a dataset asks for them
    times = np.float32(picks / FPS).astype(np.float64)
    np.testing.assert_array_equal(decode_frames(path, times), full[picks])
    np.testing.assert_array_equal(decode_frames(path, np.array([0.7, 0.8])), full[[7, 8]])  # seeks past 0


def test_video_info_matches_lerobot_keys(video):
    info = video_info(video[0])
    assert info == {
        "video.height": 16,
        "video.width": 24,
        "video.codec": "av1",
        "video.pix_fmt": "yuv420p",
        "video.is_depth_map": False,
        "video.fps": FPS,
        "video.channels": 3,
        "has_audio": False,
    }


def test_other_codec_only_when_asked(tmp_path):
    frames = _frames(4)
    encode_video(tmp_path / "h264.mp4", frames, FPS, codec="libx264")
    assert video_info(tmp_path / "h264.mp4")["video.codec"] == "h264"
    assert _close(decode_frames(tmp_path / "h264.mp4", np.arange(4) / FPS), frames)
    with pytest.raises(ValueError, match="no video encoder 'libnope'.*libsvtav1"):
        encode_video(tmp_path / "x.mp4", frames, FPS, codec="libnope")
    with pytest.raises(ValueError, match="'aac' is a audio codec"):
        check_encoder("aac")
    assert not (tmp_path / "x.mp4").exists()


@pytest.mark.parametrize(
    "frames, match",
    [
        (np.zeros((3, 16, 24, 3), np.float32), "uint8"),
        (np.zeros((3, 16, 24), np.uint8), r"\[F, H, W, 3\]"),
        (np.zeros((0, 16, 24, 3), np.uint8), "F >= 1"),
        (np.zeros((3, 15, 24, 3), np.uint8), "even height and width.*15x24"),
    ],
    ids=["float", "no_channels", "empty", "odd"],
)
def test_bad_frames(tmp_path, frames, match):
    with pytest.raises(ValueError, match=match):
        encode_video(tmp_path / "bad.mp4", frames, FPS)


def test_decode_errors(video, tmp_path):
    path, frames = video
    with pytest.raises(ValueError, match=r"no frame within 0.0001 s of times \[1.2\].*re-record"):
        decode_frames(path, np.array([0.1, 1.2]))
    with pytest.raises(ValueError, match=r"no frame within .* of times \[0.15\]"):
        decode_frames(path, np.array([0.15]))
    with pytest.raises(ValueError, match="No timestamps"):
        decode_frames(path, np.array([]))
    (tmp_path / "junk.mp4").write_bytes(b"not a video" * 10)
    with pytest.raises(ValueError, match="Cannot decode video .*junk.mp4"):
        decode_frames(tmp_path / "junk.mp4", np.array([0.0]))


def test_missing_pyav_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[video\]'"):
        import_av()


def test_episodes_back_to_back_without_concatenating(tmp_path):
    frames = _frames(9)
    encode_video(tmp_path / "whole.mp4", frames, FPS)
    encode_video(tmp_path / "parts.mp4", [frames[:4], frames[4:]], FPS)
    times = np.arange(9) / FPS
    np.testing.assert_array_equal(
        decode_frames(tmp_path / "parts.mp4", times), decode_frames(tmp_path / "whole.mp4", times)
    )
    with pytest.raises(ValueError, match=r"one size, got \[\(8, 24\), \(16, 24\)\]"):
        encode_video(tmp_path / "x.mp4", [frames[:2], frames[2:4, :8]], FPS)


def test_encoder_that_refuses_the_frames(tmp_path, monkeypatch):
    # Which sizes an encoder refuses changes between PyAV / SVT-AV1 releases (2x2 fails in some, not in 18.1), so the
    # refusal is made here: every frame fails as an FFmpeg error, which must become a ValueError naming the fix.
    av = import_av()

    class RefusedFrame:
        @staticmethod
        def from_ndarray(*_args, **_kwargs):
            raise av.error.FFmpegError(22, "Invalid argument")

    fake = types.SimpleNamespace(open=av.open, codec=av.codec, VideoFrame=RefusedFrame, error=av.error)
    monkeypatch.setattr(video_module, "import_av", lambda: fake)
    with pytest.raises(ValueError, match="Encoder 'libsvtav1' failed on 2x2 frames .*try another codec"):
        encode_video(tmp_path / "tiny.mp4", np.zeros((3, 2, 2, 3), np.uint8), FPS)


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getscheduler"), reason="Linux scheduling API")
def test_encoding_leaves_the_calling_threads_scheduling_alone(tmp_path):
    # SVT-AV1 run as root switches the thread that opens the encoder to SCHED_FIFO; encode_video must undo it.
    import os

    before = os.sched_getscheduler(0)
    frames = np.random.default_rng(0).integers(0, 255, (6, 32, 32, 3), dtype=np.uint8)
    encode_video(tmp_path / "a.mp4", frames, fps=10)
    assert os.sched_getscheduler(0) == before
