"""``prm-critic export``: export a state-critic checkpoint (or a spec's SubgoalCritic) to one
self-contained ONNX file, or re-seal an export changed on purpose (``--reseal FILE``)."""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Iterator


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="export a state-critic checkpoint to ONNX (opset 18, parity-checked against torch)",
        description="Export a state-critic checkpoint (.safetensors + .json) to one .onnx file with "
        "normalisation and metadata inside; the export is checked against torch before it is written.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="state-critic checkpoint path (.safetensors, .json or their common stem)")
    src.add_argument("--subgoal-spec", metavar="SPEC",
                     help="export the no-training SubgoalCritic of this task spec (name or .toml) instead")
    src.add_argument("--reseal", metavar="FILE",
                     help="re-seal an exported .onnx you changed on purpose (e.g. re-saved by onnxsim or onnxslim): "
                          "write the content hash of its current bytes, so it loads verified again (in place, or "
                          "to --out)")
    p.add_argument("--out", default=None,
                   help="output .onnx file (default: export/<checkpoint name>.onnx or export/subgoal_<task>.onnx; "
                        ".b1.onnx for --batch 1)")
    p.add_argument("--batch", default="dynamic", choices=["1", "dynamic"],
                   help="'dynamic' (any batch size) or '1' (fixed batch 1, for control loops); default dynamic")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset (default 18)")
    p.add_argument("--ir-version", type=int, default=None,
                   help="ONNX IR version of the file (default: the exporter's, 10, which needs onnxruntime >= 1.18; "
                        "9 loads in onnxruntime 1.16 and 1.17; at least what the opset needs, 8 for opset 18)")
    p.add_argument("--task", default=None, help="task name to store in the metadata (default: from the checkpoint)")
    p.add_argument("--quiet", action="store_true",
                   help="do not print the phases (tracing, checking, parity, writing, size and hash) on stderr")
    p.set_defaults(func=run)


@contextlib.contextmanager
def report_phases(enabled: bool = True) -> Iterator[None]:
    """Print the exporter's phases (the ``prm_critic.onnx.export`` logger, INFO) on stderr."""
    if not enabled:
        yield
        return
    logger = logging.getLogger("prm_critic.onnx.export")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("export: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _export(args) -> Path:
    from prm_critic.models.checkpoint import checkpoint_paths
    from prm_critic.onnx.export import export_state_critic

    batch = 1 if args.batch == "1" else "dynamic"
    out = args.out
    if args.subgoal_spec is not None:
        from prm_critic.onnx.export import export_subgoal_critic
        from prm_critic.robotics.make import make_env
        from prm_critic.robotics.spec import load_spec
        from prm_critic.robotics.subgoals import SubgoalCritic

        if args.task is not None:
            raise ValueError("--task: not used with --subgoal-spec (the spec names the task)")
        spec = load_spec(args.subgoal_spec)
        stem = f"subgoal_{spec.name}"
        env = make_env(spec)
        try:
            critic = SubgoalCritic(spec, env)
        finally:
            env.close()
        out = out if out is not None else Path("export") / (f"{stem}.b1.onnx" if batch == 1 else f"{stem}.onnx")
        path = export_subgoal_critic(critic, out, batch=batch, opset=args.opset, ir_version=args.ir_version)
    else:
        if out is None:
            stem = checkpoint_paths(args.checkpoint)[0].with_suffix("").name
            out = Path("export") / (f"{stem}.b1.onnx" if batch == 1 else f"{stem}.onnx")
        path = export_state_critic(args.checkpoint, out, batch=batch, opset=args.opset, task=args.task,
                                   ir_version=args.ir_version)
    return Path(path)


def _reseal(args) -> int:
    from prm_critic.onnx._meta import HASH_KEY, scan_onnx, seal_onnx

    for flag, value in (("--task", args.task), ("--ir-version", args.ir_version)):
        if value is not None:
            raise ValueError(f"{flag}: not used with --reseal (the file keeps its metadata)")
    src = Path(args.reseal)
    before = scan_onnx(src.read_bytes()).props.get(HASH_KEY) if src.is_file() else None
    path = seal_onnx(src, out=args.out)
    after = scan_onnx(path.read_bytes()).props.get(HASH_KEY)
    print(f"resealed {path}: content hash {before} -> {after} (it now loads verified; re-seal only files you trust)")
    return 0


def run(args) -> int:
    from prm_critic.onnx.export import read_onnx_metadata

    if args.reseal is not None:
        return _reseal(args)
    with report_phases(not args.quiet):
        path = _export(args)
    meta = read_onnx_metadata(path)
    print(f"wrote {path} ({path.stat().st_size} bytes): task={meta.get('task')!r} obs_dim={meta['obs_dim']} "
          f"batch={meta['batch']} opset={meta['opset']} ir_version={meta.get('ir_version')} exporter={meta['exporter']} "
          f"label_family={meta['label_family']!r}; parity with torch OK (rtol 1e-4, atol 1e-5)")
    return 0
