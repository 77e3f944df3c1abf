"""VRGD optimizers for Keras 3 (``keras`` / ``tf.keras`` with the TensorFlow backend).

``VRGDSGD``, ``VRGDAdam``, ``VRGDLars`` and ``VRGDLamb`` are built by
:func:`make_vrgd_optimizer` from ``keras.optimizers.SGD``, ``keras.optimizers.Adam`` and this
package's :class:`Lars` and :class:`Lamb` (Model Garden's formulations), so the VR versions
share one code path: the GSNR step of :mod:`vrgd_tf.gsnr` replaces the cross-replica SUM.
"""

import keras

from vrgd_tf.optimizers.lamb import Lamb
from vrgd_tf.optimizers.lars import Lars
from vrgd_tf.optimizers.vr import make_vrgd_optimizer

__all__ = ["Lamb", "Lars", "VRGDSGD", "VRGDAdam", "VRGDLars", "VRGDLamb",
           "make_vrgd_optimizer"]

VRGDSGD = make_vrgd_optimizer(keras.optimizers.SGD, name="VRGDSGD", doc=(
    "VR-SGD and VR-Momentum (Algorithm 1, eq. 10): `keras.optimizers.SGD` "
    "(`learning_rate`, `momentum`, `nesterov`, ...) fed the variance-reduced gradient.\n"))
VRGDAdam = make_vrgd_optimizer(keras.optimizers.Adam, name="VRGDAdam", default_beta_3=0.9,
                               doc=(
    "VR-Adam (Section 4.2): `keras.optimizers.Adam` (`learning_rate`, `beta_1`, `beta_2`, "
    "`epsilon`, `amsgrad`, ...) with the factor applied before the moment estimates.\n"))
VRGDLars = make_vrgd_optimizer(Lars, name="VRGDLars", doc=(
    "VR-LARS: `vrgd_tf.optimizers.Lars` (Model Garden's LARS: `learning_rate`, `momentum`, "
    "`weight_decay_rate`, `eeta`, `nesterov`, `classic_momentum`, "
    "`exclude_from_weight_decay`, `exclude_from_layer_adaptation`) fed the variance-reduced "
    "gradient, which therefore enters the momentum, the weight-decay term and the trust "
    "ratio.\n"))
VRGDLamb = make_vrgd_optimizer(Lamb, name="VRGDLamb", default_beta_3=0.9, doc=(
    "VR-LAMB: `vrgd_tf.optimizers.Lamb` (You et al. 2020 Algorithm 2 as in Model Garden: "
    "`learning_rate`, `beta_1`, `beta_2`, `epsilon`, `weight_decay_rate`, "
    "`exclude_from_weight_decay`, `exclude_from_layer_adaptation`) with the factor applied "
    "before the moment estimates.\n"))
