"""Cost of camera observation groups: milliseconds per frame (one env, one camera) on so101-reach and so101-lift.

For each task, quality (``fast``: links drawn as boxes; ``visual``: the meshes) and image size, the task steps
``num_envs`` envs with random actions (cameras off, so the physics is not timed) and a
:class:`~rslkit.envs.mujoco.cameras.CameraRenderer` built as the task builds it (``task_cameras``) draws every env
with every camera after each step: the time of those ``render`` calls divided by ``num_envs * cameras`` is the
figure. Every step changes every state row, so every call draws every env (nothing is served from the cache). One
extra row per task times ``BackendRenderer`` (the ``play.py --video`` path) on the same model at MuJoCo's visual
defaults (shadows, 8x multisampling, the scene's offscreen buffer) at the smallest size: what the speed settings buy.

The grid is repeated ``--rounds`` times (rows interleaved, so slow changes in load hit every row); medians are
reported. Usage::

    nice -n 10 .venv/bin/python benchmarks/render_cost.py [--sizes 64 96 128] [--num_envs 8] [--steps 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine_info, print_table, write_results  # noqa: E402
from rslkit.envs.mujoco import models  # noqa: E402
from rslkit.envs.mujoco.cameras import task_cameras  # noqa: E402
from rslkit.envs.mujoco.render import BackendRenderer, Marker, gl_backend  # noqa: E402
from rslkit.envs.tasks.so101_lift import SO101LiftCfg, SO101LiftTask  # noqa: E402
from rslkit.envs.tasks.so101_reach import SO101ReachCfg, SO101ReachTask  # noqa: E402

TASKS = {"so101-reach": (SO101ReachTask, SO101ReachCfg), "so101-lift": (SO101LiftTask, SO101LiftCfg)}
CAMERAS = ("front", "wrist")


def _scene(task: str, visual: bool) -> Any:
    """The MjSpec the task draws its cameras in (see the tasks' camera set-up)."""
    spec = models.so101_scene_spec(visual=visual) if task == "so101-reach" else models.so101_lift_spec(visual=visual)
    models.add_so101_cameras(spec)
    return spec


def _markers(env: Any) -> torch.Tensor | None:
    return env.target if hasattr(env, "target") else None


def measure(task: str, quality: str, size: int, num_envs: int, steps: int) -> float:
    """Milliseconds per frame (one env, one camera) of the task's camera renderer."""
    task_cls, cfg_cls = TASKS[task]
    cfg = cfg_cls(num_envs=num_envs, sim_threads=1, seed=1)
    env = task_cls(cfg)
    cam_cfg = replace(cfg, cameras=CAMERAS, camera_width=size, camera_height=size, camera_quality=quality)
    marker = Marker((0.0, 0.0, 0.0), 0.02, (0.1, 0.9, 0.2, 1.0))
    renderer = task_cameras(_scene(task, quality == "visual"), env.backend, cam_cfg, marker)
    renderer.render(_markers(env))  # warm-up: GL context, mesh upload
    elapsed = 0.0
    for _ in range(steps):
        env.step(torch.rand(num_envs, env.num_actions) * 2 - 1)
        t0 = time.perf_counter()
        renderer.render(_markers(env))
        elapsed += time.perf_counter() - t0
    renderer.close()
    env.close()
    return 1e3 * elapsed / (steps * num_envs * len(CAMERAS))


def measure_defaults(task: str, size: int, num_envs: int, steps: int) -> float:
    """Milliseconds per frame of ``BackendRenderer`` on the visual model at MuJoCo's (and the scene's) defaults."""
    task_cls, cfg_cls = TASKS[task]
    env = task_cls(cfg_cls(num_envs=num_envs, sim_threads=1, seed=1))
    renderer = BackendRenderer(_scene(task, True).compile(), env.backend, size, size, camera="front")
    renderer.render(0)
    t0 = time.perf_counter()
    for _ in range(steps):
        for env_id in range(num_envs):
            renderer.render(env_id)
    ms = 1e3 * (time.perf_counter() - t0) / (steps * num_envs)
    renderer.close()
    env.close()
    return ms


def _gl_renderer() -> str:
    """The OpenGL implementation that draws (e.g. ``llvmpipe``), read from a throw-away context."""
    from rslkit.envs.mujoco.render import Renderer

    with Renderer(models.load_so101_lift(), 8, 8):
        from OpenGL import GL

        return GL.glGetString(GL.GL_RENDERER).decode()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the grid, print the table and write ``benchmarks/results/render_cost.json``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--qualities", nargs="+", default=["fast", "visual"], choices=["fast", "visual"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[64, 96, 128])
    parser.add_argument("--num_envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="timed render calls per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--note", default="", help="recorded in the JSON (e.g. how busy the machine was)")
    parser.add_argument("--out", help="output JSON (default: benchmarks/results/render_cost.json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    info = machine_info(["mujoco", "torch", "PyOpenGL"])
    info.update(gl_backend=gl_backend(), gl_renderer=_gl_renderer(), note=args.note)
    info["env"] = {k: os.environ.get(k, "") for k in ("MUJOCO_GL", "LP_NUM_THREADS", "GALLIUM_DRIVER")}
    grid = [(t, q, s) for t in args.tasks for q in args.qualities for s in args.sizes]
    times: dict[str, list[float]] = {}
    for r in range(args.rounds):
        for task, quality, size in grid if r % 2 == 0 else grid[::-1]:
            ms = measure(task, quality, size, args.num_envs, args.steps)
            times.setdefault(f"{task}|{quality}|{size}", []).append(ms)
            print(f"round {r + 1}: {task} {quality} {size}x{size}: {ms:.2f} ms/frame", flush=True)
        for task in args.tasks:
            ms = measure_defaults(task, min(args.sizes), args.num_envs, args.steps)
            times.setdefault(f"{task}|visual-defaults|{min(args.sizes)}", []).append(ms)
    rows: list[dict[str, Any]] = []
    table: list[list[str]] = []
    for key, values in times.items():
        task, quality, size = key.split("|")
        med = statistics.median(values)
        rows.append({"task": task, "quality": quality, "size": int(size), "ms_per_frame": round(med, 2),
                     "frames_per_s": round(1e3 / med, 1), "runs_ms": [round(v, 2) for v in values]})  # fmt: skip
        table.append([task, quality, f"{size}x{size}", f"{med:.2f}", f"{1e3 / med:.1f}"])
    print_table(["task", "quality", "size", "ms/frame", "frames/s"], table)
    settings = {k: v for k, v in vars(args).items() if k != "out"} | {"cameras": list(CAMERAS)}
    payload = {"machine": info, "settings": settings, "results": rows}
    print(f"wrote {write_results('render_cost', payload, args.out)}")
    return payload


if __name__ == "__main__":
    main()
