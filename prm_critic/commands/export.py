"""``prm-critic export``: export a state-critic checkpoint (or a spec's SubgoalCritic) to one
self-contained ONNX file, or re-seal an export changed on purpose (``--reseal FILE``)."""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Iterator


DESCRIPTION = """\
Export a state-critic checkpoint (.safetensors + .json) to one .onnx file with normalisation and metadata
inside, written beside the checkpoint unless --out is given; the export is checked against torch before
it is written.

  prm-critic export --checkpoint runs/pm_critic/critic            # -> runs/pm_critic/critic.onnx
  prm-critic export --checkpoint runs/pm_critic/critic --batch 1  # -> runs/pm_critic/critic.b1.onnx
  prm-critic export --subgoal-spec FetchPush-v4                   # -> ./subgoal_FetchPush-v4.onnx
"""


def register(sub) -> None:
    p = sub.add_parser("export",
                       help="export a state-critic checkpoint to ONNX (opset 18, parity-checked against torch)",
                       description=DESCRIPTION)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="state-critic checkpoint (.json, .safetensors or their stem)")
    src.add_argument("--subgoal-spec", metavar="SPEC",
                     help="export the no-training SubgoalCritic of this task (built-in task name or a spec .toml path) instead")
    src.add_argument("--reseal", metavar="FILE",
                     help="re-seal an exported .onnx you changed on purpose (e.g. re-saved by onnxsim or onnxslim): "
                          "write the content hash of its current bytes, so it loads verified again (in place, or "
                          "to --out)")
    p.add_argument("--out", default=None,
                   help="output .onnx file (default: beside the input: CHECKPOINT.onnx next to the checkpoint, "
                        "subgoal_TASK.onnx next to a .toml spec or in the current folder for a built-in spec name, "
                        "the file itself for --reseal; .b1.onnx for --batch 1)")
    p.add_argument("--batch", default="dynamic", choices=["1", "dynamic"],
                   help="'dynamic' (any batch size) or '1' (fixed batch 1, for control loops)")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset")
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


def default_out(args) -> Path:
    """Where ``export`` writes without ``--out``: beside its input (``CHECKPOINT.onnx`` next to the
    checkpoint; ``subgoal_TASK.onnx`` next to a ``.toml`` spec, or in the current folder for a
    built-in spec name), ``.b1.onnx`` for ``--batch 1``."""
    from prm_critic._io import checkpoint_paths

    suffix = ".b1.onnx" if args.batch == "1" else ".onnx"
    if args.subgoal_spec is not None:
        from prm_critic.robotics.spec import load_spec

        spec_path = Path(args.subgoal_spec)
        folder = spec_path.parent if spec_path.suffix == ".toml" else Path(".")
        return folder / f"subgoal_{load_spec(args.subgoal_spec).name}{suffix}"
    stem = checkpoint_paths(args.checkpoint)[0].with_suffix("")
    return stem.parent / f"{stem.name}{suffix}"


def _export(args) -> Path:
    from prm_critic.onnx.export import export_state_critic

    batch = 1 if args.batch == "1" else "dynamic"
    out = args.out if args.out is not None else default_out(args)
    if args.subgoal_spec is not None:
        from prm_critic.onnx.export import export_subgoal_critic
        from prm_critic.robotics.make import make_env
        from prm_critic.robotics.spec import load_spec
        from prm_critic.robotics.subgoals import SubgoalCritic

        if args.task is not None:
            raise ValueError("--task: not used with --subgoal-spec (the spec names the task)")
        spec = load_spec(args.subgoal_spec)
        env = make_env(spec)
        try:
            critic = SubgoalCritic(spec, env)
        finally:
            env.close()
        path = export_subgoal_critic(critic, out, batch=batch, opset=args.opset, ir_version=args.ir_version)
    else:
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
