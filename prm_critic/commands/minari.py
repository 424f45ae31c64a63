"""``prm-critic minari``: write collected trajectories as a Minari dataset, or read one back.

    prm-critic minari export DATA prm/pointmaze-umaze-v0 --datasets-path minari_data --labels mc
    prm-critic minari export DATA prm/pointmaze-umaze-mc-v0 --reward prm_mc --datasets-path minari_data
    prm-critic minari export DATA prm/pointmaze-umaze-shaped-v0 --reward prm_mc --shaping potential --gamma 0.99
    prm-critic minari import prm/pointmaze-umaze-v0 DATA2 --task PointMaze_UMaze-v3 --datasets-path minari_data

Needs the ``minari`` extra (``--help`` prints the install command that applies).
"""

from __future__ import annotations

DESCRIPTION = """\
Write trajectories collected by prm-critic collect (with their labels, or a label family as the
rewards) as a Minari dataset, or write a Minari dataset in prm-critic's shard format.

  prm-critic minari export DATA prm/pointmaze-umaze-v0 --datasets-path minari_data --labels mc
  prm-critic minari export DATA prm/pointmaze-umaze-mc-v0 --reward prm_mc --datasets-path minari_data
  prm-critic minari export DATA prm/pointmaze-umaze-shaped-v0 --reward prm_mc --shaping potential --gamma 0.99
  prm-critic minari import prm/pointmaze-umaze-v0 DATA2 --task PointMaze_UMaze-v3 --datasets-path minari_data

Needs the minari extra (Minari with its HDF5 storage): {install}
"""


def _add_datasets_path(p) -> None:
    p.add_argument("--datasets-path", default=None,
                   help="folder of the Minari datasets (default: MINARI_DATASETS_PATH, else ~/.minari/datasets)")


def register(sub) -> None:
    from prm_critic.commands._help import install
    from prm_critic.robotics.families import label_families

    p = sub.add_parser("minari", help="export collected trajectories to a Minari dataset, or import one",
                       description=DESCRIPTION.format(install=install("minari")))
    msub = p.add_subparsers(dest="minari_command", metavar="{export,import}", required=True)
    e = msub.add_parser("export", help="write a collected data set (prm-critic collect) as a Minari dataset",
                        description="Write a folder written by prm-critic collect as a Minari dataset: observations, "
                        "actions, env rewards (or a label family as the rewards) and the chosen label families in "
                        "each step's infos.")
    e.add_argument("data", help="collected data folder (meta.json + shards/)")
    e.add_argument("dataset_id", help="Minari dataset id, e.g. prm/pointmaze-umaze-v0")
    _add_datasets_path(e)
    e.add_argument("--labels", nargs="*", default=[], metavar="FAMILY",
                   help="label families to store as infos['prm_<family>'], e.g. --labels mc outcome (or mc,outcome) "
                        "(default: none)")
    e.add_argument("--reward", default="env",
                   help="what the dataset's rewards are: env (the env reward), or prm_<family> for a "
                        f"label family ({', '.join(label_families())}): the label of each step is the reward of "
                        "its transition; the env reward goes to infos['prm_original_reward']")
    e.add_argument("--shaping", default=None,
                   help="potential: with --reward prm_<family>, the env reward shaped by the labels, "
                        "r + gamma * Phi(s') - Phi(s) (Phi(s') = 0 on a true termination) (default: none)")
    e.add_argument("--gamma", type=float, default=None,
                   help="discount of --shaping potential, in (0, 1]: the offline learner's gamma (default: none; "
                        "required with --shaping potential)")
    e.add_argument("--description", default=None, help="dataset description (default: none)")
    e.add_argument("--author", default=None, help="dataset author (default: none)")
    e.set_defaults(func=run_export)
    i = msub.add_parser("import", help="write a Minari dataset in prm-critic's shard format",
                        description="Write the episodes of a Minari dataset into a new folder in prm-critic's shard "
                        "format (meta.json + shards/), ready for prm-critic label. --spec is the same option as "
                        "--task.")
    i.add_argument("dataset", help="Minari dataset id or dataset folder")
    i.add_argument("out", help="output folder (new)")
    i.add_argument("--task", "--spec", dest="spec", metavar="TASK", required=True,
                   help="built-in task name or a spec .toml path; --spec is the same option")
    _add_datasets_path(i)
    i.add_argument("--shard-size", type=int, default=10, help="episodes per shard file")
    i.set_defaults(func=run_import)


def run_export(args) -> int:
    from prm_critic.commands._help import list_items
    from prm_critic.robotics.minari import REWARD_METADATA_KEY, export_minari

    ds = export_minari(args.data, args.dataset_id, datasets_path=args.datasets_path, labels=list_items(args.labels),
                       reward=args.reward, shaping=args.shaping, gamma=args.gamma,
                       description=args.description, author=args.author)
    print(f"wrote Minari dataset {args.dataset_id!r}: {ds.total_episodes} episodes, {ds.total_steps} steps, "
          f"in {ds.storage.data_path.parent}")
    rec = ds.storage.metadata.get(REWARD_METADATA_KEY)
    if rec is not None:
        how = "the labels" if rec["shaping"] is None else f"the env reward shaped by the labels (gamma {rec['gamma']})"
        print(f"rewards: {how} of family {rec['family']!r} (labels sha256 {rec['labels_sha256'][:16]}...); "
              f"env reward in infos[{rec['original_reward_info']!r}]")
        if rec.get("truncated_episodes"):
            print(f"{rec['truncated_episodes']} truncated episode(s): s_T has no label, so the last transition's "
                  "Phi(s_T) is the last step's label")
    return 0


def run_import(args) -> int:
    from prm_critic.robotics.minari import import_minari

    out = import_minari(args.dataset, args.out, spec=args.spec, datasets_path=args.datasets_path,
                        shard_size=args.shard_size)
    print(f"wrote {out}/meta.json and {out}/shards (label with: prm-critic label --data {out} --family subgoal)")
    return 0
