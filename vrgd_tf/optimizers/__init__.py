"""VRGD optimizers for Keras 3 (``keras`` / ``tf.keras`` with the TensorFlow backend).

``VRGDSGD``, ``VRGDAdam``, ``VRGDLars`` and ``VRGDLamb`` (in :mod:`vrgd_tf.optimizers.vr`)
extend ``keras.optimizers.SGD``, ``keras.optimizers.Adam`` and this package's
:class:`~vrgd_tf.Lars` and :class:`~vrgd_tf.Lamb` (Model Garden's formulations) with one
mixin, as :func:`~vrgd_tf.make_vrgd_optimizer` does for any other class: the GSNR step of
:mod:`vrgd_tf.gsnr` replaces the cross-replica SUM.

Low-precision (bfloat16, float16) variables: ``Lamb``, ``Lars`` and their VRGD classes
compute the update in float32 (float32 slots) and cast it back; ``VRGDSGD`` and ``VRGDAdam``
compute in the variable's dtype and raise ``ValueError`` at ``build`` when a hyper-parameter
fails there (a decay rate that rounds to 1.0, e.g. Adam's default ``beta_2 = 0.999`` in
bfloat16, a momentum of 0.999 too; an ``epsilon`` that rounds to 0; any Adam second moment in
float16, where ``(1 - beta_2) * g**2`` underflows). The check is
``vrgd_tf.validation.check_variable_dtypes``; mixed-precision policies keep float32
variables and are unaffected.

Weight decay: ``VRGDSGD``/``VRGDAdam`` take Keras' ``weight_decay`` (and its
``exclude_from_weight_decay()`` method); ``Lamb``/``Lars`` and their VRGD classes take
``weight_decay_rate`` only and refuse ``weight_decay`` with a ``ValueError``.
"""

import vrgd_tf as _vrgd_tf
from vrgd_tf.optimizers.lamb import Lamb
from vrgd_tf.optimizers.lars import Lars

# The TensorFlow family subclasses Keras' TensorFlow optimizer; under Keras' JAX backend
# (vrgd_tf.keras_jax, which imports Lamb and Lars from here; the backend as `import vrgd_tf`
# reads it) it is not imported, and neither is TensorFlow.
if _vrgd_tf._keras_backend() != "jax":
    from vrgd_tf.optimizers.vr import (
        VRGDSGD,
        VRGDAdam,
        VRGDLamb,
        VRGDLars,
        make_vrgd_optimizer,
    )

__all__ = ["Lamb", "Lars", "VRGDSGD", "VRGDAdam", "VRGDLars", "VRGDLamb", "make_vrgd_optimizer"]
