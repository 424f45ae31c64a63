"""``prm-critic ensemble``: write an ensemble file, the mean of several trained state critics.

The file names each member checkpoint (relative to the file's folder) with its weights hash; it
loads wherever a critic path is taken (``train-policy --critic``, ``train_policy(critic=...)``), and
a member retrained or swapped after it was written is refused. The library form is
:func:`prm_critic.models.ensemble.save_critic_ensemble`.
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "ensemble",
        help="write an ensemble file: the mean of several trained state critics, members checked by hash",
        description="Write OUT.json naming the member checkpoints (each loaded and checked: the same task, input "
        "layout and width). Its scores are the members' mean, head by head.",
    )
    p.add_argument("members", nargs="+", metavar="CHECKPOINT",
                   help="two or more state-critic checkpoints (.json, .safetensors or their stem)")
    p.add_argument("--out", required=True, help="the ensemble file to write (.json)")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from prm_critic.models.ensemble import load_critic_ensemble, save_critic_ensemble

    if len(args.members) < 2:
        raise ValueError(f"CHECKPOINT: an ensemble needs at least 2 checkpoints, got {len(args.members)}")
    path = save_critic_ensemble(args.out, args.members)
    ens = load_critic_ensemble(path)  # what a user of the file will load, checked once here
    doc = json.loads(path.read_text())
    for row in doc["members"]:
        print(f"member {row['path']}  weights sha256 {row['weights_sha256']}")
    print(f"wrote {path}: the mean of {len(doc['members'])} critics ({ens.critic_info().task})")
    return 0
