r"""Step time of VR-X relative to X over a real collective: two worker processes of
``MultiWorkerMirroredStrategy`` on 127.0.0.1 (one CPU replica each, k = 2).

The other benchmarks sum the replicas inside one process (``ReductionToOneDevice``); here every
step's all-reduce goes through TensorFlow's collective ops over gRPC between two processes, so
the bytes VRGD adds (the squares) are really sent. The launcher picks two free ports, starts
both workers with their ``TF_CONFIG``, waits with a deadline and kills both process groups on
any exit (timeout, error, Ctrl-C); the collectives themselves time out too
(``CommunicationOptions(timeout_seconds=...)``), so a run always stops by itself.

Each worker builds every variant side by side (same initial weights, a fixed random batch),
and :func:`timing.time_variants` times them in an order rotated by one per repetition, the
two workers in lockstep; worker 0 reports. Variants (``variants.py``):

  base       X (one all-reduce of the float32 gradients, 4 N bytes per worker and step);
  base_2x    X on the same architecture with twice the parameters (MLP: hidden width
             2048 -> 3072; BERT-tiny: vocabulary 30522 -> 2 x 30522 + the rest / 129): the
             bytes of VR on the wire, with twice the gradient and update work too;
  sq         X + the squares, all-reduced as VRGD does (the library's collectives,
             ``vrgd_tf.gsnr.collectives.all_reduce_samples``: the float32 ``x``, then the
             float32 ``x*x`` and the count, 8 N bytes), update from the sum;
  sq_bf16    the same with the squares in bfloat16 (6 N bytes);
  vr_nostats the library's VR class with ``statistics_interval=0`` (no diagnostics);
  vr         the library's VR class, defaults but diagnostics every step
             (``statistics_interval=1``);
  vr_bf16    the same with ``squares_dtype="bfloat16"``.

Ratios within each repetition: ``vr / base`` (same model) and ``vr / base_2x`` (same bytes).

Models: ``mlp`` (Keras 3 SGD, Dense(2048) x 3 + Dense(10) on 2048 inputs, 12.6M parameters,
batch 8 per worker: a step dominated by the all-reduce) and ``bert_tiny`` (Model Garden
``BertPretrainerV2``, 2 x 128, tf_keras ``lamb.LAMB`` vs ``vrgd_tf.tf_keras.VRGDLamb``,
random token ids).

Examples:
  python3 benchmarks/loopback.py --quick
  python3 benchmarks/loopback.py
  python3 benchmarks/overhead.py --loopback --models=   # the same, from overhead.py
"""

import argparse
import atexit
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from vrgd_tf import devices  # noqa: E402

import bert  # noqa: E402
import harness  # noqa: E402 (imports TensorFlow, runs no op)
import timing  # noqa: E402

RESULT_TAG = "LOOPBACK_RESULT "
MODELS = ("mlp", "bert_tiny")
VARIANTS = ("base", "base_2x", "sq", "sq_bf16", "vr_nostats", "vr", "vr_bf16")
#: Weights each variant must end with (same steps, same batch, same start).
CHECKS = {"sq": "base", "sq_bf16": "base", "vr_nostats": "vr", "vr_bf16": "vr"}
#: Bytes per parameter in each variant's all-reduce payload (per worker and step).
BYTES_PER_PARAM = {
    "base": 4,
    "base_2x": 4,
    "sq": 8,
    "sq_bf16": 6,
    "vr": 8,
    "vr_nostats": 8,
    "vr_bf16": 6,
    "vr_nostats_bf16": 6,
}

QUICK = dict(reps=3, steps=3, mlp_width=512, bert_seq=32, models=["mlp"], timeout=300)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="Small and fast (a smoke run).")
    p.add_argument("--out", default=None, help="JSON (default results/loopback[_quick].json).")
    p.add_argument("--models", default=",".join(MODELS), help="Comma list of " + str(MODELS))
    p.add_argument("--variants", default=",".join(VARIANTS), help="base first.")
    p.add_argument(
        "--collectives",
        default="RING",
        help="Comma list of CommunicationImplementation names (RING, AUTO).",
    )
    p.add_argument("--reps", type=int, default=7, help="Timed repetitions per variant.")
    p.add_argument("--steps", type=int, default=8, help="Steps per timed call.")
    p.add_argument("--mlp_width", type=int, default=2048)
    p.add_argument("--mlp_batch", type=int, default=8, help="Per worker.")
    p.add_argument("--bert_batch", type=int, default=8, help="Per worker.")
    p.add_argument("--bert_seq", type=int, default=128)
    p.add_argument("--timeout", type=int, default=1500, help="Seconds per model and collective.")
    p.add_argument(
        "--append", action="store_true", help="Add the rows to an existing --out document."
    )
    p.add_argument("--label", default="", help="A note stored with (and shown for) the rows.")
    p.add_argument(
        "--bytes_per_pack",
        type=int,
        default=0,
        help="CommunicationOptions.bytes_per_pack: 0 = one pack per all-reduce call "
        "(TensorFlow's default); > 0 splits a call's tensors into packs of about that size.",
    )
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)
    p.add_argument("--collective", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        for k, v in QUICK.items():
            if k == "models" and args.models != ",".join(MODELS):
                continue
            setattr(args, k, ",".join(v) if isinstance(v, list) else v)
    args.models = [m for m in args.models.split(",") if m]
    args.variants = [v for v in args.variants.split(",") if v]
    args.collectives = [c for c in args.collectives.split(",") if c]
    if not args.variants or args.variants[0] != "base":
        p.error("--variants must start with base")
    return args


# --------------------------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------------------------


def mlp_width_2x(width, inputs=2048, classes=10):
    """Hidden width whose MLP (3 hidden layers) has about twice the parameters of ``width``."""

    def params(w):
        return inputs * w + w + 2 * (w * w + w) + w * classes + classes

    target = 2 * params(width)
    return min(range(width, 3 * width), key=lambda w: abs(params(w) - target))


def bert_vocab_2x(seq, vocab=30522):
    """Vocabulary size whose BERT-tiny has about twice the parameters (each word costs 129:
    its 128-wide embedding, tied with the MLM head, and its output bias)."""
    import numpy as np

    m = bert.bert_tiny(seq, vocab)
    feats, _ = bert.bert_random_batch(2, seq)
    m(feats)
    params = int(sum(np.prod(w.shape) for w in m.trainable_weights))
    rest = params - 129 * vocab
    return 2 * vocab + rest // 129


class _Timer(timing.StepTimer):
    """One variant: model + optimizer under the strategy and a multi-step ``tf.function``."""

    def __init__(self, strategy, build_model, make_opt, weights, features, labels, logits_of):
        import tensorflow as tf

        self.strategy = strategy
        with strategy.scope():
            self.model = build_model()
            if isinstance(features, dict):
                self.model({k: v[:1] for k, v in features.items()})
            else:
                self.model(features[:1])
            self.opt = make_opt()
            import keras

            if isinstance(self.opt, keras.optimizers.Optimizer):  # Keras 3 (not tf_keras)
                self.opt.build(self.model.trainable_variables)
        self.model.set_weights(weights)
        feats = tf.nest.map_structure(tf.constant, features)
        lab = tf.constant(labels)
        model, opt = self.model, self.opt
        count = float(labels.size)
        batch = int(labels.shape[0])

        def replica_step():
            ctx = tf.distribute.get_replica_context()
            rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
            per = batch // ctx.num_replicas_in_sync
            f = tf.nest.map_structure(lambda v: v[rid * per : (rid + 1) * per], feats)
            yb = lab[rid * per : (rid + 1) * per]
            with tf.GradientTape() as tape:
                logits = logits_of(model(f, training=True))
                loss = (
                    tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
                    / count
                )
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        self.compile_steps(replica_step)


def _mlp_pieces(args, workers):
    import keras
    import numpy as np

    import vrgd_tf

    import variants

    def build(width):
        return lambda: keras.Sequential(
            [keras.Input((2048,))]
            + [keras.layers.Dense(width, activation="relu") for _ in range(3)]
            + [keras.layers.Dense(10)]
        )

    rng = np.random.default_rng(0)
    batch = args.mlp_batch * workers
    x = rng.standard_normal((batch, 2048)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int32)
    wide = mlp_width_2x(args.mlp_width)

    def make(v):
        width = wide if v == "base_2x" else args.mlp_width
        cls, extra = variants.make_keras_variant(
            "base" if v == "base_2x" else v, keras.optimizers.SGD, vrgd_tf.VRGDSGD
        )
        return build(width), (lambda: cls(learning_rate=0.01, **extra)), x, y

    info = {
        "family": "keras3 (keras.optimizers.SGD vs vrgd_tf.VRGDSGD)",
        "hidden_width": args.mlp_width,
        "hidden_width_2x": wide,
        "per_worker_batch": args.mlp_batch,
    }
    return make, (lambda out: out), info


def _bert_pieces(args, workers):
    batch = args.bert_batch * workers
    feats, labels = bert.bert_random_batch(batch, args.bert_seq)
    vocab2 = bert_vocab_2x(args.bert_seq)

    def make(v):
        vocab = vocab2 if v == "base_2x" else 30522
        return (
            (lambda: bert.bert_tiny(args.bert_seq, vocab)),
            (lambda: bert.bert_lamb("base" if v == "base_2x" else v)),
            feats,
            labels,
        )

    info = {
        "family": "tf_keras (Model Garden lamb.LAMB vs vrgd_tf.tf_keras.VRGDLamb)",
        "vocab_2x": vocab2,
        "seq_len": args.bert_seq,
        "per_worker_batch": args.bert_batch,
        "data": "random token ids (timing only)",
    }
    return make, (lambda out: out["mlm_logits"]), info


def worker_main(args):
    import numpy as np
    import tensorflow as tf

    impl = getattr(tf.distribute.experimental.CommunicationImplementation, args.collective)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=impl,
            timeout_seconds=float(args.timeout),
            bytes_per_pack=args.bytes_per_pack,
        )
    )
    workers = strategy.num_replicas_in_sync
    pieces = _mlp_pieces if args.model == "mlp" else _bert_pieces
    make, logits_of, info = pieces(args, workers)

    def log(s):
        print(f"[worker {args.worker}] {s}", file=sys.stderr, flush=True)

    weights = {}
    params = {}

    def make_timer(v):
        build, make_opt, feats, labels = make(v)
        key = "2x" if v == "base_2x" else "1x"
        if key not in weights:
            tf.keras.utils.set_random_seed(0)
            import keras

            keras.utils.set_random_seed(0)
            m = build()
            m(tf.nest.map_structure(lambda a: a[:1], feats))
            weights[key] = m.get_weights()
            params[key] = int(sum(np.prod(w.shape) for w in m.trainable_weights))
        return _Timer(strategy, build, make_opt, weights[key], feats, labels, logits_of)

    checks = {v: t for v, t in CHECKS.items() if v in args.variants and t in args.variants}
    res = timing.time_variants(
        make_timer, list(args.variants), args.steps, args.reps, log, checks=checks
    )
    raw = res["raw_step_s"]
    same_bytes = {}
    if "base_2x" in raw:
        for v in args.variants:
            same_bytes[v] = timing.summarize([t / b for t, b in zip(raw[v], raw["base_2x"])])
    n1, n2 = params["1x"], params.get("2x")
    payload = {v: BYTES_PER_PARAM.get(v, 8) * (n2 if v == "base_2x" else n1) for v in args.variants}
    res.update(info)
    res.update(
        {
            "model": args.model,
            "collective": args.collective,
            "bytes_per_pack": args.bytes_per_pack,
            "workers": workers,
            "steps_per_call": args.steps,
            "reps": args.reps,
            "params": n1,
            "params_2x": n2,
            "ratio_same_bytes": same_bytes,
            "allreduce_payload_bytes": payload,
            # Ring all-reduce: each worker sends 2 (k - 1) / k of the payload (k = workers).
            "ring_bytes_sent_per_worker": {
                v: int(b * 2 * (workers - 1) / workers) for v, b in payload.items()
            },
        }
    )
    if args.worker == 0:
        print(RESULT_TAG + json.dumps(res), flush=True)


# --------------------------------------------------------------------------------------------
# Launcher
# --------------------------------------------------------------------------------------------

_CHILDREN = []


def _kill_children():
    for p in _CHILDREN:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for p in _CHILDREN:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


atexit.register(_kill_children)


def _pass_through(args):
    out = [
        f"--steps={args.steps}",
        f"--reps={args.reps}",
        f"--mlp_width={args.mlp_width}",
        f"--mlp_batch={args.mlp_batch}",
        f"--bert_batch={args.bert_batch}",
        f"--bert_seq={args.bert_seq}",
        f"--timeout={args.timeout}",
        f"--bytes_per_pack={args.bytes_per_pack}",
        "--variants=" + ",".join(args.variants),
    ]
    return out


def run_pair(args, model, collective, log, workers=2):
    """Starts ``workers`` worker processes on 127.0.0.1 and returns worker 0's result.

    Raises:
      RuntimeError: a worker failed or the deadline (``args.timeout`` + 120 s) passed; both
        workers are killed either way.
    """
    addrs = devices.local_worker_addresses(workers)
    repo = os.path.dirname(HERE)
    procs = []
    for i in range(workers):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps(
                {"cluster": {"worker": addrs}, "task": {"type": "worker", "index": i}}
            ),
            PYTHONPATH=os.pathsep.join(
                [repo, HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p]
            ),
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        cmd = [sys.executable, os.path.abspath(__file__), f"--worker={i}", f"--model={model}"]
        cmd += [f"--collective={collective}"] + _pass_through(args)
        p = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: killed as one
        )
        _CHILDREN.append(p)
        procs.append(p)
    deadline = time.time() + args.timeout + 120
    outs = [None] * workers
    try:
        for i, p in enumerate(procs):
            left = max(1.0, deadline - time.time())
            try:
                outs[i] = p.communicate(timeout=left)
            except subprocess.TimeoutExpired as e:
                raise RuntimeError(f"{model}/{collective}: workers passed the deadline") from e
            if p.returncode != 0:
                raise RuntimeError(
                    f"{model}/{collective}: worker {i} exited with {p.returncode}:\n"
                    + outs[i][1][-3000:]
                )
    finally:
        _kill_children()
    for line in outs[0][0].splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    raise RuntimeError(f"{model}/{collective}: worker 0 printed no result:\n{outs[0][1][-3000:]}")


def run(args, log=print):
    """Runs every (model, collective) and writes the JSON; returns the document."""
    out = args.out or os.path.join(
        harness.RESULTS_DIR, "loopback_quick.json" if args.quick else "loopback.json"
    )
    doc = {
        "kind": "loopback",
        "command": harness.command_line(),
        "environment": harness.environment(),
        "config": {
            k: getattr(args, k)
            for k in (
                "quick",
                "models",
                "variants",
                "collectives",
                "reps",
                "steps",
                "mlp_width",
                "mlp_batch",
                "bert_batch",
                "bert_seq",
                "timeout",
                "bytes_per_pack",
            )
        },
        "timing": [],
        "errors": [],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if args.append and os.path.exists(out):
        old = harness.read_json(out)
        doc["timing"], doc["errors"] = old.get("timing", []), old.get("errors", [])
        doc["earlier_commands"] = old.get("earlier_commands", []) + [old.get("command")]
    t0 = time.time()
    for model in args.models:
        for collective in args.collectives:
            log(f"{model} over {collective} (2 workers on 127.0.0.1):")
            t1 = time.time()
            try:
                res = run_pair(args, model, collective, log)
            except RuntimeError as e:
                doc["errors"].append(str(e))
                log(f"  failed: {e}")
                continue
            res["wall_s"] = round(time.time() - t1, 1)
            res["label"] = args.label
            doc["timing"].append(res)
            log(
                "  step ms median: "
                + ", ".join(f"{v}={r['median']:.0f}" for v, r in res["step_ms"].items())
            )
            log(
                "  vs base: "
                + ", ".join(f"{v}={r['median']:.3f}" for v, r in res["ratio"].items())
                + " | vs base_2x: "
                + ", ".join(f"{v}={r['median']:.3f}" for v, r in res["ratio_same_bytes"].items())
            )
            doc["elapsed_s"] = round(time.time() - t0, 1)
            harness.write_json(out, doc)
    doc["elapsed_s"] = round(time.time() - t0, 1)
    doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    doc["complete"] = not doc["errors"]
    harness.write_json(out, doc)
    log(f"done in {doc['elapsed_s'] / 60:.1f} min -> {out}")
    return doc


def main(argv=None):
    args = parse_args(argv)
    if args.worker is not None:
        worker_main(args)
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(1))  # runs atexit: the workers are killed
    run(args, log=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
