"""What the studies and the cost benchmarks share (not a test, not part of the library).

The logical CPU devices and their strategies, the optimizer pairs (base class, VR class, their
arguments), the 1-D CNN and MNIST-1D (generated locally) it trains on, the initial weights of
a seed, the ``--quick`` flag defaults and the results files (written, read, and loaded if
present by the reports). The studies import it through
:mod:`studylib` and the sweeps (``studies/sweeps/``); ``benchmarks/harness.py`` and
``benchmarks/models.py`` import it too, the one module of ``studies/`` that ``benchmarks/``
imports: the cost benchmarks time the models and optimizer pairs the studies train, and one
definition keeps the two the same (``benchmarks/jax_models.py`` too, for the 1-D CNN on
JAX). It imports only ``vrgd_tf`` and third-party packages, and TensorFlow only in
:func:`setup_devices` and :func:`strategy_for`.

Call :func:`setup_devices` before any TensorFlow op: the logical device configuration must
precede TensorFlow's runtime start.
"""

import dataclasses
import json
import os
import platform
import re
import socket
import sys
import tempfile
from typing import ClassVar

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

STUDIES = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(STUDIES)
#: Where MNIST-1D is cached once generated (git-ignored).
DATA_CACHE = os.path.join(STUDIES, "sweeps", "results", "data")


# --------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------


def setup_devices(num_logical):
    """Splits the physical CPU into ``num_logical`` logical devices (before TF initialises);
    returns how many there are."""
    from vrgd_tf import devices  # TensorFlow: imported only here (jax_models imports this module)

    return len(devices.split_cpu(num_logical, argument="--replicas"))


_STRATEGIES = {}


def strategy_for(k):
    """MirroredStrategy over the first ``k`` logical CPUs (one object per ``k``)."""
    if k not in _STRATEGIES:
        from vrgd_tf import devices

        _STRATEGIES[k] = devices.cpu_strategy(k, argument="--replicas")
    return _STRATEGIES[k]


# --------------------------------------------------------------------------------------------
# Optimizer pairs, model, data
# --------------------------------------------------------------------------------------------

_EXCLUDE = ["bias"]


def optimizer_classes(pair):
    """(base class, VR class, extra kwargs) of an optimizer pair: ``"momentum"``,
    ``"adam"``, ``"lamb"`` or ``"lars"`` (the evidence study uses momentum and lamb)."""
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
    raise ValueError(f"unknown pair {pair!r}; the pairs are momentum, adam, lamb and lars.")


def make_optimizer(pair, side, learning_rate, gamma=0.1, factor_transforms=(), **vr_settings):
    """The base (``side='base'``) or VR optimizer of ``pair``; VR with the library's
    defaults, ``factor_transforms`` handed to its public extension point and
    ``vr_settings`` (other VRGD settings, e.g. ``split_half=True``) to the VR class only.
    The VR optimizer records its diagnostics every step (``statistics_interval=1`` unless
    given), so a run's record holds its last step's, whatever the library's default."""
    vr_settings.setdefault("statistics_interval", 1)
    base_cls, vr_cls, kwargs = optimizer_classes(pair)
    if side == "base":
        return base_cls(learning_rate=learning_rate, **kwargs)
    return vr_cls(
        learning_rate=learning_rate,
        gamma=gamma,
        factor_transforms=factor_transforms,
        **kwargs,
        **vr_settings,
    )


def init_weights(build_model, seed):
    """Initial weights of ``build_model()`` for ``seed`` (built outside any strategy)."""
    import keras

    keras.utils.set_random_seed(seed)
    model = build_model()
    weights = model.get_weights()
    del model
    return weights


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


def _generate_mnist1d(path, num_train, num_test, seed):
    """Writes MNIST-1D (``mnist1d.data.make_dataset``) to the .npz ``path``; seconds taken."""
    import time

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
    return round(time.time() - t0, 1)


def load_mnist1d(num_train, num_test, seed=0):
    """MNIST-1D generated locally with ``mnist1d.data.make_dataset`` (never downloaded).

    ``get_dataset_args()`` defaults (template length 12, padding, noise, shear, 40 output
    points) with ``num_samples = num_train + num_test``, ``train_split`` to match and the
    given seed. Cached as an .npz under :data:`DATA_CACHE`.

    Returns:
      dict with float32 ``x`` [N, 40, 1], int32 ``y``, ``x_test``, ``y_test`` and ``info``.
    """
    from importlib.metadata import version

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
        info["generated_s"] = _generate_mnist1d(path, num_train, num_test, seed)
    d = np.load(path)
    info["mnist1d_version"] = version("mnist1d")
    out = {
        "x": d["x"].astype(np.float32)[..., None],
        "y": d["y"].astype(np.int32),
        "x_test": d["x_test"].astype(np.float32)[..., None],
        "y_test": d["y_test"].astype(np.int32),
        "info": info,
    }
    if out["x"].shape[0] != num_train or out["x_test"].shape[0] != num_test:
        raise ValueError(f"{path} holds other sizes than {num_train} / {num_test}")
    return out


# --------------------------------------------------------------------------------------------
# Flags and results files
# --------------------------------------------------------------------------------------------


def apply_quick(quick_overrides):
    """With ``--quick``, sets every flag of ``quick_overrides`` ({name: value}) that was not
    given on the command line (absl flags: the sweep, ``overhead.py``, ``groups.py``)."""
    from absl import flags

    if not flags.FLAGS.quick:
        return
    for name, value in quick_overrides.items():
        if not flags.FLAGS[name].present:
            flags.FLAGS[name].value = value


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


def load_json(path):
    """The JSON at ``path``, or None if ``path`` is empty or there is no such file (a results
    file not made yet: the reports render what exists). Its recorded commands read as the
    docs write commands (:func:`shown_commands`)."""
    if path and os.path.exists(path):
        return shown_commands(read_json(path))
    return None


#: ``python`` as a command's interpreter (not ``python3``, not part of a path or a word).
_PYTHON = re.compile(r"(?<![\w/.=-])python(?= )")


def shown_commands(record):
    """``record`` (a results file's JSON) with every recorded command (a string under a
    ``"command"`` key, or in an ``"earlier_commands"`` list, at any depth) written with
    ``python3``, as the docs write commands: records made before :func:`command_line` said
    ``python3`` say ``python`` (the same interpreter)."""
    if isinstance(record, list):
        return [shown_commands(x) for x in record]
    if not isinstance(record, dict):
        return record
    out = {}
    for key, value in record.items():
        if key == "command" and isinstance(value, str):
            value = _PYTHON.sub("python3", value)
        elif key == "earlier_commands" and isinstance(value, list):
            value = [_PYTHON.sub("python3", c) if isinstance(c, str) else c for c in value]
        else:
            value = shown_commands(value)
        out[key] = value
    return out


def load_result(results_dir, stem, quick):
    """:func:`load_json` of ``results_dir/<stem>.json`` (``<stem>_quick.json`` if ``quick``)."""
    return load_json(os.path.join(results_dir, f"{stem}_quick.json" if quick else f"{stem}.json"))


# --------------------------------------------------------------------------------------------
# The record of a run: its command and environment
# --------------------------------------------------------------------------------------------


def dist_version(name):
    """The installed version of the distribution ``name``, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def cpu_model():
    """The CPU's ``model name`` from ``/proc/cpuinfo``, or None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def tf_onednn():
    """Whether TensorFlow's oneDNN kernels are on in this process (its default on CPUs with
    AVX512_VNNI, AVX512_BF16 or AMX, the log's "oneDNN custom operations are on"; the
    environment variable ``TF_ENABLE_ONEDNN_OPTS`` overrides it), or None where TensorFlow
    does not say. They change float rounding, kernel times and the CPU allocator (theirs
    keeps statistics: ``benchmarks/peak_memory.py``)."""
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):  # a TensorFlow without this private module
        return None


def environment(*dists):
    """Versions and machine facts of this process, recorded in every results file: Python,
    TensorFlow, Keras, NumPy, SciPy and the distributions ``dists``, the platform, host, CPU
    model and count, whether TensorFlow's oneDNN kernels are on (:func:`tf_onednn`) and the
    load average when it was called (``loadavg``: the cores may be shared)."""
    import keras
    import tensorflow as tf

    record = {
        "python": sys.version.split()[0],
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
    }
    record.update({name: dist_version(name) for name in ("numpy", "scipy") + dists})
    record.update(
        platform=platform.platform(),
        host=socket.gethostname(),
        cpu_model=cpu_model(),
        cpu_count=os.cpu_count(),
        tf_onednn=tf_onednn(),
        loadavg=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    )
    return record


def command_line():
    """The command that is running, the script relative to the repository root, as the
    docs write commands (``python3 <script> <args>``)."""
    argv = list(sys.argv)
    return " ".join(["python3", os.path.relpath(os.path.abspath(argv[0]), REPO)] + argv[1:])


def load_average(env):
    """The load average an environment record holds (``loadavg``; ``loadavg_at_start`` in
    the cost benchmarks' files written before the two records were one), or None."""
    env = env or {}
    return env.get("loadavg", env.get("loadavg_at_start"))


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------

#: The optimizer pairs' names in the reports' tables.
PAIR_LABEL = {"momentum": "Momentum", "adam": "Adam", "lamb": "LAMB", "lars": "LARS"}


@dataclasses.dataclass
class ReportContext:
    """What one rendering of a report shares between its sections (the cost report's
    ``benchmarks/report/common.Context`` and the sweeps' ``report.sweeps.common.Context``
    subclass it: each sets :attr:`RESULTS` and adds the lists its sections fill).

    Attributes:
      inputs: ``{stem: loaded JSON or None}`` of the results files; see :meth:`result`.
      quick: rendering the ``--quick`` results.
      out_md: path of the Markdown being written.
      img_dir: directory the PNGs go to; ``img_rel`` is it relative to ``out_md``.
    """

    #: The results directory :meth:`result` reads (a class attribute of each subclass).
    RESULTS: ClassVar[str] = ""

    inputs: dict
    quick: bool
    out_md: str
    img_dir: str
    img_rel: str

    def result(self, stem):
        """The JSON of ``stem`` given on the command line, else ``RESULTS/<stem>.json``
        (``<stem>_quick.json`` with ``--quick``), or None if there is no such file."""
        if stem not in self.inputs:
            self.inputs[stem] = load_result(self.RESULTS, stem, self.quick)
        return self.inputs[stem]
