r"""Large-batch LAMB/LARS versus VR-LAMB/VR-LARS on real handwritten digits.

VRGD (arXiv 2309.13681, ``docs/spec.md``) scales each gradient element by its signal-to-noise
ratio across data-parallel replicas, so elements the replicas disagree on take smaller steps
(down to ``gamma`` times); the paper reports that at very large batches this closes much of
LAMB's and LARS's generalization gap. This is that comparison in miniature, about two minutes
on 2 CPU cores: scikit-learn's 1,797 real 8x8 digits (shipped with it, nothing downloaded;
1,297 train / 500 test), an MLP 64-256-256-10, ``MirroredStrategy`` over 8 logical CPUs,
global batch 1024 (79% of the training set per step). A base optimizer and its VR version get
the same hyper-parameters, schedule, initial weights and batches.

Each run is a ``model.fit``; afterwards one forward pass each gives the accuracy on the whole
train and test splits. The job prints a table (train / test accuracy, gap, wall time,
steady-state ms per step) and writes ``results.json`` (config, rows, per-epoch curves, GSNR
statistics) and ``test_accuracy.png`` to ``--output_dir``. Differences of a few test images
(0.2% each) are within seed-to-seed noise: try several ``--seed`` values before reading one.

With ``--backend=jax`` the same job runs on Keras 3's JAX backend: ``keras.distribution.
DataParallel`` over ``--replicas`` CPU devices forced with ``XLA_FLAGS``, and
``vrgd_tf.use_micro_batches(model, num_groups=1)`` for the VR runs (one GSNR sample per
device); no TensorFlow module is imported. The report is the same, except the split-half
reliability (``split_half`` is not implemented on JAX; the output says so).

Usage::

  python3 examples/digits/digits_large_batch.py
  python3 examples/digits/digits_large_batch.py --global_batch=2048 --optimizers=lamb,vrgd_lamb
  python3 examples/digits/digits_large_batch.py --backend=jax

From Python (as the test does): ``demo.run(demo.DemoConfig(replicas=2, global_batch=64))``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import TYPE_CHECKING, List, Sequence, Tuple

import numpy as np
from absl import app, logging

if TYPE_CHECKING:
    import tensorflow as tf

BACKENDS = ("tensorflow", "jax")
DEFAULT_REPLICAS = 8  # --replicas' default, also read by select_backend before Keras


def _argv_value(argv: Sequence[str], name: str, default: str) -> str:
    """The last value of ``--name=v`` or ``--name v`` in ``argv`` (absl's forms), else
    ``default``. Values given only through ``--flagfile`` are not seen here (see below)."""
    value = default
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "--":
            break
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        elif arg == f"--{name}" and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def select_backend(argv: Sequence[str], environ=os.environ) -> str:
    """Sets ``KERAS_BACKEND`` (and, for JAX, ``XLA_FLAGS`` and, unless set, ``JAX_PLATFORMS=cpu``)
    from ``--backend`` and ``--replicas`` in ``argv``; returns the backend. Keras and JAX read
    them when they are imported.

    The choice is read from ``sys.argv`` here, before ``keras`` and ``vrgd_tf`` are imported
    below, rather than by re-running the script in a subprocess with that environment: one
    process (no second start-up, no piped output, exit status and Ctrl-C as usual), and the
    absl flag ``--backend`` still exists, so ``--helpshort`` lists it and it is validated.
    The flag wins over a ``KERAS_BACKEND`` already in the environment. What this early read
    cannot see (a value given only in a ``--flagfile``) is not ignored: after absl has
    parsed the flags, :func:`main` refuses a ``--backend`` that differs from the backend
    Keras loaded.
    """
    backend = _argv_value(argv, "backend", BACKENDS[0])
    if backend not in BACKENDS:  # absl's validator reports it with the flag's message.
        return backend
    environ["KERAS_BACKEND"] = backend
    if backend == "jax":
        environ.setdefault("JAX_PLATFORMS", "cpu")  # A CPU job: no GPU/TPU probing.
        replicas = _argv_value(argv, "replicas", str(DEFAULT_REPLICAS))
        kept = [
            f
            for f in environ.get("XLA_FLAGS", "").split()
            if not f.startswith("--xla_force_host_platform_device_count")
        ]
        environ["XLA_FLAGS"] = " ".join(
            kept + [f"--xla_force_host_platform_device_count={replicas}"]
        )
    return backend


if __name__ == "__main__":  # Run as a script: the backend before Keras (imported below).
    select_backend(sys.argv)

import keras  # noqa: E402  (after select_backend)

import vrgd_tf  # noqa: E402

import config_flags  # noqa: E402
import digits_reporting as reporting  # noqa: E402

#: ``--optimizers`` names: (class, learning-rate family).
OPTIMIZERS = {
    "lamb": (vrgd_tf.Lamb, "lamb"),
    "vrgd_lamb": (vrgd_tf.VRGDLamb, "lamb"),
    "lars": (vrgd_tf.Lars, "lars"),
    "vrgd_lars": (vrgd_tf.VRGDLars, "lars"),
}
NUM_CLASSES, NUM_FEATURES, NUM_IMAGES = 10, 64, 1797
#: Variables with neither weight decay nor trust ratio: the biases (BERT/LAMB, MLPerf/LARS).
EXCLUDE = ["bias"]
RESULTS_JSON, CURVES_PNG = "results.json", "test_accuracy.png"
FAMILY_COLORS = {"lamb": "tab:blue", "lars": "tab:red"}
_flag = config_flags.field
POSITIVE = dict(low=0.0, high=math.inf, low_open=True, high_open=True)  # finite, > 0
NON_NEGATIVE = dict(low=0.0, high=math.inf, high_open=True)  # finite, >= 0


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """One demo job; each field is also the command-line flag of that name, type and help.

    The default peak learning rates were picked for the *base* optimizers only, at this batch
    and length (seed 0: LAMB 0.01-0.1, LARS 2-40; LARS checked at seed 1 with 3, 5, 7); LAMB's
    test accuracy is flat from 0.02 to 0.05, LARS diverges from 7 up. The VR versions reuse
    them untuned.
    """

    backend: str = _flag(
        "tensorflow",
        "Keras backend: tensorflow (MirroredStrategy over logical CPUs) or jax "
        "(keras.distribution.DataParallel over CPU devices forced with XLA_FLAGS). Read "
        "from the command line before Keras is imported.",
    )
    replicas: int = _flag(
        DEFAULT_REPLICAS, "Data-parallel replicas (logical CPUs); VRGD needs >= 2.", low=1
    )
    global_batch: int = _flag(
        1024, "Images per step over all replicas; a multiple of --replicas.", low=1
    )
    epochs: int = _flag(40, "Epochs of ceil(num_train / global_batch) full batches each.", low=1)
    seed: int = _flag(0, "Seed of the initial weights and the batch order (same for all runs).")
    split_seed: int = _flag(0, "Seed of the stratified train/test split.")
    test_size: int = _flag(500, "Test images held out of the 1,797.", NUM_CLASSES, NUM_IMAGES - 100)
    optimizers: Tuple[str, ...] = _flag(
        tuple(OPTIMIZERS), f"Comma list from {', '.join(OPTIMIZERS)}."
    )
    gamma: float = _flag(
        0.1, "VRGD's lower bound of the GSNR factor (1 turns VRGD off).", 0.0, 1.0, low_open=True
    )
    lamb_learning_rate: float = _flag(0.03, "Peak learning rate of lamb and vrgd_lamb.", **POSITIVE)
    lars_learning_rate: float = _flag(5.0, "Peak learning rate of lars and vrgd_lars.", **POSITIVE)
    lamb_weight_decay: float = _flag(
        0.01, "Decoupled weight decay of the lamb pair (not biases).", **NON_NEGATIVE
    )
    lars_weight_decay: float = _flag(
        1e-4, "L2 weight decay of the lars pair (not biases).", **NON_NEGATIVE
    )
    lars_momentum: float = _flag(0.9, "Momentum of lars and vrgd_lars.", **NON_NEGATIVE)
    lars_eeta: float = _flag(0.001, "Trust coefficient eeta of lars and vrgd_lars.", **NON_NEGATIVE)
    warmup_epochs: int = _flag(5, "Linear warm-up epochs, then cosine decay to 0.", low=0)
    hidden_units: Tuple[int, ...] = _flag((256, 256), "Comma list of hidden ReLU layer widths.")
    output_dir: str = _flag(
        os.path.join("runs", "digits"), f"Where {RESULTS_JSON} and {CURVES_PNG} go."
    )
    keras_verbose: int = _flag(2, "model.fit verbose: 0 silent, 1 progress bar, 2 per epoch.", 0, 2)
    jit_compile: bool = _flag(
        False,
        "TensorFlow: compile the train step with XLA (slower to start on CPU). JAX always "
        "compiles it.",
    )

    def validate(self) -> "DemoConfig":
        """Returns ``self``; raises ``ValueError`` naming the flag and what is allowed."""

        def need(ok, message):
            if not ok:
                raise ValueError(message)

        config_flags.check_fields(self)  # Each field's type and interval (see _flag).
        need(
            self.backend in BACKENDS,
            f"--backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}.",
        )
        need(self.warmup_epochs < self.epochs, "--warmup_epochs must be < --epochs.")
        need(
            self.global_batch % self.replicas == 0,
            f"--global_batch={self.global_batch} must be divisible by --replicas="
            f"{self.replicas}, so that every replica gets an equal shard of each batch.",
        )
        unknown = [o for o in self.optimizers if o not in OPTIMIZERS]
        need(len(self.optimizers) >= 1, "--optimizers must name at least one optimizer.")
        need(not unknown, f"--optimizers: unknown name(s) {unknown}; use {list(OPTIMIZERS)}.")
        need(len(set(self.optimizers)) == len(self.optimizers), "--optimizers has a name twice.")
        units = self.hidden_units
        need(
            len(units) >= 1 and all(isinstance(u, int) and u >= 1 for u in units),
            f"--hidden_units must be a non-empty list of integers >= 1, got {list(units)}.",
        )
        need(bool(self.output_dir), "--output_dir must not be empty.")
        return self


# --- Data: scikit-learn's digits, a stratified split, a repeated stream of full batches. ---


@dataclasses.dataclass(frozen=True)
class DigitsData:
    """``x_*`` float32 [n, 64] in [0, 1], ``y_*`` int32 [n] in 0..9."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_data(test_size: int = 500, split_seed: int = 0) -> DigitsData:
    """scikit-learn's 1,797 digits, stratified and seeded split, pixels scaled to [0, 1]."""
    from sklearn import datasets, model_selection

    digits = datasets.load_digits()
    x, y = np.asarray(digits.data, np.float32) / 16.0, np.asarray(digits.target, np.int32)
    x_train, x_test, y_train, y_test = model_selection.train_test_split(
        x, y, test_size=test_size, stratify=y, random_state=split_seed
    )
    return DigitsData(x_train, y_train, x_test, y_test)


def _train_dataset(data: DigitsData, global_batch: int, seed: int) -> tf.data.Dataset:
    """Seeded shuffle, repeat, then full batches (every replica gets ``global_batch / k``)."""
    import tensorflow as tf

    n = len(data.y_train)
    dataset = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    return dataset.shuffle(n, seed=seed).repeat().batch(global_batch, drop_remainder=True)


def _train_arrays(data: DigitsData, global_batch: int, num_batches: int, seed: int):
    """The JAX path's batches without ``tf.data``: ``(x, y)`` of ``num_batches`` full batches
    in order, for ``fit(..., batch_size=global_batch, shuffle=False)``.

    As ``_train_dataset``: a new seeded permutation of the training set per pass, passes
    concatenated, cut into full batches (a batch can span two passes). The same batches for
    every optimizer of a run; not tf.data's order (that needs TensorFlow's generator).
    """
    n, rng = len(data.y_train), np.random.default_rng(seed)
    needed = global_batch * num_batches
    order = np.concatenate([rng.permutation(n) for _ in range(-(-needed // n))])[:needed]
    return data.x_train[order], data.y_train[order]


def per_replica(config: DemoConfig) -> int:
    return config.global_batch // config.replicas


def steps_per_epoch(config: DemoConfig, num_train: int) -> int:
    """``ceil(num_train / global_batch)``: each epoch sees at least the whole training set."""
    return max(1, math.ceil(num_train / config.global_batch))


# --- Model and optimizers. ---


def build_model(hidden_units: Sequence[int] = (256, 256), seed=None) -> keras.Model:
    """MLP 64 -> hidden_units (ReLU) -> 10 logits. Seed first for reproducible weights, or
    pass ``seed`` (int): each layer's Glorot-uniform kernel then gets the seed ``seed + i``
    (the JAX path: ``keras.utils.set_random_seed`` would import TensorFlow to seed it)."""

    def dense(units, name, i, **kwargs):
        if seed is not None:
            kwargs["kernel_initializer"] = keras.initializers.GlorotUniform(seed=seed + i)
        return keras.layers.Dense(units, name=name, **kwargs)

    hidden = [dense(u, f"hidden_{i}", i, activation="relu") for i, u in enumerate(hidden_units)]
    return keras.Sequential(
        [
            keras.Input((NUM_FEATURES,), name="pixels"),
            *hidden,
            dense(NUM_CLASSES, "logits", len(hidden_units)),
        ],
        name="digits_mlp",
    )


def make_schedule(peak: float, total_steps: int, warmup_steps: int):
    """Linear warm-up from 0 to ``peak`` over ``warmup_steps``, then cosine decay to 0."""
    return keras.optimizers.schedules.CosineDecay(
        0.0,
        max(1, total_steps - warmup_steps),
        alpha=0.0,
        warmup_target=peak,
        warmup_steps=warmup_steps,
    )


def peak_learning_rate(name: str, config: DemoConfig) -> float:
    return config.lamb_learning_rate if OPTIMIZERS[name][1] == "lamb" else config.lars_learning_rate


def make_optimizer(name: str, schedule, config: DemoConfig) -> keras.optimizers.Optimizer:
    """The optimizer called ``name``; VR versions get the base's arguments plus ``gamma``
    and, on 4 replicas or more, ``split_half=True`` (the reliability of the GSNR; TensorFlow
    only)."""
    cls, family = OPTIMIZERS[name]
    kwargs = dict(exclude_from_weight_decay=EXCLUDE, weight_decay_rate=config.lamb_weight_decay)
    if family == "lars":
        kwargs.update(
            momentum=config.lars_momentum,
            eeta=config.lars_eeta,
            weight_decay_rate=config.lars_weight_decay,
        )
    if name.startswith("vrgd_"):
        kwargs["gamma"] = config.gamma
        # halves of >= 2 replicas each; not implemented on JAX (the report says so)
        kwargs["split_half"] = config.replicas >= 4 and config.backend == "tensorflow"
        # The report prints the last step's diagnostics: record every step (the default
        # records every 100; these runs are short).
        kwargs["statistics_interval"] = 1
    return cls(learning_rate=schedule, **kwargs)


# --- Training: compile with the optimizer, fit with callbacks, evaluate. ---


def configure_logical_cpus(num_replicas: int) -> List[str]:
    """``num_replicas`` logical CPU device names (:func:`vrgd_tf.devices.split_cpu`)."""
    from vrgd_tf import devices

    return devices.split_cpu(num_replicas, argument="--replicas")


def jax_distribution(num_replicas: int):
    """``keras.distribution.DataParallel`` over the first ``num_replicas`` CPU devices.

    Raises:
      ValueError: fewer CPU devices (``XLA_FLAGS`` must force them before JAX starts; the
        script sets it from ``--replicas``).
    """
    cpus = keras.distribution.list_devices("cpu")
    if len(cpus) < num_replicas:
        raise ValueError(
            f"--replicas={num_replicas} needs {num_replicas} JAX CPU devices, found "
            f"{len(cpus)}: set XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{num_replicas} before JAX is imported (the script does so from --replicas)."
        )
    return keras.distribution.DataParallel(devices=cpus[:num_replicas])


def _compile(model, name: str, config: DemoConfig, peak: float, steps: int, jit_compile):
    """Compiles ``model`` with optimizer ``name`` on its schedule (peak ``peak``, ``steps``
    per epoch), the cross-entropy of the logits and the accuracy."""
    schedule = make_schedule(peak, steps * config.epochs, steps * config.warmup_epochs)
    model.compile(
        optimizer=make_optimizer(name, schedule, config),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )


def train_one(name: str, config: DemoConfig, data: DigitsData, strategy) -> reporting.RunResult:
    """Trains one fresh model with optimizer ``name`` and evaluates it.

    ``strategy``: a ``tf.distribute`` strategy (TensorFlow) or a
    ``keras.distribution.DataParallel`` (JAX), over ``config.replicas`` devices.
    """
    start = time.perf_counter()
    steps = steps_per_epoch(config, len(data.y_train))
    peak = peak_learning_rate(name, config)
    logging.info(
        f"Training {name}: {config.epochs} epochs x {steps} steps of {config.global_batch} "
        f"({per_replica(config)} per replica), peak lr {peak:g}."
    )
    recorder = reporting.RunRecorder(data.x_test, data.y_test)
    if config.backend == "jax":
        # The same initial weights and batches for all (no keras.utils.set_random_seed: it
        # seeds TensorFlow too where TensorFlow is installed, importing it).
        x, y = _train_arrays(data, config.global_batch, steps * config.epochs, config.seed)
        with strategy.scope():
            model = build_model(config.hidden_units, seed=config.seed)
            _compile(model, name, config, peak, steps, jit_compile=True)
            if name.startswith("vrgd_"):
                # k = replicas x 1 GSNR samples: one group per device of the data axis.
                vrgd_tf.use_micro_batches(model, num_groups=1)
            model.fit(
                x,
                y,
                batch_size=config.global_batch,
                epochs=config.epochs,
                steps_per_epoch=steps,  # Keras continues the batches from epoch to epoch.
                verbose=config.keras_verbose,
                shuffle=False,  # The arrays are in batch order already.
                callbacks=[recorder],
            )
            return reporting.run_result(name, model, recorder, data, steps, start, peak)
    keras.utils.set_random_seed(config.seed)  # The same initial weights and batches for all.
    with strategy.scope():
        model = build_model(config.hidden_units)
        _compile(model, name, config, peak, steps, jit_compile=config.jit_compile)
    model.fit(
        _train_dataset(data, config.global_batch, config.seed),
        epochs=config.epochs,
        steps_per_epoch=steps,
        verbose=config.keras_verbose,
        shuffle=False,  # The dataset is shuffled already.
        callbacks=[recorder],
    )
    return reporting.run_result(name, model, recorder, data, steps, start, peak)


def run(config: DemoConfig, strategy=None) -> reporting.DemoResults:
    """Validates ``config``, trains its optimizers in order, writes the JSON and the PNG.

    ``strategy`` defaults to :func:`vrgd_tf.devices.cpu_strategy` over ``config.replicas``
    logical CPUs (TensorFlow), or to :func:`jax_distribution` (JAX). Raises ``ValueError``
    on a bad field, a ``config.backend`` that is not the backend Keras loaded, or too few
    logical CPUs.
    """
    config.validate()
    start = time.perf_counter()
    if config.backend != keras.backend.backend():
        raise ValueError(
            f"--backend={config.backend}, but Keras runs on {keras.backend.backend()}: the "
            "backend is chosen before Keras is imported (KERAS_BACKEND; the script sets it "
            "from --backend on its command line)."
        )
    if config.backend == "jax":
        strategy = strategy or jax_distribution(config.replicas)
        replicas = strategy.device_mesh.shape[0]
    else:
        from vrgd_tf import devices

        strategy = strategy or devices.cpu_strategy(config.replicas, argument="--replicas")
        replicas = strategy.num_replicas_in_sync
    if replicas != config.replicas:
        raise ValueError(f"The strategy has {replicas} replicas, --replicas {config.replicas}.")
    data = load_data(config.test_size, config.split_seed)
    os.makedirs(config.output_dir, exist_ok=True)
    runs = [train_one(name, config, data, strategy) for name in config.optimizers]
    results = reporting.DemoResults(
        config=config,
        data=data,
        runs=runs,
        results_path=os.path.join(config.output_dir, RESULTS_JSON),
        plot_path=os.path.join(config.output_dir, CURVES_PNG),
        wall_time=time.perf_counter() - start,
    )
    reporting.write_json(
        results,
        "LAMB/LARS vs VR-LAMB/VR-LARS (arXiv 2309.13681) on sklearn digits",
        dict(
            num_train=len(data.y_train),
            num_test=len(data.y_test),
            steps_per_epoch=steps_per_epoch(config, len(data.y_train)),
            per_replica_batch=per_replica(config),
        ),
    )
    title = f"sklearn digits, global batch {config.global_batch}, {config.replicas} replicas"
    if config.backend == "jax":
        title += ", JAX"
    reporting.plot_curves(
        results, title, {n: FAMILY_COLORS[OPTIMIZERS[n][1]] for n in config.optimizers}
    )
    return results


# --- Command line: one absl flag per DemoConfig field (config_flags.py). ---
config_flags.define_flags(DemoConfig)


def config_from_flags() -> DemoConfig:
    """The :class:`DemoConfig` of the parsed flags."""
    return config_flags.config_from_flags(DemoConfig)


def main(argv: Sequence[str]) -> None:
    """absl entry point: logical CPUs first, then :func:`run`, then the report on stdout."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    config = config_from_flags()
    if config.backend != keras.backend.backend():  # e.g. --backend only in a --flagfile
        raise app.UsageError(
            f"--backend={config.backend}, but Keras was imported with the "
            f"{keras.backend.backend()} backend: give --backend on the command line itself "
            "(it is read before Keras is imported)."
        )
    if config.backend == "tensorflow":
        import tensorflow as tf

        try:
            configure_logical_cpus(config.replicas)  # Before anything initialises TensorFlow.
        except ValueError as e:
            raise app.UsageError(str(e)) from e
        tf.get_logger().setLevel("WARNING")  # TF's per-strategy INFO lines drown the table.
        strategy = None  # run() makes the MirroredStrategy over those logical CPUs.
    else:
        try:
            strategy = jax_distribution(config.replicas)
        except ValueError as e:
            raise app.UsageError(str(e)) from e
    results = run(config, strategy)
    n_train, n_test = len(results.data.y_train), len(results.data.y_test)
    reporting.print_report(
        results,
        f"sklearn digits: {n_train} train / {n_test} test images, global batch "
        f"{config.global_batch} over {config.replicas} replicas ({per_replica(config)} each), "
        f"{config.epochs} epochs x {steps_per_epoch(config, n_train)} steps, seed "
        f"{config.seed}, gamma {config.gamma}, backend {config.backend}",
    )


if __name__ == "__main__":
    app.run(main)
