"""VRGD on Keras 3's JAX backend (``KERAS_BACKEND=jax``): what ``import vrgd_tf`` exports there.

The optimizers (:mod:`vrgd_tf.keras_jax.optimizers`) take the TensorFlow family's names,
arguments, defaults and config keys; :func:`use_micro_batches` installs the grouped train
step (:mod:`vrgd_tf.keras_jax.step`) that makes the ``k = devices x groups`` samples; the GSNR
math is :mod:`vrgd_tf.keras_jax.gsnr`. Spec: ``docs/spec.md``.
"""

from vrgd_tf.keras_jax.optimizers import (
    VRGDSGD,
    VRGDAdam,
    VRGDLamb,
    VRGDLars,
    make_vrgd_optimizer,
)
from vrgd_tf.keras_jax.step import use_micro_batches
from vrgd_tf.optimizers.lamb import Lamb
from vrgd_tf.optimizers.lars import Lars

__all__ = [
    "Lamb",
    "Lars",
    "VRGDSGD",
    "VRGDAdam",
    "VRGDLars",
    "VRGDLamb",
    "make_vrgd_optimizer",
    "use_micro_batches",
]
