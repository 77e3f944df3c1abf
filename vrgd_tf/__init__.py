"""vrgd_tf: variance reduced gradient descent (VRGD) driven by the gradient signal-to-noise
ratio (GSNR), for large-batch data-parallel training with TensorFlow.

Keras 3 optimizers: :class:`VRGDSGD`, :class:`VRGDAdam`, :class:`VRGDLars`,
:class:`VRGDLamb`, and :func:`make_vrgd_optimizer` for any other Keras optimizer class.
The GSNR statistics live in :mod:`vrgd_tf.gsnr`. The tf_keras family for TF Model Garden
lives in :mod:`vrgd_tf.tf_keras`; with ``TF_USE_LEGACY_KERAS=1`` (``tf.keras`` is tf_keras)
the top-level names are that family's classes, and :class:`~vrgd_tf.summaries.GSNRLogger`
(headline GSNR diagnostics in ``fit``'s logs) and :class:`~vrgd_tf.summaries.GSNRTensorBoard`
are the tf_keras callbacks. :func:`~vrgd_tf.summaries.vrgd_statistics` reads the GSNR
diagnostics through loss-scale wrappers.

Under Keras 3's JAX backend (``KERAS_BACKEND=jax``, read before Keras is imported, or
Keras' own configuration) the same names are the JAX classes of ``vrgd_tf.keras_jax``
and ``use_micro_batches`` installs the grouped step that makes the GSNR samples; what
needs TensorFlow (``GSNRAggregator``, the tf_keras family, Model Garden, tf.distribute) is
refused there with a message saying what to use instead.
"""

import os as _os

__version__ = "0.1.0"


def _keras_backend() -> str:
    """The Keras backend, from ``KERAS_BACKEND`` before anything imports Keras or TF."""
    name = _os.environ.get("KERAS_BACKEND")
    if name or _os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        return name or "tensorflow"
    import keras

    return keras.backend.backend()


if _keras_backend() == "jax":
    from vrgd_tf.keras_jax import refusals as _refusals

    _refusals.check_environment(_os.environ)
    from vrgd_tf.keras_jax import (
        VRGDSGD,
        Lamb,
        Lars,
        VRGDAdam,
        VRGDLamb,
        VRGDLars,
        make_vrgd_optimizer,
        use_micro_batches,
    )
    from vrgd_tf.keras_jax.diagnostics import GSNRLogger, vrgd_statistics

    __all__ = [
        "Lamb",
        "Lars",
        "VRGDSGD",
        "VRGDAdam",
        "VRGDLars",
        "VRGDLamb",
        "make_vrgd_optimizer",
        "use_micro_batches",
        "GSNRLogger",
        "vrgd_statistics",
    ]

    def __getattr__(name):
        return _refusals.refuse(name)

else:
    if _os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        # tf.keras is tf_keras here: export the classes that work with tf.keras.Model.compile.
        from vrgd_tf.optimizers import Lamb, Lars
        from vrgd_tf.tf_keras import VRGDSGD, VRGDAdam, VRGDLamb, VRGDLars, make_vrgd_optimizer
    else:
        from vrgd_tf.micro_batches import use_micro_batches
        from vrgd_tf.optimizers import (
            VRGDSGD,
            Lamb,
            Lars,
            VRGDAdam,
            VRGDLamb,
            VRGDLars,
            make_vrgd_optimizer,
        )

    __all__ = ["Lamb", "Lars", "VRGDSGD", "VRGDAdam", "VRGDLars", "VRGDLamb", "make_vrgd_optimizer"]

    from vrgd_tf import devices  # noqa: E402,F401  (vrgd_tf.devices.cpu_strategy, as docs say)
    from vrgd_tf.aggregator import GSNRAggregator  # noqa: E402
    from vrgd_tf.summaries import unwrap_optimizer, vrgd_statistics  # noqa: E402

    if _os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        # the tf_keras callback, for tf.keras (= tf_keras) models
        from vrgd_tf.tf_keras import GSNRLogger, GSNRTensorBoard  # noqa: E402
    else:
        from vrgd_tf.summaries import GSNRLogger, GSNRTensorBoard  # noqa: E402

    __all__ += [
        "GSNRAggregator",
        "GSNRLogger",
        "GSNRTensorBoard",
        "unwrap_optimizer",
        "vrgd_statistics",
    ]
    if "use_micro_batches" in globals():
        __all__ += ["use_micro_batches"]
