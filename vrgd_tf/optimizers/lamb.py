"""LAMB for Keras 3, numerically the same as Model Garden's ``official.modeling.optimization.lamb.LAMB``.

You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", ICLR
2020, Algorithm 2: Adam moments with bias correction, decoupled weight decay added to the
update *before* the trust ratio ``||w|| / ||update||``. Keras 3's own ``keras.optimizers.Lamb``
applies weight decay outside the trust ratio and is not this algorithm.
"""

import keras
from keras import ops

from vrgd_tf import validation
from vrgd_tf.naming import matches_any, variable_name

__all__ = ["Lamb", "set_exclusions", "trust_ratio"]


def set_exclusions(optimizer, exclude_from_weight_decay, exclude_from_layer_adaptation):
    """Stores the exclusion lists as Model Garden does: layer adaptation falls back to the
    weight-decay list when None (the explicit value is kept for ``get_config``)."""
    as_list = lambda x: None if x is None else list(x)  # noqa: E731
    optimizer.exclude_from_weight_decay = as_list(exclude_from_weight_decay)
    optimizer._explicit_layer_adaptation = as_list(exclude_from_layer_adaptation)
    optimizer.exclude_from_layer_adaptation = (optimizer._explicit_layer_adaptation
                                               or optimizer.exclude_from_weight_decay)


def trust_ratio(weight_norm, update_norm, coefficient=None):
    """``coefficient * weight_norm / update_norm`` where both norms are > 0, else 1.

    The trust ratio of You et al. 2020 (LAMB, coefficient None) and 2017 (LARS, coefficient
    ``eeta``), written as in Model Garden's LAMB and LARS. Scalars of the variable's dtype.
    """
    numerator = weight_norm if coefficient is None else coefficient * weight_norm
    return ops.where(
        ops.greater(weight_norm, 0),
        ops.where(ops.greater(update_norm, 0), numerator / update_norm, 1.0),
        1.0)


@keras.saving.register_keras_serializable(package="vrgd_tf")
class Lamb(keras.optimizers.Optimizer):
    """Layer-wise Adaptive Moments optimizer (LAMB), Model Garden's formulation, for Keras 3.

    Args:
      learning_rate: float >= 0, tensor, or ``keras.optimizers.schedules`` schedule.
        Default 0.001.
      beta_1: float in [0, 1), decay of the first moment. Default 0.9.
      beta_2: float in [0, 1), decay of the second moment. Default 0.999.
      epsilon: float >= 0 added to ``sqrt(v_hat)``. Default 1e-6 (Model Garden's).
      weight_decay_rate: float >= 0, decoupled weight decay added to the update before the
        trust ratio. Default 0.
      exclude_from_weight_decay: None or list of regex strings; variables whose name
        (Keras 3 ``variable.path``) matches one get no weight decay.
      exclude_from_layer_adaptation: None or list of regex strings; matching variables get
        trust ratio 1. None means: the same list as ``exclude_from_weight_decay``.
      name: string. Default ``"LAMB"``.
      **kwargs: the Keras 3 optimizer base arguments (``clipnorm``, ``global_clipnorm``,
        ``use_ema``, ``loss_scale_factor``, ...).

    Raises:
      ValueError, TypeError: an argument outside the range given above.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 weight_decay_rate=0.0, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LAMB", **kwargs):
        validation.check_optimizer_arguments(dict(locals()))
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay_rate = weight_decay_rate
        set_exclusions(self, exclude_from_weight_decay, exclude_from_layer_adaptation)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["m", "v"])

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        grad = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        beta_1 = ops.cast(self.beta_1, dtype)
        beta_2 = ops.cast(self.beta_2, dtype)
        index = self._get_variable_index(variable)
        m = self._momentums[index]
        v = self._velocities[index]

        m_t = m * beta_1 + grad * (1 - beta_1)
        self.assign(m, m_t)
        v_t = v * beta_2 + (grad * grad) * (1 - beta_2)
        self.assign(v, v_t)
        m_hat = m_t / (1.0 - ops.power(beta_1, step))
        v_hat = v_t / (1.0 - ops.power(beta_2, step))
        update = m_hat / (ops.sqrt(v_hat) + ops.cast(self.epsilon, dtype))

        name = variable_name(variable)
        if not matches_any(self.exclude_from_weight_decay, name):
            update = update + ops.cast(self.weight_decay_rate, dtype) * variable
        if not matches_any(self.exclude_from_layer_adaptation, name):
            ratio = trust_ratio(ops.norm(ops.reshape(variable, [-1])),
                                ops.norm(ops.reshape(update, [-1])))
            self.assign(variable, variable - ratio * lr * update)
        else:
            self.assign(variable, variable - lr * update)

    def get_config(self):
        config = super().get_config()
        config.update({
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay_rate": self.weight_decay_rate,
            "exclude_from_weight_decay": self.exclude_from_weight_decay,
            "exclude_from_layer_adaptation": self._explicit_layer_adaptation,
        })
        return config
