"""An exported VLA policy deployed: instruction texts looked up in the table stored at export, and the async chunk
engine running it on uint8 camera groups, the instruction and the state (VLASH future state rolls the state only)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from rslkit.deploy.async_engine import AsyncChunkEngine, AsyncEngineCfg
from rslkit.deploy.clock import FakeClock
from rslkit.deploy.export import export_policy
from rslkit.deploy.future_state import FutureStateConditioner
from rslkit.deploy.inference_worker import SimulatedInference
from rslkit.deploy.instructions import INSTRUCTIONS_KEY, InstructionTable
from rslkit.deploy.onnx_policy import OnnxPolicy
from rslkit.models.vla import INSTRUCTION_GROUP
from tests.deploy.test_vla_export import _obs, _policy

TEXTS = ["put the cube in the back left corner", "put the cube in the front right corner"]


@pytest.fixture(scope="module")
def table() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {t: rng.normal(size=8).astype(np.float32) for t in TEXTS}


@pytest.fixture(scope="module")
def exported(tmp_path_factory, table) -> Any:
    path = tmp_path_factory.mktemp("vla") / "vla.onnx"
    meta = export_policy(_policy(), path, "vla-bc", instructions=table)
    return path, meta


def _robot_obs(seed: int, text: str = TEXTS[0]) -> dict[str, Any]:
    """One robot observation: unbatched state, images and the instruction as text."""
    obs: dict[str, Any] = {k: v[0] for k, v in _obs(1, seed).items()}
    obs[INSTRUCTION_GROUP] = text
    return obs


def test_the_instruction_table_is_stored_exactly_and_looked_up(exported, table):
    path, meta = exported
    assert meta.instruction is not None and meta.instruction["texts"] == TEXTS
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert INSTRUCTIONS_KEY in props
    policy = OnnxPolicy(path)
    assert policy.instructions is not None and policy.instructions.texts == TEXTS
    for text in TEXTS:
        np.testing.assert_array_equal(policy.instruction_embedding(text), table[text])  # bit for bit
    obs, noise = _obs(2), np.random.default_rng(5).normal(size=(2, 5, 3)).astype(np.float32)
    by_embedding = policy({**obs, INSTRUCTION_GROUP: np.stack([table[TEXTS[0]], table[TEXTS[1]]])}, noise)
    np.testing.assert_array_equal(policy({**obs, INSTRUCTION_GROUP: TEXTS}, noise), by_embedding)
    one = policy({**{k: v[1] for k, v in obs.items()}, INSTRUCTION_GROUP: TEXTS[1]}, noise[1])
    np.testing.assert_allclose(one, by_embedding[1], rtol=0, atol=1e-6)
    assert np.abs(by_embedding[0] - policy({**obs, INSTRUCTION_GROUP: [TEXTS[1]] * 2}, noise)[0]).max() > 1e-4


def test_unknown_or_unavailable_instructions_say_what_to_do(exported, tmp_path):
    path, _ = exported
    policy = OnnxPolicy(path)
    with pytest.raises(ValueError, match=r"Unknown instruction 'stack the cubes'.*back left corner.*--instructions"):
        policy(_robot_obs(0, "stack the cubes"))
    obs = _robot_obs(0)
    del obs[INSTRUCTION_GROUP]
    with pytest.raises(ValueError, match=r"Missing observation groups \['instruction'\].*instruction text \(one of"):
        policy(obs)
    export_policy(_policy(), tmp_path / "bare.onnx", "vla-bc")  # no table: embeddings only
    bare = OnnxPolicy(tmp_path / "bare.onnx")
    assert bare.instructions is None
    with pytest.raises(ValueError, match="without an instruction table.*--instructions"):
        bare(_robot_obs(0))
    assert bare({**_robot_obs(0), INSTRUCTION_GROUP: np.ones(8, np.float32)}).shape == (5, 3)


def test_instruction_tables_are_checked_at_export(tmp_path):
    with pytest.raises(ValueError, match="have 4 values but the policy takes 8"):
        export_policy(_policy(), tmp_path / "v.onnx", "vla-bc", instructions={"go": np.zeros(4)})
    with pytest.raises(ValueError, match="takes no instruction"):
        export_policy(_policy(language_dim=0), tmp_path / "v.onnx", "vla-bc", instructions={"go": np.zeros(8)})
    with pytest.raises(ValueError, match="NaN"):
        InstructionTable({"go": [np.nan] * 8})
    table = InstructionTable({"a": np.arange(3.0)}, "minilm").merged(InstructionTable({"b": np.ones(3)}))
    assert table.texts == ["a", "b"] and InstructionTable.from_json(table.to_json()).encoder == "minilm"


class _Robot:
    """A robot whose observations change every tick (state, both cameras); records what it was told to do."""

    def __init__(self, bad: dict[str, Any] | None = None) -> None:
        self.tick, self.bad, self.actions = 0, bad or {}, []
        self.observations: list[dict[str, Any]] = []

    def observe(self) -> dict[str, Any]:
        obs = {**_robot_obs(self.tick), **self.bad}
        for key in [k for k, v in self.bad.items() if v is None]:
            del obs[key]
        self.observations.append(obs)
        self.tick += 1
        return obs

    def act(self, action: np.ndarray) -> None:
        self.actions.append(action)


def _engine(policy: OnnxPolicy, robot: _Robot, calls: list, conditioner: Any = None) -> AsyncChunkEngine:
    clock = FakeClock()

    def chunk_fn(obs: Any) -> np.ndarray:
        chunk = policy(obs)
        calls.append((obs, chunk))
        return chunk

    inference = SimulatedInference(chunk_fn, clock, lambda request: 0.045)  # 3 ticks at 50 Hz
    cfg = AsyncEngineCfg(rate_hz=50.0, initial_latency_s=0.045, request_margin=2)
    return AsyncChunkEngine(robot, inference, clock, cfg, conditioner, validate=policy.check_inputs)


def test_the_engine_runs_an_exported_vla_policy(exported, table):
    path, _ = exported
    robot, calls = _Robot(), []
    engine = _engine(OnnxPolicy(path, seed=7), robot, calls)
    stats = engine.run(40)
    assert stats.chunks >= 5 and stats.starved_ticks == 0 and len(calls) == stats.requests
    direct = OnnxPolicy(path, seed=7)  # the same noise draws, called here with the raw embedding
    chunks = []
    for obs, chunk in calls:
        assert isinstance(obs[INSTRUCTION_GROUP], str) and obs["camera_front"].dtype == np.uint8
        expected = direct({**obs, INSTRUCTION_GROUP: table[obs[INSTRUCTION_GROUP]]})
        np.testing.assert_array_equal(chunk, expected)
        chunks.append(expected)
    starts = [t + d for t, d in zip(stats.request_ticks, stats.delay_ticks)]
    ran = [t for t, c in enumerate(engine.executed_chunks) if c is not None]
    assert len(ran) == 40 - stats.startup_ticks
    for t in ran:  # replace: each tick executes its row of the newest chunk planned for it
        c = engine.executed_chunks[t]
        np.testing.assert_array_equal(engine.executed[t], chunks[c][t - starts[c]])


def test_vlash_rolls_the_state_forward_and_keeps_images_and_instruction(exported):
    path, _ = exported
    robot, calls = _Robot(), []
    conditioner = FutureStateConditioner("absolute", slice(0, 3), group="policy")  # state [6]: 3 joints first
    engine = _engine(OnnxPolicy(path), robot, calls, conditioner)
    engine.run(30)
    rolled = 0
    for request, (sent, _) in zip(np.asarray(engine.stats.request_ticks), calls):
        seen = robot.observations[request]
        for key in ("camera_front", "camera_wrist", INSTRUCTION_GROUP):
            np.testing.assert_array_equal(sent[key], seen[key])
        np.testing.assert_array_equal(sent["policy"][3:], seen["policy"][3:])
        pending = [engine.executed[t] for t in range(request, request + engine.stats.delay_ticks[0])]
        if all(a is not None for a in pending):  # rolled through the planned actions: the last target
            np.testing.assert_array_equal(sent["policy"][:3], pending[-1])
            rolled += 1
    assert rolled >= 3


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"camera_wrist": None}, r"Missing observation groups \['camera_wrist'\]"),
        ({"camera_front": np.zeros((32, 32, 3), np.uint8)}, r"expected \[batch, 16, 16, 3\]"),
        ({"camera_front": np.zeros((16, 16, 3), np.float32)}, "takes uint8"),
        ({INSTRUCTION_GROUP: None}, "instruction text"),
        ({INSTRUCTION_GROUP: "stack the cubes"}, "Unknown instruction 'stack the cubes'"),
    ],
    ids=["missing-camera", "image-size", "image-dtype", "missing-instruction", "unknown-instruction"],
)
def test_the_engine_refuses_bad_observations_on_the_control_thread(exported, bad, match):
    path, _ = exported
    calls: list = []
    engine = _engine(OnnxPolicy(path), _Robot(bad), calls)
    with pytest.raises(ValueError, match=match):
        engine.step(0)
    assert calls == [] and engine.stats.requests == 0


def test_export_from_a_checkpoint_stores_the_training_and_given_instructions(tmp_path, monkeypatch, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    import rslkit.deploy.export as export_module
    from rslkit.cli.export import main
    from rslkit.models.vla import VLAPolicyCfg
    from rslkit.runners.pretrain_runner import PretrainRunner
    from rslkit.runners.vla_bc_data import VLABCRunnerCfg
    from tests.runners.instructed_point import INSTRUCTIONS, InstructedPointEnv

    demos = tmp_path / "demos"  # only the tasks of a recorded dataset matter here
    (demos / "meta").mkdir(parents=True)
    pq.write_table(pa.table({"task_index": [0, 1], "task": [INSTRUCTIONS[1], "park the point"]}),
                   demos / "meta" / "tasks.parquet")  # fmt: skip
    policy_cfg = VLAPolicyCfg(cameras=("front",), image_size=(16, 16), language_dim=384, horizon=4, d_model=32,
                              num_heads=4, num_layers=2, cnn_channels=(8, 16), token_grid=2,
                              time_embed_dim=16)  # fmt: skip
    env = InstructedPointEnv(num_envs=1)
    runner = PretrainRunner(env, VLABCRunnerCfg(dataset=str(demos), policy=policy_cfg, logger=()), None)
    monkeypatch.setattr(export_module, "load_run", lambda *a, **k: (env, runner, {"algorithm": "vla-bc"}))
    out = tmp_path / "vla.onnx"
    meta = main(["--checkpoint", "unused.pt", "--out", str(out), "--task", "point", "--instructions", "stop here"])
    expected = [*INSTRUCTIONS, "park the point", "stop here"]  # env, then dataset tasks, then given; no duplicates
    assert meta.instruction is not None and meta.instruction["texts"] == expected
    assert "with 4 instruction(s)" in capsys.readouterr().out
    onnx_policy = OnnxPolicy(out)
    assert onnx_policy.instructions is not None and onnx_policy.instructions.encoder == "minilm"
    obs = env.get_observations()
    noise = np.random.default_rng(0).normal(size=(1, 4, 2)).astype(np.float32)
    for text in expected:  # the text on the robot gives what torch gives with the encoder's embedding
        got = onnx_policy({"policy": obs["policy"][0].numpy(), "camera_front": obs["camera_front"][0].numpy(),
                           INSTRUCTION_GROUP: text}, noise[0])  # fmt: skip
        with torch.no_grad():
            groups = {"policy": obs["policy"], "camera_front": obs["camera_front"],
                      INSTRUCTION_GROUP: runner.data.instructions.embed([text])}  # fmt: skip
            want = runner.policy.act_chunk(groups, torch.from_numpy(noise))[0].numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    with pytest.raises(SystemExit):
        main(["--checkpoint", "unused.pt", "--out", str(out), "--instructions", " "])


def test_instructions_for_a_policy_without_language_are_refused(tmp_path, build):
    from rslkit.deploy.export import export_checkpoint

    build.ppo(tmp_path / "model_0.pt")
    with pytest.raises(ValueError, match="--instructions is for VLA policies"):
        export_checkpoint(tmp_path / "model_0.pt", tmp_path / "p.onnx", instructions=["go"])
