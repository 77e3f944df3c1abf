"""The GSNR diagnostics on JAX: :func:`vrgd_statistics` and :class:`GSNRLogger`
(spec section 4; the headline summaries as on TensorFlow: medians over the variables that
have a GSNR)."""

import math

import keras
import numpy as np

__all__ = ["vrgd_statistics", "headline", "GSNRLogger"]


def vrgd_statistics(optimizer):
    """``{variable path: {field: float}}`` of the VRGD optimizer ``optimizer`` (JAX).

    Raises:
      TypeError: ``optimizer`` is not a vrgd_tf VRGD optimizer.
    """
    if not hasattr(optimizer, "vrgd_statistics"):
        raise TypeError(
            "vrgd_statistics: no VRGD optimizer: "
            f"{type(optimizer).__module__}.{type(optimizer).__qualname__}."
        )
    return optimizer.vrgd_statistics()


def headline(stats):
    """``{"vrgd/median/<field>": float}`` over the variables with a GSNR; NaN (no value)
    when none has one."""
    rows = [row for row in stats.values() if row["has_gsnr"]]
    fields = ("mean_gsnr", "frac_at_gamma", "frac_at_one", "mean_factor", "norm_ratio")
    return {
        f"vrgd/median/{f}": float(np.median([r[f] for r in rows])) if rows else math.nan
        for f in fields
    }


class GSNRLogger(keras.callbacks.Callback):
    """Adds the headline GSNR diagnostics (:func:`headline`) to ``fit``'s epoch logs."""

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update(headline(vrgd_statistics(self.model.optimizer)))
