r"""Step time of the split-half reliability of the GSNR (``split_half=True``), as a ratio.

For each model and ``statistics_interval`` (1 and 10), three variants are built side by side
in ONE process on the same ``MirroredStrategy`` (8 logical CPU replicas,
``ReductionToOneDevice``) from the same weights and a fixed batch, and timed interleaved by
:func:`timing.time_variants` (rotating order, ratio within each repetition): ``base`` the
VR optimizer without the split-half reliability, ``split_half`` the same with it, and
``plain`` the base optimizer (no VRGD), for scale. ``split_half`` must end with ``base``'s
weights exactly (the reliability changes no gradient): checked and recorded.

Models: the digits demo's MLP (64-256-256-10, 85k parameters, ``examples/digits``) and a wide
MLP (64-1024-1024-10, 1.1M parameters), both with VR-LAMB.

The cost per step (``cost_per_step`` of each run, and printed). The reliability's math runs
only at recording steps, but its masked all-reduce of ``[g, g*g]`` travels on every step
(``docs/spec.md`` section 4: a collective cannot sit in a branch taken only at recording
steps); it carries a fixed subsample of about one element in ``statistics_interval`` of
each variable (64 to 4096 per variable), so the extra all-reduce per step is about the full
buffer's ``8 N`` bytes (``N`` parameters) divided by ``statistics_interval``:

- ``extra_allreduce_bytes_per_step``: ``8 M``, ``M`` the subsample's elements
  (``vrgd_tf.gsnr.halves.subsample_stride`` per variable), next to
  ``full_buffer_bytes_over_interval`` ``= 8 N / statistics_interval``;
- ``extra_ms_per_step``: the measured cost, ``(median ratio split_half / base - 1) x``
  base's median ms per step, everything included (the extra all-reduce bytes on every
  step, the per-element math at one step in ``statistics_interval``), and
  ``extra_fraction_of_base_step``, the same as a fraction of base's step.

Example:
  python3 benchmarks/split_half_cost.py --reps 7 --steps 20
"""

import os
import sys

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402  (imports TensorFlow, runs no op: the device split comes first)
import models  # noqa: E402
import timing  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_replicas", 8, "Logical CPU replicas.")
flags.DEFINE_integer("batch", 1024, "Global batch.")
flags.DEFINE_integer("steps", 20, "Train steps per timed call.")
flags.DEFINE_integer("reps", 7, "Timed repetitions per variant.")
flags.DEFINE_list("intervals", ["1", "10"], "statistics_interval values.")
flags.DEFINE_list("models", ["digits_mlp", "wide_mlp"], "Models to time.")
flags.DEFINE_string("out", None, "JSON results. Default benchmarks/results/split_half_cost.json.")

WIDTHS = {"digits_mlp": (256, 256), "wide_mlp": (1024, 1024)}


def _timer_class():
    """The :class:`timing.StepTimer` of one variant (made after the device split)."""
    import tensorflow as tf

    class MlpTimer(timing.StepTimer):
        def __init__(self, strategy, build_model, make_opt, weights, x, y):
            self.strategy = strategy
            with strategy.scope():
                self.model = build_model()
                self.opt = make_opt()
                self.opt.build(self.model.trainable_variables)
            self.model.set_weights(weights)
            xt, yt = tf.constant(x), tf.constant(y)
            batch = int(x.shape[0])
            model, opt = self.model, self.opt

            def replica_step():
                ctx = tf.distribute.get_replica_context()
                per = batch // ctx.num_replicas_in_sync
                rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
                xb, yb = xt[rid * per : (rid + 1) * per], yt[rid * per : (rid + 1) * per]
                with tf.GradientTape() as tape:
                    logits = model(xb, training=True)
                    loss = tf.reduce_sum(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits)
                    ) / float(batch)
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))

            self.compile_steps(replica_step)

    return MlpTimer


def cost_per_step(res, shapes, interval):
    """The run's ``cost_per_step`` record (see the module) from :func:`timing.time_variants`'
    ``res``, the model's variable shapes and ``statistics_interval``."""
    import math

    from vrgd_tf.gsnr import halves

    n = sum(math.prod(s) for s in shapes)
    m = sum(-(-math.prod(s) // halves.subsample_stride(s, interval)) for s in shapes)
    extra = res["ratio"]["split_half"]["median"] - 1.0
    return {
        "parameters": int(n),
        "subsample_elements": int(m),
        "extra_allreduce_bytes_per_step": 8 * int(m),
        "full_buffer_bytes": 8 * int(n),
        "full_buffer_bytes_over_interval": round(8 * n / interval, 1),
        "extra_fraction_of_base_step": round(extra, 4),
        "extra_ms_per_step": round(extra * res["step_ms"]["base"]["median"], 3),
    }


def cost_line(cost, interval):
    """The printed statement of a :func:`cost_per_step` record."""
    return (
        f"  cost per step: {cost['extra_ms_per_step']:+.2f} ms "
        f"({100 * cost['extra_fraction_of_base_step']:+.1f}% of base's step); extra all-reduce "
        f"{cost['extra_allreduce_bytes_per_step']:,} bytes per step (a subsample of "
        f"{cost['subsample_elements']:,} of {cost['parameters']:,} elements): about the full "
        f"[g, g*g] buffer's {cost['full_buffer_bytes']:,} bytes / statistics_interval "
        f"{interval} = {cost['full_buffer_bytes_over_interval']:,.0f}, kept within 64 to 4096 "
        "elements per variable"
    )


def time_model(model_name, interval, strategy, log):
    import numpy as np

    import vrgd_tf

    sys.path.insert(
        0,
        os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "digits"
        ),
    )
    import digits_large_batch as demo

    data = demo.load_data()
    reps = int(np.ceil(FLAGS.batch / len(data.y_train)))
    x = np.concatenate([data.x_train] * reps)[: FLAGS.batch]
    y = np.concatenate([data.y_train] * reps)[: FLAGS.batch]

    def build():
        return demo.build_model(WIDTHS[model_name])

    weights = models.init_weights(build, 0)
    kwargs = dict(learning_rate=1e-3, weight_decay_rate=0.01, exclude_from_weight_decay=["bias"])
    makers = {
        "base": lambda: vrgd_tf.VRGDLamb(**kwargs, statistics_interval=interval),
        "split_half": lambda: vrgd_tf.VRGDLamb(
            **kwargs, statistics_interval=interval, split_half=True
        ),
        "plain": lambda: vrgd_tf.Lamb(**kwargs),
    }
    timer = _timer_class()

    def make(v):
        return timer(strategy, build, makers[v], weights, x, y)

    res = timing.time_variants(
        make,
        ["base", "split_half", "plain"],
        FLAGS.steps,
        FLAGS.reps,
        log,
        checks={"split_half": "base"},
    )
    res.update(
        {
            "model": model_name,
            "statistics_interval": interval,
            "params": int(sum(np.prod(w.shape) for w in weights)),
            "replicas": strategy.num_replicas_in_sync,
            "batch": FLAGS.batch,
            "steps_per_call": FLAGS.steps,
            "reps": FLAGS.reps,
        }
    )
    res.pop("raw_step_s", None)
    res["cost_per_step"] = cost_per_step(res, [w.shape for w in weights], interval)
    return res


def main(argv):
    del argv

    harness.setup_devices(FLAGS.num_replicas)
    strategy = harness.strategy_for(FLAGS.num_replicas)
    out = FLAGS.out or os.path.join(harness.RESULTS_DIR, "split_half_cost.json")
    results = {
        "command": harness.command_line(),
        "environment": harness.environment(),
        "runs": [],
    }
    for model_name in FLAGS.models:
        for interval in (int(i) for i in FLAGS.intervals):
            print(f"{model_name}, statistics_interval={interval}", flush=True)
            res = time_model(model_name, interval, strategy, lambda s: print(s, flush=True))
            results["runs"].append(res)
            print(
                f"  split_half / base: median {res['ratio']['split_half']}, "
                f"of min {res['ratio_of_min']['split_half']:.3f}; "
                f"weights check {res['weights_check'].get('split_half')}",
                flush=True,
            )
            print(cost_line(res["cost_per_step"], interval), flush=True)
            harness.write_json(out, results)
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
