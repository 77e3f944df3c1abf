"""LARS for Keras 3, numerically the same as Model Garden's ``official.modeling.optimization.lars.LARS``.

You, Gitman and Ginsburg, "Large Batch Training of Convolutional Networks", arXiv 1708.03888:
L2 weight decay added to the gradient, then a per-variable trust ratio
``eeta * ||w|| / ||g + wd * w||`` scaling the learning rate ("classic" momentum, the MLPerf
reference), or ``eeta * ||w|| / ||momentum update||`` with ``classic_momentum=False``.
"""

import keras
from keras import ops

from vrgd_tf import validation
from vrgd_tf.optimizers.layerwise import LayerwiseOptimizer, compute_dtype, trust_ratio

__all__ = ["Lars"]


@keras.saving.register_keras_serializable(package="vrgd_tf")
class Lars(LayerwiseOptimizer):
    """Layer-wise Adaptive Rate Scaling (LARS), Model Garden's formulation, for Keras 3.

    Variables of any float dtype: for bfloat16 and float16 variables the update is computed
    in float32 and cast to the variable's dtype, and the ``momentum`` slot is float32;
    float32 variables step exactly as Model Garden's LARS (slot of the variable's dtype).

    Args:
      learning_rate: float >= 0, tensor or schedule. Default 0.01.
      momentum: float >= 0. Default 0.9.
      weight_decay_rate: float >= 0, L2 weight decay added to the gradient. Default 0.
      eeta: float >= 0, the LARS coefficient. Default 0.001.
      nesterov: bool, Nesterov momentum. Default False.
      classic_momentum: bool; True applies the learning rate and trust ratio inside the
        momentum update (MLPerf reference), False after it. Default True.
      exclude_from_weight_decay: None or list of regex strings matched against
        ``variable.path``; matching variables get no weight decay. The method of the same
        name (Keras') adds to it, see :meth:`exclude_from_weight_decay`.
      exclude_from_layer_adaptation: None or list of regex strings; matching variables get
        trust ratio 1. None (or empty) means the weight-decay exclusions.
      name: string, or None (the default) for Keras' default name: "lars", then
        "lars_1", ... in a process.
      **kwargs: the Keras 3 optimizer base arguments. ``weight_decay`` must be None or 0:
        LARS's weight decay is ``weight_decay_rate``.

    Raises:
      ValueError, TypeError: an argument outside the range given above, or a non-zero
        ``weight_decay`` (ValueError naming ``weight_decay_rate``).
    """

    _weight_decay_rate_doc = "LARS's L2 weight decay, added to the gradient"

    def __init__(
        self,
        learning_rate=0.01,
        momentum=0.9,
        weight_decay_rate=0.0,
        eeta=0.001,
        nesterov=False,
        classic_momentum=True,
        exclude_from_weight_decay=None,
        exclude_from_layer_adaptation=None,
        name=None,
        **kwargs,
    ):
        validation.check_optimizer_arguments(dict(locals()))
        super().__init__(
            learning_rate,
            name=name,
            exclude_from_weight_decay=exclude_from_weight_decay,
            exclude_from_layer_adaptation=exclude_from_layer_adaptation,
            **kwargs,
        )
        self.momentum = momentum
        self.weight_decay_rate = weight_decay_rate
        self.eeta = eeta
        self.nesterov = bool(nesterov)
        self.classic_momentum = bool(classic_momentum)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        (self._momentums,) = self._add_slots(var_list, ["momentum"])

    def update_step(self, gradient, variable, learning_rate):
        dtype = compute_dtype(variable.dtype)
        lr = ops.cast(learning_rate, dtype)
        grad = ops.cast(self._dense(gradient), dtype)
        momentum = ops.cast(self.momentum, dtype)
        eeta = ops.cast(self.eeta, dtype)
        v = self._momentums[self._get_variable_index(variable)]
        v_value = ops.cast(v, dtype)
        w = ops.cast(variable, dtype)
        adapt = self._adapts(variable)

        if self.weight_decay_rate and self._decays(variable):
            grad = grad + ops.cast(self.weight_decay_rate, dtype) * w
        w_norm = ops.norm(ops.reshape(w, [-1]))
        if self.classic_momentum:
            ratio = trust_ratio(w_norm, ops.norm(ops.reshape(grad, [-1])), eeta) if adapt else 1.0
            scaled_lr = lr * ratio
            next_v = momentum * v_value + scaled_lr * grad
            update = momentum * next_v + scaled_lr * grad if self.nesterov else next_v
            next_param = w - update
        else:
            next_v = momentum * v_value + grad
            update = momentum * next_v + grad if self.nesterov else next_v
            ratio = trust_ratio(w_norm, ops.norm(ops.reshape(update, [-1])), eeta) if adapt else 1.0
            next_param = w - (ratio * lr) * update
        self.assign(variable, ops.cast(next_param, variable.dtype))
        self.assign(v, ops.cast(next_v, v.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "momentum": self.momentum,
                "weight_decay_rate": self.weight_decay_rate,
                "eeta": self.eeta,
                "nesterov": self.nesterov,
                "classic_momentum": self.classic_momentum,
            }
        )
        return config
