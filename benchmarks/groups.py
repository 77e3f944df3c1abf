r"""Cost of micro-batch groups: step time and peak memory of VR-LAMB with m groups vs LAMB.

VRGD needs k GSNR samples per step; with micro-batch groups k = replicas x m. Each replica
splits its shard of the global batch into m equal, contiguous groups, computes every group's
gradients at the same weights (``tf.GradientTape`` per group, one group after another), sums
the gradients and their element-wise squares and calls
``optimizer.apply_grouped_gradients(grads_and_vars, sq_sums, num_groups=m)``. The base is
plain LAMB at the same global batch, one gradient per replica (``apply_gradients``).

Variants, per (model, devices, global batch):
  base      LAMB, one gradient per replica (Keras 3: ``vrgd_tf.Lamb``; BERT-tiny: Model
            Garden ``lamb.LAMB``);
  vr_m1     VR-LAMB with ``apply_gradients`` (m = 1, the reference row: what
            ``use_micro_batches`` does for m = 1; k = devices);
  vr_m<m>   VR-LAMB with m groups through ``apply_grouped_gradients`` (k = devices x m);
  base_m<m> (``--accum_groups``) LAMB fed the sum of m groups' gradients, no squares, no
            GSNR: separates the cost of splitting the batch from that of VR.

The step is a compiled custom loop (``timing.StepTimer``: ``tf.function`` around
``strategy.run`` in a ``tf.range`` loop, a fixed batch), for both models: the 1-D CNN is a
Keras 3 model with ``vrgd_tf.VRGDLamb`` (not ``model.fit``, so that base and VR run the same
loop); BERT-tiny is tf_keras (Model Garden ``BertPretrainerV2``) with
``vrgd_tf.tf_keras.VRGDLamb``. The batch is split as ``vrgd_tf.micro_batches`` does. The
1-D CNN unrolls the groups in Python, like ``use_micro_batches`` (a group's forward pass
waits for the previous group's squares); BERT-tiny loops with ``tf.while_loop``
(``--bert_loop``): unrolled, 8 replicas x 8 groups are 64 copies of BERT in one graph,
minutes of tracing and GBs per variant. ``vr_m8_while`` times the CNN with the while loop
too. Devices are logical CPU devices (``MirroredStrategy`` over 1 or 8 of them,
``ReductionToOneDevice``).

Timing as ``overhead.py`` (``timing.time_variants``): variants built side by side in one
process, traced and warmed up, then ``--reps`` repetitions time every variant once in an
order rotated per repetition; ratios variant/base within a repetition, min / median / max.
BERT-tiny runs in a child process. Peak memory as ``overhead.py``: ``VmHWM`` of one child
process per (model, devices, variant, repetition), interleaved.

Checks recorded with the timings (1-D CNN; BERT-tiny has dropout, so none there), after all
the timed steps on the same batch: base_m<m> against base and vr_m8_while against vr_m8
(the same update, summed in another order: the gradients agree to float rounding, ~1e-6
relative, which LAMB's normalised update amplifies over tens of steps); on one device vr_m1
against base (k = 1: the VR step is the base step, bit for bit); and 1 device x 8 groups
against 8 devices x 1 group (k = 8, the same samples).

At the end the run checks :data:`BOUNDS` (``benchmarks/bounds.py``): VR's step time beyond the
split into 8 groups and its peak memory with 8 groups, PASS/FAIL, exit status 1 on a failure
(``--quick``: informative only).

Examples:
  python3 benchmarks/groups.py --quick
  python3 benchmarks/groups.py
"""

import os
import sys
import time

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bert  # noqa: E402
import bounds  # noqa: E402
import children  # noqa: E402
import harness  # noqa: E402  (imports TensorFlow, runs no op: the device split comes first)
import models  # noqa: E402
import peak_memory  # noqa: E402
import timing  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_bool("quick", False, "Small, fast configuration (a few minutes).")
flags.DEFINE_string(
    "out",
    None,
    "JSON results. Default benchmarks/results/groups.json (groups_quick.json with --quick).",
)
flags.DEFINE_list("models", ["cnn1d", "bert_tiny"], "Models: cnn1d, bert_tiny.")
flags.DEFINE_list("devices", ["1", "8"], "Device (replica) counts.")
flags.DEFINE_list(
    "groups",
    ["1", "2", "4", "8"],
    "Micro-batch groups m per replica (1 = VR-LAMB with apply_gradients).",
)
flags.DEFINE_list(
    "accum_groups", ["8"], "m for the control 'LAMB, m groups summed, no VR', cnn1d (empty: none)."
)
flags.DEFINE_list(
    "bert_accum_groups",
    [],
    "The same for bert_tiny. Off by default: with "
    "the while loop on 8 replicas, TF 2.20's grappler fails on it "
    "(ArithmeticOptimizer AddOpsRewrite tmp_var ALREADY_EXISTS).",
)
flags.DEFINE_enum(
    "cnn_loop",
    "unrolled",
    ["unrolled", "while"],
    "How cnn1d's grouped step loops over the groups (see grouped_replica_step).",
)
flags.DEFINE_enum(
    "bert_loop",
    "while",
    ["unrolled", "while"],
    "How bert_tiny's grouped step "
    "loops over the groups (unrolled: replicas x m copies of BERT to trace, "
    "minutes and GBs at 8 x 8).",
)
flags.DEFINE_list(
    "cnn_other_loop_groups",
    ["8"],
    "m for which cnn1d also times VR-LAMB "
    "with the other loop (variant vr_m<m>_while or _unrolled).",
)
flags.DEFINE_list(
    "cnn_batches",
    ["512", "4096"],
    "Global batches, cnn1d (multiples of max(devices) x max(groups)).",
)
flags.DEFINE_integer(
    "cnn_steps",
    10,
    "Steps per timed call, cnn1d, up to batch 1024; scaled by 1024/batch (at least 3) above.",
)
flags.DEFINE_integer("reps", 7, "Timed repetitions, cnn1d.")
flags.DEFINE_integer("bert_batch", 64, "Global batch, bert_tiny.")
flags.DEFINE_integer("bert_seq", 128, "Sequence length, bert_tiny.")
flags.DEFINE_integer("bert_steps", 1, "Steps per timed call, bert_tiny.")
flags.DEFINE_integer("bert_reps", 5, "Timed repetitions, bert_tiny.")
flags.DEFINE_bool("memory", True, "Measure peak RSS in child processes.")
flags.DEFINE_list("memory_models", ["cnn1d", "bert_tiny"], "Models measured for memory.")
flags.DEFINE_integer("memory_cnn_batch", 4096, "cnn1d batch for memory.")
flags.DEFINE_integer("memory_reps", 1, "Child processes per (model, devices, variant).")
flags.DEFINE_integer("memory_steps", 3, "Train steps in a memory child.")
# Internal: child processes.
flags.DEFINE_enum("child", None, ["bert", "memory"], "Internal: run as a child process.")
flags.DEFINE_string("child_model", None, "Internal.")
flags.DEFINE_integer("child_devices", None, "Internal.")
flags.DEFINE_string("child_variant", None, "Internal.")
flags.DEFINE_integer("child_batch", None, "Internal.")

QUICK = dict(
    cnn_batches=["512"],
    cnn_steps=5,
    reps=3,
    groups=["1", "2", "8"],
    bert_seq=32,
    bert_steps=1,
    bert_reps=3,
    memory_models=["cnn1d"],
    memory_cnn_batch=512,
    memory_steps=2,
)

#: Learning rate (timing is insensitive to it; the steps do real arithmetic).
LR = 1e-3


def _ints(values):
    return [int(v) for v in values]


def default_loop(model):
    return FLAGS.cnn_loop if model == "cnn1d" else FLAGS.bert_loop


def variant_names(model):
    """base, vr_m<m> for --groups, base_m<m> for --accum_groups, and for cnn1d
    vr_m<m>_<other loop> for --cnn_other_loop_groups."""
    names = ["base"] + [f"vr_m{m}" for m in _ints(FLAGS.groups)]
    accum = FLAGS.accum_groups if model == "cnn1d" else FLAGS.bert_accum_groups
    names += [f"base_m{m}" for m in _ints(accum) if m > 1]
    if model == "cnn1d":
        other = "while" if FLAGS.cnn_loop == "unrolled" else "unrolled"
        names += [f"vr_m{m}_{other}" for m in _ints(FLAGS.cnn_other_loop_groups) if m > 1]
    return names


def parse_variant(name, model):
    """(VR?, m, loop) of a variant name (loop None for m = 1)."""
    if name == "base":
        return False, 1, None
    kind, rest = name.split("_m")
    m, _, loop = rest.partition("_")
    m = int(m)
    return kind == "vr", m, (loop or default_loop(model)) if m > 1 else None


def variant_info(name, model, devices):
    vr, m, loop = parse_variant(name, model)
    return {
        "vr": vr,
        "m": m,
        "k": devices * m if vr else None,
        "loop": loop,
        "path": (
            "apply_grouped_gradients"
            if vr and m > 1
            else "apply_gradients of the summed group gradients"
            if m > 1
            else "apply_gradients"
        ),
    }


# --------------------------------------------------------------------------------------------
# The grouped train step
# --------------------------------------------------------------------------------------------


def grouped_replica_step(model, opt, data, batch, loss_fn, m, squares, loop="unrolled"):
    """The per-replica train step with ``m`` micro-batch groups.

    ``data`` is a nest of tensors holding the global batch (dimension 0); replica ``d`` takes
    rows ``d*b .. (d+1)*b - 1`` (``b = batch / replicas``) and splits them into ``m``
    contiguous groups. ``loss_fn(part)`` is the part's loss in the global-batch convention
    (a sum over its examples divided by the global count), so the groups' gradients sum to
    the replica's gradient. ``m = 1``: one tape and ``apply_gradients``. ``m > 1``: a tape
    per group at the same weights, one group after another; the summed gradients go to
    ``apply_grouped_gradients(..., sq_sums, num_groups=m)`` if ``squares``, else (control)
    to ``apply_gradients``.

    ``loop="unrolled"``: the library's group loop, ``vrgd_tf.micro_batches.run_groups``
    (what ``use_micro_batches`` and Model Garden's trainer run): ``m`` copies of the
    forward and backward pass in the graph, group ``j + 1``'s forward pass depending on
    group ``j``'s squares (or gradients); sparse gradients stay sparse in the sum.
    ``loop="while"``: this benchmark's own variant, not in the library: a ``tf.while_loop``
    (``parallel_iterations=1``) whose body is one group, one copy in the graph whatever
    ``m``; dense accumulators.
    """
    import tensorflow as tf

    from vrgd_tf import micro_batches

    variables = model.trainable_variables

    def unrolled(mine):
        def group_step(group):
            with tf.GradientTape() as tape:
                loss = loss_fn(group)
            # (a None gradient: e.g. BERT's unused pooler)
            return list(zip(tape.gradient(loss, variables), variables)), None

        groups = micro_batches.split_batch(mine, m)
        result = micro_batches.run_groups(groups, group_step, squares=squares)
        return [g for g, _ in result.grads_and_vars], result.sq_sums

    def while_loop(mine):
        # [m, group, ...]: group j is rows j*group .. (j+1)*group - 1, static shapes.
        split = tf.nest.map_structure(
            lambda t: tf.reshape(t, [m, t.shape[0] // m] + t.shape[1:].as_list()), mine
        )
        zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
        missing = set()  # variables without a gradient (BERT's unused pooler), at trace time

        def body(j, acc, *sq):
            group = tf.nest.map_structure(lambda t: tf.gather(t, j), split)
            with tf.GradientTape() as tape:
                loss = loss_fn(group)
            grads = tape.gradient(loss, variables)
            missing.update(i for i, g in enumerate(grads) if g is None)
            dense = [z if g is None else tf.convert_to_tensor(g) for g, z in zip(grads, zeros)]
            acc = [a + g for a, g in zip(acc, dense)]
            if squares:
                sq = [micro_batches.add_square(q, g) for q, g in zip(sq[0], dense)]
                return j + 1, acc, sq
            return j + 1, acc

        init = (tf.constant(0), zeros) + ((list(zeros),) if squares else ())
        out = tf.while_loop(lambda j, *_: j < m, body, init, parallel_iterations=1)
        acc, sq = out[1], (out[2] if squares else [None] * len(variables))
        acc = [None if i in missing else a for i, a in enumerate(acc)]
        sq = [None if i in missing or not squares else q for i, q in enumerate(sq)]
        return acc, sq

    def replica_step():
        ctx = tf.distribute.get_replica_context()
        rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
        per = batch // ctx.num_replicas_in_sync
        mine = tf.nest.map_structure(lambda t: t[rid * per : (rid + 1) * per], data)
        if m == 1:
            with tf.GradientTape() as tape:
                loss = loss_fn(mine)
            grads = tape.gradient(loss, variables)
            opt.apply_gradients(zip(grads, variables))
            return
        summed, sq_sums = (unrolled if loop == "unrolled" else while_loop)(mine)
        if squares:
            opt.apply_grouped_gradients(list(zip(summed, variables)), sq_sums, num_groups=m)
        else:
            opt.apply_gradients(list(zip(summed, variables)))

    return replica_step


class GroupTimer(timing.StepTimer):
    """One variant on one strategy: model, optimizer, the compiled grouped steps."""

    def __init__(
        self,
        strategy,
        model_name,
        variant,
        build_model,
        make_opt,
        weights,
        data,
        batch,
        loss_of,
        build_inputs=None,
    ):
        import tensorflow as tf

        vr, m, loop = parse_variant(variant, model_name)
        self.strategy = strategy
        with strategy.scope():
            self.model = build_model()
            if build_inputs is not None:
                self.model(build_inputs)  # tf_keras: build the variables
            self.opt = make_opt(vr)
            if hasattr(self.opt, "build") and build_inputs is None:
                self.opt.build(self.model.trainable_variables)  # Keras 3
        self.model.set_weights(weights)
        data = tf.nest.map_structure(tf.constant, data)
        self.compile_steps(
            grouped_replica_step(
                self.model, self.opt, data, batch, loss_of(self.model), m, vr, loop
            )
        )


def _cnn_parts(batch):
    """(timer kwargs, parameter count, trainable variables) for the 1-D CNN."""
    import tensorflow as tf

    build_model, x, y = models.cnn1d_timing_data(batch)
    weights = models.init_weights(build_model, 0)
    base_cls, vr_cls, kwargs = models.optimizer_classes("lamb")

    def make_opt(vr):
        return (vr_cls if vr else base_cls)(learning_rate=LR, **kwargs)

    def loss_of(model):
        def loss_fn(part):
            xb, yb = part
            logits = model(xb, training=True)
            return tf.reduce_sum(
                tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits)
            ) / float(batch)

        return loss_fn

    n_params = int(sum(w.size for w in weights))
    return (
        dict(
            build_model=build_model,
            make_opt=make_opt,
            weights=weights,
            data=(x, y),
            batch=batch,
            loss_of=loss_of,
        ),
        n_params,
        len(weights),
    )


def _bert_parts(batch, seq):
    import tensorflow as tf
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    inputs, labels = bert.bert_random_batch(batch, seq)
    m = bert.bert_tiny(seq)
    m(inputs)
    weights = m.get_weights()
    count = float(labels.size)

    def make_opt(vr):
        return bert.bert_lamb("vr" if vr else "base", learning_rate=LR)

    def loss_of(model):
        def loss_fn(part):
            f, yb = part
            logits = model(f, training=True)["mlm_logits"]
            return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits)) / count

        return loss_fn

    n_params = int(sum(int(tf.size(w)) for w in m.trainable_weights))
    return (
        dict(
            build_model=lambda: bert.bert_tiny(seq),
            make_opt=make_opt,
            weights=weights,
            data=(inputs, labels),
            batch=batch,
            loss_of=loss_of,
            build_inputs=inputs,
        ),
        n_params,
        len(m.trainable_weights),
    )


def model_parts(model, batch):
    if model == "cnn1d":
        return _cnn_parts(batch)
    if model == "bert_tiny":
        return _bert_parts(batch, FLAGS.bert_seq)
    raise ValueError(model)


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def _checks(model, names, devices):
    """Which final weights must agree (see the module docstring)."""
    if model != "cnn1d":
        return {}
    checks = {v: "base" for v in names if v.startswith("base_m")}
    if devices == 1 and "vr_m1" in names:
        checks["vr_m1"] = "base"
    for v in names:  # the other loop: the same arithmetic
        if v.startswith("vr_m") and v.count("_") == 2 and v.rsplit("_", 1)[0] in names:
            checks[v] = v.rsplit("_", 1)[0]
    return checks


def time_config(model, devices, batch, steps, reps, log, weights_out=None):
    """One (model, devices, batch): every variant, interleaved; the results entry."""
    for m in _ints(FLAGS.groups) + _ints(FLAGS.accum_groups + FLAGS.bert_accum_groups):
        if batch % (devices * m):
            raise app.UsageError(
                f"{model}: batch {batch} is not a multiple of {devices} devices x {m} groups"
            )
    strategy = harness.strategy_for(devices)
    kwargs, n_params, n_vars = model_parts(model, batch)
    names = variant_names(model)
    res = timing.time_variants(
        lambda v: GroupTimer(strategy, model, v, **kwargs),
        names,
        steps,
        reps,
        log,
        checks=_checks(model, names, devices),
        weights_out=weights_out,
    )
    res.update(
        {
            "model": model,
            "pair": "lamb",
            "devices": devices,
            "batch": batch,
            "per_replica_batch": batch // devices,
            "steps_per_call": steps,
            "reps": reps,
            "params": n_params,
            "trainable_variables": n_vars,
            # Steps every variant ran before its weights were compared (trace + warm-up + reps).
            "steps_before_check": 1 + steps + reps * steps,
            "variants": {
                v: dict(
                    variant_info(v, model, devices),
                    group_size=batch // devices // parse_variant(v, model)[1],
                )
                for v in names
            },
            "family": (
                "keras3 (vrgd_tf.Lamb vs vrgd_tf.VRGDLamb)"
                if model == "cnn1d"
                else "tf_keras (Model Garden lamb.LAMB vs vrgd_tf.tf_keras.VRGDLamb)"
            ),
        }
    )
    if model == "bert_tiny":
        res.update({"seq_len": FLAGS.bert_seq, "data": "random token ids (timing only)"})
    return res


def _log_entry(res, log):
    log("  ratio median: " + ", ".join(f"{v}={r['median']:.3f}" for v, r in res["ratio"].items()))


def _cross_check(w_a, w_b):
    import numpy as np

    num = max(float(np.max(np.abs(a - b))) for a, b in zip(w_a, w_b))
    den = max(float(np.max(np.abs(b))) for b in w_b)
    return num / max(den, 1e-30)


def cnn_timing(doc, out, log, t_start):
    """The 1-D CNN rows, in this process; plus the k = 8 cross-check."""
    devices = _ints(FLAGS.devices)
    groups = _ints(FLAGS.groups)
    for batch in _ints(FLAGS.cnn_batches):
        steps = int(max(3, FLAGS.cnn_steps * min(1, 1024 / batch)))
        final = {}
        for d in devices:
            log(f"cnn1d batch {batch}, {d} device(s):")
            final[d] = {}
            res = time_config("cnn1d", d, batch, steps, FLAGS.reps, log, final[d])
            doc["timing"].append(res)
            _log_entry(res, log)
            doc["elapsed_s"] = round(time.time() - t_start, 1)
            harness.write_json(out, doc)
        # 1 device x m groups and m devices x 1 group: the same k samples, same weights.
        for m in groups:
            if m > 1 and 1 in final and m in final:
                diff = _cross_check(final[1][f"vr_m{m}"], final[m]["vr_m1"])
                doc["cross_checks"].append(
                    {
                        "model": "cnn1d",
                        "batch": batch,
                        "k": m,
                        "a": f"1 device x {m} groups (apply_grouped_gradients)",
                        "b": f"{m} devices x 1 group (apply_gradients)",
                        "max_abs_diff_rel": diff,
                    }
                )
                log(f"  cross-check k={m}: 1x{m} vs {m}x1 max rel diff {diff:.2e}")
        harness.write_json(out, doc)


def _common_child_args():
    return [
        f"--devices={','.join(FLAGS.devices)}",
        f"--groups={','.join(FLAGS.groups)}",
        f"--accum_groups={','.join(FLAGS.accum_groups)}",
        f"--bert_accum_groups={','.join(FLAGS.bert_accum_groups)}",
        f"--bert_batch={FLAGS.bert_batch}",
        f"--bert_seq={FLAGS.bert_seq}",
        f"--cnn_loop={FLAGS.cnn_loop}",
        f"--bert_loop={FLAGS.bert_loop}",
        f"--cnn_other_loop_groups={','.join(FLAGS.cnn_other_loop_groups)}",
    ]


def bert_child():
    """Child: BERT-tiny timing for every device count; prints the entries."""
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    out = []
    for d in _ints(FLAGS.devices):
        log(f"bert_tiny batch {FLAGS.bert_batch}, {d} device(s):")
        res = time_config("bert_tiny", d, FLAGS.bert_batch, FLAGS.bert_steps, FLAGS.bert_reps, log)
        _log_entry(res, log)
        out.append(res)
    children.print_result(out)


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


def memory_child():
    """Child: one variant, ``--memory_steps`` steps, then the peak RSS."""
    import tensorflow as tf

    model, d, variant, batch = (
        FLAGS.child_model,
        FLAGS.child_devices,
        FLAGS.child_variant,
        FLAGS.child_batch,
    )
    strategy = harness.strategy_for(d)
    kwargs, _, _ = model_parts(model, batch)
    rss0 = peak_memory.rss_kb()
    timer = GroupTimer(strategy, model, variant, **kwargs)
    timer.run(tf.constant(FLAGS.memory_steps))
    children.print_result(peak_memory.memory_result(rss0))


def memory(log):
    configs = []
    for model in [m for m in FLAGS.models if m in FLAGS.memory_models]:
        batch = FLAGS.memory_cnn_batch if model == "cnn1d" else FLAGS.bert_batch
        configs += [(model, d, batch) for d in _ints(FLAGS.devices)]

    def child_args(c, v):
        return [
            "--child=memory",
            f"--child_model={c[0]}",
            f"--child_devices={c[1]}",
            f"--child_variant={v}",
            f"--child_batch={c[2]}",
            f"--memory_steps={FLAGS.memory_steps}",
        ] + _common_child_args()

    raw = peak_memory.memory_runs(
        __file__, configs, lambda c: variant_names(c[0]), FLAGS.memory_reps, child_args, log
    )
    out = []
    for c in configs:
        names = variant_names(c[0])
        entry = {
            "model": c[0],
            "pair": "lamb",
            "devices": c[1],
            "batch": c[2],
            "variants": {v: variant_info(v, c[0], c[1]) for v in names},
            "raw": raw[c],
        }
        entry.update(peak_memory.memory_ratios(raw[c], names))
        out.append(entry)
    return out


# --------------------------------------------------------------------------------------------
# Regression bounds and main
# --------------------------------------------------------------------------------------------

#: Regression bounds of the full run: VR's step time with 8 groups over LAMB fed the same 8
#: groups' summed gradients (VR's cost beyond the split), and VR with 8 groups over LAMB in
#: peak RSS.
BOUNDS = (
    bounds.above_recorded(
        "vr_m8_over_base_m8_step", 1.083, "cnn1d, batch 4096, 1 device", {"model": "cnn1d"}
    ),
    bounds.above_recorded("vr_m8_peak_memory_ratio", 1.259, "cnn1d, 8 devices", {"model": "cnn1d"}),
    bounds.above_recorded(
        "vr_m8_peak_memory_ratio", 1.704, "BERT-tiny, 8 devices", {"model": "bert_tiny"}
    ),
)


def bound_measurements(doc):
    """Per timing entry with both variants, the median over repetitions of vr_m8 / base_m8;
    per memory entry, vr_m8's peak-RSS ratio to base."""
    import numpy as np

    for e in doc["timing"]:
        raw = e["raw_step_s"]
        if "vr_m8" in raw and "base_m8" in raw:
            ratio = float(np.median([a / b for a, b in zip(raw["vr_m8"], raw["base_m8"])]))
            case = {"model": e["model"], "batch": e["batch"], "devices": e["devices"]}
            yield bounds.Measurement("vr_m8_over_base_m8_step", case, ratio)
    for m in doc["memory"]:
        if isinstance(m.get("vr_m8"), dict):
            case = {"model": m["model"], "batch": m["batch"], "devices": m["devices"]}
            yield bounds.Measurement(
                "vr_m8_peak_memory_ratio", case, m["vr_m8"]["peak_ratio"]["median"]
            )


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)
    harness.apply_quick(QUICK)
    harness.setup_devices(max(_ints(FLAGS.devices)))
    if FLAGS.child == "bert":
        bert_child()
        return
    if FLAGS.child == "memory":
        memory_child()
        return

    out = FLAGS.out or os.path.join(
        harness.RESULTS_DIR, "groups_quick.json" if FLAGS.quick else "groups.json"
    )

    def log(s):
        print(s, flush=True)

    meminfo = peak_memory.cpu_memory_info()
    doc = {
        "kind": "groups",
        "command": harness.command_line(),
        "environment": harness.environment(),
        "config": {
            k: FLAGS[k].value
            for k in (
                "quick",
                "models",
                "devices",
                "groups",
                "accum_groups",
                "bert_accum_groups",
                "cnn_loop",
                "bert_loop",
                "cnn_other_loop_groups",
                "cnn_batches",
                "cnn_steps",
                "reps",
                "bert_batch",
                "bert_seq",
                "bert_steps",
                "bert_reps",
                "memory",
                "memory_models",
                "memory_cnn_batch",
                "memory_reps",
                "memory_steps",
            )
        },
        "variants": {
            "base": "LAMB, one gradient per replica (apply_gradients)",
            "vr_m1": "VR-LAMB, apply_gradients (m = 1, k = devices)",
            "vr_m<m>": "VR-LAMB, m groups per replica, apply_grouped_gradients (k = devices x m)",
            "base_m<m>": "LAMB fed the sum of m groups' gradients (no squares, "
            "no GSNR): the cost of the split alone",
        },
        "step": "compiled custom loop (timing.StepTimer) for both models; groups split "
        "with vrgd_tf.micro_batches.split_batch, serial tapes, summed with "
        "micro_batches.sum_group_gradients",
        "memory_method": "VmHWM (peak resident set) from /proc/self/status of one child "
        "process per (model, devices, variant) and repetition",
        "tf_get_memory_info_cpu": meminfo,
        "timing": [],
        "cross_checks": [],
        "memory": [],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    t_start = time.time()
    if "cnn1d" in FLAGS.models:
        cnn_timing(doc, out, log, t_start)
    if "bert_tiny" in FLAGS.models:
        log(f"bert_tiny batch {FLAGS.bert_batch} (child process):")
        args = [
            "--child=bert",
            f"--bert_steps={FLAGS.bert_steps}",
            f"--bert_reps={FLAGS.bert_reps}",
        ] + _common_child_args()
        try:
            res, dt = children.run_child(__file__, args, log)
            doc["timing"] += res
            for r in res:
                log(f"  {r['devices']} device(s):")
                _log_entry(r, log)
            log(f"  ({dt:.0f}s)")
        except Exception as e:  # noqa: BLE001
            doc.setdefault("errors", []).append(str(e))
            log(f"  bert_tiny failed: {e}")
        doc["elapsed_s"] = round(time.time() - t_start, 1)
        harness.write_json(out, doc)
    if FLAGS.memory:
        log("memory (child processes):")
        doc["memory"] = memory(log)
    doc["elapsed_s"] = round(time.time() - t_start, 1)
    doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    doc["complete"] = True
    doc["bounds"] = bounds.check(BOUNDS, bound_measurements(doc), not FLAGS.quick, log)
    harness.write_json(out, doc)
    log(f"done in {doc['elapsed_s'] / 60:.1f} min -> {out}")
    return bounds.exit_status(doc["bounds"])


if __name__ == "__main__":
    app.run(main)
