"""The TensorFlow / Keras releases the Keras 3 family supports, and the import-time check.

The Keras 3 family relies on private Keras internals, all patched or mirrored in
``vrgd_tf.keras_internals`` (which runs ``check_keras3`` when imported); the evidence
of when each exists, read from each release's installed sources (also in ``setup.cfg``):

* ``TFOptimizer._all_reduce_sum_gradients`` (``keras/src/backend/tensorflow/optimizer.py``),
  the aggregation hook: absent in Keras 3.0-3.1; in 3.2-3.4 it runs inside the merge call
  (cross-replica context), where it does not all-reduce, so VRGD would be bypassed without
  an error; since 3.5 ``_backend_update_step`` calls it in the replica context.
* ``Optimizer._overwrite_variable_with_gradient`` and ``add_variable(..., layout=)``
  (``keras/src/optimizers/base_optimizer.py``), used by ``Lamb``/``Lars``: added in Keras
  3.10.
* ``_clip_gradients``, ``_var_key``, ``_get_variable_index``, ``_track_variable``,
  ``LossScaleOptimizer.check_finite`` / ``_stateful_handle_non_finite_grads`` and the
  trainer's ``_compute_loss`` / ``_loss_tracker`` / ``_call_has_training_arg`` /
  ``unscale_loss_for_distribution``: present with the same behaviour from 3.8 (or earlier)
  to 3.15.

TensorFlow 2.16 is the first release whose ``tf.keras`` is Keras 3; TensorFlow 2.20 needs
Keras >= 3.10, TensorFlow 2.21 Keras >= 3.12 (their wheels' requirements). The tf_keras
family and Model Garden (the ``model-garden`` extra) need TensorFlow 2.20 exactly, as
``tf-models-official==2.20.0`` and ``tf-keras~=2.20.0`` do.
"""

import re
from typing import Optional, Tuple

__all__ = ["MIN_TENSORFLOW", "MIN_KERAS", "TESTED_TENSORFLOW", "TESTED_KERAS", "SUPPORTED"]

#: The oldest TensorFlow / Keras (major, minor) the Keras 3 family works with.
MIN_TENSORFLOW = (2, 16)
MIN_KERAS = (3, 10)
#: The newest (major, minor) tested (``.ci/compat``); ``setup.cfg`` caps installs above them.
TESTED_TENSORFLOW = (2, 21)
TESTED_KERAS = (3, 15)

SUPPORTED = (
    f"TensorFlow {MIN_TENSORFLOW[0]}.{MIN_TENSORFLOW[1]}-{TESTED_TENSORFLOW[0]}."
    f"{TESTED_TENSORFLOW[1]} with Keras {MIN_KERAS[0]}.{MIN_KERAS[1]}-{TESTED_KERAS[0]}."
    f"{TESTED_KERAS[1]}"
)


def _major_minor(version: str) -> Optional[Tuple[int, int]]:
    """``"3.10.0"`` -> ``(3, 10)``; None if ``version`` does not start with two numbers."""
    match = re.match(r"(\d+)\.(\d+)", str(version))
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def check_keras3(tensorflow_version: str, keras_version: str) -> None:
    """Raises unless the releases can run the Keras 3 family.

    Args:
      tensorflow_version: ``tf.__version__``, e.g. ``"2.20.0"``.
      keras_version: ``keras.__version__``, e.g. ``"3.15.1"``.

    Raises:
      ImportError: TensorFlow older than 2.16 or Keras older than 3.10 (or not Keras 3);
        the message names the supported range (:data:`SUPPORTED`). Newer releases than the
        tested ones pass: if they stop calling the aggregation hook, the first
        multi-replica step raises ``RuntimeError`` (:mod:`vrgd_tf.optimizers.vr`).
    """
    tf_mm = _major_minor(tensorflow_version)
    keras_mm = _major_minor(keras_version)
    problems = []
    if tf_mm is None or tf_mm < MIN_TENSORFLOW:
        problems.append(f"TensorFlow {tensorflow_version}")
    if keras_mm is None or keras_mm < MIN_KERAS or keras_mm[0] != MIN_KERAS[0]:
        problems.append(f"Keras {keras_version}")
    if problems:
        raise ImportError(
            f"vrgd_tf's Keras 3 optimizers support {SUPPORTED} (Python 3.9-3.13); this "
            f"environment has {' and '.join(problems)}. Install a supported pair, e.g. "
            f'`pip install "tensorflow>={MIN_TENSORFLOW[0]}.{MIN_TENSORFLOW[1]}" '
            f'"keras>={MIN_KERAS[0]}.{MIN_KERAS[1]}"`, or `pip install .` in vrgd_tf\'s checkout for the '
            "tested range."
        )
