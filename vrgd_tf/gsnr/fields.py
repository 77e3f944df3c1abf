"""The recorded diagnostics' fields and what a row of them says, without TensorFlow (both
families read them; spec ``docs/spec.md`` section 4)."""

__all__ = ["STATISTICS_FIELDS", "has_gsnr"]

#: Names of the diagnostics kept per variable, in storage order: the fields of
#: :class:`vrgd_tf.gsnr.GSNRStatistics`. The one definition every reader of the diagnostics
#: uses.
STATISTICS_FIELDS = ("mean_gsnr", "frac_at_gamma", "frac_at_one", "mean_factor", "norm_ratio")


def has_gsnr(row) -> bool:
    """Whether a recorded row of diagnostics (``row``: a mapping with the fields of
    ``STATISTICS_FIELDS``, one row of ``vrgd_statistics()``) has a GSNR: the last recording
    step measured the variable and at least one of its elements had a defined GSNR.

    A variable no step measured keeps its row of zeros (a gradient always None, or Keras'
    ``overwrite_with_gradient`` variables; one of no element records ``mean_factor`` 0); a
    variable without a defined element (every sample sent the same gradient, e.g.
    ``train_on_batch`` under a strategy) records ``mean_gsnr`` 0 with every factor 1. So the
    saved five numbers tell it (``docs/spec.md`` section 4).
    """
    unmeasured = row["mean_factor"] <= 0.0
    undefined = row["mean_gsnr"] == 0.0 and row["frac_at_one"] == 1.0
    return not (unmeasured or undefined)
