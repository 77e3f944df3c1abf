r"""Large-batch LAMB/LARS versus VR-LAMB/VR-LARS on real handwritten digits.

What it shows
-------------
VRGD (G. Jiang et al., "Accelerating Large Batch Training via Gradient Signal to Noise
Ratio (GSNR)", arXiv 2309.13681) scales each gradient element by how consistent it is across
data-parallel replicas: elements whose GSNR ``mean**2 / variance`` (over the replicas' shard
gradients) is low get their step shrunk, down to ``gamma`` times. The paper reports that at very
large batches this closes much of the generalization gap of LAMB and LARS (spec
``docs/spec.md``, section 5).

This demo reproduces that comparison in miniature, on real data, in a few minutes on a CPU:

* data: scikit-learn's ``load_digits``, 1,797 real 8x8 handwritten digits (UCI), shipped inside
  scikit-learn, so nothing is downloaded. A seeded, stratified split gives 1,297 training and
  500 test images; pixels are scaled from 0..16 to [0, 1].
* parallelism: ``tf.distribute.MirroredStrategy`` over ``--replicas`` (default 8) logical CPU
  devices made with ``tf.config.set_logical_device_configuration``, so every optimizer step
  sees ``--replicas`` shard gradients and VRGD has a noise estimate.
* model: a small MLP (64 -> 256 -> 256 -> 10, ReLU) in Keras 3.
* batch: global batch ``--global_batch`` (default 1024, i.e. 128 images per replica), 79% of
  the training set per step: this is the "very large batch" regime scaled down to a small
  data set. The training stream is the shuffled training set, repeated, cut into *full*
  batches (``drop_remainder``); one epoch is ``ceil(1297 / global_batch)`` steps.
* optimizers: ``vrgd_tf.Lamb``, ``vrgd_tf.VRGDLamb``, ``vrgd_tf.Lars``, ``vrgd_tf.VRGDLars``
  (Model Garden's LAMB and LARS formulations). A base optimizer and its VR version get the
  same hyper-parameters, the same learning-rate schedule (linear warm-up, then cosine decay
  to 0, ``keras.optimizers.schedules.CosineDecay``), the same initial weights
  (``keras.utils.set_random_seed(seed)`` before each model is built) and the same sequence of
  batches. The only difference is VRGD's GSNR step.

Every run is trained with ``model.fit`` (per-epoch progress lines from Keras, with the test
accuracy of each epoch added to the logs). After training, the accuracy on the *whole*
training split and on the test split is computed with one forward pass each (not the running
average of the training steps). The job prints a table (optimizer, train accuracy, test
accuracy, generalization gap = train - test, wall time of the run, and the steady-state time
of one step) and writes to ``--output_dir``:

* ``results.json``: configuration, the table rows, per-epoch curves and, for the VR runs, the
  GSNR factor statistics of the last step (``opt.vrgd_statistics()``);
* ``test_accuracy.png``: test accuracy per epoch for every run (and the training loss).

Cost: the 4 default runs take about 2 minutes on 2 CPU cores (about 60 ms per step with 8
replicas; VRGD adds its one extra all-reduce of the squared gradients). Most of the wall time
is fixed cost per run, tracing the step for 8 replicas and creating and destroying the
distributed input iterators, which grows when other processes load the machine.

It is a small-scale illustration, not a reproduction of the paper's ImageNet/BERT numbers:
with 1,297 images the accuracies are high for every optimizer and differences of a few test
images (0.2% each) are within seed-to-seed noise. Run several ``--seed`` values before reading
anything into a difference.

Usage::

  python -m vrgd_tf.demo.digits_large_batch
  python -m vrgd_tf.demo.digits_large_batch --replicas=8 --global_batch=2048 --epochs=40 \
      --optimizers=lamb,vrgd_lamb --output_dir=/tmp/digits

From Python (the test does this)::

  from vrgd_tf.demo import digits_large_batch as demo
  demo.configure_logical_cpus(2)   # before TensorFlow initialises, if you can
  results = demo.run(demo.DemoConfig(replicas=2, global_batch=64, epochs=1,
                                     optimizers=("lamb", "vrgd_lamb"), output_dir="/tmp/d"))
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging

import vrgd_tf
from vrgd_tf import devices, naming

__all__ = [
    "OPTIMIZERS",
    "DemoConfig",
    "DigitsData",
    "RunResult",
    "DemoResults",
    "configure_logical_cpus",
    "load_data",
    "build_model",
    "make_schedule",
    "make_optimizer",
    "evaluate_accuracy",
    "train_one",
    "run",
    "steps_per_epoch",
    "format_table",
    "config_from_flags",
    "main",
    "RESULTS_JSON",
    "CURVES_PNG",
]

#: Optimizer names accepted by ``--optimizers``: (class, learning-rate family).
OPTIMIZERS = {
    "lamb": (vrgd_tf.Lamb, "lamb"),
    "vrgd_lamb": (vrgd_tf.VRGDLamb, "lamb"),
    "lars": (vrgd_tf.Lars, "lars"),
    "vrgd_lars": (vrgd_tf.VRGDLars, "lars"),
}
DEFAULT_OPTIMIZERS = ("lamb", "vrgd_lamb", "lars", "vrgd_lars")
NUM_CLASSES = 10
NUM_FEATURES = 64
#: Regexes (matched against Keras 3 ``variable.path``) of the variables that get neither
#: weight decay nor a trust ratio: the biases, as in the BERT/LAMB and MLPerf/LARS recipes.
EXCLUDE = ["bias"]
RESULTS_JSON = "results.json"
CURVES_PNG = "test_accuracy.png"


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """Everything one demo job depends on; the absl flags map 1:1 onto these fields.

    Attributes:
      replicas: number of data-parallel replicas (logical CPU devices), >= 1. VRGD needs >= 2
        to estimate the gradient noise (the paper uses >= 8).
      global_batch: images per optimizer step over all replicas; a multiple of ``replicas``.
      epochs: number of epochs; one epoch is ``ceil(num_train / global_batch)`` steps.
      seed: seeds the initial weights (the same for every optimizer) and the batch order.
      split_seed: seeds the stratified train/test split (kept apart from ``seed`` so that
        seed sweeps keep the same data).
      test_size: number of test images (stratified); the rest of the 1,797 are for training.
      optimizers: names from :data:`OPTIMIZERS`, trained in this order.
      gamma: VRGD's lower bound of the per-element factor, in (0, 1].
      lamb_learning_rate: peak learning rate of LAMB and VR-LAMB. Both default peak
        learning rates were picked for the *base* optimizers only, at this batch and length
        (seed 0: LAMB 0.01, 0.02, 0.03, 0.05, 0.1 and LARS 2, 5, 10, 20, 40; checked at seed 1
        with LARS 3, 5, 7). LAMB's test accuracy is flat from 0.02 to 0.05; LARS diverges
        from 7 up. The VR versions reuse them untuned.
      lars_learning_rate: peak learning rate of LARS and VR-LARS (multiplies the trust ratio
        ``eeta * ||w|| / ||g||``).
      lamb_weight_decay: LAMB's decoupled weight decay rate (biases excluded).
      lars_weight_decay: LARS's L2 weight decay (biases excluded).
      lars_momentum: LARS momentum.
      lars_eeta: LARS trust coefficient.
      warmup_epochs: epochs of linear warm-up from 0 to the peak learning rate; the rest is
        cosine decay to 0. Must be < ``epochs`` (0 for no warm-up).
      hidden_units: widths of the MLP's hidden ReLU layers.
      output_dir: where ``results.json`` and the PNG go (created if needed).
      keras_verbose: ``verbose`` of ``model.fit`` (0 silent, 1 progress bar, 2 one line per
        epoch).
      jit_compile: compile the train step with XLA.
    """

    replicas: int = 8
    global_batch: int = 1024
    epochs: int = 40
    seed: int = 0
    split_seed: int = 0
    test_size: int = 500
    optimizers: Tuple[str, ...] = DEFAULT_OPTIMIZERS
    gamma: float = 0.1
    lamb_learning_rate: float = 0.03
    lars_learning_rate: float = 5.0
    lamb_weight_decay: float = 0.01
    lars_weight_decay: float = 1e-4
    lars_momentum: float = 0.9
    lars_eeta: float = 0.001
    warmup_epochs: int = 5
    hidden_units: Tuple[int, ...] = (256, 256)
    output_dir: str = os.path.join("runs", "digits")
    keras_verbose: int = 2
    jit_compile: bool = False

    def validate(self) -> "DemoConfig":
        """Checks every field; returns ``self``.

        Raises:
          ValueError: naming the field (as its command-line flag) and what is allowed.
        """

        def need(ok, message):
            if not ok:
                raise ValueError(message)

        need(
            isinstance(self.replicas, int) and self.replicas >= 1,
            f"--replicas must be an integer >= 1, got {self.replicas!r}.",
        )
        need(
            isinstance(self.global_batch, int) and self.global_batch >= 1,
            f"--global_batch must be an integer >= 1, got {self.global_batch!r}.",
        )
        need(
            self.global_batch % self.replicas == 0,
            f"--global_batch={self.global_batch} must be divisible by --replicas="
            f"{self.replicas}, so that every replica gets an equal shard of each batch "
            f"(e.g. --global_batch={self.replicas * max(1, self.global_batch // self.replicas)}"
            ").",
        )
        need(
            isinstance(self.epochs, int) and self.epochs >= 1,
            f"--epochs must be an integer >= 1, got {self.epochs!r}.",
        )
        need(
            isinstance(self.warmup_epochs, int) and 0 <= self.warmup_epochs < self.epochs,
            f"--warmup_epochs must be an integer in [0, --epochs), got "
            f"{self.warmup_epochs!r} with --epochs={self.epochs}.",
        )
        need(
            isinstance(self.test_size, int) and NUM_CLASSES <= self.test_size <= 1797 - 100,
            f"--test_size must be an integer in [{NUM_CLASSES}, 1697], got {self.test_size!r}.",
        )
        need(len(self.optimizers) >= 1, "--optimizers must name at least one optimizer.")
        unknown = [o for o in self.optimizers if o not in OPTIMIZERS]
        need(
            not unknown,
            f"--optimizers: unknown name(s) {unknown}; choose from {sorted(OPTIMIZERS)}.",
        )
        need(
            len(set(self.optimizers)) == len(self.optimizers),
            f"--optimizers lists a name twice: {list(self.optimizers)}.",
        )
        need(0.0 < self.gamma <= 1.0, f"--gamma must be in (0, 1], got {self.gamma!r}.")
        for name in ("lamb_learning_rate", "lars_learning_rate"):
            value = getattr(self, name)
            need(
                math.isfinite(value) and value > 0,
                f"--{name} must be a finite number > 0, got {value!r}.",
            )
        for name in ("lamb_weight_decay", "lars_weight_decay", "lars_momentum", "lars_eeta"):
            value = getattr(self, name)
            need(
                math.isfinite(value) and value >= 0,
                f"--{name} must be a finite number >= 0, got {value!r}.",
            )
        need(
            len(self.hidden_units) >= 1
            and all(isinstance(u, int) and u >= 1 for u in self.hidden_units),
            f"--hidden_units must be a non-empty list of integers >= 1, got "
            f"{list(self.hidden_units)!r}.",
        )
        need(
            self.keras_verbose in (0, 1, 2),
            f"--keras_verbose must be 0, 1 or 2, got {self.keras_verbose!r}.",
        )
        need(bool(self.output_dir), "--output_dir must not be empty.")
        return self


@dataclasses.dataclass(frozen=True)
class DigitsData:
    """The split: ``x_*`` float32 [n, 64] in [0, 1], ``y_*`` int32 [n] in 0..9."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclasses.dataclass
class RunResult:
    """One optimizer's run.

    Attributes:
      name: the optimizer's name in ``--optimizers``.
      model: the trained Keras model (its variables are mirrored over the replicas).
      optimizer: its optimizer (``vrgd_statistics()`` for the VR ones).
      train_accuracy: accuracy over the whole training split after training.
      test_accuracy: accuracy over the test split after training.
      gap: ``train_accuracy - test_accuracy``.
      wall_time: seconds for building, training and evaluating this run. On CPU it is
        dominated by fixed costs (tracing the replicated step, creating and tearing down the
        distributed input iterators) that vary with the machine's load.
      ms_per_step: median over epochs 2.. of the epoch's step time per step, in ms: the
        steady-state cost of one optimizer step, comparable between optimizers.
      curves: per-epoch lists: ``test_accuracy``, ``test_loss``, and Keras' running
        ``loss`` and ``accuracy`` of the training steps; for VR runs also
        ``frac_at_gamma`` (fraction of all weights whose factor was clipped at gamma in the
        epoch's last step).
      initial_weights_sha256: fingerprint of the initial weights (equal across runs).
      vrgd_statistics: ``optimizer.vrgd_statistics()`` after training, ``None`` for base
        optimizers.
    """

    name: str
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    train_accuracy: float
    test_accuracy: float
    gap: float
    wall_time: float
    ms_per_step: float
    curves: Dict[str, List[float]]
    initial_weights_sha256: str
    vrgd_statistics: Optional[Dict[str, Dict[str, float]]]

    def row(self) -> Dict[str, Any]:
        """The table row as JSON-ready values."""
        return {
            "optimizer": self.name,
            "train_accuracy": self.train_accuracy,
            "test_accuracy": self.test_accuracy,
            "generalization_gap": self.gap,
            "wall_time_s": self.wall_time,
            "ms_per_step": self.ms_per_step,
        }


@dataclasses.dataclass
class DemoResults:
    """What :func:`run` returns: the config, the data, one :class:`RunResult` per optimizer
    (in ``config.optimizers`` order), the paths written and the total wall time."""

    config: DemoConfig
    data: DigitsData
    runs: List[RunResult]
    results_path: str
    plot_path: str
    wall_time: float

    @property
    def rows(self) -> List[Dict[str, Any]]:
        return [r.row() for r in self.runs]


# ---------------------------------------------------------------------------------------------
# Devices, data, model, optimizers.


def configure_logical_cpus(num_replicas: int) -> List[str]:
    """``num_replicas`` logical CPU device names (:func:`vrgd_tf.devices.split_cpu`)."""
    return devices.split_cpu(num_replicas, argument="--replicas")


def load_data(test_size: int = 500, split_seed: int = 0) -> DigitsData:
    """scikit-learn's 1,797 digits, stratified and seeded split, pixels scaled to [0, 1]."""
    from sklearn import (
        datasets,  # pylint: disable=g-import-not-at-top
        model_selection,  # pylint: disable=g-import-not-at-top
    )

    digits = datasets.load_digits()
    x = np.asarray(digits.data, np.float32) / 16.0
    y = np.asarray(digits.target, np.int32)
    x_train, x_test, y_train, y_test = model_selection.train_test_split(
        x, y, test_size=test_size, stratify=y, random_state=split_seed
    )
    return DigitsData(x_train, y_train, x_test, y_test)


def build_model(hidden_units: Sequence[int] = (256, 256)) -> keras.Model:
    """MLP 64 -> hidden_units (ReLU) -> 10 logits. Seed first for reproducible weights."""
    layers = [keras.Input((NUM_FEATURES,), name="pixels")]
    for i, units in enumerate(hidden_units):
        layers.append(keras.layers.Dense(units, activation="relu", name=f"hidden_{i}"))
    layers.append(keras.layers.Dense(NUM_CLASSES, name="logits"))
    return keras.Sequential(layers, name="digits_mlp")


def make_schedule(peak: float, total_steps: int, warmup_steps: int):
    """Linear warm-up from 0 to ``peak`` over ``warmup_steps``, then cosine decay to 0."""
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        decay_steps=max(1, total_steps - warmup_steps),
        alpha=0.0,
        warmup_target=peak,
        warmup_steps=warmup_steps,
    )


def make_optimizer(name: str, schedule, config: DemoConfig) -> keras.optimizers.Optimizer:
    """The optimizer called ``name``; VR versions get the base's arguments plus ``gamma``."""
    cls, family = OPTIMIZERS[name]
    if family == "lamb":
        kwargs = dict(weight_decay_rate=config.lamb_weight_decay, exclude_from_weight_decay=EXCLUDE)
    else:
        kwargs = dict(
            momentum=config.lars_momentum,
            eeta=config.lars_eeta,
            weight_decay_rate=config.lars_weight_decay,
            exclude_from_weight_decay=EXCLUDE,
        )
    if name.startswith("vrgd_"):
        kwargs["gamma"] = config.gamma
    return cls(learning_rate=schedule, **kwargs)


def _peak_learning_rate(name: str, config: DemoConfig) -> float:
    return config.lamb_learning_rate if OPTIMIZERS[name][1] == "lamb" else config.lars_learning_rate


def _logits(model: keras.Model, x: np.ndarray) -> np.ndarray:
    """One full-batch forward pass in inference mode (cross-replica context)."""
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)))


def evaluate_accuracy(model: keras.Model, x: np.ndarray, y: np.ndarray) -> Tuple[float, float]:
    """``(accuracy, mean cross-entropy)`` of ``model`` on all of ``x``, ``y``."""
    logits = _logits(model, x).astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = float(-log_probs[np.arange(len(y)), y].mean())
    accuracy = float(np.mean(np.argmax(logits, axis=1) == y))
    return accuracy, loss


def _weights_sha256(model: keras.Model) -> str:
    digest = hashlib.sha256()
    for w in model.get_weights():
        digest.update(np.ascontiguousarray(w).tobytes())
    return digest.hexdigest()


def _sizes_by_statistics_name(model: keras.Model) -> Dict[str, int]:
    """``{name in vrgd_statistics(): number of elements}`` of the model's variables."""
    variables = model.trainable_variables
    names = naming.display_names([naming.variable_name(v) for v in variables])
    return {n: int(np.prod(v.shape)) for n, v in zip(names, variables)}


def _fraction_at_gamma(optimizer, model) -> Optional[float]:
    """Share of all trainable weights whose VRGD factor sat at gamma in the last step."""
    if not hasattr(optimizer, "vrgd_statistics"):
        return None
    stats = optimizer.vrgd_statistics()
    sizes = _sizes_by_statistics_name(model)
    total = sum(sizes.get(n, 0) for n in stats)
    if not total:
        return None
    return float(sum(s["frac_at_gamma"] * sizes.get(n, 0) for n, s in stats.items()) / total)


class _StepTimer(keras.callbacks.Callback):
    """Wall time of each epoch's training steps, callbacks excluded (list it first)."""

    def __init__(self):
        super().__init__()
        self.epoch_seconds: List[float] = []
        self._start = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_seconds.append(time.perf_counter() - self._start)


class _TestSetMonitor(keras.callbacks.Callback):
    """Adds ``test_accuracy``/``test_loss`` to each epoch's logs (so Keras prints them).

    One full-batch forward pass per epoch instead of ``fit(validation_data=...)``: with
    Keras 3.15, each validation pass under a ``MirroredStrategy`` of 8 CPU replicas makes a
    new distributed iterator and re-runs ``_maybe_symbolic_build``, which took 1 to 20 s of
    mostly idle time per epoch on a 2-core machine, and that build reduces the first batch
    across replicas, so it fails unless the first batch splits evenly.
    """

    def __init__(self, x, y, curves):
        super().__init__()
        self._x, self._y, self._curves = x, y, curves

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        accuracy, loss = evaluate_accuracy(self.model, self._x, self._y)
        logs["test_accuracy"] = accuracy
        logs["test_loss"] = loss
        self._curves["test_accuracy"].append(accuracy)
        self._curves["test_loss"].append(loss)
        for key in ("loss", "accuracy"):
            if key in logs:
                self._curves[key].append(float(logs[key]))
        fraction = _fraction_at_gamma(self.model.optimizer, self.model)
        if fraction is not None:
            self._curves["frac_at_gamma"].append(fraction)


# ---------------------------------------------------------------------------------------------
# Training.


def _train_dataset(data: DigitsData, global_batch: int, seed: int) -> tf.data.Dataset:
    """Shuffled (seeded), repeated training set in full global batches.

    ``drop_remainder`` with ``repeat`` first: every batch has exactly ``global_batch``
    images, so every replica gets a shard of ``global_batch / replicas``.
    """
    n = len(data.y_train)
    return (
        tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
        .shuffle(n, seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(global_batch, drop_remainder=True)
    )


def steps_per_epoch(config: DemoConfig, num_train: int) -> int:
    """``ceil(num_train / global_batch)``: each epoch sees at least the whole training set."""
    return max(1, math.ceil(num_train / config.global_batch))


def train_one(
    name: str, config: DemoConfig, data: DigitsData, strategy: tf.distribute.Strategy
) -> RunResult:
    """Trains one fresh model with optimizer ``name`` and evaluates it."""
    start = time.perf_counter()
    steps = steps_per_epoch(config, len(data.y_train))
    total_steps = steps * config.epochs
    warmup_steps = steps * config.warmup_epochs
    keras.utils.set_random_seed(config.seed)  # Same initial weights and batches for all.
    with strategy.scope():
        model = build_model(config.hidden_units)
        schedule = make_schedule(_peak_learning_rate(name, config), total_steps, warmup_steps)
        optimizer = make_optimizer(name, schedule, config)
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
            jit_compile=config.jit_compile,
        )
    initial_sha = _weights_sha256(model)
    curves: Dict[str, List[float]] = {
        k: [] for k in ("test_accuracy", "test_loss", "loss", "accuracy")
    }
    if name.startswith("vrgd_"):
        curves["frac_at_gamma"] = []
    logging.info(
        "Training %s: %d epochs x %d steps of %d (%d per replica), peak lr %g.",
        name,
        config.epochs,
        steps,
        config.global_batch,
        config.global_batch // config.replicas,
        _peak_learning_rate(name, config),
    )
    timer = _StepTimer()
    model.fit(
        _train_dataset(data, config.global_batch, config.seed),
        epochs=config.epochs,
        steps_per_epoch=steps,
        verbose=config.keras_verbose,
        shuffle=False,
        callbacks=[timer, _TestSetMonitor(data.x_test, data.y_test, curves)],
    )
    train_accuracy, _ = evaluate_accuracy(model, data.x_train, data.y_train)
    test_accuracy, _ = evaluate_accuracy(model, data.x_test, data.y_test)
    stats = optimizer.vrgd_statistics() if hasattr(optimizer, "vrgd_statistics") else None
    return RunResult(
        name=name,
        model=model,
        optimizer=optimizer,
        train_accuracy=train_accuracy,
        test_accuracy=test_accuracy,
        gap=train_accuracy - test_accuracy,
        wall_time=time.perf_counter() - start,
        ms_per_step=1000.0
        * float(np.median(timer.epoch_seconds[1:] or timer.epoch_seconds))
        / steps,
        curves=curves,
        initial_weights_sha256=initial_sha,
        vrgd_statistics=stats,
    )


def _summarize_statistics(stats, model) -> Optional[Dict[str, Any]]:
    """Per-variable statistics plus element-weighted means over all variables."""
    if stats is None:
        return None
    sizes = _sizes_by_statistics_name(model)
    total = sum(sizes.get(n, 0) for n in stats) or 1
    weighted = {
        key: float(sum(s[key] * sizes.get(n, 0) for n, s in stats.items()) / total)
        for key in ("frac_at_gamma", "frac_at_one")
    }
    weighted["mean_gsnr_over_variables"] = float(np.mean([s["mean_gsnr"] for s in stats.values()]))
    return {"per_variable": stats, "all_weights": weighted}


def _write_json(results: DemoResults) -> None:
    config = results.config
    payload = {
        "description": "LAMB/LARS vs VR-LAMB/VR-LARS (arXiv 2309.13681) on sklearn digits",
        "config": dataclasses.asdict(config),
        "data": {
            "num_train": int(len(results.data.y_train)),
            "num_test": int(len(results.data.y_test)),
            "steps_per_epoch": steps_per_epoch(config, len(results.data.y_train)),
            "per_replica_batch": config.global_batch // config.replicas,
        },
        "versions": {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "vrgd_tf": vrgd_tf.__version__,
        },
        "rows": results.rows,
        "runs": {
            r.name: {
                "peak_learning_rate": _peak_learning_rate(r.name, config),
                "initial_weights_sha256": r.initial_weights_sha256,
                "curves": r.curves,
                "vrgd_statistics": _summarize_statistics(r.vrgd_statistics, r.model),
            }
            for r in results.runs
        },
        "total_wall_time_s": results.wall_time,
    }
    with open(results.results_path, "w") as f:
        json.dump(payload, f, indent=2)


def _plot(results: DemoResults) -> None:
    # The Agg canvas directly, without pyplot: no global backend switch, no display needed.
    # pylint: disable=g-import-not-at-top
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # pylint: enable=g-import-not-at-top
    config = results.config
    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    ax_acc, ax_loss = fig.subplots(1, 2)
    # One color per family; the base optimizer dashed, its VR version solid.
    colors = {"lamb": "tab:blue", "lars": "tab:red"}
    for r in results.runs:
        epochs = np.arange(1, len(r.curves["test_accuracy"]) + 1)
        style = dict(
            color=colors[OPTIMIZERS[r.name][1]],
            linestyle="-" if r.name.startswith("vrgd_") else "--",
            label=r.name,
        )
        ax_acc.plot(epochs, r.curves["test_accuracy"], **style)
        if r.curves["loss"]:
            ax_loss.plot(epochs, r.curves["loss"], **style)
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("test accuracy")
    ax_acc.set_title(
        f"sklearn digits, global batch {config.global_batch}, {config.replicas} replicas"
    )
    ax_acc.grid(alpha=0.3)
    ax_acc.legend()
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("training loss (running mean over the epoch)")
    ax_loss.set_yscale("log")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    fig.tight_layout()
    fig.savefig(results.plot_path, dpi=100)


def format_table(rows: Sequence[Dict[str, Any]]) -> str:
    """The results table as text (accuracies in %)."""
    header = (
        f"{'optimizer':<12} {'train acc':>10} {'test acc':>10} {'gap':>8} "
        f"{'wall time':>10} {'ms/step':>8}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['optimizer']:<12} {100 * row['train_accuracy']:>9.2f}% "
            f"{100 * row['test_accuracy']:>9.2f}% "
            f"{100 * row['generalization_gap']:>7.2f}% "
            f"{row['wall_time_s']:>9.1f}s {row['ms_per_step']:>8.1f}"
        )
    return "\n".join(lines)


def run(config: DemoConfig, strategy: Optional[tf.distribute.Strategy] = None) -> DemoResults:
    """Trains every optimizer of ``config``, writes ``results.json`` and the PNG.

    Args:
      config: the job; validated first.
      strategy: defaults to a ``MirroredStrategy`` over the first ``config.replicas``
        logical CPUs (made by :func:`configure_logical_cpus` if TensorFlow is not yet
        initialised), with ``ReductionToOneDevice`` (the collective all-reduce keys of
        several strategies in one process can clash on CPU; the sums are the same).

    Returns:
      :class:`DemoResults`, with the trained models.

    Raises:
      ValueError: a bad config field, or too few logical CPUs.
    """
    config.validate()
    start = time.perf_counter()
    if strategy is None:
        devices = configure_logical_cpus(config.replicas)
        strategy = tf.distribute.MirroredStrategy(
            devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    if strategy.num_replicas_in_sync != config.replicas:
        raise ValueError(
            f"The strategy has {strategy.num_replicas_in_sync} replicas but "
            f"--replicas={config.replicas}."
        )
    data = load_data(config.test_size, config.split_seed)
    os.makedirs(config.output_dir, exist_ok=True)
    runs = [train_one(name, config, data, strategy) for name in config.optimizers]
    results = DemoResults(
        config=config,
        data=data,
        runs=runs,
        results_path=os.path.join(config.output_dir, RESULTS_JSON),
        plot_path=os.path.join(config.output_dir, CURVES_PNG),
        wall_time=time.perf_counter() - start,
    )
    _write_json(results)
    _plot(results)
    return results


# ---------------------------------------------------------------------------------------------
# Command line.

_D = DemoConfig()
_REPLICAS = flags.DEFINE_integer(
    "replicas",
    _D.replicas,
    "Data-parallel replicas: logical CPU devices of the "
    "MirroredStrategy. VRGD estimates the gradient noise across them, so it needs >= 2 (the "
    "paper uses >= 8).",
    lower_bound=1,
)
_GLOBAL_BATCH = flags.DEFINE_integer(
    "global_batch",
    _D.global_batch,
    "Images per optimizer step summed over all replicas; "
    "must be divisible by --replicas. The default 1024 is 79% of the 1,297 training images.",
    lower_bound=1,
)
_EPOCHS = flags.DEFINE_integer(
    "epochs",
    _D.epochs,
    "Training epochs; one epoch is ceil(num_train / global_batch) full "
    "batches from the shuffled, repeated training set.",
    lower_bound=1,
)
_WARMUP_EPOCHS = flags.DEFINE_integer(
    "warmup_epochs",
    _D.warmup_epochs,
    "Epochs of linear learning-rate warm-up from 0; the "
    "remaining epochs decay it to 0 with a cosine. Must be < --epochs.",
    lower_bound=0,
)
_SEED = flags.DEFINE_integer(
    "seed",
    _D.seed,
    "Seed of the initial weights and of the batch order; every optimizer gets the same ones.",
)
_SPLIT_SEED = flags.DEFINE_integer(
    "split_seed", _D.split_seed, "Seed of the stratified train/test split."
)
_TEST_SIZE = flags.DEFINE_integer(
    "test_size",
    _D.test_size,
    "Test images held out (stratified) of the 1,797.",
    lower_bound=NUM_CLASSES,
)
_OPTIMIZERS = flags.DEFINE_list(
    "optimizers",
    list(_D.optimizers),
    "Comma-separated optimizers to train, in order, from: "
    f"{', '.join(OPTIMIZERS)}. The vrgd_* ones are the VRGD versions of the others, with "
    "the same hyper-parameters.",
)
_GAMMA = flags.DEFINE_float(
    "gamma",
    _D.gamma,
    "VRGD's lower bound of the per-element GSNR factor, in (0, 1] "
    "(paper default 0.1; 1 turns VRGD off).",
)
_LAMB_LR = flags.DEFINE_float(
    "lamb_learning_rate", _D.lamb_learning_rate, "Peak learning rate of lamb and vrgd_lamb."
)
_LARS_LR = flags.DEFINE_float(
    "lars_learning_rate",
    _D.lars_learning_rate,
    "Peak learning rate of lars and vrgd_lars (it multiplies the trust ratio "
    "eeta * ||w|| / ||g||).",
)
_LAMB_WD = flags.DEFINE_float(
    "lamb_weight_decay",
    _D.lamb_weight_decay,
    "Decoupled weight decay rate of lamb and vrgd_lamb (biases excluded).",
)
_LARS_WD = flags.DEFINE_float(
    "lars_weight_decay",
    _D.lars_weight_decay,
    "L2 weight decay of lars and vrgd_lars (biases excluded).",
)
_LARS_MOMENTUM = flags.DEFINE_float(
    "lars_momentum", _D.lars_momentum, "Momentum of lars and vrgd_lars."
)
_LARS_EETA = flags.DEFINE_float(
    "lars_eeta", _D.lars_eeta, "Trust coefficient eeta of lars and vrgd_lars."
)
_HIDDEN_UNITS = flags.DEFINE_list(
    "hidden_units",
    [str(u) for u in _D.hidden_units],
    "Comma-separated widths of the MLP's hidden ReLU layers.",
)
_OUTPUT_DIR = flags.DEFINE_string(
    "output_dir",
    _D.output_dir,
    f"Directory for {RESULTS_JSON} and {CURVES_PNG} (created if missing).",
)
_KERAS_VERBOSE = flags.DEFINE_enum(
    "keras_verbose",
    str(_D.keras_verbose),
    ["0", "1", "2"],
    "verbose of model.fit: 0 silent, 1 progress bar, 2 one line per epoch.",
)
_JIT_COMPILE = flags.DEFINE_bool(
    "jit_compile", _D.jit_compile, "Compile the train step with XLA (slower to start on CPU)."
)

flags.register_multi_flags_validator(
    ["global_batch", "replicas"],
    lambda f: f["global_batch"] % f["replicas"] == 0,
    message="--global_batch must be divisible by --replicas, so that every replica gets an "
    "equal shard of each batch.",
)
flags.register_multi_flags_validator(
    ["warmup_epochs", "epochs"],
    lambda f: f["warmup_epochs"] < f["epochs"],
    message="--warmup_epochs must be smaller than --epochs.",
)
flags.register_validator(
    "optimizers",
    lambda names: (
        bool(names) and all(n in OPTIMIZERS for n in names) and len(set(names)) == len(names)
    ),
    message=f"--optimizers must be a non-empty, duplicate-free comma list of: "
    f"{', '.join(OPTIMIZERS)}.",
)
flags.register_validator("gamma", lambda g: 0.0 < g <= 1.0, message="--gamma must be in (0, 1].")


def config_from_flags() -> DemoConfig:
    """The :class:`DemoConfig` given by the parsed flags.

    Raises:
      app.UsageError: a flag value that the validators could not check alone.
    """
    try:
        hidden = tuple(int(u) for u in _HIDDEN_UNITS.value)
    except ValueError as e:
        raise app.UsageError(f"--hidden_units must be integers: {e}") from e
    config = DemoConfig(
        replicas=_REPLICAS.value,
        global_batch=_GLOBAL_BATCH.value,
        epochs=_EPOCHS.value,
        seed=_SEED.value,
        split_seed=_SPLIT_SEED.value,
        test_size=_TEST_SIZE.value,
        optimizers=tuple(_OPTIMIZERS.value),
        gamma=_GAMMA.value,
        lamb_learning_rate=_LAMB_LR.value,
        lars_learning_rate=_LARS_LR.value,
        lamb_weight_decay=_LAMB_WD.value,
        lars_weight_decay=_LARS_WD.value,
        lars_momentum=_LARS_MOMENTUM.value,
        lars_eeta=_LARS_EETA.value,
        warmup_epochs=_WARMUP_EPOCHS.value,
        hidden_units=hidden,
        output_dir=_OUTPUT_DIR.value,
        keras_verbose=int(_KERAS_VERBOSE.value),
        jit_compile=_JIT_COMPILE.value,
    )
    try:
        return config.validate()
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def main(argv: Sequence[str]) -> None:
    """absl entry point: logical CPUs, :func:`run`, then the table on stdout."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    config = config_from_flags()
    # Logical devices first: nothing above touches the TensorFlow runtime.
    try:
        configure_logical_cpus(config.replicas)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    tf.get_logger().setLevel("WARNING")  # TF's per-strategy INFO lines drown the table.
    results = run(config)
    print()
    print(
        f"sklearn digits: {len(results.data.y_train)} train / {len(results.data.y_test)} "
        f"test images, global batch {config.global_batch} over {config.replicas} replicas "
        f"({config.global_batch // config.replicas} each), {config.epochs} epochs x "
        f"{steps_per_epoch(config, len(results.data.y_train))} steps, seed {config.seed}, "
        f"gamma {config.gamma}"
    )
    print(format_table(results.rows))
    for r in results.runs:
        summary = _summarize_statistics(r.vrgd_statistics, r.model)
        if summary:
            w = summary["all_weights"]
            print(
                f"{r.name}: last step, share of weights with factor at gamma "
                f"{100 * w['frac_at_gamma']:.1f}%, at 1 {100 * w['frac_at_one']:.1f}%, "
                f"mean GSNR (mean over variables) {w['mean_gsnr_over_variables']:.3g}"
            )
    print(
        f"total wall time {results.wall_time:.1f}s; wrote {results.results_path} and "
        f"{results.plot_path}"
    )


if __name__ == "__main__":
    app.run(main)
