"""GSNR diagnostics as TensorBoard summaries, and Keras callbacks that write them.

Each VRGD optimizer keeps, per trainable variable, the diagnostics of
:class:`vrgd_tf.gsnr.GSNRStatistics` (mean GSNR, fractions of elements whose factor was
clipped at ``gamma`` and at 1, mean factor applied), computed inside the train step on the
steps that bring ``iterations`` to a multiple of its ``statistics_interval`` (other steps skip
that work). These helpers only read them, outside the step, every ``update_freq`` steps; set
``update_freq`` to a multiple of the interval.

The headline values (:data:`HEADLINE_PREFIXES`) summarise all variables in a way a reader can
trust: ``vrgd/median/mean_gsnr`` is the median over variables of the mean GSNR (a mean over
variables is dominated by the few with a huge GSNR), and ``vrgd/mean/mean_factor`` is the
mean over variables of the factor applied, i.e. how much smaller than the base optimizer's
the average step is.
"""

import logging

import numpy as np
import tensorflow as tf

from vrgd_tf.gsnr import STATISTICS_FIELDS

__all__ = ["write_gsnr_summaries", "GSNRTensorBoard", "summary_logs", "HEADLINE_PREFIXES"]

_FIELDS = STATISTICS_FIELDS
#: Tag prefixes of the summaries over all variables (median of the GSNR, means of the rest).
HEADLINE_PREFIXES = ("vrgd/median/", "vrgd/mean/")
_LOG = logging.getLogger("vrgd_tf")


def _inner(optimizer):
    """The VRGD optimizer inside a loss-scale wrapper, or the optimizer itself."""
    for attr in ("inner_optimizer", "_optimizer"):
        inner = getattr(optimizer, attr, None)
        if inner is not None and hasattr(inner, "vrgd_statistics"):
            return inner
    return optimizer


def summary_logs(optimizer, headline_only=False):
    """The optimizer's GSNR diagnostics as a flat ``{tag: float}`` dict.

    Tags: ``"vrgd/<variable>/<field>"`` for every variable and field of
    :data:`vrgd_tf.gsnr.STATISTICS_FIELDS`, plus the headline over variables:
    ``"vrgd/median/mean_gsnr"`` (median of the per-variable mean GSNR) and
    ``"vrgd/mean/<field>"`` for ``frac_at_gamma``, ``frac_at_one`` and ``mean_factor``
    (means over variables). Suitable for a Keras ``logs`` dict or Model Garden's train-step
    logs.

    Args:
      optimizer: a vrgd_tf optimizer of either family, possibly inside a loss-scale wrapper.
      headline_only: bool; return only the headline tags (:data:`HEADLINE_PREFIXES`).

    Returns:
      The dict; empty for a non-VRGD optimizer or one not built yet.
    """
    optimizer = _inner(optimizer)
    if not hasattr(optimizer, "vrgd_statistics"):
        return {}
    stats = optimizer.vrgd_statistics()
    logs = {}
    if not headline_only:
        for name, values in stats.items():
            for field in _FIELDS:
                logs[f"vrgd/{name}/{field}"] = values[field]
    if stats:
        logs["vrgd/median/mean_gsnr"] = float(np.median([v["mean_gsnr"]
                                                         for v in stats.values()]))
        for field in _FIELDS[1:]:
            logs[f"vrgd/mean/{field}"] = float(np.mean([v[field] for v in stats.values()]))
    return logs


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
    """
    logs = summary_logs(optimizer)
    if not logs:
        return logs
    ctx = writer.as_default(step=step) if writer is not None else _NullContext()
    with ctx:
        for key, value in logs.items():
            tf.summary.scalar(key, value, step=step)
        for field in _FIELDS:
            values = [v for k, v in logs.items()
                      if k.endswith("/" + field) and not k.startswith(HEADLINE_PREFIXES)]
            tf.summary.histogram(f"vrgd/hist/{field}", np.asarray(values, np.float32),
                                 step=step)
    return logs


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _make_callback(callback_base):
    class GSNRTensorBoard(callback_base):
        """Writes the VRGD GSNR diagnostics to TensorBoard every ``update_freq`` batches.

        Args:
          log_dir: str, directory for the event files (e.g. beside Keras' TensorBoard
            callback: ``os.path.join(log_dir, "vrgd")``).
          update_freq: int >= 1, in training batches.
          log_to_history: bool; also add the mean-over-variables values to the epoch logs
            (so they show in the progress bar and ``History``).

        Raises:
          ValueError: ``update_freq`` < 1.
        """

        def __init__(self, log_dir, update_freq=100, log_to_history=False):
            super().__init__()
            if int(update_freq) < 1:
                raise ValueError(f"`update_freq` must be an int >= 1; got {update_freq}.")
            self.log_dir = log_dir
            self.update_freq = int(update_freq)
            self.log_to_history = log_to_history
            self._writer = None
            self._step = 0

        def on_train_begin(self, logs=None):
            self._writer = tf.summary.create_file_writer(self.log_dir)
            interval = getattr(_inner(self.model.optimizer), "statistics_interval", 1)
            if interval == 0 or self.update_freq % interval:
                _LOG.warning(
                    "GSNRTensorBoard(update_freq=%d) with statistics_interval=%d: the "
                    "written diagnostics are from an earlier step (or zeros). Use an "
                    "update_freq that is a multiple of the optimizer's statistics_interval.",
                    self.update_freq, interval)

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

    return GSNRTensorBoard


def _keras3_callback():
    import keras
    return _make_callback(keras.callbacks.Callback)


GSNRTensorBoard = _keras3_callback()
GSNRTensorBoard.__module__ = __name__


def tf_keras_callback():
    """The same callback for tf_keras (Keras 2) models. Returns the class."""
    import tf_keras
    return _make_callback(tf_keras.callbacks.Callback)
