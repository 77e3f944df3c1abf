"""Shared pieces of the VRGD benchmarks (not a test, not part of the library).

Logical CPU replicas, the real data sets (MNIST-1D generated locally, scikit-learn digits),
the 1-D CNN and the small ResNet, the optimizer pairs with a square-root-scaled warm-up +
cosine schedule, a custom data-parallel training loop (``tf.function`` around
``strategy.run``) that is traced once per (model, optimizer) and reused across seeds and batch
sizes, and an atomic JSON writer for incremental results.

Import this module only after ``setup_devices`` has run, or call ``setup_devices`` before any
TensorFlow op: the logical device configuration must precede TensorFlow's runtime start.
"""

import json
import math
import os
import platform
import socket
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from vrgd_tf import devices  # noqa: E402

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
DATA_CACHE = os.path.join(RESULTS_DIR, "data")


# --------------------------------------------------------------------------------------------
# Devices and strategies
# --------------------------------------------------------------------------------------------


def setup_devices(num_logical):
    """Splits the physical CPU into ``num_logical`` logical devices (before TF initialises);
    returns how many there are."""
    return len(devices.split_cpu(num_logical, argument="--replicas"))


_STRATEGIES = {}


def strategy_for(k):
    """MirroredStrategy over the first ``k`` logical CPUs, ReductionToOneDevice all-reduce.

    One strategy object per ``k`` in the process (ReductionToOneDevice avoids collective-key
    clashes between strategies of different sizes).
    """
    if k not in _STRATEGIES:
        _STRATEGIES[k] = devices.cpu_strategy(k, argument="--replicas")
    return _STRATEGIES[k]


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def load_mnist1d(num_train, num_test, seed=0):
    """MNIST-1D generated locally with ``mnist1d.data.make_dataset`` (never downloaded).

    ``get_dataset_args()`` defaults (template length 12, padding, noise, shear, 40 output
    points) with ``num_samples = num_train + num_test``, ``train_split`` to match and the
    given seed. Cached as an .npz under ``benchmarks/results/data``.

    Returns:
      dict with float32 ``x`` [N, 40, 1], int32 ``y``, ``x_test``, ``y_test`` and ``info``.
    """
    os.makedirs(DATA_CACHE, exist_ok=True)
    path = os.path.join(DATA_CACHE, f"mnist1d_{num_train}_{num_test}_seed{seed}.npz")
    info = {
        "name": "mnist1d",
        "generator": "mnist1d.data.make_dataset",
        "num_train": num_train,
        "num_test": num_test,
        "seed": seed,
        "cache": path,
    }
    if not os.path.exists(path):
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        total = num_train + num_test
        # make_dataset generates num_samples // 10 per class; keep the total divisible.
        if total % 10:
            raise ValueError("num_train + num_test must be a multiple of 10")
        args.num_samples = total
        args.train_split = num_train / total
        args.seed = seed
        t0 = time.time()
        d = make_dataset(args)
        tmp = path + ".tmp.npz"
        np.savez_compressed(tmp, x=d["x"], y=d["y"], x_test=d["x_test"], y_test=d["y_test"])
        os.replace(tmp, path)
        info["generated_s"] = round(time.time() - t0, 1)
    d = np.load(path)
    import mnist1d  # noqa: F401  (version for the record)

    info["mnist1d_version"] = _dist_version("mnist1d")
    out = {
        "x": d["x"].astype(np.float32)[..., None],
        "y": d["y"].astype(np.int32),
        "x_test": d["x_test"].astype(np.float32)[..., None],
        "y_test": d["y_test"].astype(np.int32),
        "info": info,
    }
    assert out["x"].shape[0] == num_train and out["x_test"].shape[0] == num_test
    return out


def load_digits_1d(test_fraction=0.2, seed=0):
    """scikit-learn's 1,797 real 8x8 digits as 64-point 1-D signals (row-major, /16).

    Stratified, seeded train/test split (``sklearn.model_selection.train_test_split``).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0
    x = (x - x.mean()) / x.std()
    y = digits.target.astype(np.int32)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=test_fraction, random_state=seed, stratify=y
    )
    return {
        "x": x_tr[..., None],
        "y": y_tr,
        "x_test": x_te[..., None],
        "y_test": y_te,
        "info": {
            "name": "digits",
            "source": "sklearn.datasets.load_digits",
            "num_train": len(y_tr),
            "num_test": len(y_te),
            "seed": seed,
            "layout": "8x8 flattened row-major to 64 points",
        },
    }


def load_digits_images(size=32):
    """scikit-learn digits as ``size`` x ``size`` x 3 images (nearest upscaling), labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    img = digits.images.astype(np.float32) / 16.0
    rep = size // 8
    img = np.repeat(np.repeat(img, rep, axis=1), rep, axis=2)
    img = np.repeat(img[..., None], 3, axis=-1)
    return img, digits.target.astype(np.int32)


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def cnn1d(length, channels=1, num_classes=10, width=32):
    """A small 1-D CNN: conv5 -> conv3/2 -> conv3/2 (ReLU, ``width`` channels) -> dense."""
    import keras

    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((length, channels)),
            layers.Conv1D(width, 5, padding="same", activation="relu", name="conv1"),
            layers.Conv1D(width, 3, strides=2, padding="same", activation="relu", name="conv2"),
            layers.Conv1D(width, 3, strides=2, padding="same", activation="relu", name="conv3"),
            layers.Flatten(),
            layers.Dense(num_classes, name="logits"),
        ],
        name="cnn1d",
    )


def resnet_cifar(depth=20, input_shape=(32, 32, 3), num_classes=10, width=16):
    """ResNet-(6n+2) for 32x32 inputs (He et al. 2016, CIFAR variant), Keras 3 functional."""
    import keras

    layers = keras.layers
    n = (depth - 2) // 6
    inp = keras.Input(input_shape)
    x = layers.Conv2D(width, 3, padding="same", use_bias=False)(inp)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    for stage in range(3):
        filters = width * (2**stage)
        for block in range(n):
            strides = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            y = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False)(x)
            y = layers.BatchNormalization()(y)
            y = layers.Activation("relu")(y)
            y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
            y = layers.BatchNormalization()(y)
            if strides != 1 or shortcut.shape[-1] != filters:
                shortcut = layers.Conv2D(filters, 1, strides=strides, use_bias=False)(shortcut)
                shortcut = layers.BatchNormalization()(shortcut)
            x = layers.Activation("relu")(layers.Add()([y, shortcut]))
    x = layers.GlobalAveragePooling2D()(x)
    out = layers.Dense(num_classes)(x)
    return keras.Model(inp, out, name=f"resnet{depth}")


# --------------------------------------------------------------------------------------------
# Optimizers and the learning-rate schedule
# --------------------------------------------------------------------------------------------

#: Optimizer pairs: name -> (base class path, VR class path, constructor kwargs, VR beta_3).
PAIRS = ("momentum", "adam", "lamb", "lars")
PAIR_LABELS = {"momentum": "Momentum (SGD m=0.9)", "adam": "Adam", "lamb": "LAMB", "lars": "LARS"}
_EXCLUDE = ["bias"]


def optimizer_classes(pair):
    """(base class, VR class, extra kwargs) for a pair name."""
    import keras

    import vrgd_tf

    if pair == "momentum":
        return keras.optimizers.SGD, vrgd_tf.VRGDSGD, {"momentum": 0.9}
    if pair == "adam":
        return keras.optimizers.Adam, vrgd_tf.VRGDAdam, {}
    if pair == "lamb":
        return (
            vrgd_tf.Lamb,
            vrgd_tf.VRGDLamb,
            {"weight_decay_rate": 0.01, "exclude_from_weight_decay": _EXCLUDE},
        )
    if pair == "lars":
        # No exclusions: an excluded (trust ratio 1) bias would take LARS's large global
        # learning rate raw and diverge; every variable is layer-adapted here.
        return (
            vrgd_tf.Lars,
            vrgd_tf.VRGDLars,
            {"momentum": 0.9, "eeta": 0.001, "weight_decay_rate": 1e-4},
        )
    raise ValueError(f"unknown pair {pair!r}")


def make_optimizer(pair, side, learning_rate, gamma=0.1, beta_3=None, factor_transforms=()):
    """The base (``side='base'``) or VR optimizer of ``pair``; VR defaults as the library's,
    ``factor_transforms`` handed to the VR class (its public extension point)."""
    base_cls, vr_cls, kwargs = optimizer_classes(pair)
    if side == "base":
        return base_cls(learning_rate=learning_rate, **kwargs)
    vr_kwargs = dict(kwargs, gamma=gamma, factor_transforms=factor_transforms)
    if beta_3 is not None:
        vr_kwargs["beta_3"] = beta_3
    return vr_cls(learning_rate=learning_rate, **vr_kwargs)


def scaled_lr(base_lr, batch, base_batch):
    """Square-root scaling rule: ``base_lr * sqrt(batch / base_batch)``."""
    return base_lr * math.sqrt(batch / base_batch)


def make_schedule():
    """A warm-up + cosine schedule whose parameters are variables (reused across runs).

    ``lr(s) = peak * (s + 1) / W`` for ``s < W``, then
    ``peak * (1 + cos(pi * (s - W) / (T - W))) / 2`` down to 0 at ``T`` total steps.
    """
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


def init_weights(build_model, seed):
    """Initial weights of ``build_model()`` for ``seed`` (built outside any strategy)."""
    import keras

    keras.utils.set_random_seed(seed)
    model = build_model()
    weights = model.get_weights()
    del model
    return weights


class Trainer:
    """A model and an optimizer under a MirroredStrategy, with compiled train/eval functions.

    Traced once; ``reset`` re-initialises the weights and zeroes every optimizer variable
    (iterations, moments, VRGD state), so runs for other seeds, batch sizes and learning
    rates reuse the graph. ``train_steps`` takes the global batch as a tensor and slices each
    replica's shard from a permutation inside the step, so no ``tf.data`` pipeline is needed.
    """

    def __init__(self, strategy, build_model, make_opt):
        self.strategy = strategy
        self._build_model = build_model
        self.schedule = make_schedule()
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
        self._train = tf.function(self._train_impl)
        self._eval = tf.function(self._eval_impl)
        self._weight_cache = {}

    # -- state --------------------------------------------------------------------------------
    def reset(self, weights, peak_lr, warmup_steps, total_steps):
        self.model.set_weights(weights)
        for v in self.optimizer.variables:
            v.assign(np.zeros(v.shape, dtype=v.dtype))
        self.schedule.set(peak_lr, warmup_steps, total_steps)

    # -- compiled functions ------------------------------------------------------------------
    def _train_impl(self, x, y, perm, start, batch, num_steps):
        model, opt = self.model, self.optimizer

        def replica_step(idx):
            ctx = tf.distribute.get_replica_context()
            k = ctx.num_replicas_in_sync
            rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
            per = batch // k
            mine = idx[rid * per : (rid + 1) * per]
            xb = tf.gather(x, mine)
            yb = tf.gather(y, mine)
            with tf.GradientTape() as tape:
                logits = model(xb, training=True)
                per_ex = tf.nn.sparse_softmax_cross_entropy_with_logits(yb, logits)
                # Keras convention: sum over the shard / global batch (x_d = g_d / k).
                loss = tf.reduce_sum(per_ex) / tf.cast(batch, tf.float32)
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
        n = int(x.shape[0])
        accs, losses, sizes = [], [], []
        for i in range(0, n, chunk):
            a, loss = self._eval(x[i : i + chunk], y[i : i + chunk])
            accs.append(float(a))
            losses.append(float(loss))
            sizes.append(min(chunk, n - i))
        w = np.asarray(sizes, np.float64) / n
        return float(np.dot(accs, w)), float(np.dot(losses, w))

    def gsnr_snapshot(self):
        """``{variable: [mean_gsnr, frac_at_gamma, frac_at_one]}`` or None for a base optimizer."""
        if not hasattr(self.optimizer, "vrgd_statistics"):
            return None
        return {
            name: [
                round(v["mean_gsnr"], 6),
                round(v["frac_at_gamma"], 6),
                round(v["frac_at_one"], 6),
            ]
            for name, v in self.optimizer.vrgd_statistics().items()
        }


def train_run(
    trainer,
    data,
    *,
    seed,
    batch,
    epochs,
    peak_lr,
    warmup_frac,
    evals_per_epoch=1,
    train_eval_subset=10000,
    log=print,
):
    """Trains from scratch for a fixed number of epochs; returns the per-run record.

    Same seed -> same initial weights and same data order, whatever the optimizer.
    """
    n = data["x"].shape[0]
    steps_per_epoch = n // batch
    if steps_per_epoch < 1:
        raise ValueError(f"batch {batch} larger than the training set ({n})")
    total = steps_per_epoch * epochs
    warmup = max(1, int(round(warmup_frac * total)))
    key = ("w", seed)
    weights = trainer._weight_cache.get(key)
    if weights is None:
        weights = trainer._weight_cache[key] = init_weights(trainer._build_model, seed)
    trainer.reset(weights, peak_lr, warmup, total)
    x, y = data["tf_x"], data["tf_y"]
    sub = min(train_eval_subset, n)
    chunks = max(1, min(evals_per_epoch, steps_per_epoch))
    bounds = [round(steps_per_epoch * (c + 1) / chunks) for c in range(chunks)]
    curve, gsnr = [], []
    step = 0
    t0 = time.time()
    train_time = 0.0
    for epoch in range(epochs):
        perm = np.random.default_rng([seed, epoch]).permutation(n).astype(np.int32)
        done = 0
        for b in bounds:
            t1 = time.time()
            trainer.train_steps(x, y, perm, done, batch, b - done)
            train_time += time.time() - t1
            step += b - done
            done = b
            test_acc, test_loss = trainer.evaluate(data["tf_x_test"], data["tf_y_test"])
            tr_acc, tr_loss = trainer.evaluate(x[:sub], y[:sub])
            curve.append(
                {
                    "epoch": round(epoch + b / steps_per_epoch, 4),
                    "step": step,
                    "test_acc": round(test_acc, 5),
                    "test_loss": round(test_loss, 5),
                    "train_acc_subset": round(tr_acc, 5),
                    "train_loss_subset": round(tr_loss, 5),
                }
            )
        snap = trainer.gsnr_snapshot()
        if snap is not None:
            gsnr.append({"epoch": epoch + 1, "step": step, "stats": snap})
    train_acc, train_loss = trainer.evaluate(x, y)
    test_acc, test_loss = curve[-1]["test_acc"], curve[-1]["test_loss"]
    diverged = not (math.isfinite(train_loss) and math.isfinite(test_loss))
    record = {
        "seed": seed,
        "batch": batch,
        "epochs": epochs,
        "steps": total,
        "steps_per_epoch": steps_per_epoch,
        "warmup_steps": warmup,
        "peak_lr": peak_lr,
        "final": {
            "test_acc": test_acc,
            "test_loss": test_loss,
            "train_acc": round(train_acc, 5),
            "train_loss": round(train_loss, 5),
            "gap": round(train_acc - test_acc, 5),
            "diverged": diverged,
        },
        "curve": curve,
        "gsnr": gsnr,
        "wall_s": round(time.time() - t0, 2),
        "train_s": round(train_time, 2),
    }
    return record


def prepare(data):
    """Adds tensors of the arrays to a data dict (once)."""
    data["tf_x"] = tf.constant(data["x"])
    data["tf_y"] = tf.constant(data["y"])
    data["tf_x_test"] = tf.constant(data["x_test"])
    data["tf_y_test"] = tf.constant(data["y_test"])
    return data


# --------------------------------------------------------------------------------------------
# Results files
# --------------------------------------------------------------------------------------------


def _dist_version(name):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # pragma: no cover
        return None


def library_state():
    """Git commit of the repository, uncommitted changes under vrgd_tf/ and a hash of the
    library sources actually imported (other people edit the library concurrently)."""
    import hashlib
    import subprocess

    import vrgd_tf

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pkg = os.path.dirname(os.path.abspath(vrgd_tf.__file__))

    def git(*args):
        try:
            return subprocess.run(
                ["git", "-C", root] + list(args), capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except Exception:  # pragma: no cover
            return None

    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(pkg)):
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return {
        "git_head": git("rev-parse", "HEAD"),
        "git_status_vrgd_tf": git("status", "--porcelain", "vrgd_tf"),
        "vrgd_tf_sources_sha256": h.hexdigest()[:16],
    }


def environment():
    """Versions and machine facts recorded in every results file."""
    import keras

    return {
        "library": library_state(),
        "python": sys.version.split()[0],
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "vrgd_tf": _dist_version("vrgd_tf"),
        "mnist1d": _dist_version("mnist1d"),
        "scikit-learn": _dist_version("scikit-learn"),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def command_line():
    """The command that is running, relative to the repository root when possible."""
    argv = list(sys.argv)
    script = os.path.relpath(
        os.path.abspath(argv[0]), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
    return " ".join(["python", script] + argv[1:])


def write_json(path, obj):
    """Atomically writes ``obj`` as JSON (temp file + rename), so readers never see half."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
    os.replace(tmp, path)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def apply_quick(quick_overrides):
    """With ``--quick``, sets every flag of ``quick_overrides`` ({name: value}) that was not
    given on the command line (sweep.py, overhead.py, groups.py)."""
    from absl import flags

    if not flags.FLAGS.quick:
        return
    for name, value in quick_overrides.items():
        if not flags.FLAGS[name].present:
            flags.FLAGS[name].value = value


# --------------------------------------------------------------------------------------------
# Step timing and peak memory (overhead.py, groups.py)
# --------------------------------------------------------------------------------------------


def cpu_memory_info():
    """``"available"``, or ``"unavailable: <TF's error>"``: whether
    ``tf.config.experimental.get_memory_info`` works for the CPU (it raises "Allocator stats
    not available" there, so peak memory is VmHWM instead)."""
    try:
        tf.config.experimental.get_memory_info("CPU:0")
        return "available"
    except Exception as e:  # noqa: BLE001
        return f"unavailable: {e}"


#: Prefix of the line on which a child process prints its JSON result.
RESULT_TAG = "RESULT_JSON:"


def status_kb(field):
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), or None."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def rss_kb():
    """Current resident set of this process (``VmRSS``)."""
    return status_kb("VmRSS")


def peak_kb():
    """Peak RSS of this process image: VmHWM. (``getrusage(RUSAGE_SELF).ru_maxrss`` is not
    used: on Linux it carries the parent's high-water mark across fork + exec.)"""
    return status_kb("VmHWM")


def summarize(values):
    """``{"min", "median", "max", "n"}`` of a list of numbers."""
    v = np.asarray(values, np.float64)
    return {
        "min": float(v.min()),
        "median": float(np.median(v)),
        "max": float(v.max()),
        "n": int(v.size),
    }


def state_bytes(opt, model):
    """Exact bytes of optimizer state and of the model, summed over replica copies."""
    variables = opt.variables if not callable(getattr(opt, "variables", None)) else opt.variables()

    def total(vs):
        out = 0
        for v in vs:
            tv = getattr(v, "value", v) if not isinstance(v, tf.Variable) else v
            copies = len(tv.values) if isinstance(tv, tf.distribute.DistributedValues) else 1
            size = int(np.prod(v.shape)) if len(v.shape) else 1
            out += copies * size * tf.as_dtype(v.dtype).size
        return out

    return {
        "optimizer_state_bytes": total(variables),
        "model_bytes": total(model.trainable_variables),
    }


class StepTimer:
    """A model, its optimizer and ``run(n)``, a ``tf.function`` running ``n`` train steps
    (``strategy.run(replica_step)`` in a ``tf.range`` loop). Subclasses build ``model`` and
    ``opt`` and call :meth:`compile_steps` with their replica step."""

    def compile_steps(self, replica_step):
        strategy = self.strategy

        @tf.function
        def run(n):
            for _ in tf.range(n):
                strategy.run(replica_step)
            return n

        self.run = run

    def graph_ops(self):
        """Graph nodes of the traced multi-step function (loop body = one step, all replicas
        unrolled, plus the few loop nodes): a proxy for the per-step fixed cost."""
        gdef = self.run.get_concrete_function(tf.constant(1)).graph.as_graph_def()
        return len(gdef.node) + sum(len(f.node_def) for f in gdef.library.function)

    def time(self, steps):
        """Seconds per step of one call running ``steps`` steps."""
        t0 = time.perf_counter()
        self.run(tf.constant(steps))
        return (time.perf_counter() - t0) / steps

    def weights(self):
        return [w.copy() for w in self.model.get_weights()]

    def state_bytes(self):
        return state_bytes(self.opt, self.model)


#: Default weights check of :func:`time_variants`: variants that must end with the weights
#: of ``base`` (the same update), the others are compared with ``vr``.
_SAME_AS_BASE = ("base", "sq", "sq_bf16", "base_allreduce")


def time_variants(make_timers, variant_names, steps, reps, log, checks=None, weights_out=None):
    """Interleaved timing; returns per-variant times and per-rep ratios to ``base``.

    Every variant is built (``make_timers(name)``, a :class:`StepTimer`), traced and warmed
    up; then each of ``reps`` repetitions times every variant once (``steps`` steps), in an
    order rotated by one per repetition, and the ratio variant/base is taken within the
    repetition. ``checks`` maps a variant to the variant whose final weights it must match
    (all ran the same steps from the same weights on the same batch); by default
    base/sq/base_allreduce are compared with base and the rest with vr. A dict
    ``weights_out`` receives every variant's final weights.
    """
    timers = {}
    ops = {}
    sbytes = {}
    build_s = {}
    for v in variant_names:
        t0 = time.time()
        timers[v] = make_timers(v)
        timers[v].time(1)  # trace
        build_s[v] = {"build_and_first_step": round(time.time() - t0, 2)}
        timers[v].time(steps)  # warm-up
        try:
            sbytes[v] = timers[v].state_bytes()
        except Exception as e:  # pragma: no cover
            sbytes[v] = None
            log(f"state bytes failed for {v}: {e}")
        try:
            ops[v] = timers[v].graph_ops()
        except Exception as e:  # pragma: no cover - op count is informative only
            ops[v] = None
            log(f"op count failed for {v}: {e}")
        log(f"  built {v} ({time.time() - t0:.1f}s, {ops[v]} graph ops/step)")
    times = {v: [] for v in variant_names}
    for r in range(reps):
        order = variant_names[r % len(variant_names) :] + variant_names[: r % len(variant_names)]
        for v in order:
            times[v].append(timers[v].time(steps))
        log(
            "  rep %d: %s"
            % (r, ", ".join(f"{v}={times[v][-1] * 1e3:.1f}ms" for v in variant_names))
        )
    ratios = {v: [t / b for t, b in zip(times[v], times["base"])] for v in variant_names}
    # Equivalence: all variants did the same number of steps from the same weights on the
    # same batch, so base~sq~base_allreduce and vr~vr_nostats up to float summation order.
    if checks is None:
        checks = {v: "base" if v in _SAME_AS_BASE else "vr" for v in variant_names}
    ref = {}
    diffs = {}
    for v in variant_names:
        target = checks.get(v)
        if target not in timers:
            continue
        if target not in ref:
            ref[target] = timers[target].weights()
        w = timers[v].weights()
        num = max(float(np.max(np.abs(a - b))) for a, b in zip(w, ref[target]))
        den = max(float(np.max(np.abs(b))) for b in ref[target])
        diffs[v] = {"vs": target, "max_abs_diff_rel": num / max(den, 1e-30)}
    base_med = float(np.median(times["base"]))
    out = {
        "step_ms": {v: summarize([t * 1e3 for t in times[v]]) for v in variant_names},
        "ratio": {v: summarize(ratios[v]) for v in variant_names},
        # Robust to load spikes: the fastest repetition of each variant.
        "ratio_of_min": {v: float(np.min(times[v]) / np.min(times["base"])) for v in variant_names},
        "raw_step_s": times,
        "graph_ops": ops,
        "weights_check": diffs,
        "state_bytes": sbytes,
        # Seconds to build the variant and run its first call (tracing, graph optimisation).
        "build_s": {v: b["build_and_first_step"] for v, b in build_s.items()},
    }
    parts = {}
    med = {v: float(np.median(times[v])) for v in variant_names}
    if "base_allreduce" in med:
        parts["aggregation_path"] = (med["base_allreduce"] - med["base"]) / base_med
    if "sq" in med:
        sq_ref = med.get("base_allreduce", med["base"])
        parts["a_allreduce_squares"] = (med["sq"] - sq_ref) / base_med
        if "vr_nostats" in med:
            parts["b_gsnr_math_and_state"] = (med["vr_nostats"] - med["sq"]) / base_med
    if "vr_nostats" in med and "vr" in med:
        parts["c_diagnostics_every_step"] = (med["vr"] - med["vr_nostats"]) / base_med
    out["parts_of_base_median"] = parts
    if weights_out is not None:
        weights_out.update({v: timers[v].weights() for v in variant_names})
    return out


def run_child(script, args, log):
    """Runs ``python script args`` and returns (the JSON it printed after RESULT_TAG,
    seconds); logs the child's stderr tail and raises if there is none."""
    import subprocess

    cmd = [sys.executable, os.path.abspath(script)] + list(args)
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :]), time.time() - t0
    log(proc.stderr[-3000:])
    raise RuntimeError(f"child failed: {' '.join(cmd)} (rc {proc.returncode})")


def print_result(obj):
    """The child side of :func:`run_child`."""
    print(RESULT_TAG + json.dumps(obj), flush=True)


def memory_result(rss_before_model_kb):
    """What a memory child reports after its steps: peak RSS (VmHWM), the RSS just before
    the model was built, the RSS now and ``ru_maxrss`` (for comparison only)."""
    import resource

    return {
        "maxrss_kb": peak_kb(),
        "rss_before_model_kb": rss_before_model_kb,
        "rss_end_kb": rss_kb(),
        "ru_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def memory_runs(script, configs, variants, reps, child_args, log):
    """Peak memory from one child process per (configuration, variant, repetition).

    Interleaved: for each repetition, for each configuration, every variant in an order
    rotated by one per repetition. ``variants`` is a list, or a function of the
    configuration returning one. ``child_args(config, variant)`` gives the child's
    arguments; the child prints :func:`memory_result`. Returns ``{config: {variant: [the
    children's results]}}``.
    """
    names = {c: list(variants(c) if callable(variants) else variants) for c in configs}
    raw = {c: {v: [] for v in names[c]} for c in configs}
    for rep in range(reps):
        for c in configs:
            vs = names[c]
            vs = vs[rep % len(vs) :] + vs[: rep % len(vs)]
            for v in vs:
                res, dt = run_child(script, child_args(c, v), log)
                raw[c][v].append(res)
                log(
                    f"  memory rep {rep} {c} {v}: maxrss {res['maxrss_kb'] / 1024:.0f} MB, "
                    f"increment {(res['maxrss_kb'] - res['rss_before_model_kb']) / 1024:.0f}"
                    f" MB ({dt:.0f}s)"
                )
    return raw


def memory_ratios(raw, variants):
    """Ratios to ``base`` of one configuration's memory results, per repetition: peak RSS
    and the increment (peak minus the RSS before the model). Returns ``{variant: {...}}``
    for the variants other than base, plus ``base_peak_mb_median``."""
    base = raw["base"]
    out = {}
    for v in variants:
        if v == "base":
            continue
        peak_ratio = [r["maxrss_kb"] / b["maxrss_kb"] for r, b in zip(raw[v], base)]
        inc_ratio = [
            (r["maxrss_kb"] - r["rss_before_model_kb"])
            / max(1, b["maxrss_kb"] - b["rss_before_model_kb"])
            for r, b in zip(raw[v], base)
        ]
        out[v] = {
            "peak_ratio": summarize(peak_ratio),
            "increment_ratio": summarize(inc_ratio),
            "peak_mb_median": float(np.median([r["maxrss_kb"] for r in raw[v]])) / 1024,
        }
    out["base_peak_mb_median"] = float(np.median([b["maxrss_kb"] for b in base])) / 1024
    return out


def cnn1d_timing_data(batch):
    """The 1-D CNN builder and a fixed batch of ``batch`` MNIST-1D examples (the sweep's
    data at a small size, repeated if needed) for timing."""
    d = load_mnist1d(8000, 2000, 0)
    x, y = d["x"], d["y"]
    reps = int(np.ceil(batch / len(y)))
    x, y = np.concatenate([x] * reps)[:batch], np.concatenate([y] * reps)[:batch]
    return (lambda: cnn1d(40)), x, y


#: Model Garden BERT's exclusions from weight decay (LAMB).
BERT_EXCLUDE = ["LayerNorm", "layer_norm", "bias"]


def bert_tiny(seq, vocab_size=30522):
    """Model Garden ``BertEncoder`` 2 layers x 128 hidden (tf_keras) in ``BertPretrainerV2``
    with its tied masked-LM head (``vocab_size`` other than BERT's 30522: a model of other
    size with the same layers, e.g. twice the parameters for the loopback benchmark)."""
    from official.nlp.modeling import models, networks

    encoder = networks.BertEncoder(
        vocab_size=vocab_size,
        hidden_size=128,
        num_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        max_sequence_length=seq,
        type_vocab_size=2,
    )
    return models.BertPretrainerV2(encoder_network=encoder)


def bert_random_batch(batch, seq, num_masked=20):
    """A fixed masked-LM batch of random token ids (timing only): (features, labels)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30522, size=(batch, seq)).astype(np.int32)
    pos = np.sort(
        np.stack([rng.choice(np.arange(1, seq), num_masked, replace=False) for _ in range(batch)]),
        axis=1,
    ).astype(np.int32)
    labels = np.take_along_axis(ids, pos, 1)
    return {
        "input_word_ids": ids,
        "input_mask": np.ones_like(ids),
        "input_type_ids": np.zeros_like(ids),
        "masked_lm_positions": pos,
    }, labels


def bert_lamb(variant, learning_rate=1e-3):
    """Model Garden ``lamb.LAMB`` (``variant='base'``) or a variant of ``variants.py``
    against ``vrgd_tf.tf_keras.VRGDLamb`` (``'vr'`` is the library's class), BERT's weight
    decay 0.01 and exclusions."""
    from official.modeling.optimization import lamb as mg_lamb

    from vrgd_tf import tf_keras as vtk

    import variants

    cls, extra = variants.make_tf_keras_variant(variant, mg_lamb.LAMB, vtk.VRGDLamb)
    return cls(
        learning_rate=learning_rate,
        weight_decay_rate=0.01,
        exclude_from_weight_decay=BERT_EXCLUDE,
        **extra,
    )
