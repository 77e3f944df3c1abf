"""VRGD optimizers for tf_keras (Keras 2), the Keras that TF Model Garden uses.

``VRGDSGD``, ``VRGDAdam``, ``VRGDLars``, ``VRGDLamb`` and ``make_vrgd_optimizer``, built on
``tf_keras.optimizers.legacy`` and Model Garden's LARS / LAMB. What they are built on, how the
GSNR step plugs in, loss scaling, low-precision variables and checkpoint slots: see
:mod:`vrgd_tf.tf_keras.optimizers`, where the classes live. Needs the ``model-garden`` extra
(``tf-models-official``, ``tf-keras``). The diagnostics callbacks for tf_keras ``fit``:
``GSNRLogger`` and ``GSNRTensorBoard``, the tf_keras classes of those of
:mod:`vrgd_tf.summaries`.
"""

from vrgd_tf import summaries as _summaries
from vrgd_tf.tf_keras.optimizers import VRGDSGD, VRGDAdam, VRGDLamb, VRGDLars, make_vrgd_optimizer

GSNRLogger, GSNRTensorBoard = _summaries._tf_keras_callbacks()

__all__ = [
    "VRGDSGD",
    "VRGDAdam",
    "VRGDLars",
    "VRGDLamb",
    "make_vrgd_optimizer",
    "GSNRLogger",
    "GSNRTensorBoard",
]
