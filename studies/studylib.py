"""Training helpers of the studies (not a test, not part of the library).

The Fashion-MNIST data and CNN, a warm-up + cosine schedule whose parameters are variables,
and a custom data-parallel training loop (``tf.function`` around ``strategy.run``) traced
once per optimizer and reused across seeds and learning rates. The loop runs either ``k``
replicas (logical CPU devices, one gradient per replica) or one device with ``m`` micro-batch
groups (one gradient per group, handed to VRGD through ``apply_grouped_gradients``): both
give VRGD ``k`` GSNR samples of the same contiguous shards of the global batch, so the same
weights up to float rounding. The devices, the optimizer pairs, the initial weights and the
results files are :mod:`shared`'s (the module the cost benchmarks share), imported here under
their names (``studylib.make_optimizer`` is ``shared.make_optimizer``).

Call :func:`setup_devices` before any TensorFlow op: the logical device configuration must
precede TensorFlow's runtime start. Nothing here imports from ``benchmarks/``.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from shared import (  # noqa: E402, F401  (the studies' names for them)
    init_weights,
    make_optimizer,
    optimizer_classes,
    read_json,
    setup_devices,
    strategy_for,
    write_json,
)

STUDIES = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(STUDIES)


# --------------------------------------------------------------------------------------------
# Data, model
# --------------------------------------------------------------------------------------------


def fashion_cnn(num_classes=10):
    """The evidence protocol's CNN: 19,162 parameters, no BatchNorm, 28x28x1 input:
    conv3x3(16) -> pool -> conv3x3(32) -> pool -> conv3x3(48) -> global average pool ->
    dense."""
    import keras

    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(16, 3, padding="same", activation="relu", name="conv1"),
            layers.MaxPooling2D(2),
            layers.Conv2D(32, 3, padding="same", activation="relu", name="conv2"),
            layers.MaxPooling2D(2),
            layers.Conv2D(48, 3, padding="same", activation="relu", name="conv3"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(num_classes, name="logits"),
        ],
        name="fashion_cnn",
    )


def fashion_cnn_bn(num_classes=10):
    """The BatchNorm pilot's CNN (studies/evidence/PILOT_BN.md): :func:`fashion_cnn` with
    BatchNorm after each convolution (convolution without bias, BatchNorm, ReLU); 28x28x1
    input."""
    import keras

    layers = keras.layers
    body = [keras.Input((28, 28, 1))]
    for i, width in enumerate((16, 32, 48)):
        body += [
            layers.Conv2D(width, 3, padding="same", use_bias=False, name=f"conv{i + 1}"),
            layers.BatchNormalization(name=f"bn{i + 1}"),
            layers.ReLU(),
        ]
        body.append(layers.MaxPooling2D(2) if i < 2 else layers.GlobalAveragePooling2D())
    body.append(layers.Dense(num_classes, name="logits"))
    return keras.Sequential(body, name="fashion_cnn_bn")


def load_fashion_mnist(data_dir=None, split_seed=0):
    """Fashion-MNIST 55k train / 5k validation / 10k test as a data dict (``x``/``y``
    train, ``x_val``/``y_val``, ``x_test``/``y_test``); see ``examples/data/fashion_mnist.py``
    for the files and the checks."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(repo, "examples", "data"))
    import fashion_mnist

    d = fashion_mnist.load(data_dir or fashion_mnist.DEFAULT_DIR, split_seed=split_seed)
    return {
        "x": d.x_train,
        "y": d.y_train,
        "x_val": d.x_val,
        "y_val": d.y_val,
        "x_test": d.x_test,
        "y_test": d.y_test,
        "name": "fashion_mnist",
    }


def prepare(data, with_test=True):
    """Adds tensors of the arrays to a data dict; the test set only if ``with_test`` (the
    tuning phases never touch it)."""
    data["tf_x"] = tf.constant(data["x"])
    data["tf_y"] = tf.constant(data["y"])
    data["tf_x_val"] = tf.constant(data["x_val"])
    data["tf_y_val"] = tf.constant(data["y_val"])
    if with_test:
        data["tf_x_test"] = tf.constant(data["x_test"])
        data["tf_y_test"] = tf.constant(data["y_test"])
    return data


# --------------------------------------------------------------------------------------------
# The learning-rate schedule
# --------------------------------------------------------------------------------------------


def make_schedule():
    """A warm-up + cosine schedule whose parameters are variables (reused across runs).

    ``lr(s) = peak * (s + 1) / W`` for ``s < W``, then
    ``peak * (1 + cos(pi * (s - W) / (T - W))) / 2`` down to 0 at ``T`` total steps.
    """
    import math

    import keras

    class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self):
            self.peak = tf.Variable(0.0, trainable=False, name="lr_peak")
            self.warmup = tf.Variable(1.0, trainable=False, name="lr_warmup")
            self.total = tf.Variable(2.0, trainable=False, name="lr_total")

        def set(self, peak, warmup_steps, total_steps):
            self.peak.assign(float(peak))
            self.warmup.assign(float(max(1, warmup_steps)))
            self.total.assign(float(max(total_steps, warmup_steps + 1)))

        def __call__(self, step):
            s = tf.cast(step, tf.float32)
            warm = self.peak * (s + 1.0) / self.warmup
            frac = tf.clip_by_value((s - self.warmup) / (self.total - self.warmup), 0.0, 1.0)
            cos = 0.5 * self.peak * (1.0 + tf.cos(math.pi * frac))
            return tf.where(s < self.warmup, warm, cos)

        def get_config(self):
            return {}

    return WarmupCosine()


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def _cross_entropy_sum(model, x, y, batch):
    """Sum of the examples' cross-entropy over the global batch size (Keras' convention:
    the replicas' or groups' gradients then sum to the global batch's gradient)."""
    logits = model(x, training=True)
    per_ex = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
    return tf.reduce_sum(per_ex) / tf.cast(batch, tf.float32)


class Trainer:
    """A model and an optimizer under a MirroredStrategy, with compiled train/eval functions.

    ``groups`` > 1 (one replica) splits the batch into that many contiguous micro-batch
    groups, one forward/backward pass each, and hands VRGD their summed gradients and
    squares (``apply_grouped_gradients``); a base optimizer gets the summed gradients
    (``apply_gradients``), the whole batch's gradient. Traced once; ``reset``
    re-initialises the weights and zeroes every optimizer variable, so runs for other
    seeds and learning rates reuse the graph. ``train_steps`` slices each replica's shard
    from a permutation inside the step (no ``tf.data`` pipeline). ``jit_compile=True``
    compiles the train function with XLA (one-replica strategies).
    """

    def __init__(self, strategy, build_model, make_opt, groups=1, jit_compile=False):
        self.strategy = strategy
        self.groups = int(groups)
        if self.groups > 1 and strategy.num_replicas_in_sync != 1:
            raise ValueError(
                f"groups={groups} needs a one-replica strategy; got "
                f"{strategy.num_replicas_in_sync} replicas (use groups=1 with replicas)."
            )
        self.schedule = make_schedule()
        self.build_model = build_model
        with strategy.scope():
            self.model = build_model()
            self.optimizer = make_opt(self.schedule)
            self.optimizer.build(self.model.trainable_variables)
        cfg = self.optimizer.get_config()
        self.optimizer_config = {
            k: v
            for k, v in cfg.items()
            if k != "learning_rate" and isinstance(v, (int, float, str, bool, list, type(None)))
        }
        self._train = tf.function(self._train_impl, jit_compile=bool(jit_compile) or None)
        self._eval = tf.function(self._eval_impl)
        self.weight_cache = {}

    def reset(self, weights, peak_lr, warmup_steps, total_steps):
        self.model.set_weights(weights)
        for v in self.optimizer.variables:
            v.assign(np.zeros(v.shape, dtype=v.dtype))
        self.schedule.set(peak_lr, warmup_steps, total_steps)

    def _grouped_step(self, xb, yb, batch):
        model, m = self.model, self.groups
        vr = hasattr(self.optimizer, "apply_grouped_gradients")
        per = batch // m
        summed, squares = None, None
        for j in range(m):
            with tf.GradientTape() as tape:
                loss = _cross_entropy_sum(
                    model, xb[j * per : (j + 1) * per], yb[j * per : (j + 1) * per], batch
                )
            g = tape.gradient(loss, model.trainable_variables)
            sq = [tf.square(t) for t in g] if vr else None
            if summed is None:
                summed, squares = list(g), sq
            else:
                summed = [a + t for a, t in zip(summed, g)]
                squares = [a + t for a, t in zip(squares, sq)] if vr else None
        pairs = list(zip(summed, model.trainable_variables))
        if vr:
            self.optimizer.apply_grouped_gradients(pairs, squares, m)
        else:
            self.optimizer.apply_gradients(pairs)

    def _train_impl(self, x, y, perm, start, batch, num_steps):
        model, opt = self.model, self.optimizer

        def replica_step(idx):
            ctx = tf.distribute.get_replica_context()
            k = ctx.num_replicas_in_sync
            rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
            per = batch // k
            mine = idx[rid * per : (rid + 1) * per]
            xb, yb = tf.gather(x, mine), tf.gather(y, mine)
            if self.groups > 1:
                self._grouped_step(xb, yb, batch)
                return
            with tf.GradientTape() as tape:
                loss = _cross_entropy_sum(model, xb, yb, batch)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        for s in tf.range(start, start + num_steps):
            idx = perm[s * batch : (s + 1) * batch]
            self.strategy.run(replica_step, args=(idx,))
        return num_steps

    def _eval_impl(self, x, y):
        logits = self.model(x, training=False)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        acc = tf.reduce_mean(
            tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), y), tf.float32)
        )
        return acc, loss

    def train_steps(self, x, y, perm, start, batch, num_steps):
        """Steps ``start .. start + num_steps - 1`` of an epoch with permutation ``perm``."""
        return int(
            self._train(
                x,
                y,
                tf.constant(perm, tf.int32),
                tf.constant(start, tf.int32),
                tf.constant(batch, tf.int32),
                tf.constant(num_steps, tf.int32),
            )
        )

    def evaluate(self, x, y, chunk=20000):
        """(accuracy, mean loss) on ``x``, ``y``, as fractions."""
        n = int(x.shape[0])
        accs, losses, sizes = [], [], []
        for i in range(0, n, chunk):
            a, loss = self._eval(x[i : i + chunk], y[i : i + chunk])
            accs.append(float(a))
            losses.append(float(loss))
            sizes.append(min(chunk, n - i))
        w = np.asarray(sizes, np.float64) / n
        return float(np.dot(accs, w)), float(np.dot(losses, w))


def _vr_diagnostics(optimizer, epoch):
    """``{"epoch", "stats"}`` of the VR diagnostics of the last step, or None for a base."""
    if not hasattr(optimizer, "vrgd_statistics"):
        return None
    stats = optimizer.vrgd_statistics()
    return {
        "epoch": epoch,
        "stats": {
            name: {f: round(v, 6) for f, v in fields.items()} for name, fields in stats.items()
        },
    }


def train_epochs(trainer, data, seed, batch, epochs, subset):
    """Trains ``epochs`` epochs of ``len(x) // batch`` steps, the data order of epoch ``e``
    ``numpy.random.default_rng([seed, e]).permutation``; stops early on a non-finite
    training loss (the rest of the run would be NaN).

    Returns:
      ``(curve, diagnostics, train_seconds)``: per epoch validation accuracy (%) and loss
      on all of ``x_val``, training accuracy and loss on the first ``subset`` examples, and
      the VR diagnostics of its last step (none for a base optimizer).
    """
    import math
    import time

    n = data["x"].shape[0]
    steps = n // batch
    sub = min(subset, n)
    curve, diag, train_s = [], [], 0.0
    for epoch in range(epochs):
        perm = np.random.default_rng([seed, epoch]).permutation(n).astype(np.int32)
        t0 = time.time()
        trainer.train_steps(data["tf_x"], data["tf_y"], perm, 0, batch, steps)
        train_s += time.time() - t0
        val_acc, val_loss = trainer.evaluate(data["tf_x_val"], data["tf_y_val"])
        tr_acc, tr_loss = trainer.evaluate(data["tf_x"][:sub], data["tf_y"][:sub])
        curve.append(
            {
                "epoch": epoch + 1,
                "step": (epoch + 1) * steps,
                "val_acc": round(100 * val_acc, 3),
                "val_loss": round(val_loss, 5),
                "train_acc": round(100 * tr_acc, 3),
                "train_loss": round(tr_loss, 5),
            }
        )
        d = _vr_diagnostics(trainer.optimizer, epoch + 1)
        if d is not None:
            diag.append(d)
        if not math.isfinite(tr_loss):
            break
    return curve, diag, train_s


def pilot_run(data, trainer, batch, lr, epochs, warmup_epochs, seed, subset):
    """One pilot run of ``trainer`` (reset to ``seed``'s initial weights, warm-up
    ``warmup_epochs`` whole epochs then cosine): the record the pilots' JSON keeps (final
    validation accuracy, or ``collapsed`` on a non-finite training loss, the curve, the
    wall time and the start and end time). Provenance is the runner's to add."""
    import math
    import time

    n = data["x"].shape[0]
    steps = n // batch
    trainer.reset(
        init_weights(trainer.build_model, seed), lr, steps * warmup_epochs, steps * epochs
    )
    t0, started = time.time(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    curve, _, _ = train_epochs(trainer, data, seed, batch, epochs, subset)
    last = curve[-1]
    finite = math.isfinite(last["train_loss"]) and len(curve) == epochs
    return {
        "batch": batch,
        "peak_lr": lr,
        "seed": seed,
        "epochs": epochs,
        "groups": trainer.groups,
        "steps": steps * epochs,
        "warmup_steps": steps * warmup_epochs,
        "optimizer_config": trainer.optimizer_config,
        "final": {"val_acc": last["val_acc"] if finite else None, "collapsed": not finite},
        "curve": curve,
        "wall_s": round(time.time() - t0, 1),
        "started": started,
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": list(os.getloadavg()),
    }
