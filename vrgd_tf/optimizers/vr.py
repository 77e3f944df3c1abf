"""Makes the VRGD version of any Keras 3 optimizer class (TensorFlow backend).

The hook: Keras 3's TensorFlow optimizer (``keras.src.backend.tensorflow.optimizer.
TFOptimizer``) sums the per-replica gradients in ``_all_reduce_sum_gradients``, called in the
replica context from ``_backend_update_step``. Keras 3 has no public hook for cross-replica
aggregation; this private method is the narrowest one (tested with Keras 3.15, pinned in
``setup.cfg``). The VRGD class overrides it with :func:`vrgd_tf.gsnr.variance_reduce` and
leaves the base update rule untouched. If a Keras upgrade stops calling it, the first
``apply`` with more than one replica raises ``RuntimeError`` instead of silently training
without variance reduction.
"""

import keras
import tensorflow as tf
from keras.src import backend
from keras.src.backend.tensorflow import optimizer as _tf_optimizer

from vrgd_tf import common
from vrgd_tf import gsnr
from vrgd_tf import validation

__all__ = ["make_vrgd_optimizer"]

_HOOK = "_all_reduce_sum_gradients"
if not hasattr(_tf_optimizer.TFOptimizer, _HOOK):  # pragma: no cover - Keras upgrade guard
    raise ImportError(
        f"vrgd_tf needs Keras 3's TFOptimizer.{_HOOK}, which this Keras "
        f"({keras.__version__}) does not have. Install the Keras range pinned by vrgd_tf.")


class _KerasVRGDMixin(common.VRGDCommon):
    """Overrides of a Keras 3 optimizer that insert the GSNR step. Use make_vrgd_optimizer."""

    def build(self, variables):
        if self.built:
            return
        validation.check_variable_dtypes(self, variables, base_rule=self._vrgd_base_class)
        super().build(variables)
        self._vrgd_state = gsnr.VRGDState(self._vrgd_make_variable, self._var_key,
                                          self.beta_3)
        self._vrgd_state.add_variables(variables)

    def _vrgd_make_variable(self, kind, index, shape, reference):
        colocate = reference.value if isinstance(reference, backend.Variable) else reference
        with self._distribution_strategy.extended.colocate_vars_with(colocate):
            with backend.name_scope(self.name, caller=self):
                variable = backend.Variable(
                    initializer=keras.initializers.Zeros(), shape=tuple(shape),
                    dtype="float32", trainable=False, synchronization="on_read",
                    aggregation="only_first_replica",
                    name=f"vrgd_{kind}_{index}")
        self._track_variable(variable)
        return variable

    def apply(self, grads, trainable_variables=None):
        self._vrgd_hook_called = False
        result = super().apply(grads, trainable_variables)
        ctx = tf.distribute.get_replica_context()
        if (ctx is not None and ctx.num_replicas_in_sync > 1 and len(grads) > 0
                and not self._vrgd_hook_called):
            raise RuntimeError(
                f"{type(self).__name__}: Keras {keras.__version__} applied gradients "
                f"without calling {_HOOK}, so VRGD's GSNR step was bypassed. This Keras "
                "version is not supported; install the range pinned by vrgd_tf.")
        return result

    def _all_reduce_sum_gradients(self, grads_and_vars):
        self._vrgd_hook_called = True
        ctx = tf.distribute.get_replica_context()
        if ctx is None:
            return super()._all_reduce_sum_gradients(grads_and_vars)
        return self._vrgd_reduce(grads_and_vars, ctx)



def make_vrgd_optimizer(base_class, *, name=None, default_beta_3=0.0, register=True,
                        doc=None):
    """Returns the VRGD version of a Keras 3 optimizer class.

    The new class takes the base class's arguments plus ``gamma`` and ``beta_3``, and
    differs from it only in how gradients are aggregated across replicas (see
    :mod:`vrgd_tf.gsnr`). Its update rule, slots and schedules are the base class's.

    Args:
      base_class: a subclass of ``keras.optimizers.Optimizer`` (TensorFlow backend), e.g.
        ``keras.optimizers.AdamW`` or ``keras.optimizers.Lion``.
      name: the new class's name; default ``"VRGD" + base_class.__name__``.
      default_beta_3: float in [0, 1), the default of ``beta_3`` (the paper: 0.9 for
        Adam-type optimizers, 0 for SGD-type ones).
      register: register the class as Keras serializable under package ``"vrgd_tf"``, so
        ``keras.models.load_model`` finds it without ``custom_objects``.
      doc: the class docstring.

    Returns:
      The new class. Its constructor raises ``ValueError``/``TypeError`` for
      ``gamma`` outside (0, 1], ``beta_3`` outside [0, 1), and out-of-range base arguments;
      its ``build`` raises ``ValueError`` for a bfloat16/float16 variable that the base
      rule cannot train (see :func:`vrgd_tf.validation.check_variable_dtypes`).

    Raises:
      TypeError: ``base_class`` is not a Keras 3 optimizer class.
    """
    if not (isinstance(base_class, type)
            and issubclass(base_class, keras.optimizers.Optimizer)):
        raise TypeError(f"`base_class` must be a keras.optimizers.Optimizer subclass; got "
                        f"{base_class!r}.")
    return common.make_vrgd_class(
        _KerasVRGDMixin, base_class, name=name, default_beta_3=default_beta_3, doc=doc,
        module="vrgd_tf.optimizers" if register else base_class.__module__,
        register=(lambda n: keras.saving.register_keras_serializable(package="vrgd_tf",
                                                                    name=n))
        if register else None)
