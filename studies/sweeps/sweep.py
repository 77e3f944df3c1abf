r"""Batch-size sweep of VRGD vs its base optimizers on real data, with k and gamma ablations.

Data: MNIST-1D generated locally (``mnist1d.data.make_dataset``, fixed seed; never
downloaded) and scikit-learn's 8x8 digits read as 64-point signals. Model: a small 1-D CNN
(``shared.cnn1d``). Data parallelism: MirroredStrategy over logical CPU replicas with
``ReductionToOneDevice``. Each batch size trains for the same number of epochs (so a larger
batch takes fewer steps), with the peak learning rate scaled by the square-root rule from
``base_lr`` at ``base_batch``, linear warm-up then cosine decay to 0; the schedule, initial
weights and data order are identical for the base optimizer and its VR version.

Experiments (``--experiments``):
  batch   every pair x side x batch size x seed, on each data set;
  k       one pair at one large batch with 4, 8 and 16 replicas (base and VR);
  gamma   one pair's VR optimizer at one large batch with several gamma values;
  lr      (development aid, not in the default) base optimizers at the base batch with
          learning rates around the defaults, one seed.

Results are written to ``--out`` as JSON after every run (atomic rename), and a rerun with the
same ``--out`` skips the runs already there, so a killed sweep resumes.

Examples:
  python3 studies/sweeps/sweep.py --quick
  python3 studies/sweeps/sweep.py               # the full sweep (see studies/sweeps/README.md)
"""

import functools
import os
import sys
import time

from absl import app, flags, logging

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # studies/

FLAGS = flags.FLAGS
flags.DEFINE_bool("quick", False, "Small, fast configuration for development (minutes).")
flags.DEFINE_string(
    "out",
    None,
    "JSON results file. Default studies/sweeps/results/sweep.json (sweep_quick.json with --quick).",
)
flags.DEFINE_list("experiments", ["batch", "k", "gamma"], "Subset of batch,k,gamma,lr.")
flags.DEFINE_list("datasets", ["mnist1d", "digits"], "Data sets for the batch experiment.")
flags.DEFINE_list("pairs", ["momentum", "adam", "lamb", "lars"], "Optimizer pairs.")
flags.DEFINE_integer("seeds", 3, "Seeds per configuration (0 .. seeds-1).")
flags.DEFINE_integer(
    "ablation_seeds", 3, "Seeds of the k and gamma ablations (0 = same as --seeds)."
)
flags.DEFINE_integer("mnist1d_train", 40000, "MNIST-1D training samples.")
flags.DEFINE_integer("mnist1d_test", 10000, "MNIST-1D test samples.")
flags.DEFINE_integer("mnist1d_data_seed", 0, "Seed of the MNIST-1D generator.")
flags.DEFINE_list(
    "batches", ["512", "1024", "2048", "4096", "8192"], "MNIST-1D global batch sizes."
)
flags.DEFINE_list("digits_batches", ["64", "256", "1024"], "digits global batch sizes.")
flags.DEFINE_integer("epochs", 15, "MNIST-1D epochs, the same for every batch size.")
flags.DEFINE_integer("digits_epochs", 30, "digits epochs, the same for every batch size.")
flags.DEFINE_integer("base_batch", 512, "MNIST-1D batch at which --base_lr applies.")
flags.DEFINE_integer("digits_base_batch", 64, "digits batch at which --base_lr applies.")
flags.DEFINE_list(
    "base_lr",
    ["momentum:0.15", "adam:0.02", "lamb:0.03", "lars:18"],
    "pair:lr, peak learning rate at the base batch (sqrt-scaled for others).",
)
flags.DEFINE_list(
    "digits_base_lr",
    ["momentum:0.15", "adam:0.006", "lamb:0.01", "lars:6"],
    "pair:lr for digits, at --digits_base_batch.",
)
flags.DEFINE_list("lr_batches", [], "lr experiment: batches (default: the base batch).")
flags.DEFINE_float("warmup_frac", 0.1, "Linear warm-up, fraction of the run's steps.")
flags.DEFINE_integer("replicas", 8, "Replicas (logical CPUs) of the batch and gamma runs.")
flags.DEFINE_integer("evals_per_epoch", 1, "Test evaluations per epoch (curve resolution).")
flags.DEFINE_string("ablation_pair", "lamb", "Pair for the k and gamma ablations.")
flags.DEFINE_string("ablation_dataset", "mnist1d", "Data set of the k and gamma ablations.")
flags.DEFINE_integer("ablation_batch", 8192, "Global batch of the k and gamma ablations.")
flags.DEFINE_list("k_values", ["4", "8", "16"], "Replica counts of the k ablation.")
flags.DEFINE_list("gammas", ["0.05", "0.1", "0.2", "1.0"], "gamma values of the ablation.")
flags.DEFINE_list(
    "lr_multipliers",
    ["0.25", "0.5", "1", "2", "4"],
    "lr experiment: multipliers of --base_lr tried at the base batch.",
)
flags.DEFINE_bool("resume", True, "Skip runs already present in --out.")
flags.DEFINE_bool("dry_run", False, "Print the plan (runs per experiment) and exit.")
flags.DEFINE_float("budget_minutes", 0, "If > 0, stop starting new runs after this long.")

QUICK = dict(
    mnist1d_train=8000,
    mnist1d_test=2000,
    batches=["256", "2048"],
    digits_batches=["64", "512"],
    epochs=3,
    digits_epochs=3,
    base_batch=256,
    seeds=2,
    ablation_seeds=1,
    k_values=["4", "8", "16"],
    gammas=["0.1", "1.0"],
    ablation_batch=2048,
    lr_multipliers=["0.5", "1", "2"],
)


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    import shared

    shared.apply_quick(QUICK)

    k_values = sorted({int(k) for k in FLAGS.k_values} | {FLAGS.replicas})
    need = max(k_values) if "k" in FLAGS.experiments else FLAGS.replicas
    shared.setup_devices(need)
    import keras  # noqa: F401  (after the device setup)
    import provenance
    import studylib
    import sweeplib
    import tensorflow as tf  # noqa: F401

    out = FLAGS.out or os.path.join(
        sweeplib.RESULTS_DIR, "sweep_quick.json" if FLAGS.quick else "sweep.json"
    )
    base_lr = {
        "mnist1d": {p.split(":")[0]: float(p.split(":")[1]) for p in FLAGS.base_lr},
        "digits": {p.split(":")[0]: float(p.split(":")[1]) for p in FLAGS.digits_base_lr},
    }
    config = {
        "quick": FLAGS.quick,
        "experiments": FLAGS.experiments,
        "datasets": FLAGS.datasets,
        "pairs": FLAGS.pairs,
        "seeds": FLAGS.seeds,
        "ablation_seeds": min(FLAGS.ablation_seeds or FLAGS.seeds, FLAGS.seeds),
        "mnist1d_train": FLAGS.mnist1d_train,
        "mnist1d_test": FLAGS.mnist1d_test,
        "mnist1d_data_seed": FLAGS.mnist1d_data_seed,
        "batches": [int(b) for b in FLAGS.batches],
        "digits_batches": [int(b) for b in FLAGS.digits_batches],
        "epochs": FLAGS.epochs,
        "digits_epochs": FLAGS.digits_epochs,
        "base_batch": FLAGS.base_batch,
        "digits_base_batch": FLAGS.digits_base_batch,
        "base_lr": base_lr,
        "warmup_frac": FLAGS.warmup_frac,
        "replicas": FLAGS.replicas,
        "evals_per_epoch": FLAGS.evals_per_epoch,
        "ablation_pair": FLAGS.ablation_pair,
        "ablation_dataset": FLAGS.ablation_dataset,
        "ablation_batch": FLAGS.ablation_batch,
        "k_values": [int(k) for k in FLAGS.k_values],
        "gammas": [float(g) for g in FLAGS.gammas],
        "lr_multipliers": [float(m) for m in FLAGS.lr_multipliers],
        "lr_batches": [int(b) for b in FLAGS.lr_batches],
        "lr_rule": "sqrt",
        "schedule": "linear warm-up (warmup_frac of steps) + cosine to 0",
        "model": "cnn1d (conv5-32, conv3/2-32, conv3/2-32, dense-10)",
        "loss": "softmax cross-entropy, sum over shard / global batch",
    }
    runs = []
    history = []
    # Runs are keyed by their own settings (seed included), so a file made with other seed
    # counts but the same configuration otherwise can be extended.
    seedless = ("seeds", "ablation_seeds")

    def comparable(c):
        return {k: v for k, v in c.items() if k not in seedless}

    if FLAGS.resume and os.path.exists(out):
        old = shared.read_json(out)
        if comparable(old.get("config", {})) == comparable(config):
            runs = old.get("runs", [])
            history = old.get("history", []) + [
                {
                    "command": old.get("command"),
                    "started": old.get("started"),
                    "seeds": old["config"].get("seeds"),
                    "ablation_seeds": old["config"].get("ablation_seeds"),
                    "runs_at_stop": len(runs),
                }
            ]
            print(f"resuming: {len(runs)} runs already in {out}", flush=True)
        else:
            print(f"{out} has another configuration; starting afresh", flush=True)
    done = {tuple(r["key"]) for r in runs}
    doc = {
        "kind": "sweep",
        "command": provenance.command_line(),
        "config": config,
        "environment": provenance.environment(),
        "provenance": provenance.snapshot(
            ignore=(os.path.relpath(sweeplib.RESULTS_DIR, provenance.REPO) + os.sep,)
        ),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "runs": runs,
        "complete": False,
        "history": history,
    }

    data_cache = {}

    def dataset(name):
        if name not in data_cache:
            if name == "mnist1d":
                d = shared.load_mnist1d(
                    FLAGS.mnist1d_train, FLAGS.mnist1d_test, FLAGS.mnist1d_data_seed
                )
            elif name == "digits":
                d = sweeplib.load_digits_1d()
            else:
                raise ValueError(name)
            data_cache[name] = sweeplib.prepare_train_test(d)
            doc.setdefault("datasets", {})[name] = d["info"]
        return data_cache[name]

    trainers = {}

    def trainer(ds, pair, side, k, gamma):
        key = (ds, pair, side, k, gamma if side == "vr" else None)
        if key not in trainers:
            d = dataset(ds)
            length = d["x"].shape[1]
            build = functools.partial(shared.cnn1d, length)
            trainers[key] = (
                studylib.Trainer(
                    shared.strategy_for(k),
                    build,
                    lambda sched: shared.make_optimizer(pair, side, sched, gamma=gamma),
                ),
                build,
            )
        return trainers[key]

    # ---- the plan: (experiment tag, dataset, pair, side, batch, k, gamma, seed, lr) --------
    plan = []
    seeds = list(range(FLAGS.seeds))
    bb = {"mnist1d": FLAGS.base_batch, "digits": FLAGS.digits_base_batch}
    eps = {"mnist1d": FLAGS.epochs, "digits": FLAGS.digits_epochs}
    batches = {
        "mnist1d": [int(b) for b in FLAGS.batches],
        "digits": [int(b) for b in FLAGS.digits_batches],
    }

    def lr_for(ds, pair, batch):
        return sweeplib.scaled_lr(base_lr[ds][pair], batch, bb[ds])

    if "lr" in FLAGS.experiments:
        for ds in FLAGS.datasets:
            for batch in [int(b) for b in FLAGS.lr_batches] or [bb[ds]]:
                for mult in [float(m) for m in FLAGS.lr_multipliers]:
                    for pair in FLAGS.pairs:
                        plan.append(
                            (
                                "lr",
                                ds,
                                pair,
                                "base",
                                batch,
                                FLAGS.replicas,
                                None,
                                0,
                                lr_for(ds, pair, batch) * mult,
                            )
                        )
    if "batch" in FLAGS.experiments:
        # Seed-major, and base next to VR: partial results cover every pair, and load on
        # the machine hits both sides alike.
        for seed in seeds:
            for ds in FLAGS.datasets:
                for batch in batches[ds]:
                    for pair in FLAGS.pairs:
                        for side in ("base", "vr"):
                            plan.append(
                                (
                                    "batch",
                                    ds,
                                    pair,
                                    side,
                                    batch,
                                    FLAGS.replicas,
                                    0.1 if side == "vr" else None,
                                    seed,
                                    lr_for(ds, pair, batch),
                                )
                            )
    ab_ds, ab_pair, ab_b = FLAGS.ablation_dataset, FLAGS.ablation_pair, FLAGS.ablation_batch
    ab_seeds = list(range(min(FLAGS.ablation_seeds or FLAGS.seeds, FLAGS.seeds)))
    if "k" in FLAGS.experiments:
        for seed in ab_seeds:
            for k in [int(k) for k in FLAGS.k_values]:
                for side in ("base", "vr"):
                    plan.append(
                        (
                            "k",
                            ab_ds,
                            ab_pair,
                            side,
                            ab_b,
                            k,
                            0.1 if side == "vr" else None,
                            seed,
                            lr_for(ab_ds, ab_pair, ab_b),
                        )
                    )
    if "gamma" in FLAGS.experiments:
        for seed in ab_seeds:
            plan.append(
                (
                    "gamma",
                    ab_ds,
                    ab_pair,
                    "base",
                    ab_b,
                    FLAGS.replicas,
                    None,
                    seed,
                    lr_for(ab_ds, ab_pair, ab_b),
                )
            )
            for g in [float(g) for g in FLAGS.gammas]:
                plan.append(
                    (
                        "gamma",
                        ab_ds,
                        ab_pair,
                        "vr",
                        ab_b,
                        FLAGS.replicas,
                        g,
                        seed,
                        lr_for(ab_ds, ab_pair, ab_b),
                    )
                )

    # Runs shared between experiments (same configuration) are trained once: the key below
    # ignores the experiment tag except for the lr probe.
    t_start = time.time()
    todo = []
    seen = set()
    for item in plan:
        tag, ds, pair, side, batch, k, gamma, seed, lr = item
        base_cls, vr_cls, _ = shared.optimizer_classes(pair)
        opt_name = (vr_cls if side == "vr" else base_cls).__name__
        beta_3 = vr_cls.default_settings.beta_3 if side == "vr" else None
        key = (
            "lr" if tag == "lr" else "main",
            ds,
            opt_name,
            batch,
            k,
            gamma,
            beta_3,
            seed,
            eps[ds],
            round(lr, 10),
        )
        if key in done or key in seen:
            continue
        seen.add(key)
        todo.append((item, opt_name, beta_3, key))
    print(f"{len(todo)} runs to do ({len(done)} already done) -> {out}", flush=True)
    if FLAGS.dry_run:
        import collections

        count = collections.Counter((it[0], it[1], it[4]) for it, *_ in todo)
        for (tag, ds, batch), n in sorted(count.items()):
            print(f"  {tag:5s} {ds:7s} batch {batch:5d}: {n} runs")
        return

    run_times = []
    for n, (item, opt_name, beta_3, key) in enumerate(todo):
        tag, ds, pair, side, batch, k, gamma, seed, lr = item
        if FLAGS.budget_minutes and time.time() - t_start > 60 * FLAGS.budget_minutes:
            print("budget exhausted; stopping (results so far are saved)", flush=True)
            doc["stopped_by_budget"] = True
            break
        t0 = time.time()
        tr, build = trainer(ds, pair, side, k, gamma)
        trace_s = time.time() - t0
        rec = sweeplib.train_run(
            tr,
            build,
            dataset(ds),
            seed=seed,
            batch=batch,
            epochs=eps[ds],
            peak_lr=lr,
            warmup_frac=FLAGS.warmup_frac,
            evals_per_epoch=FLAGS.evals_per_epoch,
        )
        rec.update(
            {
                "key": list(key),
                "tag": tag,
                "optimizer_config": tr.optimizer_config,
                "dataset": ds,
                "pair": pair,
                "side": side,
                "optimizer": opt_name,
                "replicas": k,
                "gamma": gamma,
                "beta_3": beta_3,
                "setup_s": round(trace_s, 2),
                "loadavg": list(os.getloadavg()),
            }
        )
        runs.append(rec)
        doc["runs"] = runs
        doc["elapsed_s"] = round(time.time() - t_start, 1)
        shared.write_json(out, doc)
        dt = time.time() - t0
        run_times.append(dt)
        left = len(todo) - n - 1
        eta = left * (sum(run_times) / len(run_times))
        f = rec["final"]
        print(
            f"[{n + 1}/{len(todo)}] {tag:5s} {ds:7s} {opt_name:9s} B={batch:5d} k={k:2d} "
            f"g={gamma} seed={seed} lr={lr:.4g}: test={f['test_acc']:.4f} "
            f"train={f['train_acc']:.4f} ({dt:.1f}s, ETA {eta / 60:.1f} min)",
            flush=True,
        )
    else:
        doc["complete"] = True
    doc["elapsed_s"] = round(time.time() - t_start, 1)
    doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    shared.write_json(out, doc)
    print(f"done in {doc['elapsed_s'] / 60:.1f} min -> {out}", flush=True)


if __name__ == "__main__":
    app.run(main)
