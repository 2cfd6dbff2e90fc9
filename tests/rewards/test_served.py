"""The served-critic adapter against a fake OpenAI-compatible server on loopback, and its prompts and parsers.

The fake server plays a VLAC-like critic whose judgement can be checked by hand: an image is a flat grey of value
``v`` (0..100), progress from ``a`` to ``b`` is ``v_b - v_a`` percent, and ``b`` is done when ``v_b >= 90``. Socket
tests use the ``server`` fixture, which skips outside a private network namespace (see conftest.py).
"""

from __future__ import annotations

import base64
import io
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import torch
from PIL import Image
from tensordict import TensorDict

from rslkit.rewards.contract import ProgressCritic
from rslkit.rewards.served import ServedCriticCfg, ServedCriticError, ServedProgressCritic
from rslkit.rewards.served_prompts import (
    SYSTEM_PROMPT,
    done_prompt,
    parse_done,
    parse_progress,
    progress_prompt,
    split_on_images,
)

Reply = tuple[int, bytes, float]
"""What the fake server answers: (HTTP status, body, seconds to wait before answering)."""


def completion(text: str) -> bytes:
    """A chat-completions body whose answer is ``text``."""
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    return json.dumps({"id": "fake", "object": "chat.completion", "choices": [choice]}).encode()


def images_of(body: dict[str, Any]) -> list[Image.Image]:
    """The images of a request, decoded from their data URLs, in order."""
    parts = body["messages"][-1]["content"]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    return [Image.open(io.BytesIO(base64.b64decode(u.split(",", 1)[1]))) for u in urls]


def grey(image: Image.Image) -> int:
    """The value of a flat grey image (top-left pixel, red channel)."""
    return int(image.convert("RGB").getpixel((0, 0))[0])


def text_of(body: dict[str, Any]) -> str:
    return "".join(p["text"] for p in body["messages"][-1]["content"] if p["type"] == "text")


def vlac_like(body: dict[str, Any]) -> Reply:
    """The fake critic: progress ``v_b - v_a`` percent, done when ``v_b >= 90``."""
    images = images_of(body)
    if "<score>" in text_of(body):
        return 200, completion(f"{grey(images[-1]) - grey(images[-2])}"), 0.0
    return 200, completion("1" if grey(images[-1]) >= 90 else "0"), 0.0


class FakeServer:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that records requests and counts those in flight."""

    def __init__(self) -> None:
        self.reply: Callable[[dict[str, Any]], Reply] = vlac_like
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.auth: list[str | None] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.base_url = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests.append(body)
                    fake.paths.append(self.path)
                    fake.auth.append(self.headers.get("Authorization"))
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    status, payload, delay = fake.reply(body)
                    fake.stop.wait(delay)
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)
                finally:
                    with fake.lock:
                        fake.in_flight -= 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def server(netns: None, request: pytest.FixtureRequest) -> FakeServer:
    fake = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"

    def shut_down() -> None:
        fake.stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5.0)
        assert not thread.is_alive(), "the fake server did not stop"

    request.addfinalizer(shut_down)
    return fake


@pytest.fixture
def make_critic(server: FakeServer) -> Iterator[Callable[..., ServedProgressCritic]]:
    """``make_critic(**cfg)``: a critic on the fake server (small images, quick retries), closed after the test."""
    made: list[ServedProgressCritic] = []

    def make(**overrides: Any) -> ServedProgressCritic:
        cfg = dict(base_url=server.base_url, image_size=8, timeout_s=5.0, backoff_s=0.01, backoff_max_s=0.05)
        made.append(ServedProgressCritic(ServedCriticCfg(**(cfg | overrides))))
        return made[-1]

    yield make
    for critic in made:
        critic.close()


def obs(*values: int, size: int = 6) -> TensorDict:
    """Observations ``[B]``: camera ``front`` flat grey of each value, and a vector group."""
    images = torch.tensor(values, dtype=torch.uint8).view(-1, 1, 1, 1).expand(-1, size, size, 3).contiguous()
    return TensorDict({"camera_front": images, "policy": torch.zeros(len(values), 4)}, batch_size=[len(values)])


# ---- prompts and parsers (no sockets) -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("35", 0.35),
        ("-12.5", -0.125),
        ("+20%", 0.2),
        ("<score> -40 </score>", -0.4),
        ("Image-2 is closer to the goal: 15", 0.15),
        ("<think>the first image is at 80% already</think> -5", -0.05),
        ("100", 1.0),
        ("-100%", -1.0),
    ],
)
def test_progress_answers_in_several_styles(answer: str, expected: float) -> None:
    assert parse_progress(answer) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [("1", 1.0), ("0", 0.0), ("0.85", 0.85), ("90%", 0.9), ("Yes, it is done.", 1.0), ("no.", 0.0), ("False", 0.0)],
)
def test_done_mapping(answer: str, expected: float) -> None:
    assert parse_done(answer) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("parse", "answer", "message"),
    [
        (parse_progress, "I cannot tell from these images", "holds no number"),
        (parse_progress, "250", "outside [-100, 100]"),
        (parse_done, "3", "outside [0, 1]"),
        (parse_done, "150%", "outside [0, 100] %"),
        (parse_done, "maybe", "neither a number nor yes/no"),
    ],
)
def test_answers_that_are_not_scores_raise_quoting_them(
    parse: Callable[[str], float], answer: str, message: str
) -> None:
    with pytest.raises(ServedCriticError, match=re.escape(message)) as err:
        parse(answer)
    assert repr(answer) in str(err.value)


def test_long_garbage_is_quoted_truncated() -> None:
    with pytest.raises(ServedCriticError, match=r"\(\+800 more characters\)") as err:
        parse_progress("x" * 1000)
    assert "x" * 200 in str(err.value) and "x" * 201 not in str(err.value)


def test_prompts_place_their_images() -> None:
    assert len(split_on_images(progress_prompt("lift the cube"))) == 3  # a, b
    one_shot = progress_prompt("lift the cube", n_reference=4)
    assert len(split_on_images(one_shot)) == 4 + 3 + 1  # reference, beginning, a, b
    assert [f" {p}% <image>" in one_shot for p in (0, 33, 66, 100)] == [True] * 4
    assert one_shot.count("lift the cube") == 2
    assert len(split_on_images(done_prompt("lift the cube"))) == 2
    assert len(split_on_images(done_prompt("lift the cube", goal_image=True))) == 3
    with pytest.raises(ValueError, match="at least 2 frames"):
        progress_prompt("lift the cube", n_reference=1)


def test_bad_observations_are_refused_before_any_request() -> None:
    # Nothing listens on this port, and no request is made: every call fails on its input first.
    critic = ServedProgressCritic(ServedCriticCfg(base_url="http://127.0.0.1:9/v1", cameras=("wrist",)))
    try:
        assert isinstance(critic, ProgressCritic)
        with pytest.raises(ValueError, match=r"camera_wrist.*holds \['camera_front', 'policy'\]"):
            critic.score(obs(10), obs(20), "lift the cube")
    finally:
        critic.close()
    critic = ServedProgressCritic(ServedCriticCfg(base_url="http://127.0.0.1:9/v1"))
    try:
        floats = TensorDict({"camera_front": torch.zeros(1, 6, 6, 3)}, batch_size=[1])
        with pytest.raises(ValueError, match="uint8 RGB images"):
            critic.score(floats, floats, "lift the cube")
        with pytest.raises(ValueError, match="R >= 2"):
            critic.score(obs(10), obs(20), "lift the cube", reference=obs(0))
        with pytest.raises(ValueError, match="2 goals for 1"):
            critic.score(obs(10), obs(20), ["a", "b"])
        with pytest.raises(ValueError, match="<image>"):
            critic.score(obs(10), obs(20), "put <image> here")
    finally:
        critic.close()
    with pytest.raises(RuntimeError, match="closed"):
        critic.score(obs(10), obs(20), "lift the cube")


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        ServedCriticCfg(base_url="127.0.0.1:8000")
    with pytest.raises(ValueError, match="bare"):
        ServedCriticCfg(cameras=("camera_front",))
    with pytest.raises(ValueError, match="timeout_s"):
        ServedCriticCfg(timeout_s=0)


def test_missing_httpx_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(ImportError, match=r"pip install -e '\.\[rewards\]'"):
        ServedProgressCritic()


# ---- against the fake server -------------------------------------------------------------------------------------


def test_request_shape(server: FakeServer, make_critic: Callable[..., ServedProgressCritic]) -> None:
    make_critic(image_size=16).score(obs(10), obs(40), "lift the red cube")
    assert server.paths == ["/v1/chat/completions"] * 2
    progress, done = sorted(server.requests, key=lambda b: "<done>" in text_of(b))
    for body in (progress, done):
        assert body["model"] == "VLAC"
        assert (body["temperature"], body["top_k"], body["max_tokens"]) == (0.5, 1, 32)
        assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert body["messages"][1]["role"] == "user"
        assert "<task> lift the red cube </task>" in text_of(body)
        urls = [p["image_url"]["url"] for p in body["messages"][1]["content"] if p["type"] == "image_url"]
        assert all(u.startswith("data:image/png;base64,") for u in urls)
        assert all(im.format == "PNG" and im.size == (16, 16) for im in images_of(body))
    kinds = [p["type"] for p in progress["messages"][1]["content"]]
    assert kinds == ["text", "image_url", "text", "image_url", "text"]
    assert progress["messages"][1]["content"][0]["text"] == "Image-1: "
    assert [grey(im) for im in images_of(progress)] == [10, 40]
    assert [p["type"] for p in done["messages"][1]["content"]] == ["image_url", "text"]
    assert [grey(im) for im in images_of(done)] == [40]


def test_inline_image_tags_send_the_prompt_whole(
    server: FakeServer, make_critic: Callable[..., ServedProgressCritic]
) -> None:
    make_critic(inline_image_tags=True, system_prompt=None, top_k=None).score(obs(10), obs(40), "lift the cube")
    progress = next(b for b in server.requests if "<score>" in text_of(b))
    assert [p["type"] for p in progress["messages"][0]["content"]] == ["text", "image_url", "image_url"]
    assert progress["messages"][0]["content"][0]["text"] == progress_prompt("lift the cube")
    assert len(progress["messages"]) == 1 and "top_k" not in progress


def test_signed_deltas_and_done(server: FakeServer, make_critic: Callable[..., ServedProgressCritic]) -> None:
    out = make_critic().score(obs(10, 60, 50), obs(40, 20, 95), ["lift", "lift", "place"])
    assert out.delta.dtype == torch.float32 and out.delta.shape == (3,)
    assert out.delta.tolist() == pytest.approx([0.3, -0.4, 0.45])
    assert out.done.tolist() == [0.0, 0.0, 1.0]


def test_one_shot_reference_frames(server: FakeServer, make_critic: Callable[..., ServedProgressCritic]) -> None:
    reference = obs(*[5 * i for i in range(20)])
    out = make_critic(max_reference_frames=4).score(obs(30), obs(50), "lift the cube", reference=reference)
    assert out.delta.tolist() == pytest.approx([0.2])
    progress = next(b for b in server.requests if "<score>" in text_of(b))
    # Evenly subsampled as VLAC does: frames 0, 6, 12 and the last; then the beginning (obs_a), a, b.
    assert [grey(im) for im in images_of(progress)] == [0, 30, 60, 95, 30, 30, 50]
    assert "trajectory beginning" in text_of(progress) and " 66% " in text_of(progress)
    done = next(b for b in server.requests if "<done>" in text_of(b))
    assert [grey(im) for im in images_of(done)] == [95, 50]  # the goal image, then obs_b
    assert "Refer to the goal" in text_of(done)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_retries_after_a_server_error_then_succeeds(
    server: FakeServer, make_critic: Callable[..., ServedProgressCritic], status: int
) -> None:
    failures = iter(range(2))

    def flaky(body: dict[str, Any]) -> Reply:
        with server.lock:
            fail = next(failures, None) is not None
        return (status, b'{"error": "busy"}', 0.0) if fail else vlac_like(body)

    server.reply = flaky
    out = make_critic(retries=2).score(obs(10), obs(40), "lift the cube")
    assert out.delta.tolist() == pytest.approx([0.3])
    assert len(server.requests) == 4  # two questions, the first two attempts refused


def test_server_errors_on_every_attempt(server: FakeServer, make_critic: Callable[..., ServedProgressCritic]) -> None:
    server.reply = lambda body: (500, b"internal error", 0.0)
    with pytest.raises(ServedCriticError, match=r"after 3 attempt\(s\).*HTTP 500: 'internal error'"):
        make_critic(retries=2, max_concurrency=1).score(obs(10), obs(40), "lift the cube")


def test_timeout_names_url_deadline_and_attempts(
    server: FakeServer, make_critic: Callable[..., ServedProgressCritic]
) -> None:
    server.reply = lambda body: (200, completion("10"), 2.0)
    critic = make_critic(timeout_s=0.2, retries=1)
    start = time.monotonic()
    with pytest.raises(ServedCriticError) as err:
        critic.score(obs(10), obs(40), "lift the cube")
    assert time.monotonic() - start < 1.5
    message = str(err.value)
    assert server.base_url + "/chat/completions" in message
    assert "0.2 s deadline" in message and "2 attempt(s)" in message


def test_unreachable_server(netns: None) -> None:
    cfg = ServedCriticCfg(base_url=f"http://127.0.0.1:{free_port()}/v1", retries=1, backoff_s=0.01, timeout_s=1.0)
    with ServedProgressCritic(cfg) as critic, pytest.raises(ServedCriticError, match=r"2 attempt\(s\).*ConnectError"):
        critic.score(obs(10), obs(40), "lift the cube")


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((200, b"<html>Bad Gateway</html>", 0.0), r"not JSON.*'<html>Bad Gateway</html>'"),
        ((200, b'{"result": 12}', 0.0), r"without choices\[0\]\.message\.content.*result"),
        ((200, completion("I cannot tell"), 0.0), "holds no number: 'I cannot tell'"),
        ((200, completion("250"), 0.0), r"outside \[-100, 100\]"),
    ],
)
def test_garbage_answers_raise_a_clear_error_without_retry(
    server: FakeServer, make_critic: Callable[..., ServedProgressCritic], reply: Reply, message: str
) -> None:
    server.reply = lambda body: reply if "<score>" in text_of(body) else vlac_like(body)
    with pytest.raises(ServedCriticError, match=message):
        make_critic(retries=3).score(obs(10), obs(40), "lift the cube")
    assert sum("<score>" in text_of(b) for b in server.requests) == 1  # a bad answer is not asked again


def test_401_is_not_retried_and_the_key_stays_secret(
    server: FakeServer, make_critic: Callable[..., ServedProgressCritic], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSLKIT_CRITIC_API_KEY", "sekrit-123")
    server.reply = lambda body: (401, b'{"error": "invalid api key"}', 0.0)
    with pytest.raises(ServedCriticError, match=r"HTTP 401.*invalid api key.*RSLKIT_CRITIC_API_KEY") as err:
        make_critic(retries=3, max_concurrency=1).score(obs(10), obs(40), "lift the cube")
    assert "sekrit" not in str(err.value)
    texts = [text_of(b) for b in server.requests]
    assert 1 <= len(texts) == len(set(texts))  # no question asked twice: a 401 is not retried
    assert set(server.auth) == {"Bearer sekrit-123"}


def test_cache_answers_a_repeated_question_without_a_request(
    server: FakeServer, make_critic: Callable[..., ServedProgressCritic]
) -> None:
    critic = make_critic()
    first = critic.score(obs(10, 20), obs(40, 20), "lift the cube")
    assert len(server.requests) == 4
    again = critic.score(obs(10, 20), obs(40, 20), "lift the cube")
    assert len(server.requests) == 4
    assert again.delta.tolist() == first.delta.tolist() and again.done.tolist() == first.done.tolist()
    critic.score(obs(10), obs(40), "place the cube")  # another goal: asked anew
    assert len(server.requests) == 6
    uncached = make_critic(cache_size=0)
    uncached.score(obs(10), obs(40), "lift the cube")
    uncached.score(obs(10), obs(40), "lift the cube")
    assert len(server.requests) == 10


def test_identical_questions_in_one_call_are_asked_once(
    server: FakeServer, make_critic: Callable[..., ServedProgressCritic]
) -> None:
    out = make_critic(cache_size=0).score(obs(10, 10, 10), obs(40, 40, 40), "lift the cube")
    assert out.delta.tolist() == pytest.approx([0.3] * 3)
    assert len(server.requests) == 2


def test_lru_cache_is_bounded(server: FakeServer, make_critic: Callable[..., ServedProgressCritic]) -> None:
    critic = make_critic(cache_size=2)
    critic.score(obs(10), obs(40), "lift the cube")  # 2 answers cached
    critic.score(obs(11), obs(41), "lift the cube")  # evicts the first two
    critic.score(obs(10), obs(40), "lift the cube")
    assert len(server.requests) == 6


def test_concurrency_is_bounded(server: FakeServer, make_critic: Callable[..., ServedProgressCritic]) -> None:
    server.reply = lambda body: (*vlac_like(body)[:2], 0.05)
    out = make_critic(max_concurrency=3).score(obs(*range(8)), obs(*range(10, 18)), "lift the cube")
    assert out.delta.tolist() == pytest.approx([0.1] * 8)
    assert len(server.requests) == 16
    assert 2 <= server.max_in_flight <= 3


def test_two_threads_share_one_critic(server: FakeServer, make_critic: Callable[..., ServedProgressCritic]) -> None:
    server.reply = lambda body: (*vlac_like(body)[:2], 0.02)
    critic = make_critic(max_concurrency=2)
    results: dict[int, list[float]] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for _ in range(3):
                results[k] = critic.score(obs(k, k + 1), obs(k + 5 * k, k + 1), f"goal {k}").delta.tolist()
        except BaseException as err:  # noqa: B036 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20.0)
    assert not any(t.is_alive() for t in threads), "a scoring thread hung"
    assert not errors, errors
    assert results[1] == pytest.approx([0.05, 0.0]) and results[2] == pytest.approx([0.10, 0.0])
    assert len(server.requests) == 8  # each thread's repeats came from the cache
    assert server.max_in_flight <= 2


def free_port() -> int:
    """A loopback port that nothing listens on (bound, read, released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
