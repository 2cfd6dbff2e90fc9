"""``python -m rslkit.export --checkpoint C --out policy.onnx``: a checkpoint's policy to ONNX (deploy.export)."""

from __future__ import annotations

import argparse

from rslkit.deploy.export import DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, check_opset, export_checkpoint, external_data_path
from rslkit.deploy.metadata import PolicyMetadata


def main(argv: list[str] | None = None) -> PolicyMetadata:
    """Command line: ``python -m rslkit.export --checkpoint model_300.pt --out policy.onnx``."""
    parser = argparse.ArgumentParser(description="Export a trained rslkit policy to ONNX (normalizers inside).")
    parser.add_argument("--checkpoint", required=True, help="model_<iter>.pt written by train.py, or its run directory")
    parser.add_argument("--out", required=True, help="output .onnx file")
    parser.add_argument("--task", default=None, help="task name, when the checkpoint does not record it")
    parser.add_argument(
        "--flow_steps",
        type=int,
        default=None,
        help="Euler steps K to unroll (flow policies: flow-bc, reinflow, vla-bc, vla-reinflow; refused for others)",
    )
    parser.add_argument(
        "--opset",
        type=int,
        default=DEFAULT_OPSET,
        help=f"ONNX opset, {MIN_OPSET} to {MAX_OPSET} (default {DEFAULT_OPSET})",
    )
    parser.add_argument(
        "--instructions",
        nargs="+",
        default=[],
        metavar="TEXT",
        help="VLA policies: instructions to store (embedded) beside the training ones, so that a robot without "
        "torch can pass the text",
    )
    parser.add_argument(
        "--external_data",
        choices=("auto", "yes", "no"),
        default="auto",
        help="weights in <out>.data beside the model (auto: above 1 GiB, e.g. a pretrained VLA backbone; one .onnx "
        "file holds at most 2 GB); copy both files to the robot",
    )
    args = parser.parse_args(argv)
    if args.flow_steps is not None and args.flow_steps < 1:
        parser.error(f"--flow_steps must be >= 1, got {args.flow_steps}")
    try:
        check_opset(args.opset)
    except ValueError as err:
        parser.error(str(err))
    if not args.out.lower().endswith(".onnx"):
        parser.error(f"--out must name an .onnx file, got '{args.out}'")
    if any(not t.strip() for t in args.instructions):
        parser.error("--instructions takes non-empty texts")
    external = {"auto": None, "yes": True, "no": False}[args.external_data]
    meta = export_checkpoint(
        args.checkpoint, args.out, args.task, args.flow_steps, args.opset, args.instructions, external
    )  # fmt: skip
    shapes = ", ".join(f"{g}{s}" for g, s in meta.obs_groups.items())
    extra = f" | chunk {meta.chunk_length} x K={meta.num_flow_steps}" if meta.kind == "chunk" else ""
    if meta.max_future_offset > 0:
        extra += f" | future_state {meta.future_state_slice} (offsets <= {meta.max_future_offset})"
    rate = f" | {meta.control_rate_hz:g} Hz" if meta.control_rate_hz else ""
    print(f"Exported {meta.algorithm} {meta.kind} policy ({shapes} -> {meta.action_dim} actions{extra}{rate})")
    print(f"  to {args.out}")
    if external_data_path(args.out).exists():
        print(f"  weights in {external_data_path(args.out)} (keep it beside the model)")
    texts = (meta.instruction or {}).get("texts")
    if texts:
        print(f"  with {len(texts)} instruction(s): " + "; ".join(repr(t) for t in texts))
    return meta
