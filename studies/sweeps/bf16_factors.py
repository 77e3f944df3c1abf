r"""How much ``squares_dtype="bfloat16"`` changes the VRGD factors, on real gradients.

The sweep's 1-D CNN on MNIST-1D (generated locally) is trained with plain momentum SGD
(global batch 1024, learning rate 0.05) and, at several points of training, the gradients
of the ``k`` replicas (the batch split in ``k`` shards; each replica's gradient in the units
Keras hands the optimizer, loss / global batch) are computed in float32. From them:

* float32 statistics, as VRGD computes them: ``S1 = sum_d x_d`` and ``S2 = sum_d x_d**2``;
* bfloat16 statistics, as a ring all-reduce sums a bfloat16 buffer: each square rounded to
  bfloat16 and accumulated replica after replica in bfloat16 (one rounding per hop);

and the factors of both with :func:`vrgd_tf.gsnr.statistics.gsnr_factors_flat` (the library's
math, the threshold of each dtype). Reported per ``k`` and point of training: the distribution of
``|f_bf16 - f_f32|`` (median, p99, max), the fraction of elements whose clipping changes (at
``gamma``, at 1), the fraction with a GSNR defined in float32 but not in bfloat16, and the mean
factor of each.

Example:
  python3 studies/sweeps/bf16_factors.py       # about a minute
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # studies/
sys.path.insert(2, os.path.dirname(os.path.dirname(HERE)))  # this checkout's vrgd_tf first

import provenance  # noqa: E402
import shared  # noqa: E402
import sweeplib  # noqa: E402


def replica_gradients(model, x, y, k):
    """float32 ``[k, N]``: the k shards' flat gradients of loss / global batch."""
    import numpy as np
    import tensorflow as tf

    batch = x.shape[0]
    per = batch // k
    out = []
    for d in range(k):
        with tf.GradientTape() as tape:
            logits = model(x[d * per : (d + 1) * per], training=True)
            loss = tf.reduce_sum(
                tf.nn.sparse_softmax_cross_entropy_with_logits(y[d * per : (d + 1) * per], logits)
            ) / float(batch)
        grads = tape.gradient(loss, model.trainable_variables)
        out.append(np.concatenate([g.numpy().ravel() for g in grads]))
    return np.stack(out).astype(np.float32)


def bf16_ring_sum_of_squares(xs):
    """``sum_d x_d**2`` with each square rounded to bfloat16 and the sum accumulated in
    bfloat16 replica after replica, as a ring all-reduce of a bfloat16 buffer does."""
    import tensorflow as tf

    acc = tf.cast(tf.square(tf.constant(xs[0])), tf.bfloat16)
    for d in range(1, xs.shape[0]):
        acc = acc + tf.cast(tf.square(tf.constant(xs[d])), tf.bfloat16)
    return tf.cast(acc, tf.float32)


def compare(xs, sizes, gamma):
    import numpy as np
    import tensorflow as tf

    from vrgd_tf import gsnr
    from vrgd_tf.gsnr import statistics

    k = xs.shape[0]
    s1 = tf.constant(xs.sum(0, dtype=np.float32))
    s2_32 = tf.constant(np.square(xs).sum(0, dtype=np.float32))
    s2_16 = bf16_ring_sum_of_squares(xs)
    f32, _ = statistics.gsnr_factors_flat(s1, s2_32, sizes, k, gamma)
    f16, _ = statistics.gsnr_factors_flat(s1, s2_16, sizes, k, gamma, squares_dtype="bfloat16")
    f32, f16 = f32.numpy().astype(np.float64), f16.numpy().astype(np.float64)
    diff = np.abs(f16 - f32)
    noise32 = s2_32.numpy() - s1.numpy() ** 2 / k
    noise16 = s2_16.numpy() - s1.numpy() ** 2 / k
    def32 = noise32 > gsnr.NOISE_RTOL * k * s2_32.numpy()
    def16 = noise16 > gsnr.NOISE_RTOL_BFLOAT16 * k * s2_16.numpy()
    at_g32, at_g16 = f32 <= gamma * (1 + 1e-6), f16 <= gamma * (1 + 1e-6)
    rel_s2 = np.abs(s2_16.numpy() / np.maximum(s2_32.numpy(), 1e-38) - 1.0)
    return {
        "k": k,
        "elements": int(xs.shape[1]),
        "abs_diff": {
            "median": float(np.median(diff)),
            "p99": float(np.quantile(diff, 0.99)),
            "max": float(diff.max()),
            "mean": float(diff.mean()),
        },
        "frac_clip_at_gamma_changes": float(np.mean(at_g32 != at_g16)),
        "frac_clip_at_one_changes": float(np.mean((f32 >= 1.0) != (f16 >= 1.0))),
        "frac_defined_f32": float(def32.mean()),
        "frac_defined_bf16": float(def16.mean()),
        "frac_defined_f32_not_bf16": float(np.mean(def32 & ~def16)),
        "mean_factor_f32": float(f32.mean()),
        "mean_factor_bf16": float(f16.mean()),
        "s2_rel_err": {"median": float(np.median(rel_s2)), "max": float(rel_s2.max())},
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(sweeplib.RESULTS_DIR, "bf16_factors.json"))
    p.add_argument("--ks", default="2,8,32,128")
    p.add_argument("--points", default="0,100,400", help="Training steps before each look.")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--gamma", type=float, default=0.1)
    args = p.parse_args(argv)
    import keras
    import numpy as np

    ks = [int(k) for k in args.ks.split(",")]
    points = [int(s) for s in args.points.split(",")]
    data = shared.load_mnist1d(8000, 2000, 0)
    x, y = data["x"], data["y"]
    keras.utils.set_random_seed(0)
    model = shared.cnn1d(40)
    opt = keras.optimizers.SGD(0.05, momentum=0.9)
    sizes = [int(np.prod(v.shape)) for v in model.trainable_variables]
    rng = np.random.default_rng(0)
    doc = {
        "kind": "bf16_factors",
        "command": provenance.command_line(),
        "environment": provenance.environment(),
        "provenance": provenance.snapshot(),
        "config": vars(args),
        "model": "cnn1d (the sweep's 1-D CNN), MNIST-1D 8000 train",
        "params": int(sum(sizes)),
        "rows": [],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    step = 0
    for point in points:
        while step < point:
            idx = rng.choice(len(y), args.batch, replace=False)
            xs_, ys_ = x[idx], y[idx]
            import tensorflow as tf

            with tf.GradientTape() as tape:
                logits = model(xs_, training=True)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(ys_, logits))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            step += 1
        idx = rng.choice(len(y), args.batch, replace=False)
        for k in ks:
            xs = replica_gradients(model, x[idx], y[idx], k)
            row = dict(compare(xs, sizes, args.gamma), step=point)
            doc["rows"].append(row)
            print(
                f"step {point} k={k}: |df| median {row['abs_diff']['median']:.2e} p99 "
                f"{row['abs_diff']['p99']:.2e} max {row['abs_diff']['max']:.2e}; clip@gamma "
                f"changes {row['frac_clip_at_gamma_changes']:.4f}, @1 "
                f"{row['frac_clip_at_one_changes']:.4f}; defined f32 "
                f"{row['frac_defined_f32']:.3f} bf16 {row['frac_defined_bf16']:.3f}",
                flush=True,
            )
    doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    shared.write_json(args.out, doc)
    print("->", args.out)


if __name__ == "__main__":
    main()
