"""Where a learned potential departs from the spec's, on the learner's own replay buffer.

Reads a training state of a shaped HER run (``benchmarks/rl/run.py`` saves one at every evaluation
under ``<run>/resume/``; its ``PRMHerReplayBuffer`` rows hold the critic inputs of every stored
transition) and, for windows of env steps (what the learner stored early, midway, late), compares a
learned critic's potential with the spec's subgoal progress on the transitions as stored and as
HER relabels them ("future" goals from the same episode, as the learner samples four of every five):

* Spearman rank correlation of Phi(s) (learned vs spec);
* mean |dPhi| per step, with dPhi = Phi(s') - Phi(s), of each, and the correlation of the two dPhi
  (how well the learned shaping term follows the spec's, whose shaping works);
* mean |dPhi learned - dPhi spec| by the number of the spec's subgoals that hold in s (where they
  disagree most).

    python -m benchmarks.rl.buffer_diagnosis --state RUN/resume/state-70000.safetensors \\
        --critic benchmarks/rl/critics/push_mc.json --head success --windows 0:10000 20000:30000 60000:70000

Each measurement is stored in ``benchmarks/results/rl_buffer_diagnosis.json`` (keyed by task, then
by the training state it read, ``<run label>/seed<N>@<env steps>``, then by critic and head), which
``benchmarks/rl/report.py`` renders, one table per state. The run is read from the state's folders
(``<label>/seed<N>/resume/state-N.safetensors``); a state copied elsewhere names it with ``--run``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.report_io import write_json

HERE = Path(__file__).resolve().parent
RAW = HERE.parents[1] / "benchmarks" / "results" / "rl_buffer_diagnosis.json"


def relabel_future(x, next_x, ep_start, ep_len, idx, layout, rng):
    """HER "future" relabelling of the stored transitions ``idx`` (env 0): the desired goal of s and s'
    becomes the achieved goal of s' at a random later step of the same episode."""
    des, ach = layout.slices["desired_goal"], layout.slices["achieved_goal"]
    n = len(ep_start)
    cur = (idx - ep_start[idx]) % n
    fut = (rng.integers(cur, ep_len[idx]) + ep_start[idx]) % n
    xr, nxr = x[idx].copy(), next_x[idx].copy()
    xr[:, des] = next_x[fut][:, ach]
    nxr[:, des] = next_x[fut][:, ach]
    return xr, nxr


def compare(phi_l, phi_s, x, nx, holds) -> dict:
    from scipy.stats import spearmanr

    pl, ps = phi_l(x), phi_s(x)
    dl, ds = phi_l(nx) - pl, phi_s(nx) - ps
    err = np.abs(dl - ds)
    stage = holds(x).sum(axis=1)
    return {"n": int(len(x)), "spearman_phi": float(spearmanr(pl, ps).statistic),
            "dphi_learned": float(np.abs(dl).mean()), "dphi_spec": float(np.abs(ds).mean()),
            "dphi_corr": float(np.corrcoef(dl, ds)[0, 1]) if dl.std() > 0 and ds.std() > 0 else None,
            "dphi_err": float(err.mean()),
            "dphi_err_by_stage": {int(k): float(err[stage == k].mean()) for k in np.unique(stage)}}


def run_of(state: Path, config: dict, run: str | None = None) -> str:
    """The run (``<label>/seed<N>``) that wrote ``state``: ``run`` if given, else the state's folders
    (``<label>/seed<N>/resume/state-N.safetensors``). Checked against the state's own config: the seed,
    and HER / scale in the label's ``prm_her_s<scale>`` / ``prm_s<scale>`` prefix."""
    if run is None:
        parts = state.resolve().parts
        if len(parts) < 4 or parts[-2] != "resume" or not parts[-3].startswith("seed"):
            raise SystemExit(f"--state: {str(state)!r} is not in a run's <label>/seed<N>/resume/ folder; "
                             "name the run with --run LABEL/seedN")
        run = f"{parts[-4]}/{parts[-3]}"
    label, sep, seed = run.rpartition("/seed")
    if not sep or not label or not seed.isdigit():
        raise SystemExit(f"--run: expected LABEL/seedN (e.g. prm_her_s10/seed3), got {run!r}")
    if int(seed) != config.get("seed"):
        raise SystemExit(f"--run: {run!r} names seed {seed}, but the state was trained with seed {config.get('seed')}")
    from benchmarks.rl.run import config_label

    prefix = config_label("prm_her" if config.get("her") else "prm", config.get("scale"), False)
    if label != prefix and not label.startswith(prefix + "_"):
        raise SystemExit(f"--run: {run!r} does not match the state's config (expected a label starting "
                         f"{prefix!r}: her={config.get('her')}, scale={config.get('scale')})")
    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state", type=Path, required=True, help="a training state (state-N.safetensors) of a shaped HER run")
    p.add_argument("--critic", type=Path, required=True, help="learned critic checkpoint (.json)")
    p.add_argument("--head", default="success", choices=["success", "progress"])
    p.add_argument("--random-weights", type=int, default=None, metavar="SEED", help="run.py's uninformed control")
    p.add_argument("--windows", nargs="+", default=["0:10000", "20000:30000", "60000:70000"],
                   help="env-step windows START:END of stored transitions")
    p.add_argument("--task", default="FetchPush-v4")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run", default=None, metavar="LABEL/seedN",
                   help="the run that wrote --state (default: read from its folders)")
    p.add_argument("--raw", type=Path, default=RAW)
    a = p.parse_args(argv)
    meta_path = a.state.with_suffix(".json")
    if not a.state.is_file() or not meta_path.is_file():
        raise SystemExit(f"--state: expected a training state state-N.safetensors with its .json, got {str(a.state)!r}")
    meta = json.loads(meta_path.read_text())
    if "prm_rows" not in meta.get("buffer", {}).get("arrays", []):
        raise SystemExit(f"--state: {str(a.state)!r} holds no relabelling rows (not a shaped HER run's "
                         "PRMHerReplayBuffer)")
    config = meta["extra"]["config"]
    if config["task"] != a.task:
        raise SystemExit(f"--state: the run trained {config['task']!r}, expected --task {a.task!r}")
    run = run_of(a.state, config, a.run)
    from safetensors.numpy import load_file

    from benchmarks.rl.potential_noise import task_critics
    from prm_critic.robotics.layout import CriticInputLayout

    t = load_file(str(a.state))
    x, nx = t["buffer.prm_rows.x"][:, 0], t["buffer.prm_rows.next_x"][:, 0]
    ep_start, ep_len = t["buffer.ep_start"][:, 0], t["buffer.ep_length"][:, 0]
    _, learned, subgoal = task_critics(a.task, a.critic, a.random_weights)
    layout = learned.critic_info().layout  # declared by every critic, an ensemble's from its members
    if isinstance(layout, CriticInputLayout):
        layout = layout.to_dict()
    if layout != subgoal.layout.to_dict():
        raise SystemExit(f"--critic: its critic-input layout is not the task's (declares {layout!r}, "
                         f"expected {subgoal.layout.to_dict()!r})")

    def phi_l(v):
        return getattr(learned.score(v), a.head).astype(np.float64)

    def phi_s(v):
        return subgoal.score(v).progress.astype(np.float64)

    rng = np.random.default_rng(a.seed)
    out = {}
    for w in a.windows:
        lo, hi = (int(v) for v in w.split(":"))
        idx = np.arange(lo, min(hi, len(x)))
        idx = idx[ep_len[idx] > 0]  # finished episodes only: HER samples nothing else
        if len(idx) == 0:
            raise SystemExit(f"--windows: {w} holds no transition of a finished episode in this buffer ({len(x)} stored)")
        xr, nxr = relabel_future(x, nx, ep_start, ep_len, idx, subgoal.layout, rng)
        out[w] = {"stored": compare(phi_l, phi_s, x[idx], nx[idx], subgoal.evaluator.holds),
                  "relabelled": compare(phi_l, phi_s, xr, nxr, subgoal.evaluator.holds)}
        for kind in ("stored", "relabelled"):
            r = out[w][kind]
            print(f"{w:>13s} {kind:10s} n={r['n']:6d} spearman(Phi) {r['spearman_phi']:.3f}  |dPhi| learned "
                  f"{r['dphi_learned']:.4f} spec {r['dphi_spec']:.4f}  corr(dPhi) {r['dphi_corr']}  "
                  f"err {r['dphi_err']:.4f}  by stage {r['dphi_err_by_stage']}")

    key = f"critic-{a.critic.stem}-{a.head}" + (f"_randw{a.random_weights}" if a.random_weights is not None else "")
    # the command as run on the run's own folder (a state file is replaced at the next evaluation: copy it to keep it)
    args = list(sys.argv[1:] if argv is None else argv)
    if "--state" in args:
        args[args.index("--state") + 1] = f"benchmarks/rl/results/runs/{a.task}/{run}/resume/{a.state.name}"
    if "--run" in args:
        del args[args.index("--run"):args.index("--run") + 2]
    raw = json.loads(a.raw.read_text()) if a.raw.is_file() else {}
    raw.setdefault(a.task, {}).setdefault(f"{run}@{meta['num_timesteps']}", {})[key] = {
        "windows": out, "state": f"`{run}`, its training state at {meta['num_timesteps']} env steps",
        "run_config": {k: config.get(k) for k in ("her", "scale", "seed")},
        "command": "python -m benchmarks.rl.buffer_diagnosis " + " ".join(args)}
    write_json(a.raw, raw, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
