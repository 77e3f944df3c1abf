"""What cannot exist on Keras 3's JAX backend, and what to use instead (``import vrgd_tf``
with ``KERAS_BACKEND=jax`` raises these for the TensorFlow-only names)."""

__all__ = ["REFUSED", "refuse", "check_environment"]

_DISTRIBUTE = (
    "On JAX, samples come from the device mesh: use keras.distribution.DataParallel and "
    "vrgd_tf.use_micro_batches(model, num_groups=m)."
)

#: TensorFlow-only names of ``vrgd_tf`` -> why, and what to use on JAX.
REFUSED = {
    "GSNRAggregator": "it aggregates in a tf.distribute replica context. " + _DISTRIBUTE,
    "GSNRTensorBoard": "it writes tf.summary scalars. Use vrgd_tf.GSNRLogger with "
    "keras.callbacks.TensorBoard, which logs what GSNRLogger adds to the logs.",
    "unwrap_optimizer": "loss-scale wrappers are refused on JAX; use model.optimizer.",
    "devices": "vrgd_tf.devices makes tf.distribute strategies. " + _DISTRIBUTE,
    "strategies": "tf.distribute strategies do not exist on JAX. " + _DISTRIBUTE,
    "tf_keras": "the tf_keras family runs on TensorFlow only. Use the Keras 3 classes "
    "(vrgd_tf.VRGDLamb, ...) on JAX, or the TensorFlow backend for tf_keras.",
    "model_garden": "TF Model Garden runs on TensorFlow only. On JAX, train Keras 3 models "
    "(e.g. KerasHub) with vrgd_tf.VRGDLamb and use_micro_batches.",
}


def refuse(name: str):
    """Raises ``AttributeError`` for ``vrgd_tf.<name>`` on JAX: why, and what to use."""
    if name in REFUSED:
        raise AttributeError(
            f"vrgd_tf.{name} is not available on Keras' JAX backend: {REFUSED[name]}"
        )
    raise AttributeError(f"module 'vrgd_tf' has no attribute {name!r}")


def check_environment(environ) -> None:
    """Raises ``ImportError`` for ``TF_USE_LEGACY_KERAS`` together with the JAX backend."""
    if environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        raise ImportError(
            "vrgd_tf: TF_USE_LEGACY_KERAS asks for the tf_keras family, which runs on "
            "TensorFlow only, but KERAS_BACKEND is 'jax'. Unset TF_USE_LEGACY_KERAS for the "
            "JAX classes, or unset KERAS_BACKEND=jax for tf_keras."
        )
