"""Value order and AUROC of every learned potential, on one evaluation set per task that no critic was
trained on.

For each critic checkpoint in ``benchmarks/rl/critics`` (ensembles included), the head each RL run
used as its potential is scored on every state of a fresh ``prm-critic collect`` folder of its task
(scripted episodes, seeds far from every training folder's), and two metrics are recorded:

* value order: the Spearman correlation of the value with time inside each successful episode,
  averaged over them (the metric GVL and ProcVLM report: a progress estimate rises along a success);
* AUROC: the value of every state against its episode's success (does the value tell successes from
  failures).

    python -m benchmarks.rl.critic_order            # collects critic_data/<task>_order_eval if missing

Results go to ``benchmarks/results/rl_critic_order.json`` (the command, the evaluation folder's record
and, per critic file, its SHA-256 and the metrics per head), which ``benchmarks/rl/report.py`` shows in
the learned-potential tables. A critic whose file changed since it was measured is measured again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.report_io import write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RAW = ROOT / "benchmarks" / "results" / "rl_critic_order.json"
CRITICS = HERE / "critics"
#: per task: the evaluation episodes (seed far from every training folder's: 0, 1000, 50000, 51000)
EVAL = {"FetchPush-v4": dict(episodes=100, seed=70000), "PointMaze_Medium-v3": dict(episodes=60, seed=70000)}


def file_sha(path: Path) -> str:
    """SHA-256 of a critic's JSON and, when it has one, its weights file (an ensemble's: its members')."""
    h = hashlib.sha256(path.read_bytes())
    w = path.with_suffix(".safetensors")
    if w.is_file():
        h.update(w.read_bytes())
    doc = json.loads(path.read_text())
    for m in doc.get("members", []) if doc.get("format") == "prm-critic/critic-ensemble" else []:
        h.update(file_sha(path.parent / m["path"]).encode())
    return h.hexdigest()


def eval_folder(task: str, root: Path) -> Path:
    from prm_critic.robotics.collection import collect

    out = root / f"{task}_order_eval"
    collect(task, out, episodes=EVAL[task]["episodes"], seed=EVAL[task]["seed"], progress=False)
    return out


def measure(critic_path: Path, folder: Path) -> dict:
    from prm_critic.models.evaluate import evaluate_state_critic
    from prm_critic.robotics.collection import load_shard
    from prm_critic.sb3.envs import resolve_critic

    shards = [load_shard(f) for f in sorted((folder / "shards").glob("shard_*.npz"))]
    x = np.concatenate([d["x"] for d in shards])
    ep = np.concatenate([d["episode"] for d in shards])
    t = np.concatenate([d["t"] for d in shards])
    ok = np.concatenate([np.asarray([dict(zip(d["ep_index"].tolist(), d["ep_success"].tolist()))[e]
                                     for e in d["episode"].tolist()], bool) for d in shards])
    meta = json.loads((folder / "meta.json").read_text())
    critic = resolve_critic(str(critic_path), meta["spec"]["task"]["name"])
    out = {}
    for head in ("progress", "success"):
        class Head:  # the one head as the success score evaluate_state_critic reads
            obs_dim = getattr(critic, "obs_dim", None)

            def score(self, xs, _h=head):
                from prm_critic import StepScores

                s = getattr(critic.score(xs), _h)
                return StepScores(progress=s, success=s)

        m = evaluate_state_critic(Head(), x, episode=ep, t=t, ep_success=ok)
        out[head] = {"value_order": m["spearman_success_time"], "auroc": m["auroc_success"],
                     "n_success_episodes": m["n_success_episodes"], "n_episodes": m["n_episodes"]}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-root", type=Path, default=ROOT / "critic_data", help="where the evaluation folders go")
    p.add_argument("--raw", type=Path, default=RAW)
    a = p.parse_args(argv)
    raw = json.loads(a.raw.read_text()) if a.raw.is_file() else {}
    raw["command"] = "python -m benchmarks.rl.critic_order"
    crit = raw.setdefault("critics", {})
    folders: dict[str, Path] = {}
    for path in sorted(CRITICS.glob("*.json")):
        if path.name.endswith(".metrics.json"):
            continue
        doc = json.loads(path.read_text())
        task = doc.get("meta", {}).get("task") or doc.get("task")
        if task is None and doc.get("format") == "prm-critic/critic-ensemble":  # the members' task
            task = json.loads((path.parent / doc["members"][0]["path"]).read_text())["meta"]["task"]
        if task not in EVAL:
            print(f"skip {path.name}: no evaluation set for task {task!r}")
            continue
        sha = file_sha(path)
        if crit.get(path.stem, {}).get("sha256") == sha:
            continue
        if task not in folders:
            folders[task] = eval_folder(task, a.data_root)
            raw.setdefault("eval", {})[task] = {"folder": folders[task].name, **EVAL[task], "policy": "scripted"}
        crit[path.stem] = {"task": task, "sha256": sha, **measure(path, folders[task])}
        print(path.stem, json.dumps(crit[path.stem]["progress"]), json.dumps(crit[path.stem]["success"]))
        write_json(a.raw, raw, indent=2, sort_keys=True, default=float)
    write_json(a.raw, raw, indent=2, sort_keys=True, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
