"""VRGD against its base optimizer under ``MirroredStrategy``'s DEFAULT cross-device ops
(``CollectiveAllReduce`` on logical CPUs), 4 replicas, for each family named in the
arguments (``keras3``, ``tf_keras``).

``CollectiveAllReduce`` concatenates the dense tensors of one ``all_reduce`` call into one
buffer and sums it in chunks whose order depends on the offsets: a tensor summed beside
others can differ in its last bits from the same tensor summed alone (issue 36, fault 1).
In its own process: the collective keys of several strategies in one process can clash.

Prints ``{family: {case: {variable: values (list)} or "ErrorType: message"}}`` as JSON on
its last line. Float32 and float64 values pass through JSON exactly.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from vrgd_tf import devices  # noqa: E402

NUM_REPLICAS = 4
DEVICES = devices.split_cpu(NUM_REPLICAS)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

#: The shapes of the mechanism the issue shows (a [276] tensor beside a [552] one).
SHAPES = {"a": (276,), "b": (552,)}
#: An embedding table with sparse gradients, beside the dense ones.
TABLE = (40, 6)


def problem(shapes, steps, seed, dtype=np.float32):
    rng = np.random.RandomState(seed)
    init = {n: rng.randn(*s).astype(dtype) for n, s in shapes.items()}
    grads = {
        n: (rng.randn(steps, NUM_REPLICAS, *s) * rng.uniform(0.1, 2.0, s)).astype(dtype)
        for n, s in shapes.items()
    }
    return init, grads


def custom_loop(strategy, family, make_optimizer, init, grads, sparse_rows=0, index=tf.int32):
    """Applies known per-replica gradients (``strategy.run`` of ``apply_gradients``) and
    returns the final weights; with ``sparse_rows`` > 0, also a ``TABLE`` variable whose
    gradient is a ``tf.IndexedSlices`` of ``sparse_rows`` rows per replica."""
    names = sorted(init)
    steps = next(iter(grads.values())).shape[0]
    rng = np.random.RandomState(7)
    with strategy.scope():
        if family == "keras3":
            import keras

            make = lambda n, v: keras.Variable(v, name=n)  # noqa: E731
        else:
            make = lambda n, v: tf.Variable(v, name=n)  # noqa: E731
        variables = {n: make(n, init[n]) for n in names}
        if sparse_rows:
            variables["table"] = make("table", rng.randn(*TABLE).astype(np.float32))
        opt = make_optimizer()
        if family == "keras3":
            opt.build([variables[n] for n in sorted(variables)])
    consts = {n: tf.constant(g) for n, g in grads.items()}
    indices = tf.constant(
        rng.randint(0, TABLE[0], (steps, NUM_REPLICAS, max(sparse_rows, 1))), index
    )
    rows = tf.constant(rng.randn(steps, NUM_REPLICAS, max(sparse_rows, 1), TABLE[1]), tf.float32)

    @tf.function
    def step(i):
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            pairs = [(tf.gather(consts[n][i], rid), variables[n]) for n in names]
            if sparse_rows:
                g = tf.IndexedSlices(
                    tf.gather(rows[i], rid), tf.gather(indices[i], rid), tf.constant(TABLE)
                )
                pairs.insert(1, (g, variables["table"]))
            opt.apply_gradients(pairs)

        strategy.run(fn)

    for i in range(steps):
        step(tf.constant(i))
    return {n: v.numpy().ravel().tolist() for n, v in variables.items()}


def fit_dense(strategy, family, make_optimizer):
    """``model.fit`` of a two-layer Dense model (kernels of 552 and 24 elements), 6 steps of
    a 32-example batch, from fixed weights; the final weights."""
    if family == "keras3":
        import keras as k
    else:
        import tf_keras as k
    rng = np.random.RandomState(3)
    x = rng.randn(192, 23).astype(np.float32)
    y = (np.tanh(x @ rng.randn(23, 1)) + 0.3 * rng.randn(192, 1)).astype(np.float32)
    with strategy.scope():
        model = k.Sequential([k.Input((23,)), k.layers.Dense(24, "tanh"), k.layers.Dense(1)])
        model.set_weights(
            [
                np.random.RandomState(i).randn(*w.shape).astype(np.float32) * 0.2
                for i, w in enumerate(model.get_weights())
            ]
        )
        model.compile(make_optimizer(), "mse")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
    return {f"w{i}": w.ravel().tolist() for i, w in enumerate(model.get_weights())}


def optimizers(family):
    """``{name: () -> optimizer}``: the bases and the VRGD classes that must equal them."""
    if family == "keras3":
        import keras

        import vrgd_tf as v

        sgd, adam = keras.optimizers.SGD, keras.optimizers.Adam
    else:
        import tf_keras

        from vrgd_tf import tf_keras as v

        sgd, adam = tf_keras.optimizers.legacy.SGD, tf_keras.optimizers.legacy.Adam
    same = dict(gamma=1.0, beta_3=0.0)
    return {
        "sgd": lambda: sgd(0.1),
        "vr_sgd": lambda: v.VRGDSGD(0.1, **same),
        "vr_sgd_split": lambda: v.VRGDSGD(0.1, split_half=True, **same),
        "vr_sgd_bf16": lambda: v.VRGDSGD(0.1, squares_dtype="bfloat16", **same),
        "vr_sgd_bf16_split": lambda: v.VRGDSGD(
            0.1, squares_dtype="bfloat16", split_half=True, **same
        ),
        "vr_sgd_gamma": lambda: v.VRGDSGD(0.1, gamma=0.5, statistics_interval=1),
        "vr_sgd_gamma_split": lambda: v.VRGDSGD(
            0.1, gamma=0.5, split_half=True, statistics_interval=1
        ),
        "adam": lambda: adam(0.01),
        "vr_adam": lambda: v.VRGDAdam(0.01, **same),
        "vr_adam_split": lambda: v.VRGDAdam(0.01, split_half=True, **same),
    }


def outcome(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the outcome is what is reported
        return f"{type(e).__name__}: {e}"[:2000]


def run_family(strategy, family, full):
    """The cases of ``family``: with ``full``, all; otherwise the plain step and split_half
    with bfloat16 squares in a custom loop and ``fit`` (the collectives are shared by both
    families, ``vrgd_tf.gsnr.collectives``: the other cases run in one)."""
    make = optimizers(family)
    out = {}
    init, grads = problem(SHAPES, steps=5, seed=0)
    # Each case is a trace on 4 replicas (the suite's time): split_half and bfloat16 squares
    # together stand for each alone; the plain VRGD step for the others.
    for name in ("sgd", "vr_sgd", "vr_sgd_bf16_split"):
        out[f"vars/{name}"] = outcome(
            lambda: custom_loop(strategy, family, make[name], init, grads)
        )
    for name in ("sgd", "vr_sgd_split"):
        out[f"dense/{name}"] = outcome(lambda: fit_dense(strategy, family, make[name]))
    if full:
        out.update(_more_cases(strategy, family, make, init, grads))
    return out


def _more_cases(strategy, family, make, init, grads):
    """gamma < 1 with and without split_half, Adam over 40 steps, sparse rows (int32 and
    int64 indices) beside dense gradients, float64 variables."""
    out = {}
    for name in ("vr_sgd_gamma", "vr_sgd_gamma_split"):
        out[f"vars/{name}"] = outcome(
            lambda: custom_loop(strategy, family, make[name], init, grads)
        )
    init40, grads40 = problem(SHAPES, steps=40, seed=1)
    for name in ("adam", "vr_adam_split"):
        out[f"vars40/{name}"] = outcome(
            lambda: custom_loop(strategy, family, make[name], init40, grads40)
        )
    for name in ("sgd", "vr_sgd_split"):
        out[f"sparse/{name}"] = outcome(
            lambda: custom_loop(strategy, family, make[name], init, grads, sparse_rows=5)
        )
    for name in ("sgd", "vr_sgd"):  # int64 indices (an all-gather without static length)
        out[f"sparse64/{name}"] = outcome(
            lambda: custom_loop(
                strategy, family, make[name], init, grads, sparse_rows=5, index=tf.int64
            )
        )
    wide_init, wide_grads = problem(SHAPES, steps=5, seed=2, dtype=np.float64)
    for name in ("sgd", "vr_sgd_split"):
        out[f"float64/{name}"] = outcome(
            lambda: custom_loop(strategy, family, make[name], wide_init, wide_grads)
        )
    return out


def main():
    strategy = tf.distribute.MirroredStrategy(DEVICES)  # default cross-device ops
    families = sys.argv[1:]  # the first runs every case
    print(json.dumps({f: run_family(strategy, f, f == families[0]) for f in families}))


if __name__ == "__main__":
    main()
