"""VRGD optimizers for Keras 3 (``keras`` / ``tf.keras`` with the TensorFlow backend).

``VRGDSGD``, ``VRGDAdam``, ``VRGDLars`` and ``VRGDLamb`` are built by
:func:`make_vrgd_optimizer` from ``keras.optimizers.SGD``, ``keras.optimizers.Adam`` and this
package's :class:`Lars` and :class:`Lamb` (Model Garden's formulations), so the VR versions
share one code path: the GSNR step of :mod:`vrgd_tf.gsnr` replaces the cross-replica SUM.

Low-precision (bfloat16, float16) variables: ``Lamb``, ``Lars`` and their VRGD classes
compute the update in float32 (float32 slots) and cast it back; ``VRGDSGD`` computes in the
variable's dtype, which works for its rule; ``VRGDAdam`` raises ``ValueError`` at ``build``
for such a variable (Keras' Adam computes in the variable's dtype, where ``beta_2 = 0.999``
is 1.0 in bfloat16 and ``(1 - beta_2) * g**2`` underflows in float16). The check is
:func:`vrgd_tf.validation.check_variable_dtypes`; mixed-precision policies keep float32
variables and are unaffected.

Weight decay: ``VRGDSGD``/``VRGDAdam`` take Keras' ``weight_decay`` (and its
``exclude_from_weight_decay()`` method); ``Lamb``/``Lars`` and their VRGD classes take
``weight_decay_rate`` only and refuse ``weight_decay`` with a ``ValueError``.
"""

import keras

from vrgd_tf.optimizers.lamb import Lamb
from vrgd_tf.optimizers.lars import Lars
from vrgd_tf.optimizers.vr import make_vrgd_optimizer

__all__ = ["Lamb", "Lars", "VRGDSGD", "VRGDAdam", "VRGDLars", "VRGDLamb",
           "make_vrgd_optimizer"]

VRGDSGD = make_vrgd_optimizer(keras.optimizers.SGD, name="VRGDSGD", doc=(
    "VR-SGD and VR-Momentum (Algorithm 1, eq. 10): `keras.optimizers.SGD` "
    "(`learning_rate`, `momentum`, `nesterov`, ...) fed the variance-reduced gradient.\n"
    "Variables of any float dtype (a `momentum` in [0, 1) that rounds to 1.0 in a "
    "bfloat16/float16 variable's dtype raises ValueError at build).\n"))
VRGDAdam = make_vrgd_optimizer(keras.optimizers.Adam, name="VRGDAdam", default_beta_3=0.9,
                               doc=(
    "VR-Adam (Section 4.2): `keras.optimizers.Adam` (`learning_rate`, `beta_1`, `beta_2`, "
    "`epsilon`, `amsgrad`, ...) with the factor applied before the moment estimates.\n"
    "float32/float64 variables: for bfloat16 or float16 ones, `build` raises ValueError "
    "(Keras' Adam computes in the variable's dtype).\n"))
VRGDLars = make_vrgd_optimizer(Lars, name="VRGDLars", doc=(
    "VR-LARS: `vrgd_tf.optimizers.Lars` (Model Garden's LARS: `learning_rate`, `momentum`, "
    "`weight_decay_rate`, `eeta`, `nesterov`, `classic_momentum`, "
    "`exclude_from_weight_decay`, `exclude_from_layer_adaptation`) fed the variance-reduced "
    "gradient, which therefore enters the momentum, the weight-decay term and the trust "
    "ratio. Any float variable dtype (computed in float32). `weight_decay` is refused: "
    "use `weight_decay_rate`.\n"))
VRGDLamb = make_vrgd_optimizer(Lamb, name="VRGDLamb", default_beta_3=0.9, doc=(
    "VR-LAMB: `vrgd_tf.optimizers.Lamb` (You et al. 2020 Algorithm 2 as in Model Garden: "
    "`learning_rate`, `beta_1`, `beta_2`, `epsilon`, `weight_decay_rate`, "
    "`exclude_from_weight_decay`, `exclude_from_layer_adaptation`) with the factor applied "
    "before the moment estimates. Any float variable dtype (computed in float32). "
    "`weight_decay` is refused: use `weight_decay_rate`.\n"))
