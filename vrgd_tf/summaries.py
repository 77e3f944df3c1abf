"""GSNR diagnostics as TensorBoard summaries, and Keras callbacks that write them.

Each VRGD optimizer keeps, per trainable variable, the diagnostics of
:class:`vrgd_tf.gsnr.GSNRStatistics` (mean GSNR, fractions of elements whose factor was
clipped at ``gamma`` and at 1, mean factor applied, update norm ratio
``||f * S1|| / ||S1||``), computed inside the train step on the
steps that bring ``iterations`` to a multiple of its ``statistics_interval`` (other steps skip
that work). These helpers only read them, outside the step, every ``update_freq`` steps; set
``update_freq`` to a multiple of the interval.

The headline values (:data:`HEADLINE_PREFIXES`) summarise all variables in a way a reader can
trust: ``vrgd/median/mean_gsnr`` is the median over variables of the mean GSNR (a mean over
variables is dominated by the few with a huge GSNR), and ``vrgd/mean/mean_factor`` is the
mean over variables of the factor applied, i.e. how much smaller than the base optimizer's
the average step is.
"""

import contextlib
import importlib.util
import logging

import numpy as np
import tensorflow as tf

from vrgd_tf.gsnr import STATISTICS_FIELDS

__all__ = [
    "write_gsnr_summaries",
    "GSNRTensorBoard",
    "summary_logs",
    "HEADLINE_PREFIXES",
    "unwrap_optimizer",
    "vrgd_statistics",
    "all_weights_statistics",
    "tf_keras_callback",
]
# Also ``TfKerasGSNRTensorBoard`` (made on first access, as it imports tf_keras; not in
# ``__all__`` for that reason).

_FIELDS = STATISTICS_FIELDS
#: Tag prefixes of the summaries over all variables (median of the GSNR, means of the rest).
HEADLINE_PREFIXES = ("vrgd/median/", "vrgd/mean/")
_LOG = logging.getLogger("vrgd_tf")


def _tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def require_tensorboard(what: str) -> None:
    """Raises unless the ``tensorboard`` package (what ``tf.summary`` writes with) is installed.

    TensorFlow up to 2.20 installs it; TensorFlow 2.21 no longer depends on it, and its
    ``tf.summary.scalar`` then fails with ``TBNotInstalledError`` when first called.

    Args:
      what: the caller, named in the message.

    Raises:
      ImportError: ``tensorboard`` is not importable; the message says to install it.
    """
    if not _tensorboard_installed():
        raise ImportError(
            f"{what} writes tf.summary events, which need the `tensorboard` package; "
            f"TensorFlow {tf.__version__} does not install it (TensorFlow >= 2.21 no longer "
            "depends on it). Run `pip install tensorboard`, or read the diagnostics without "
            "it: `vrgd_tf.vrgd_statistics(optimizer)`, `vrgd_tf.summaries.summary_logs`."
        )


_WRAPPER_ATTRS = ("inner_optimizer", "_optimizer")
_MAX_WRAPPER_DEPTH = 16


def unwrap_optimizer(optimizer):
    """The VRGD optimizer inside loss-scale wrappers, or ``optimizer`` itself if none.

    Follows ``inner_optimizer`` (Keras 3 ``keras.optimizers.LossScaleOptimizer``, tf_keras
    ``tf_keras.mixed_precision.LossScaleOptimizer``) and ``_optimizer`` through nested
    wrappers (at most 16 deep), and returns the first optimizer found that has
    ``vrgd_statistics``. ``model.compile`` under a ``"mixed_float16"`` policy adds such a
    wrapper around the optimizer it is given.

    Args:
      optimizer: any optimizer (either family), wrapped or not.

    Returns:
      The VRGD optimizer, or ``optimizer`` unchanged when there is none inside it.
    """
    current, seen = optimizer, set()
    for _ in range(_MAX_WRAPPER_DEPTH):
        if hasattr(current, "vrgd_statistics"):
            return current
        seen.add(id(current))
        inner = None
        for attr in _WRAPPER_ATTRS:
            candidate = getattr(current, attr, None)
            if candidate is not None and id(candidate) not in seen:
                inner = candidate
                break
        if inner is None:
            break
        current = inner
    return optimizer


def vrgd_statistics(optimizer):
    """``vrgd_statistics()`` of the VRGD optimizer inside ``optimizer``'s wrappers.

    Use this instead of ``model.optimizer.vrgd_statistics()`` when ``model.optimizer`` may
    be a loss-scale wrapper (mixed precision).

    Args:
      optimizer: a vrgd_tf optimizer (either family), possibly inside (nested)
        loss-scale wrappers.

    Returns:
      ``{variable name: {field: float}}`` with the fields of
      :data:`vrgd_tf.gsnr.STATISTICS_FIELDS`; see the optimizers' ``vrgd_statistics``.

    Raises:
      TypeError: there is no VRGD optimizer inside ``optimizer``.
    """
    inner = unwrap_optimizer(optimizer)
    if not hasattr(inner, "vrgd_statistics"):
        raise TypeError(
            "vrgd_statistics: no VRGD optimizer inside "
            f"{type(optimizer).__module__}.{type(optimizer).__qualname__}."
        )
    return inner.vrgd_statistics()


def summary_logs(optimizer, headline_only=False):
    """The optimizer's GSNR diagnostics as a flat ``{tag: float}`` dict.

    Tags: ``"vrgd/<variable>/<field>"`` for every variable and field of
    :data:`vrgd_tf.gsnr.STATISTICS_FIELDS`, plus the headline over variables:
    ``"vrgd/median/mean_gsnr"`` (median of the per-variable mean GSNR) and
    ``"vrgd/mean/<field>"`` for ``frac_at_gamma``, ``frac_at_one``, ``mean_factor`` and
    ``norm_ratio`` (means over variables). Suitable for a Keras ``logs`` dict or Model Garden's train-step
    logs.

    Args:
      optimizer: a vrgd_tf optimizer of either family, possibly inside a loss-scale wrapper.
      headline_only: bool; return only the headline tags (:data:`HEADLINE_PREFIXES`).

    Returns:
      The dict; empty for a non-VRGD optimizer or one not built yet.
    """
    optimizer = unwrap_optimizer(optimizer)
    if not hasattr(optimizer, "vrgd_statistics"):
        return {}
    stats = optimizer.vrgd_statistics()
    logs = {}
    if not headline_only:
        for name, values in stats.items():
            for field in _FIELDS:
                logs[f"vrgd/{name}/{field}"] = values[field]
    if stats:
        logs["vrgd/median/mean_gsnr"] = float(np.median([v["mean_gsnr"] for v in stats.values()]))
        for field in _FIELDS[1:]:
            logs[f"vrgd/mean/{field}"] = float(np.mean([v[field] for v in stats.values()]))
    return logs


def all_weights_statistics(optimizer, variables):
    """The last recorded step's diagnostics over all weights, each weight counting once.

    ``frac_at_gamma`` and ``frac_at_one`` are the fractions of all elements of ``variables``
    (means over variables weighted by their sizes, unlike the unweighted headline of
    :func:`summary_logs`); ``mean_gsnr_over_variables`` is the plain mean over variables of
    their mean GSNR.

    Args:
      optimizer: a vrgd_tf optimizer of either family, possibly inside loss-scale wrappers;
        anything else gives None.
      variables: the variables to count, e.g. ``model.trainable_variables``; those without
        VRGD state (not trained by ``optimizer``) are left out.

    Returns:
      A dict of floats, ``"frac_at_gamma"`` and ``"frac_at_one"`` in [0, 1] and
      ``"mean_gsnr_over_variables"`` >= 0, or None for a non-VRGD optimizer, one not built
      yet, or no element counted.
    """
    optimizer = unwrap_optimizer(optimizer)
    if not hasattr(optimizer, "vrgd_aggregator"):
        return None
    state = optimizer.vrgd_aggregator.state
    stats = list(optimizer.vrgd_statistics().values())  # in the order of the state
    sizes = np.zeros(len(stats))
    for variable in variables:
        if state is not None and variable in state:
            sizes[state.index(variable)] = np.prod(variable.shape)
    if not stats or sizes.sum() == 0:
        return None
    out = {
        field: float(np.dot(sizes, [s[field] for s in stats]) / sizes.sum())
        for field in ("frac_at_gamma", "frac_at_one")
    }
    out["mean_gsnr_over_variables"] = float(np.mean([s["mean_gsnr"] for s in stats]))
    return out


def write_gsnr_summaries(optimizer, step, writer=None):
    """Writes the optimizer's GSNR diagnostics as TensorBoard scalars and histograms.

    Scalars: every tag of :func:`summary_logs`; histograms ``vrgd/hist/<field>`` over
    variables.

    Args:
      optimizer: a vrgd_tf optimizer (either family), possibly inside a LossScaleOptimizer.
      step: int, the summary step.
      writer: a ``tf.summary`` writer; default the current default writer.

    Returns:
      The logs dict written (see :func:`summary_logs`); empty for a non-VRGD optimizer.

    Raises:
      ImportError: the ``tensorboard`` package is not installed (TensorFlow >= 2.21 does
        not install it), see ``require_tensorboard``.
    """
    require_tensorboard("write_gsnr_summaries")
    logs = summary_logs(optimizer)
    if not logs:
        return logs
    ctx = writer.as_default(step=step) if writer is not None else contextlib.nullcontext()
    with ctx:
        for key, value in logs.items():
            tf.summary.scalar(key, value, step=step)
        for field in _FIELDS:
            values = [
                v
                for k, v in logs.items()
                if k.endswith("/" + field) and not k.startswith(HEADLINE_PREFIXES)
            ]
            tf.summary.histogram(f"vrgd/hist/{field}", np.asarray(values, np.float32), step=step)
    return logs


class _GSNRTensorBoardMixin:
    """Writes the VRGD GSNR diagnostics to TensorBoard every ``update_freq`` batches.

    Args:
      log_dir: str, directory for the event files (e.g. beside Keras' TensorBoard
        callback: ``os.path.join(log_dir, "vrgd")``).
      update_freq: int >= 1, in training batches.
      log_to_history: bool; also add the mean-over-variables values to the epoch logs
        (so they show in the progress bar and ``History``).

    Raises:
      ValueError: ``update_freq`` < 1.
      ImportError: the ``tensorboard`` package is not installed (TensorFlow >= 2.21 does
        not install it; ``pip install tensorboard``).
    """

    def __init__(self, log_dir, update_freq=100, log_to_history=False):
        super().__init__()
        if int(update_freq) < 1:
            raise ValueError(f"`update_freq` must be an int >= 1; got {update_freq}.")
        require_tensorboard(type(self).__name__)
        self.log_dir = log_dir
        self.update_freq = int(update_freq)
        self.log_to_history = log_to_history
        self._writer = None
        self._step = 0

    def on_train_begin(self, logs=None):
        self._writer = tf.summary.create_file_writer(self.log_dir)
        interval = getattr(unwrap_optimizer(self.model.optimizer), "statistics_interval", 1)
        if interval == 0 or self.update_freq % interval:
            _LOG.warning(
                "GSNRTensorBoard(update_freq=%d) with statistics_interval=%d: the "
                "written diagnostics are from an earlier step (or zeros). Use an "
                "update_freq that is a multiple of the optimizer's statistics_interval.",
                self.update_freq,
                interval,
            )

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self._step % self.update_freq == 0:
            write_gsnr_summaries(self.model.optimizer, self._step, self._writer)

    def on_epoch_end(self, epoch, logs=None):
        if self.log_to_history and logs is not None:
            logs.update(summary_logs(self.model.optimizer, headline_only=True))

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.flush()


def _callback_class(name, callback_base, family):
    return type(
        name,
        (_GSNRTensorBoardMixin, callback_base),
        {
            "__module__": __name__,
            "__qualname__": name,
            "__doc__": _GSNRTensorBoardMixin.__doc__.replace(
                "to TensorBoard", f"to TensorBoard ({family} callback)", 1
            ),
        },
    )


def _keras3_callback():
    import keras

    return _callback_class("GSNRTensorBoard", keras.callbacks.Callback, "Keras 3")


GSNRTensorBoard = _keras3_callback()

_TF_KERAS_CLASS = None


def _tf_keras_class():
    global _TF_KERAS_CLASS
    if _TF_KERAS_CLASS is None:
        import tf_keras

        _TF_KERAS_CLASS = _callback_class(
            "TfKerasGSNRTensorBoard", tf_keras.callbacks.Callback, "tf_keras"
        )
    return _TF_KERAS_CLASS


def __getattr__(name):
    if name == "TfKerasGSNRTensorBoard":
        return _tf_keras_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tf_keras_callback(log_dir, update_freq=100, log_to_history=False):
    """A :class:`GSNRTensorBoard` for tf_keras (Keras 2) models.

    Same arguments as :class:`GSNRTensorBoard`; returns a ``TfKerasGSNRTensorBoard``
    (a ``tf_keras.callbacks.Callback``). With ``TF_USE_LEGACY_KERAS=1``,
    ``vrgd_tf.GSNRTensorBoard`` is that class.
    """
    return _tf_keras_class()(log_dir, update_freq=update_freq, log_to_history=log_to_history)
