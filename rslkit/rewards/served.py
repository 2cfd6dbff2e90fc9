"""A VLAC-class progress critic served behind an OpenAI-compatible chat endpoint (vLLM, LMDeploy, ms-swift).

:class:`ServedProgressCritic` implements :class:`~rslkit.rewards.contract.ProgressCritic` by asking a served
vision-language model, over HTTP, VLAC's pairwise-progress question for each pair ``(obs_a[i], obs_b[i])`` and its
done question for ``obs_b[i]`` (the prompts and the answer parsing are in :mod:`rslkit.rewards.served_prompts`,
which cites their source). One request is one ``POST {base_url}/chat/completions``::

    {"model": cfg.model, "temperature": 0.5, "top_k": 1, "max_tokens": 32,
     "messages": [{"role": "system", "content": VLAC's system prompt},
                  {"role": "user", "content": [{"type": "text", "text": "Image-1: "},
                                               {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}},
                                               {"type": "text", "text": "\\nImage-2: "}, ...]}]}

Images come from the observation groups ``camera_<name>`` named by ``cfg.cameras`` (uint8 ``[B, H, W, 3]``); with
several cameras a frame is their images side by side, left to right in ``cfg.cameras`` order. ``top_k`` is not an
OpenAI field: vLLM, LMDeploy and ms-swift read it as an extra sampling parameter (``None`` leaves it out).

One-shot mode: ``reference`` frames ``[R]`` (a demonstration of the same goal, in time order, at most
``cfg.max_reference_frames`` of them, evenly subsampled as VLAC does) go first in the progress prompt, labelled
``0% ... 100%``, followed by the trajectory beginning and the pair. rslkit's pairs carry no episode start, so
``obs_a`` stands in for it (the pair is scored as if the episode began at ``obs_a``). The done question then shows
the last reference frame as the goal image before ``obs_b``.

Not on the control path: a call blocks until every answer is in (each request bounded by ``cfg.timeout_s`` and
``cfg.retries``), so call it from a worker thread, as the real-world actor calls its reward plug-in from the spool
writer thread (:mod:`rslkit.realworld.rewards`). The critic is thread-safe: one instance may serve several threads,
which share its connection pool, its concurrency bound and its cache. A plug-in ``f(batch) -> rewards [N]`` would
build one critic at import, turn ``batch.obs`` / ``batch.next_obs`` into TensorDicts ``[N]`` and return
``critic.score(obs, next_obs, goal).delta.numpy()`` (or a reward shaped from it).

rslkit never bundles or downloads VLAC's weights (their licence is non-commercial): the user serves them.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from tensordict import TensorDict

from rslkit.envs.camera_groups import camera_group
from rslkit.rewards.contract import ProgressCritic, ProgressScore, check_pair, goals_for_batch
from rslkit.rewards.served_prompts import (
    IMAGE_TAG,
    SYSTEM_PROMPT,
    ServedCriticError,
    done_prompt,
    parse_done,
    parse_progress,
    progress_prompt,
    quote,
    split_on_images,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["ServedCriticCfg", "ServedCriticError", "ServedProgressCritic"]


@dataclass
class ServedCriticCfg:
    """How to reach the served critic and what to send it."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """The ``/v1`` root of the OpenAI-compatible server (vLLM's default port 8000; LMDeploy's is 23333)."""
    model: str = "VLAC"
    """The served model name (vLLM ``--served-model-name``, LMDeploy ``--model-name``)."""
    cameras: tuple[str, ...] = ("front",)
    """Bare camera names; their groups ``camera_<name>`` are sent, side by side when there are several."""
    image_size: int | None = 448
    """Each camera image is resized to this square size before sending (VLAC resizes to 448x448); None: as is."""
    image_format: Literal["png", "jpeg"] = "png"
    """Encoding of the base64 data URLs (PNG is lossless)."""
    inline_image_tags: bool = False
    """False: text and image parts interleaved where the prompt's ``<image>`` tags are (the OpenAI way, which ms-swift
    maps back to tags in place). True: the whole prompt, tags included, as one text part, then the images: for a
    server that expands ``<image>`` tags written in the text and would otherwise gather all images at the start."""
    system_prompt: str | None = SYSTEM_PROMPT
    """VLAC's system prompt; None sends no system message."""
    temperature: float = 0.5
    """Sampling temperature (VLAC's examples: 0.5 with top-k 1, i.e. greedy)."""
    top_k: int | None = 1
    """Top-k sampling, an extra parameter of vLLM/LMDeploy/ms-swift; None leaves it out (strict OpenAI servers)."""
    max_tokens: int = 32
    """Answer length cap: VLAC answers a number."""
    timeout_s: float = 10.0
    """Deadline of one request, from sending to the last byte of the answer (checked as bytes arrive; no single
    wait for the server, connecting or reading, lasts longer)."""
    retries: int = 2
    """Further attempts after a timeout, a connection error, HTTP 429 or 5xx (other 4xx and bad answers: none)."""
    backoff_s: float = 0.5
    """Wait before the first retry; doubled for each further one (or the server's Retry-After, if longer)."""
    backoff_max_s: float = 8.0
    """Cap on any wait between attempts."""
    max_concurrency: int = 8
    """Requests in flight at once, over all threads that share this critic (the B pairs of a call go out together)."""
    cache_size: int = 4096
    """Answers kept (LRU), keyed on the image bytes, the prompt (goal included), its kind and the request settings;
    0 disables the cache."""
    max_reference_frames: int = 9
    """At most this many reference frames are sent (VLAC's default ``ref_num``; its README allows up to 11)."""
    api_key_env: str | None = "RSLKIT_CRITIC_API_KEY"
    """Environment variable holding the API key sent as ``Authorization: Bearer``; unset or None: no key. The key is
    read once and never logged."""
    max_response_bytes: int = 1 << 20
    """A larger answer is an error (a VLAC answer is a few bytes)."""

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {self.base_url!r}."
            )
        if not self.cameras:
            raise ValueError("cameras must name at least one camera (e.g. ('front',) for the group camera_front).")
        for name in self.cameras:
            camera_group(name)  # raises on an empty or prefixed name
        positive = {"timeout_s": self.timeout_s, "max_concurrency": self.max_concurrency}
        positive |= {"max_tokens": self.max_tokens, "max_response_bytes": self.max_response_bytes}
        for field, value in positive.items():
            if value <= 0:
                raise ValueError(f"ServedCriticCfg.{field} must be positive, got {value}.")
        if self.retries < 0 or self.cache_size < 0 or self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ValueError("retries, cache_size, backoff_s and backoff_max_s must be >= 0.")
        if self.image_size is not None and self.image_size <= 0:
            raise ValueError(f"image_size must be positive or None (send as is), got {self.image_size}.")
        if self.max_reference_frames < 2:
            raise ValueError(f"max_reference_frames must be >= 2 (start and goal), got {self.max_reference_frames}.")
        if self.image_format not in ("png", "jpeg"):
            raise ValueError(f"image_format must be 'png' or 'jpeg', got {self.image_format!r}.")


@dataclass(frozen=True, eq=False)
class _Frame:
    """One observation's camera images ``(H, W, 3)`` uint8, one per camera, and a digest of their bytes."""

    views: tuple[np.ndarray, ...]
    digest: bytes

    @classmethod
    def of(cls, views: tuple[np.ndarray, ...]) -> _Frame:
        h = hashlib.sha256()
        for view in views:
            h.update(repr(view.shape).encode())
            h.update(np.ascontiguousarray(view).tobytes())
        return cls(views, h.digest())


@dataclass(frozen=True)
class _Job:
    """One question: its kind (``progress`` or ``done``), its prompt and the frames its ``<image>`` tags stand for."""

    kind: Literal["progress", "done"]
    prompt: str
    frames: tuple[_Frame, ...]


class _DeadlineExceeded(Exception):
    """The answer did not arrive in full within ``timeout_s``."""


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError as err:
        raise ImportError("ServedProgressCritic talks HTTP through httpx: pip install -e '.[rewards]'") from err
    return httpx


class ServedProgressCritic(ProgressCritic):
    """A :class:`~rslkit.rewards.contract.ProgressCritic` whose model runs behind an OpenAI-compatible chat endpoint.

    Thread-safe; blocking (never call it from a control loop). Close it (or use it as a context manager) to release
    its connections and worker threads.
    """

    def __init__(self, cfg: ServedCriticCfg | None = None) -> None:
        self.cfg = cfg or ServedCriticCfg()
        self._httpx = _import_httpx()
        self.url = self.cfg.base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.cfg.api_key_env) if self.cfg.api_key_env else None
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        n = self.cfg.max_concurrency
        # trust_env=False: requests go where base_url says, never through a proxy from the environment.
        self._client: httpx.Client = self._httpx.Client(
            timeout=self._httpx.Timeout(self.cfg.timeout_s),
            limits=self._httpx.Limits(max_connections=n, max_keepalive_connections=n),
            trust_env=False,
        )
        self._pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="served-critic")
        self._cache: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    # ---- the contract ------------------------------------------------------------------------------------------

    def score(
        self,
        obs_a: TensorDict,
        obs_b: TensorDict,
        goal: str | Sequence[str],
        reference: TensorDict | None = None,
    ) -> ProgressScore:
        """Signed progress from ``obs_a`` to ``obs_b`` and the done probability of ``obs_b``, asked of the server.

        Args:
            obs_a, obs_b: observations ``[B]`` holding the groups ``camera_<name>`` of ``cfg.cameras``.
            goal: the language goal, one for the batch or one per pair.
            reference: optional frames ``[R]``, ``R >= 2``, of a demonstration of the goal (one-shot mode).

        Returns:
            ``ProgressScore`` with ``delta [B]`` (VLAC's percent / 100) and ``done [B]``, float32 on the images' device.

        Raises:
            ValueError: missing camera groups, images that are not uint8 ``[B, H, W, 3]``, mismatched pairs or goals.
            ServedCriticError: no answer within the deadline after the retries, an HTTP error, or an answer that is
                not a score.
        """
        if self._closed:
            raise RuntimeError("This ServedProgressCritic is closed; make a new one.")
        batch = check_pair(obs_a, obs_b)
        goals = goals_for_batch(goal, batch)
        if any(IMAGE_TAG in g for g in goals):
            raise ValueError(f"A goal must not contain {IMAGE_TAG!r}: it marks where images go in the prompt.")
        frames_a, frames_b = self._frames(obs_a, "obs_a"), self._frames(obs_b, "obs_b")
        ref = self._reference(reference)
        jobs: dict[bytes, _Job] = {}
        progress_keys, done_keys = [], []
        for i in range(batch):
            pair = (*ref, frames_a[i], frames_a[i], frames_b[i]) if ref else (frames_a[i], frames_b[i])
            progress_keys.append(self._add(jobs, _Job("progress", progress_prompt(goals[i], len(ref)), pair)))
            seen = (ref[-1], frames_b[i]) if ref else (frames_b[i],)
            done_keys.append(self._add(jobs, _Job("done", done_prompt(goals[i], goal_image=bool(ref)), seen)))
        answers = self._answer(jobs)
        device = obs_b[camera_group(self.cfg.cameras[0])].device
        delta = torch.tensor([answers[k] for k in progress_keys], dtype=torch.float32, device=device)
        done = torch.tensor([answers[k] for k in done_keys], dtype=torch.float32, device=device)
        return ProgressScore(delta=delta, done=done)

    def close(self) -> None:
        """Release the connection pool and the worker threads (waits for requests in flight)."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()

    def __enter__(self) -> ServedProgressCritic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- observations to frames --------------------------------------------------------------------------------

    def _frames(self, obs: TensorDict, name: str) -> list[_Frame]:
        """One :class:`_Frame` per row of ``obs``.

        Raises:
            ValueError: a camera group missing, or images that are not uint8 ``[B, H, W, 3]``.
        """
        groups = [camera_group(c) for c in self.cfg.cameras]
        present = sorted(str(k) for k in obs.keys())
        missing = [g for g in groups if g not in present]
        if missing:
            raise ValueError(
                f"{name} lacks the camera group(s) {missing}; it holds {present}. Set ServedCriticCfg.cameras to the "
                "bare names of cameras it has (e.g. 'front' for the group 'camera_front')."
            )
        views = [self._images(obs[g], f"{name}[{g!r}]") for g in groups]
        if self.cfg.image_size is None and len({v.shape[1] for v in views}) > 1:
            raise ValueError(
                f"{name}: cameras {list(self.cfg.cameras)} have different heights {[v.shape[1] for v in views]}; "
                "set ServedCriticCfg.image_size so they can be placed side by side."
            )
        return [_Frame.of(tuple(v[i] for v in views)) for i in range(views[0].shape[0])]

    @staticmethod
    def _images(images: torch.Tensor, name: str) -> np.ndarray:
        """``images`` as a numpy array ``[N, H, W, 3]`` uint8 (raises ``ValueError`` on another dtype or shape)."""
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(
                f"{name} must hold uint8 RGB images [N, H, W, 3], got {images.dtype} {tuple(images.shape)}."
            )
        return images.detach().cpu().numpy()

    def _reference(self, reference: TensorDict | None) -> tuple[_Frame, ...]:
        """The reference frames sent, evenly subsampled to ``cfg.max_reference_frames`` with first and last kept.

        Raises:
            ValueError: a reference that is not ``[R]`` with ``R >= 2``, or lacks a camera group.
        """
        if reference is None:
            return ()
        if len(reference.batch_size) != 1 or reference.batch_size[0] < 2:
            raise ValueError(
                f"reference must be frames [R] with R >= 2 (a demonstration from start to goal), got batch size "
                f"{tuple(reference.batch_size)}."
            )
        frames = self._frames(reference, "reference")
        n = min(len(frames), self.cfg.max_reference_frames)
        step = (len(frames) - 1) / (n - 1)
        return tuple(frames[int(i * step)] for i in range(n - 1)) + (frames[-1],)

    def _data_url(self, frame: _Frame) -> str:
        """``frame`` encoded as a base64 data URL: each camera resized to ``image_size``, cameras side by side."""
        from PIL import Image

        size = self.cfg.image_size
        images = [Image.fromarray(v) for v in frame.views]
        if size is not None:
            images = [im.resize((size, size), Image.Resampling.LANCZOS) for im in images]
        canvas = Image.new("RGB", (sum(im.width for im in images), images[0].height))
        x = 0
        for im in images:
            canvas.paste(im, (x, 0))
            x += im.width
        buffer = io.BytesIO()
        canvas.save(buffer, format=self.cfg.image_format.upper())
        return f"data:image/{self.cfg.image_format};base64," + base64.b64encode(buffer.getvalue()).decode("ascii")

    # ---- jobs, cache and concurrency ---------------------------------------------------------------------------

    def _add(self, jobs: dict[bytes, _Job], job: _Job) -> bytes:
        """Add ``job`` to ``jobs`` under its cache key (identical questions in one call are asked once)."""
        h = hashlib.sha256()
        settings = (job.kind, self.cfg.model, self.cfg.system_prompt, self.cfg.image_size, self.cfg.image_format)
        h.update(repr((settings, self.cfg.inline_image_tags, self.cfg.temperature, self.cfg.top_k)).encode())
        h.update(job.prompt.encode())
        for frame in job.frames:
            h.update(frame.digest)
        key = h.digest()
        jobs.setdefault(key, job)
        return key

    def _answer(self, jobs: dict[bytes, _Job]) -> dict[bytes, float]:
        """The parsed answer of every job: from the cache, or asked concurrently (at most ``max_concurrency``)."""
        out: dict[bytes, float] = {}
        with self._lock:
            for key in jobs:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    out[key] = self._cache[key]
        futures: dict[Future[float], bytes] = {
            self._pool.submit(self._ask, job): key for key, job in jobs.items() if key not in out
        }
        try:
            # No timeout here: every request is bounded by its deadline and the retries.
            for future in as_completed(futures):
                key = futures[future]
                out[key] = future.result()
                self._remember(key, out[key])
        finally:
            for future in futures:
                future.cancel()
        return out

    def _remember(self, key: bytes, value: float) -> None:
        if self.cfg.cache_size == 0:
            return
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            while len(self._cache) > self.cfg.cache_size:
                self._cache.popitem(last=False)

    def _ask(self, job: _Job) -> float:
        """Send ``job`` and parse the answer (runs in a worker thread)."""
        text = self._post(json.dumps(self._body(job)).encode())
        return parse_progress(text) if job.kind == "progress" else parse_done(text)

    def _body(self, job: _Job) -> dict[str, Any]:
        """The chat-completions request of ``job``."""
        images = [{"type": "image_url", "image_url": {"url": self._data_url(f)}} for f in job.frames]
        content: list[dict[str, Any]]
        if self.cfg.inline_image_tags:
            content = [{"type": "text", "text": job.prompt}, *images]
        else:
            content = []
            for i, text in enumerate(split_on_images(job.prompt)):
                if i:
                    content.append(images[i - 1])
                if text:
                    content.append({"type": "text", "text": text})
        messages: list[dict[str, Any]] = []
        if self.cfg.system_prompt:
            messages.append({"role": "system", "content": self.cfg.system_prompt})
        messages.append({"role": "user", "content": content})
        body: dict[str, Any] = {"model": self.cfg.model, "messages": messages}
        body |= {"temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens}
        if self.cfg.top_k is not None:
            body["top_k"] = self.cfg.top_k
        return body

    # ---- HTTP ----------------------------------------------------------------------------------------------------

    def _post(self, payload: bytes) -> str:
        """The answer text to ``payload``, with retries.

        Raises:
            ServedCriticError: timeouts or connection errors on every attempt, a 4xx other than 429, a 429/5xx on the
                last attempt, or a body that is not a chat completion.
        """
        attempts = self.cfg.retries + 1
        last, wait = "", 0.0
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(self.cfg.backoff_max_s, max(wait, self.cfg.backoff_s * 2 ** (attempt - 1))))
            wait = 0.0
            try:
                status, raw, wait = self._send(payload)
            except (self._httpx.TimeoutException, _DeadlineExceeded) as err:
                last = f"no complete answer within the {self.cfg.timeout_s:g} s deadline ({type(err).__name__})"
                continue
            except self._httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
                continue
            if status == 200:
                return self._content(raw)
            if status == 429 or status >= 500:
                last = f"HTTP {status}: {quote(raw)}"
                continue
            raise ServedCriticError(self._client_error(status, raw))
        raise ServedCriticError(
            f"No answer from {self.url} after {attempts} attempt(s), each with a {self.cfg.timeout_s:g} s deadline "
            f"(last: {last}). Is the server up and serving {self.cfg.model!r}? Raise ServedCriticCfg.timeout_s or "
            "retries for a slow server."
        )

    def _send(self, payload: bytes) -> tuple[int, bytes, float]:
        """One attempt: ``(status, body, retry_after_s)``; the body read in full before the deadline.

        Raises:
            _DeadlineExceeded, httpx.TimeoutException, httpx.TransportError: no complete answer in time.
            ServedCriticError: an answer larger than ``max_response_bytes``.
        """
        deadline = time.monotonic() + self.cfg.timeout_s
        with self._client.stream("POST", self.url, content=payload, headers=self._headers) as response:
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > self.cfg.max_response_bytes:
                    raise ServedCriticError(
                        f"{self.url} answered more than {self.cfg.max_response_bytes} bytes; a VLAC answer is a "
                        f"number. Start of the answer: {quote(b''.join(chunks))}."
                    )
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise _DeadlineExceeded()
            if time.monotonic() > deadline:
                raise _DeadlineExceeded()
            return response.status_code, b"".join(chunks), _retry_after(response.headers.get("retry-after"))

    def _content(self, raw: bytes) -> str:
        """``choices[0].message.content`` of a chat-completion body (raises :class:`ServedCriticError` otherwise)."""
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except ValueError as err:
            raise ServedCriticError(
                f"{self.url} answered HTTP 200 with a body that is not JSON ({err}): {quote(raw)}. Is base_url the "
                "/v1 root of an OpenAI-compatible server?"
            ) from err
        except (KeyError, IndexError, TypeError) as err:
            raise ServedCriticError(
                f"{self.url} answered JSON without choices[0].message.content: {quote(raw)}. Is it a chat-completions "
                "endpoint?"
            ) from err
        if not isinstance(content, str):
            raise ServedCriticError(f"{self.url} answered a message content that is not text: {quote(raw)}.")
        return content

    def _client_error(self, status: int, raw: bytes) -> str:
        """The message of an HTTP error that is not retried."""
        head = f"{self.url} refused the request with HTTP {status}: {quote(raw)}."
        if status in (401, 403):
            where = (
                f"the environment variable {self.cfg.api_key_env}"
                if self.cfg.api_key_env
                else "an environment variable named by ServedCriticCfg.api_key_env"
            )
            return f"{head} The server wants an API key: put it in {where}."
        return (
            f"{head} Not retried: check base_url, the model name ({self.cfg.model!r}) and the server's limits "
            "(e.g. vLLM's --limit-mm-per-prompt for the images per request)."
        )


def _retry_after(value: str | None) -> float:
    """Seconds of a numeric ``Retry-After`` header (0 when absent or a date)."""
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0
