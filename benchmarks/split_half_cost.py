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

Example:
  python benchmarks/split_half_cost.py --reps 7 --steps 20
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
    return res


def main(argv):
    del argv

    harness.setup_devices(FLAGS.num_replicas)
    strategy = harness.strategy_for(FLAGS.num_replicas)
    out = FLAGS.out or os.path.join(harness.RESULTS_DIR, "split_half_cost.json")
    results = {"runs": []}
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
            harness.write_json(out, results)
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
