r"""Step time and peak memory of VR-X relative to X, with the extra time broken into parts.

Step time: for every model and optimizer pair, the variants of ``variants.py`` (base; base +
all-reduce of the squares; the library's VR class without and with per-step diagnostics) are built
side by side in ONE process on the same MirroredStrategy (logical CPU replicas,
``ReductionToOneDevice``), from the same initial weights and a fixed batch. Each is a
``tf.function`` that runs ``--steps`` train steps (``strategy.run`` in a ``tf.range`` loop).
After two untimed warm-up calls (tracing), ``--reps`` repetitions time every variant once,
in a rotating order, so that machine load affects all of them alike; the ratio
variant/base is taken within each repetition and summarised by min / median / max.

Peak memory: the process RSS high-water mark (``VmHWM`` of ``/proc/self/status``; not
``ru_maxrss``, which on Linux keeps the parent's high-water mark across fork + exec) of a
separate subprocess per variant and repetition, interleaved; also the high-water mark minus
the RSS just before the model was built (the training increment). Exact optimizer-state
bytes (all replica copies) are recorded with the timings.
``tf.config.experimental.get_memory_info`` is not available for CPU devices (TF raises
"Allocator stats not available"), which is checked and recorded.

Models: ``cnn1d`` (the sweep's 1-D CNN on MNIST-1D shaped input), ``resnet20`` (Keras 3
ResNet-20, CIFAR layout, on scikit-learn digits upscaled to 32x32x3) and ``bert_tiny``
(Model Garden ``BertEncoder`` 2 layers x 128 hidden with ``BertPretrainerV2``'s tied MLM head,
tf_keras; ``vrgd_tf.tf_keras.VRGDLamb`` vs Model Garden ``lamb.LAMB``; random token ids, run
in a child process), and ``embedding``, a recommendation-style Keras 3 model whose
parameters are almost all one ``--embedding_rows`` x ``--embedding_dim`` table (1M x 32) with a
``tf.IndexedSlices`` gradient, where ``vr_dense`` (the statistics of that gradient's dense
form, the aggregator's ``sparse_statistics="dense"``) is timed and measured too. BERT-tiny's
word embedding gets a *dense* gradient (its MLM head is tied to it), so the sparse statistics do
not apply there.

At the end the run checks :data:`BOUNDS` (``benchmarks/bounds.py``): VR/base step time and peak
memory per model, PASS/FAIL, exit status 1 on a failure (``--quick``: informative only).

Examples:
  python3 benchmarks/overhead.py --quick
  python3 benchmarks/overhead.py
"""

import os
import sys
import time

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The benchmarks' shared pieces (they import TensorFlow but run no op, so the logical-device
# split of main() still comes first).
from overhead_bounds import BOUNDS, bound_measurements  # noqa: E402

import bounds  # noqa: E402
import children  # noqa: E402
import harness  # noqa: E402
import models  # noqa: E402
import peak_memory  # noqa: E402
from bert import bert_lamb as _bert_opt  # noqa: E402
from bert import bert_random_batch as _bert_data  # noqa: E402
from bert import bert_tiny as _bert_build  # noqa: E402
from peak_memory import rss_kb as _rss_kb  # noqa: E402
from timing import StepTimer, time_variants  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_bool("quick", False, "Small, fast configuration (minutes).")
flags.DEFINE_string(
    "out",
    None,
    "JSON results. Default benchmarks/results/overhead.json (overhead_quick.json with --quick).",
)
flags.DEFINE_list("models", ["cnn1d", "resnet20", "bert_tiny", "embedding"], "Models to time.")
flags.DEFINE_list("pairs", ["momentum", "adam", "lamb", "lars"], "Pairs for cnn1d.")
flags.DEFINE_list("resnet_pairs", ["lars", "lamb"], "Pairs for resnet20.")
flags.DEFINE_list(
    "variants",
    ["base", "sq", "vr_nostats", "vr"],
    "Variants for cnn1d (see variants.py); base is required.",
)
flags.DEFINE_list("resnet_variants", ["base", "sq", "vr_nostats", "vr"], "Variants for the ResNet.")
flags.DEFINE_list(
    "bert_variants",
    ["base", "base_allreduce", "sq", "vr_nostats", "vr_default", "vr"],
    "Variants for bert_tiny (tf_keras; base_allreduce only exists there).",
)
flags.DEFINE_list(
    "memory_models",
    ["cnn1d", "resnet20", "bert_tiny", "embedding"],
    "Models measured for memory (those also in --models).",
)
flags.DEFINE_integer("replicas", 8, "Logical CPU replicas.")
flags.DEFINE_integer("reps", 7, "Timed repetitions per variant (>= 5 for the report).")
flags.DEFINE_list("cnn_batches", ["512", "8192"], "Global batches for cnn1d.")
flags.DEFINE_integer(
    "cnn_steps",
    20,
    "Steps per timed call, cnn1d, up to batch 1024; scaled by 1024/batch (at least 4) above.",
)
flags.DEFINE_integer("resnet_batch", 64, "Global batch, resnet20.")
flags.DEFINE_integer(
    "resnet_depth", 20, "ResNet depth (6n+2); the model is still called resnet20 in --models."
)
flags.DEFINE_integer("resnet_steps", 4, "Steps per timed call, resnet20.")
flags.DEFINE_integer("bert_batch", 64, "Global batch, bert_tiny, for memory (and a child).")
flags.DEFINE_list("bert_batches", ["64", "512"], "Global batches timed for bert_tiny.")
flags.DEFINE_integer("bert_reps", 5, "Timed repetitions, bert_tiny.")
flags.DEFINE_integer("bert_seq", 128, "Sequence length, bert_tiny.")
flags.DEFINE_integer("bert_steps", 4, "Steps per timed call, bert_tiny.")
flags.DEFINE_integer("embedding_rows", 1_000_000, "Rows of the embedding model's table.")
flags.DEFINE_integer("embedding_dim", 32, "Width of the embedding model's table.")
flags.DEFINE_integer("embedding_ids", 8, "Token ids per example, embedding model.")
flags.DEFINE_integer("embedding_batch", 512, "Global batch, embedding model.")
flags.DEFINE_integer("embedding_steps", 4, "Steps per timed call, embedding model.")
flags.DEFINE_list("embedding_pairs", ["momentum", "adam"], "Pairs for the embedding model.")
flags.DEFINE_list(
    "embedding_variants",
    ["base", "vr_dense", "vr_nostats", "vr"],
    "Variants for the embedding model (vr_dense: dense statistics of the sparse gradient).",
)
flags.DEFINE_list(
    "embedding_memory_variants",
    ["base", "vr_dense", "vr"],
    "Variants measured for memory, embedding model.",
)
flags.DEFINE_bool("memory", True, "Measure peak RSS in subprocesses.")
flags.DEFINE_integer("memory_reps", 2, "Subprocesses per variant for memory.")
flags.DEFINE_list("memory_variants", ["base", "vr_default", "vr"], "Variants measured for memory.")
flags.DEFINE_list("memory_pairs", ["lamb"], "cnn1d/resnet20 pairs for memory.")
flags.DEFINE_list("memory_cnn_batches", ["8192"], "cnn1d batches for memory.")
flags.DEFINE_integer("memory_steps", 10, "Train steps in a memory subprocess.")
flags.DEFINE_enum(
    "cpu_allocator",
    "default",
    ["default", "bfc"],
    "TensorFlow's CPU allocator in the memory subprocesses: bfc "
    "(TF_CPU_ALLOCATOR_USE_BFC=true) also reports the tensors' own peak beside peak RSS "
    "(benchmarks/peak_memory.py); default is TensorFlow's own choice, oneDNN's allocator "
    "where its kernels are on (it reports the tensors' peak too; each child records "
    "tf_onednn).",
)
flags.DEFINE_bool(
    "loopback",
    False,
    "Also time base vs VR over a real collective: benchmarks/loopback.py (2 "
    "MultiWorkerMirroredStrategy workers on 127.0.0.1; --quick passes through). Its rows go to "
    "results/loopback[_quick].json and under 'loopback' here. --models= --nomemory: only that.",
)
flags.DEFINE_string("loopback_args", "", "Extra arguments for loopback.py, space separated.")
# Internal: child processes.
flags.DEFINE_enum(
    "child", None, ["memory", "bert", "embedding"], "Internal: run as a child process."
)
flags.DEFINE_string("child_model", None, "Internal.")
flags.DEFINE_string("child_pair", None, "Internal.")
flags.DEFINE_string("child_variant", None, "Internal.")
flags.DEFINE_integer("child_batch", None, "Internal.")

QUICK = dict(
    pairs=["momentum", "lamb"],
    resnet_pairs=["lamb"],
    reps=5,
    cnn_batches=["512"],
    cnn_steps=10,
    resnet_steps=2,
    bert_steps=2,
    memory_reps=1,
    memory_pairs=["lamb"],
    memory_steps=4,
    bert_batch=16,
    bert_batches=["16"],
    resnet_depth=8,
    bert_seq=64,
    resnet_variants=["base", "vr_nostats", "vr"],
    bert_variants=["base", "vr_nostats", "vr"],
    memory_models=["cnn1d"],
    memory_cnn_batches=["512"],
    embedding_rows=100_000,
    embedding_pairs=["momentum"],
    bert_reps=5,
)

#: Learning rates used only so that the steps do real arithmetic (timing is insensitive).
TIMING_LR = {"momentum": 0.01, "adam": 1e-3, "lamb": 1e-3, "lars": 0.5}

# --------------------------------------------------------------------------------------------
# Keras 3 timing
# --------------------------------------------------------------------------------------------


def _model_and_data(model_name, batch):

    if model_name == "cnn1d":
        return models.cnn1d_timing_data(batch)
    if model_name == "resnet20":
        x, y = models.load_digits_images(32)
        return (lambda: models.resnet_cifar(FLAGS.resnet_depth)), x[:batch], y[:batch]
    if model_name == "embedding":
        return _embedding_model_and_data(batch)
    raise ValueError(model_name)


def _embedding_model_and_data(batch):
    """A recommendation-style model whose parameters are almost all one embedding table
    (``--embedding_rows`` x ``--embedding_dim``, its gradient a ``tf.IndexedSlices``): mean
    of the embeddings of ``--embedding_ids`` random ids, a 10-way softmax. Random ids and
    labels (timing only)."""
    import keras
    import numpy as np

    rows, dim, ids = FLAGS.embedding_rows, FLAGS.embedding_dim, FLAGS.embedding_ids

    def build():
        return keras.Sequential(
            [
                keras.Input((ids,), dtype="int32"),
                keras.layers.Embedding(rows, dim),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(10),
            ]
        )

    rng = np.random.default_rng(0)
    x = rng.integers(0, rows, size=(batch, ids)).astype(np.int32)
    y = rng.integers(0, 10, size=batch).astype(np.int32)
    return build, x, y


class KerasTimer(StepTimer):
    """One variant: model + optimizer under the strategy, a compiled multi-step function."""

    def __init__(self, strategy, build_model, opt_cls, opt_kwargs, weights, x, y):
        import tensorflow as tf

        self.strategy = strategy
        with strategy.scope():
            self.model = build_model()
            self.opt = opt_cls(**opt_kwargs)
            self.opt.build(self.model.trainable_variables)
        self.model.set_weights(weights)
        xt, yt = tf.constant(x), tf.constant(y)
        batch = int(x.shape[0])
        model, opt = self.model, self.opt

        def replica_step():
            ctx = tf.distribute.get_replica_context()
            k = ctx.num_replicas_in_sync
            rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
            per = batch // k
            xb, yb = xt[rid * per : (rid + 1) * per], yt[rid * per : (rid + 1) * per]
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                loss = tf.reduce_sum(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits)
                ) / float(batch)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        self.compile_steps(replica_step)


def _variant_classes(pair, variant, family="keras"):
    import variants

    base_cls, vr_cls, kwargs = models.optimizer_classes(pair)
    cls, extra = variants.make_keras_variant(variant, base_cls, vr_cls)
    return cls, dict(kwargs, learning_rate=TIMING_LR[pair], **extra)


def keras_timing(model_name, pair, batch, steps, reps, strategy, log, variant_names):

    build_model, x, y = _model_and_data(model_name, batch)
    weights = models.init_weights(build_model, 0)

    def make(v):
        cls, kw = _variant_classes(pair, v)
        return KerasTimer(strategy, build_model, cls, kw, weights, x, y)

    res = time_variants(make, list(variant_names), steps, reps, log)
    import numpy as np

    n_params = int(sum(np.prod(w.shape) for w in weights))
    if model_name == "resnet20":
        model_name = f"resnet{FLAGS.resnet_depth}"
    res.update(
        {
            "model": model_name,
            "pair": pair,
            "batch": batch,
            "steps_per_call": steps,
            "reps": reps,
            "replicas": strategy.num_replicas_in_sync,
            "per_replica_batch": batch // strategy.num_replicas_in_sync,
            "params": n_params,
            "trainable_variables": len(weights),
            "family": "keras3",
        }
    )
    return res


# --------------------------------------------------------------------------------------------
# BERT-tiny (tf_keras, Model Garden) timing
# --------------------------------------------------------------------------------------------


class BertTimer(KerasTimer):
    def __init__(self, strategy, variant, weights, batch, seq):
        import tensorflow as tf

        self.strategy = strategy
        with strategy.scope():
            self.model = _bert_build(seq)
            inputs, labels = _bert_data(batch, seq)
            self.model(inputs)  # build
            self.opt = _bert_opt(variant)
        self.model.set_weights(weights)
        feats = {k: tf.constant(v) for k, v in inputs.items()}
        lab = tf.constant(labels)
        model, opt = self.model, self.opt
        count = float(labels.size)

        def replica_step():
            ctx = tf.distribute.get_replica_context()
            rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
            per = batch // ctx.num_replicas_in_sync
            f = {k: v[rid * per : (rid + 1) * per] for k, v in feats.items()}
            yb = lab[rid * per : (rid + 1) * per]
            with tf.GradientTape() as tape:
                logits = model(f, training=True)["mlm_logits"]
                loss = (
                    tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
                    / count
                )
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        self.compile_steps(replica_step)


def bert_timing(strategy, batch, seq, steps, reps, log):
    import numpy as np
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    m = _bert_build(seq)
    inputs, _ = _bert_data(batch, seq)
    m(inputs)
    weights = m.get_weights()
    names = list(FLAGS.bert_variants)
    res = time_variants(
        lambda v: BertTimer(strategy, v, weights, batch, seq), names, steps, reps, log
    )
    res.update(
        {
            "model": "bert_tiny",
            "pair": "lamb",
            "batch": batch,
            "seq_len": seq,
            "steps_per_call": steps,
            "reps": reps,
            "replicas": strategy.num_replicas_in_sync,
            "per_replica_batch": batch // strategy.num_replicas_in_sync,
            "params": int(sum(np.prod(w.shape) for w in m.trainable_weights)),
            "trainable_variables": len(m.trainable_weights),
            "family": "tf_keras (Model Garden lamb.LAMB vs vrgd_tf.tf_keras.VRGDLamb)",
            "data": "random token ids (timing only)",
        }
    )
    return res


def embedding_timing(doc, out, log, t_start):
    """The embedding model, timed in one child process per pair and non-base variant, each
    beside its own base: every variant holds 8 replica copies of the 1M x 32 table and its
    optimizer state, too many to hold side by side in one process on this machine."""

    for pair in FLAGS.embedding_pairs:
        for v in [v for v in FLAGS.embedding_variants if v != "base"]:
            log(f"embedding {pair} batch {FLAGS.embedding_batch}, base vs {v} (child):")
            args = [
                "--child=embedding",
                f"--child_pair={pair}",
                f"--child_variant={v}",
                f"--replicas={FLAGS.replicas}",
                f"--reps={FLAGS.reps}",
                f"--embedding_rows={FLAGS.embedding_rows}",
                f"--embedding_dim={FLAGS.embedding_dim}",
                f"--embedding_ids={FLAGS.embedding_ids}",
                f"--embedding_batch={FLAGS.embedding_batch}",
                f"--embedding_steps={FLAGS.embedding_steps}",
            ]
            try:
                res, dt = _run_child(args, log)
                doc["timing"].append(res)
                log(f"  ({dt:.0f}s) ratio median: {v}={res['ratio'][v]['median']:.3f}")
            except Exception as e:  # noqa: BLE001
                doc.setdefault("embedding_errors", []).append(str(e))
                log(f"  embedding failed: {e}")
            doc["elapsed_s"] = round(time.time() - t_start, 1)
            harness.write_json(out, doc)


# --------------------------------------------------------------------------------------------
# Children
# --------------------------------------------------------------------------------------------


def child_main():

    harness.setup_devices(FLAGS.replicas)
    import tensorflow as tf

    strategy = harness.strategy_for(FLAGS.replicas)
    if FLAGS.child == "embedding":
        res = keras_timing(
            "embedding",
            FLAGS.child_pair,
            FLAGS.embedding_batch,
            FLAGS.embedding_steps,
            FLAGS.reps,
            strategy,
            lambda s: print(s, file=sys.stderr, flush=True),
            ["base", FLAGS.child_variant],
        )
        children.print_result(res)
        return
    if FLAGS.child == "bert":
        res = bert_timing(
            strategy,
            FLAGS.bert_batch,
            FLAGS.bert_seq,
            FLAGS.bert_steps,
            FLAGS.reps,
            lambda s: print(s, file=sys.stderr, flush=True),
        )
        children.print_result(res)
        return
    # memory
    model, pair, variant, batch = (
        FLAGS.child_model,
        FLAGS.child_pair,
        FLAGS.child_variant,
        FLAGS.child_batch,
    )
    if model == "bert_tiny":
        import tf_keras

        tf_keras.utils.set_random_seed(0)
        inputs, _ = _bert_data(batch, FLAGS.bert_seq)
        rss0 = _rss_kb()
        m = _bert_build(FLAGS.bert_seq)
        m(inputs)
        timer = BertTimer(strategy, variant, m.get_weights(), batch, FLAGS.bert_seq)
    else:
        build_model, x, y = _model_and_data(model, batch)
        weights = models.init_weights(build_model, 0)
        rss0 = _rss_kb()
        cls, kw = _variant_classes(pair, variant)
        timer = KerasTimer(strategy, build_model, cls, kw, weights, x, y)
    timer.run(tf.constant(FLAGS.memory_steps))
    children.print_result(peak_memory.memory_result(rss0))


def _run_child(args, log):

    return children.run_child(__file__, args, log)


def memory_runs(log):
    """Interleaved subprocesses: for rep: for config: for variant."""

    configs = []
    for model in [m for m in FLAGS.models if m in FLAGS.memory_models]:
        if model == "cnn1d":
            for pair in FLAGS.memory_pairs:
                for b in FLAGS.memory_cnn_batches:
                    configs.append((model, pair, int(b)))
        elif model == "resnet20":
            for pair in FLAGS.memory_pairs:
                configs.append((model, pair, FLAGS.resnet_batch))
        elif model == "bert_tiny":
            configs.append((model, "lamb", FLAGS.bert_batch))
        elif model == "embedding":
            for pair in FLAGS.embedding_pairs:
                configs.append((model, pair, FLAGS.embedding_batch))

    def child_args(c, v):
        return [
            "--child=memory",
            f"--child_model={c[0]}",
            f"--child_pair={c[1]}",
            f"--child_variant={v}",
            f"--child_batch={c[2]}",
            f"--replicas={FLAGS.replicas}",
            f"--memory_steps={FLAGS.memory_steps}",
            f"--bert_seq={FLAGS.bert_seq}",
            f"--resnet_depth={FLAGS.resnet_depth}",
            f"--embedding_rows={FLAGS.embedding_rows}",
            f"--embedding_dim={FLAGS.embedding_dim}",
            f"--embedding_ids={FLAGS.embedding_ids}",
        ]

    def variants(c):
        if c[0] == "embedding":
            return list(FLAGS.embedding_memory_variants)
        return list(FLAGS.memory_variants)

    env = peak_memory.BFC_ENV if FLAGS.cpu_allocator == "bfc" else None
    raw = peak_memory.memory_runs(
        __file__, configs, variants, FLAGS.memory_reps, child_args, log, env=env
    )
    if env is not None:
        missing = [
            (c, v) for c in configs for v in raw[c] if not peak_memory.has_tensor_peaks(raw[c][v])
        ]
        if missing:
            raise RuntimeError(
                f"--cpu_allocator=bfc, but these children reported no tensor peak: {missing}"
            )
    out = []
    for c in configs:
        entry = {"model": c[0], "pair": c[1], "batch": c[2], "raw": raw[c]}
        entry.update(peak_memory.memory_ratios(raw[c], variants(c)))
        out.append(entry)
    return out


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def loopback_runs(log):
    """Runs ``loopback.py`` in a child process (it starts and always stops its 2 workers)
    and returns its JSON document."""
    import subprocess

    out = os.path.join(
        harness.RESULTS_DIR, "loopback_quick.json" if FLAGS.quick else "loopback.json"
    )
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "loopback.py")]
    cmd += ["--quick"] * FLAGS.quick + [f"--out={out}"] + FLAGS.loopback_args.split()
    log("loopback collective (2 workers on 127.0.0.1): " + " ".join(cmd[1:]))
    proc = subprocess.run(cmd, text=True)
    if proc.returncode != 0:
        log(f"  loopback.py exited with {proc.returncode}")
    return harness.read_json(out) if os.path.exists(out) else None


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)

    harness.apply_quick(QUICK)
    if FLAGS.child:
        child_main()
        return
    harness.setup_devices(FLAGS.replicas)

    out = FLAGS.out or os.path.join(
        harness.RESULTS_DIR, "overhead_quick.json" if FLAGS.quick else "overhead.json"
    )
    for name in ("variants", "resnet_variants", "bert_variants"):
        if "base" not in FLAGS[name].value:
            raise app.UsageError(f"--{name} must include base")

    def log(s):
        print(s, flush=True)

    meminfo = peak_memory.cpu_memory_info()
    doc = {
        "kind": "overhead",
        "command": harness.command_line(),
        "environment": harness.environment(),
        "config": {
            k: FLAGS[k].value
            for k in (
                "quick",
                "models",
                "pairs",
                "resnet_pairs",
                "variants",
                "resnet_variants",
                "bert_variants",
                "memory_models",
                "replicas",
                "reps",
                "cnn_batches",
                "cnn_steps",
                "resnet_batch",
                "resnet_depth",
                "resnet_steps",
                "bert_batch",
                "bert_batches",
                "bert_reps",
                "memory_cnn_batches",
                "bert_seq",
                "bert_steps",
                "memory",
                "memory_reps",
                "memory_variants",
                "memory_pairs",
                "memory_steps",
                "cpu_allocator",
                "embedding_rows",
                "embedding_dim",
                "embedding_ids",
                "embedding_batch",
                "embedding_steps",
                "embedding_pairs",
                "embedding_variants",
                "embedding_memory_variants",
                "loopback",
            )
        },
        "memory_method": "VmHWM (peak resident set) from /proc/self/status of one "
        "subprocess per variant and repetition"
        + (
            "; the tensors' peak from TensorFlow's BFC CPU allocator (TF_CPU_ALLOCATOR_USE_BFC)"
            if FLAGS.cpu_allocator == "bfc"
            else ""
        ),
        "tf_get_memory_info_cpu": meminfo
        + ("" if FLAGS.cpu_allocator == "default" else " (this process; the children: BFC)"),
        "timing": [],
        "memory": [],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    t_start = time.time()
    strategy = harness.strategy_for(FLAGS.replicas)
    for model in FLAGS.models:
        if model == "bert_tiny":
            continue
        if model == "embedding":
            embedding_timing(doc, out, log, t_start)
            continue
        pairs = {"cnn1d": FLAGS.pairs, "embedding": FLAGS.embedding_pairs}.get(
            model, FLAGS.resnet_pairs
        )
        batches = {
            "cnn1d": [int(b) for b in FLAGS.cnn_batches],
            "embedding": [FLAGS.embedding_batch],
        }.get(model, [FLAGS.resnet_batch])
        for batch in batches:
            steps = (
                max(4, FLAGS.cnn_steps * min(1, 1024 / batch))
                if model == "cnn1d"
                else (FLAGS.embedding_steps if model == "embedding" else FLAGS.resnet_steps)
            )
            steps = int(steps)
            for pair in pairs:
                log(f"{model} {pair} batch {batch}:")
                names = {"cnn1d": FLAGS.variants, "embedding": FLAGS.embedding_variants}.get(
                    model, FLAGS.resnet_variants
                )
                res = keras_timing(model, pair, batch, steps, FLAGS.reps, strategy, log, names)
                doc["timing"].append(res)
                log(
                    "  ratio median: "
                    + ", ".join(f"{v}={res['ratio'][v]['median']:.3f}" for v in names)
                )
                doc["elapsed_s"] = round(time.time() - t_start, 1)
                harness.write_json(out, doc)
    if "bert_tiny" in FLAGS.models:
        for bert_batch in [int(b) for b in FLAGS.bert_batches]:
            log(f"bert_tiny lamb batch {bert_batch} (child process):")
            args = [
                "--child=bert",
                f"--replicas={FLAGS.replicas}",
                f"--reps={FLAGS.bert_reps}",
                f"--bert_batch={bert_batch}",
                f"--bert_seq={FLAGS.bert_seq}",
                f"--bert_steps={FLAGS.bert_steps}",
                "--bert_variants=" + ",".join(FLAGS.bert_variants),
            ]
            try:
                res, dt = _run_child(args, log)
                doc["timing"].append(res)
                log(
                    f"  ({dt:.0f}s) ratio median: "
                    + ", ".join(f"{v}={r['median']:.3f}" for v, r in res["ratio"].items())
                )
            except Exception as e:  # noqa: BLE001
                doc.setdefault("bert_errors", []).append(str(e))
                log(f"  bert_tiny failed: {e}")
            doc["elapsed_s"] = round(time.time() - t_start, 1)
            harness.write_json(out, doc)
    if FLAGS.memory:
        log("memory (subprocesses):")
        doc["memory"] = memory_runs(log)
    if FLAGS.loopback:
        doc["loopback"] = loopback_runs(log)
    doc["elapsed_s"] = round(time.time() - t_start, 1)
    doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    doc["complete"] = True
    doc["bounds"] = bounds.check(BOUNDS, bound_measurements(doc), not FLAGS.quick, log)
    harness.write_json(out, doc)
    log(f"done in {doc['elapsed_s'] / 60:.1f} min -> {out}")
    return bounds.exit_status(doc["bounds"])


if __name__ == "__main__":
    app.run(main)
