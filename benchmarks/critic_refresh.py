"""Does refreshing a learned critic on the policy's own episodes fix its staleness?

A success critic is trained on the behaviour data it starts from (the spec's noisy scripted
controller, outcome labels). An RL policy then visits other states. This script measures the
critic's success prediction on the *policy's* held-out episodes before and after offline refreshes
with :class:`prm_critic.sb3.CriticRefreshCallback` (the same update the callback runs during
training: BCE on outcome labels of recent episodes), and on held-out *scripted* episodes (does the
refresh make it forget the behaviour data?). The spec's untrained ``SubgoalCritic`` is the reference.

    OMP_NUM_THREADS=1 python benchmarks/critic_refresh.py --policy benchmarks/rl/results/runs/FetchPush-v4/prm_her_s10/seed0/policy.json

``--policy`` is a ``train-policy`` checkpoint for the task (the one above comes from
``python benchmarks/rl/run.py --task FetchPush-v4 --config prm_her --scale 10 --seed 0``).
Policy episodes use its stochastic actions; the first ``--refresh-episodes`` are the refresh data,
the next ``--heldout-episodes`` are never trained on. Resumable: collection, labels and the
critic's training skip what is on disk; the refreshes themselves take seconds and are re-run.
Writes a markdown table (``--table``) and a plot of held-out AUROC and Brier score vs refresh rounds (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from prm_critic.models.pipeline import train_critic_from_data
from prm_critic.models import load_state_critic
from prm_critic.models.evaluate import evaluate_state_critic, score_in_batches
from prm_critic.models.train import TrainConfig
from prm_critic.robotics.collect import collect
from prm_critic.robotics.dataset import load_steps, split_episodes
from prm_critic.robotics.labels import label
from prm_critic.robotics.make import CriticInputLayout
from prm_critic.robotics.subgoals import SubgoalCritic
from prm_critic.sb3 import load_policy


def episodes_of(table, ids) -> list[tuple[np.ndarray, bool]]:
    """``[(x_0 .. x_T, success)]`` of the given episode ids (states in time order plus the last next state)."""
    out = []
    for e in ids:
        rows = np.nonzero(table.episode == e)[0]
        rows = rows[np.argsort(table.t[rows])]
        out.append((np.concatenate([table.x[rows], table.next_x[rows[-1:]]]), bool(table.ep_success[rows[0]])))
    return out


def subset(table, ids):
    keep = np.isin(table.episode, np.asarray(list(ids)))
    return {"x": table.x[keep], "episode": table.episode[keep], "t": table.t[keep], "ep_success": table.ep_success[keep]}


def metrics(critic, part) -> dict:
    m = evaluate_state_critic(critic, part["x"], episode=part["episode"], t=part["t"], ep_success=part["ep_success"])
    _, s = score_in_batches(critic, part["x"])
    y = part["ep_success"].astype(np.float64)
    return {"auroc": m["auroc_success"], "auroc_early": m["auroc_success_early"],
            "brier": float(np.mean((np.asarray(s, np.float64) - y) ** 2)), "mean_score": float(np.mean(s)),
            "success_rate": float(y.mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="FetchPush-v4")
    ap.add_argument("--policy", required=True, help="train-policy checkpoint (policy.json) for --task")
    ap.add_argument("--out", default="prm_runs/refresh")
    ap.add_argument("--scripted-episodes", type=int, default=300)
    ap.add_argument("--refresh-episodes", type=int, default=100)
    ap.add_argument("--heldout-episodes", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=40, help="critic training epochs on the scripted data")
    ap.add_argument("--rounds", type=int, nargs="+", default=[1, 2, 5, 10, 20],
                    help="report after this many refreshes (each: --n-updates Adam steps)")
    ap.add_argument("--n-updates", type=int, default=50)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--table", default="docs/critic_refresh.md")
    ap.add_argument("--plot", default="docs/critic_refresh.png")
    a = ap.parse_args(argv)
    from prm_critic.sb3 import CriticRefreshCallback

    out = Path(a.out) / a.task
    t0 = time.perf_counter()
    scripted = out / "scripted"
    collect(a.task, scripted, episodes=a.scripted_episodes, policy="scripted", seed=a.seed)
    label(scripted, "outcome")
    ckpt = out / "critic_outcome"
    if not ckpt.with_suffix(".json").exists():
        train_critic_from_data(scripted, "outcome", ckpt, config=TrainConfig(epochs=a.epochs, seed=a.seed),
                               holdout=0.25, seed=a.seed)
    # the policy is copied beside the data, so that a later retrain of the run does not change this benchmark
    pol_dir = out / "policy"
    pol_dir.mkdir(parents=True, exist_ok=True)
    src = Path(a.policy)
    for suffix in (".json", ".safetensors"):
        if not (pol_dir / f"policy{suffix}").exists():
            shutil.copyfile(src.with_suffix(suffix), pol_dir / f"policy{suffix}")
    pol_meta = json.loads((pol_dir / "policy.json").read_text())
    polic = out / "policy_episodes"
    n_pol = a.refresh_episodes + a.heldout_episodes
    collect(a.task, polic, episodes=n_pol, policy=str(pol_dir / "policy.json"), seed=100_000 + a.seed,
            policy_loader=load_policy)
    label(polic, "outcome")
    t_data = time.perf_counter() - t0

    s_table = load_steps(scripted, "outcome")
    _, s_test = split_episodes(s_table, holdout=0.25, seed=a.seed)  # the critic's own held-out split
    s_held = {"x": s_test.x, "episode": s_test.episode, "t": s_test.t, "ep_success": s_test.ep_success}
    p_table = load_steps(polic, "outcome")
    ids = np.unique(p_table.episode)
    refresh_ids, held_ids = ids[:a.refresh_episodes], ids[a.refresh_episodes:n_pol]
    p_held = subset(p_table, held_ids)

    layout = CriticInputLayout.from_dict(p_table.layout.to_dict())
    spec_critic = SubgoalCritic(p_table.spec, layout=layout)
    rows = [{"critic": "spec (untrained SubgoalCritic)", "round": None,
             "policy": metrics(spec_critic, p_held), "scripted": metrics(spec_critic, s_held)}]
    critic = load_state_critic(ckpt)
    cb = CriticRefreshCallback(critic, head="success", n_updates=a.n_updates, lr=a.lr, window=len(refresh_ids),
                               seed=a.seed)
    for x, ok in episodes_of(p_table, refresh_ids):
        cb.add_episode(x, ok)
    rows.append({"critic": "outcome critic (scripted data)", "round": 0,
                 "policy": metrics(critic, p_held), "scripted": metrics(critic, s_held)})
    t1 = time.perf_counter()
    for r in range(1, max(a.rounds) + 1):
        cb.refresh()
        if r in a.rounds:
            rows.append({"critic": "outcome critic, refreshed", "round": r,
                         "policy": metrics(critic, p_held), "scripted": metrics(critic, s_held)})
    t_refresh = time.perf_counter() - t1

    def f(v):
        return "n/a" if v is None or not np.isfinite(v) else f"{v:.3f}"

    pol_rate = float(np.mean([ok for _, ok in episodes_of(p_table, ids[:n_pol])]))
    lines = [
        "# Critic refresh on the policy's own episodes",
        "",
        f"Generated by `benchmarks/critic_refresh.py` (command below). Task {a.task}. Critic: MLP trained "
        f"{a.epochs} epochs on {a.scripted_episodes} scripted-controller episodes with outcome labels. Policy: "
        f"`{pol_meta.get('algo')}` checkpoint at {pol_meta.get('num_timesteps')} env steps (stochastic actions), "
        f"{n_pol} episodes, success rate {pol_rate:.2f}: the first {len(refresh_ids)} are the refresh data, "
        f"the other {len(held_ids)} are held out. One refresh = {a.n_updates} Adam steps (lr {a.lr:g}, batch 256) "
        "of BCE on the refresh episodes' outcome labels (the update `CriticRefreshCallback` runs in training).",
        "",
        "Success AUROC: per-step success score vs the episode's final success (early = first 25% of each "
        "episode). Brier: mean squared error of the per-step success score against that outcome.",
        "",
        "| critic | refreshes | policy held-out AUROC | policy held-out AUROC (first 25%) | policy held-out Brier | "
        "policy held-out mean score (true rate) | scripted held-out AUROC | scripted held-out Brier |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, s = r["policy"], r["scripted"]
        lines.append(f"| {r['critic']} | {'-' if r['round'] is None else r['round']} | {f(p['auroc'])} | "
                     f"{f(p['auroc_early'])} | {f(p['brier'])} | {f(p['mean_score'])} ({p['success_rate']:.2f}) | "
                     f"{f(s['auroc'])} | {f(s['brier'])} |")
    lines += ["", f"Data (collection, labels, critic training; skipped when on disk): {t_data:.0f} s; "
              f"{max(a.rounds)} refreshes: {t_refresh:.1f} s.", "", "```bash",
              f"OMP_NUM_THREADS=1 python benchmarks/critic_refresh.py --policy {a.policy}", "```", ""]
    text = "\n".join(lines)
    print(text)
    if a.table:
        Path(a.table).write_text(text)
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        learned = [r for r in rows if r["round"] is not None]
        rr = [r["round"] for r in learned]
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for ax, key, name in ((axes[0], "auroc", "success AUROC (all steps)"), (axes[1], "brier", "Brier score (lower is better)")):
            ax.plot(rr, [r["policy"][key] for r in learned], "o-", label="policy episodes (held out)")
            ax.plot(rr, [r["scripted"][key] for r in learned], "s-", label="scripted episodes (held out)")
            ax.axhline(rows[0]["policy"][key], color="grey", ls=":", label="spec critic, policy episodes")
            ax.set_xlabel(f"refreshes ({a.n_updates} Adam steps each)")
            ax.set_ylabel(name)
            ax.legend(fontsize=8)
        fig.suptitle(f"{a.task}: outcome critic refreshed on the policy's episodes", fontsize=10)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
