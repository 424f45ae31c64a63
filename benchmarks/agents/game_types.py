"""The agents benchmark over game types: label, train a per-type PRM, play the test seeds.

For each type of ``plan.py`` (its environment spec and its label / tune / test seeds, fixed before
the runs) the stages run the project's own command lines in this process, in order:

``labels``  ``python -m agents.textworld_agent.labels`` on the type's label seeds (Monte-Carlo
            labels, ``--k`` rollouts per step, ``--siblings`` terminal siblings per state) into
            ``.cache/agents_types/TYPE/labels``; its ``summary.json`` is copied to
            ``benchmarks/agents/types/TYPE/labels_summary.json``, its units (one JSON per labelled
            episode) and settings to ``benchmarks/agents/types/TYPE/label_units``, from which a later
            run with an empty cache resumes (the labeller re-renders the JSONL files from them).
``train``   ``train_prm.py --freeze-encoder --epochs 150 --lr 3e-3`` on those labels into ``benchmarks/agents/prms/TYPE``
            (a head-only checkpoint; ``train_stats.json`` records the labels' SHA-256); skipped when
            that folder holds a PRM trained on the same labels, refused when on other labels.
``tune``    PRM MCTS on the first ``--tune-games`` tuning seeds for each setting of :data:`MCTS_GRID`
            (exploration constant, value aggregation, expansion width, no prior, the PRM as the prior),
            the PRM's and the budget the beam's; the best success (then the fewest policy calls, then
            the grid's order) is written to ``benchmarks/agents/types/TYPE/mcts_tuning.json``.
``test``    ``run.py --type TYPE --split test`` for the rows of :data:`TEST_RUNS`: the base policy,
            outcome best-of-4 and the gold path, then the PRM beam and PRM MCTS with the type's PRM
            and with the random and constant control critics (same searches, same policy seeds);
            with a tuned MCTS setting other than the default, its MCTS rows too (tagged with it).

``--prm-tag`` / ``--prm`` play the test searches with another PRM (the transfer rows: ``all-types``,
``loo-TYPE``); ``train`` with ``--labels-of`` trains one PRM on the labels of several types.
Every stage is resumable (labels per unit, one result file per episode).

    python -m benchmarks.agents.game_types --type twx-coin
    python -m benchmarks.agents.game_types --type twx-coin --stages test
    python -m benchmarks.agents.report --render
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from benchmarks.agents.plan import TYPES, game_type

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

STAGES = ("labels", "train", "tune", "test")
CACHE = Path(".cache") / "agents_types"
#: committed per-type data (label summaries) and PRMs, relative to the repository root (the paths
#: are recorded in the training statistics)
DATA = Path("benchmarks") / "agents" / "types"
PRMS = Path("benchmarks") / "agents" / "prms"
#: the test rows, in this order (each search's PRM row and its controls together, so a run cut short
#: leaves complete comparisons): (methods, critic); the critic searches with the PRM get its tag
TEST_RUNS = (("prm_beam", "prm"), ("prm_beam", "random"), ("prm_beam", "constant"), ("base,outcome_bon4,gold", "prm"),
             ("prm_mcts", "prm"), ("prm_mcts", "random"), ("prm_mcts", "constant"))


#: the MCTS settings tried on the tuning seeds (run.py --mcts-*): (exploration, aggregate, branch, selection, prior)
MCTS_GRID = ((1.0, "last", 2, "puct", "policy"), (0.5, "last", 2, "puct", "policy"), (2.0, "last", 2, "puct", "policy"),
             (1.0, "mean", 2, "puct", "policy"), (1.0, "last", 3, "puct", "policy"), (1.0, "last", 2, "uct", "policy"),
             (1.0, "last", 2, "puct", "critic"))
_FIELDS = ("exploration", "aggregate", "branch", "selection", "prior")


def _mcts_args(setting) -> list[str]:
    c, agg, b, sel, prior = setting
    return ["--mcts-exploration", str(c), "--mcts-aggregate", agg, "--mcts-branch", str(b), "--mcts-selection", sel,
            "--mcts-prior", prior]


def stage_tune(name: str, prm: Path, prm_tag: str, games: int) -> dict:
    """PRM MCTS over :data:`MCTS_GRID` on the first ``games`` tuning seeds; the chosen setting."""
    from benchmarks.agents import run
    from benchmarks.agents.report import load_results

    t = game_type(name)
    seeds = list(t.tune)[:games]
    out = Path(run.DEFAULT_OUT) / "types" / name / "tune"
    rows = []
    for setting in MCTS_GRID:
        run.main(["--type", name, "--split", "tune", "--seeds", f"{seeds[0]}-{seeds[-1]}", "--methods", "prm_mcts",
                  "--prm", str(prm), "--tag", prm_tag, *_mcts_args(setting)])
        tag = run.MCTSSettings(setting[2], setting[0], setting[1], setting[3], setting[4]).tag
        from prm_critic.text.envs import parse_env_spec

        res = load_results(out, seeds, parse_env_spec(t.env).tag).get("+".join(["prm_mcts", prm_tag, *([tag] if tag else [])]), [])
        rows.append({"setting": dict(zip(_FIELDS, setting)), "tag": tag,
                     "episodes": len(res), "success": sum(r["won"] for r in res) / max(len(res), 1),
                     "policy_calls": sum(r["policy_calls"] for r in res) / max(len(res), 1)})
    best = max(range(len(rows)), key=lambda i: (rows[i]["success"], -rows[i]["policy_calls"], -i))
    result = {"type": name, "tune_seeds": seeds, "prm": str(prm), "grid": rows, "chosen": rows[best]}
    (DATA / name).mkdir(parents=True, exist_ok=True)
    (DATA / name / "mcts_tuning.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["chosen"]))
    return result


def tuned_setting(name: str):
    """The MCTS setting chosen on the tuning seeds (``None`` when not tuned or the default)."""
    f = DATA / name / "mcts_tuning.json"
    if not f.is_file():
        return None
    chosen = json.loads(f.read_text())["chosen"]
    s = chosen["setting"]
    return None if not chosen["tag"] else tuple(s[k] for k in _FIELDS)


def _seeds(r: range) -> str:
    return f"{r.start}-{r.stop - 1}"


def labels_dir(name: str) -> Path:
    return CACHE / name / "labels"


def stage_labels(name: str, k: int, siblings: int, max_steps: int) -> None:
    from agents.textworld_agent import labels

    t = game_type(name)
    out = labels_dir(name)
    kept = DATA / name / "label_units"
    if kept.is_dir() and not out.exists():  # the committed units: the labeller resumes from them
        shutil.copytree(kept, out)
    labels.main(["--env", t.env, "--out", str(out), "--seeds", _seeds(t.label), "--k", str(k),
                 "--siblings", str(siblings), "--max-steps", str(max_steps)])
    (DATA / name).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "summary.json", DATA / name / "labels_summary.json")
    tmp = kept.with_name(kept.name + ".tmp")  # whole or not at all: a kill leaves the previous units
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(out, tmp, ignore=lambda d, names: [n for n in names if n.endswith(".jsonl")])
    shutil.rmtree(kept, ignore_errors=True)
    tmp.rename(kept)


def _label_files(names: list[str]) -> list[str]:
    args = []
    for n in names:
        d = labels_dir(n)
        if not (d / "labels.jsonl").is_file():
            raise SystemExit(f"train: no labels of type {n} in {d}; run the 'labels' stage first")
        args += ["--labels", str(d / "labels.jsonl")]
        if (d / "labels_siblings.jsonl").is_file() and (d / "labels_siblings.jsonl").stat().st_size:
            args += ["--extra", str(d / "labels_siblings.jsonl")]
    return args


def stage_train(out: Path, names: list[str], epochs: int, lr: float) -> None:
    from benchmarks.agents import train_prm
    from prm_critic.integrity import sha256_bytes

    files = _label_files(names)
    stats = out / "train_stats.json"
    if stats.is_file():
        want = [sha256_bytes(Path(f).read_bytes()) for f, flag in zip(files[1::2], files[::2]) if flag == "--labels"]
        got = json.loads(stats.read_text())["labels_sha256"]["labels"]
        got = [got] if isinstance(got, str) else got
        if got != want:
            raise SystemExit(f"train: {out} holds a PRM trained on other labels ({got}); expected {want} "
                             f"(remove the folder to retrain)")
        print(f"train: {out} already holds the PRM of these labels")
        return
    train_prm.main([*files, "--freeze-encoder", "--epochs", str(epochs), "--lr", str(lr), "--out", str(out)])


def stage_test(name: str, prm: Path, prm_tag: str, runs=TEST_RUNS, extra: list[str] = ()) -> None:
    from benchmarks.agents import run

    for methods, critic in runs:
        args = ["--type", name, "--split", "test", "--methods", methods, "--reps", "1", *extra]
        if critic == "prm":
            if any(m.startswith("prm") for m in methods.split(",")):
                args += ["--prm", str(prm), "--tag", prm_tag]
        else:
            args += ["--critic", critic]
        run.main(args)
    tuned = tuned_setting(name)
    for methods, critic in (runs if tuned else ()):
        if "prm_mcts" not in methods.split(","):
            continue
        args = ["--type", name, "--split", "test", "--methods", "prm_mcts", "--reps", "1", *_mcts_args(tuned)]
        run.main(args + (["--prm", str(prm), "--tag", prm_tag] if critic == "prm" else ["--critic", critic]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--type", required=True, choices=sorted(TYPES))
    ap.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, from {STAGES}")
    ap.add_argument("--k", type=int, default=4, help="labels: rollouts per step")
    ap.add_argument("--siblings", type=int, default=0, help="labels: terminal siblings per state")
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=150, help="train: epochs (the committed cooking PRM's)")
    ap.add_argument("--lr", type=float, default=3e-3, help="train: the head's learning rate")
    ap.add_argument("--labels-of", default=None,
                    help="train: the types whose labels train the PRM (comma-separated; default --type)")
    ap.add_argument("--prm", type=Path, default=None, help="the PRM folder (default benchmarks/agents/prms/TYPE)")
    ap.add_argument("--prm-tag", default=None, help="the PRM rows' tag (default the type's name)")
    ap.add_argument("--tune-games", type=int, default=16, help="tune: the first N tuning seeds")
    ap.add_argument("--test-runs", default=None, help="test: only these critic rows, e.g. 'prm' (default all)")
    a = ap.parse_args(argv)
    if Path.cwd().resolve() != ROOT:
        raise SystemExit(f"game_types.py: run from the repository root {ROOT.name}/ (its paths are recorded relative to it), "
                         f"not from {Path.cwd()}")
    stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise SystemExit(f"--stages: expected names from {STAGES}, got {bad}")
    prm = a.prm or PRMS / a.type
    tag = a.prm_tag or a.type
    runs = TEST_RUNS if a.test_runs is None else tuple(r for r in TEST_RUNS if r[1] in a.test_runs.split(","))
    if "labels" in stages:
        stage_labels(a.type, a.k, a.siblings, a.max_steps)
    if "train" in stages:
        names = [n.strip() for n in (a.labels_of or a.type).split(",")]
        for n in names:
            game_type(n)
        stage_train(prm, names, a.epochs, a.lr)
    if "tune" in stages:
        stage_tune(a.type, prm, tag, a.tune_games)
    if "test" in stages:
        stage_test(a.type, prm, tag, runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
