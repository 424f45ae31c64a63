"""``prm-critic export``: export a state-critic checkpoint to one self-contained ONNX file."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="export a state-critic checkpoint to ONNX (opset 18, parity-checked against torch)",
        description="Export a state-critic checkpoint (.safetensors + .json) to one .onnx file with "
        "normalisation and metadata inside; the export is checked against torch before it is written.",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint path (.safetensors, .json or their common stem)")
    p.add_argument("--out", default=None,
                   help="output .onnx file (default: export/<checkpoint name>.onnx, or .b1.onnx for --batch 1)")
    p.add_argument("--batch", default="dynamic", choices=["1", "dynamic"],
                   help="'dynamic' (any batch size) or '1' (fixed batch 1, for control loops); default dynamic")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset (default 18)")
    p.add_argument("--task", default=None, help="task name to store in the metadata (default: from the checkpoint)")
    p.set_defaults(func=run)


def run(args) -> int:
    from prm_critic.models.checkpoint import checkpoint_paths
    from prm_critic.onnx.export import export_state_critic, read_onnx_metadata

    batch = 1 if args.batch == "1" else "dynamic"
    out = args.out
    if out is None:
        stem = checkpoint_paths(args.checkpoint)[0].with_suffix("").name
        out = Path("export") / (f"{stem}.b1.onnx" if batch == 1 else f"{stem}.onnx")
    path = export_state_critic(args.checkpoint, out, batch=batch, opset=args.opset, task=args.task)
    meta = read_onnx_metadata(path)
    print(f"wrote {path} ({path.stat().st_size} bytes): task={meta.get('task')!r} obs_dim={meta['obs_dim']} "
          f"batch={meta['batch']} opset={meta['opset']} exporter={meta['exporter']} "
          f"label_family={meta['label_family']!r}; parity with torch OK (rtol 1e-4, atol 1e-5)")
    return 0
