"""LAMB for Keras 3, numerically the same as Model Garden's ``official.modeling.optimization.lamb.LAMB``.

You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", ICLR
2020, Algorithm 2: Adam moments with bias correction, decoupled weight decay added to the
update *before* the trust ratio ``||w|| / ||update||``. Keras 3's own ``keras.optimizers.Lamb``
applies weight decay outside the trust ratio and is not this algorithm.

What LAMB and LARS share (trust ratio, float32 compute dtype, exclusions) is in
:mod:`vrgd_tf.optimizers.layerwise`.
"""

import keras
from keras import ops

from vrgd_tf import validation
from vrgd_tf.optimizers.layerwise import LayerwiseOptimizer, compute_dtype, trust_ratio

__all__ = ["Lamb"]


@keras.saving.register_keras_serializable(package="vrgd_tf")
class Lamb(LayerwiseOptimizer):
    """Layer-wise Adaptive Moments optimizer (LAMB), Model Garden's formulation, for Keras 3.

    Variables of any float dtype: for bfloat16 and float16 variables the update is computed
    in float32 and cast to the variable's dtype, and the ``m``/``v`` slots are float32;
    float32 variables step exactly as Model Garden's LAMB (slots of the variable's dtype).

    Args:
      learning_rate: float >= 0, tensor, or ``keras.optimizers.schedules`` schedule.
        Default 0.001.
      beta_1: float in [0, 1), decay of the first moment. Default 0.9.
      beta_2: float in [0, 1), decay of the second moment. Default 0.999.
      epsilon: float > 0 added to ``sqrt(v_hat)`` (0 would give 0/0 for an element whose
        gradient has been 0; ValueError). Default 1e-6 (Model Garden's).
      weight_decay_rate: float >= 0, decoupled weight decay added to the update before the
        trust ratio. Default 0.
      exclude_from_weight_decay: None or list of regex strings; variables whose name
        (Keras 3 ``variable.path``) matches one get no weight decay. The method of the same
        name (Keras') adds to it, see :meth:`exclude_from_weight_decay`.
      exclude_from_layer_adaptation: None or list of regex strings; matching variables get
        trust ratio 1. None (or empty) means: the weight-decay exclusions.
      name: string, or None (the default) for Keras' default name: "lamb", then
        "lamb_1", ... in a process.
      **kwargs: the Keras 3 optimizer base arguments (``clipnorm``, ``global_clipnorm``,
        ``use_ema``, ``loss_scale_factor``, ...). ``weight_decay`` must be None or 0: LAMB's
        weight decay is ``weight_decay_rate``.

    Raises:
      ValueError, TypeError: an argument outside the range given above, or a non-zero
        ``weight_decay`` (ValueError naming ``weight_decay_rate``).
    """

    _weight_decay_rate_doc = (
        "LAMB's decoupled weight decay, added to the update before the trust ratio"
    )

    def __init__(
        self,
        learning_rate=0.001,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay_rate=0.0,
        exclude_from_weight_decay=None,
        exclude_from_layer_adaptation=None,
        name=None,
        **kwargs,
    ):
        validation.check_optimizer_arguments(dict(locals()), positive=("epsilon",))
        super().__init__(
            learning_rate,
            name=name,
            exclude_from_weight_decay=exclude_from_weight_decay,
            exclude_from_layer_adaptation=exclude_from_layer_adaptation,
            **kwargs,
        )
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay_rate = weight_decay_rate

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self._add_slots(var_list, ["m", "v"])

    def update_step(self, gradient, variable, learning_rate):
        dtype = compute_dtype(variable.dtype)
        lr = ops.cast(learning_rate, dtype)
        grad = ops.cast(self._dense(gradient), dtype)
        step = ops.cast(self.iterations + 1, dtype)
        beta_1 = ops.cast(self.beta_1, dtype)
        beta_2 = ops.cast(self.beta_2, dtype)
        index = self._get_variable_index(variable)
        m = self._momentums[index]
        v = self._velocities[index]
        w = ops.cast(variable, dtype)

        m_t = ops.cast(m, dtype) * beta_1 + grad * (1 - beta_1)
        self.assign(m, ops.cast(m_t, m.dtype))
        v_t = ops.cast(v, dtype) * beta_2 + (grad * grad) * (1 - beta_2)
        self.assign(v, ops.cast(v_t, v.dtype))
        m_hat = m_t / (1.0 - ops.power(beta_1, step))
        v_hat = v_t / (1.0 - ops.power(beta_2, step))
        update = m_hat / (ops.sqrt(v_hat) + ops.cast(self.epsilon, dtype))

        if self._decays(variable):
            update = update + ops.cast(self.weight_decay_rate, dtype) * w
        if self._adapts(variable):
            ratio = trust_ratio(ops.norm(ops.reshape(w, [-1])), ops.norm(ops.reshape(update, [-1])))
            new_w = w - ratio * lr * update
        else:
            new_w = w - lr * update
        self.assign(variable, ops.cast(new_w, variable.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "weight_decay_rate": self.weight_decay_rate,
            }
        )
        return config
