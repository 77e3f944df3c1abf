"""Makes the VRGD version of any Keras 3 optimizer class (TensorFlow backend).

The hook: Keras 3's TensorFlow optimizer sums the per-replica gradients in the private
``TFOptimizer._all_reduce_sum_gradients``, called in the replica context from
``_backend_update_step``; Keras 3 has no public hook for cross-replica aggregation, and this
is the narrowest one. The VRGD class overrides it with the GSNR step
(:class:`vrgd_tf.GSNRAggregator`) and leaves the base update rule untouched. What the family
takes from Keras internals, and the import-time guard that refuses an unsupported Keras, is
in ``vrgd_tf.keras_internals``; if a Keras upgrade stops calling the hook, the first
``apply`` with more than one replica raises ``RuntimeError`` instead of silently training
without variance reduction.
"""

import keras
import tensorflow as tf
from keras.src import backend

from vrgd_tf import common, keras_internals, settings, validation, versions
from vrgd_tf.gsnr import state as state_lib
from vrgd_tf.optimizers.lamb import Lamb
from vrgd_tf.optimizers.lars import Lars

__all__ = ["VRGDSGD", "VRGDAdam", "VRGDLars", "VRGDLamb", "make_vrgd_optimizer"]

_HOOK = keras_internals.AGGREGATION_HOOK


class _KerasVRGDMixin(common.VRGDCommon):
    """Overrides of a Keras 3 optimizer that insert the GSNR step. Use make_vrgd_optimizer.

    Gradient clipping (``clipnorm``, ``clipvalue``, ``global_clipnorm``) acts on the
    aggregated, variance-reduced gradient, as in the tf_keras family: plain Keras 3 clips each
    replica's gradient before the all-reduce, which would make clipped gradients equal across
    replicas and hide the noise that the GSNR measures.
    """

    _vrgd_name_is_class_name = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._vrgd_check_strategy_combinations(tf.distribute.get_strategy())

    def _vrgd_check_strategy_combinations(self, strategy) -> None:
        """Raises for base-optimizer options that Keras 3 cannot run under ``strategy``.

        Keras 3 runs the gradient accumulation and the EMA overwrite inside a conditional
        in the replica context, where a tf.distribute strategy needs a merge call (and
        VRGD's all-reduce would sit inside the conditional): both fail deep in the first
        step. They are refused here instead, by name.
        """
        if strategy.num_replicas_in_sync > 1:
            name = type(self).__name__
            if self.gradient_accumulation_steps:
                raise ValueError(
                    f"{name}: `gradient_accumulation_steps={self.gradient_accumulation_steps}` "
                    "cannot be used under a tf.distribute strategy with "
                    f"{strategy.num_replicas_in_sync} replicas: Keras 3 all-reduces the "
                    "accumulated gradients inside a conditional, which the strategy cannot "
                    "run. Raise the global batch instead (more replicas, or a larger "
                    "per-replica batch), or leave `gradient_accumulation_steps` unset."
                )
            if self.use_ema and self.ema_overwrite_frequency:
                raise ValueError(
                    f"{name}: `use_ema=True` with `ema_overwrite_frequency="
                    f"{self.ema_overwrite_frequency}` cannot be used under a tf.distribute "
                    "strategy: Keras 3 overwrites the model variables inside a conditional "
                    "in the replica context, which the strategy cannot run. Leave "
                    "`ema_overwrite_frequency=None` and call "
                    "`optimizer.finalize_variable_values(model.trainable_variables)` at the "
                    "end of training."
                )

    def build(self, variables):
        if self.built:
            return
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.num_replicas_in_sync > 1 and not tf.executing_eagerly():
            raise RuntimeError(
                f"{type(self).__name__} is being built inside `strategy.run` in a "
                "tf.function, where a tf.distribute strategy cannot create its variables. "
                "Build it once in the strategy scope before the first step: "
                "`with strategy.scope(): optimizer.build(model.trainable_variables)` "
                "(`model.compile` + `model.fit` do this for you)."
            )
        self._vrgd_check_strategy_combinations(tf.distribute.get_strategy())
        validation.check_variable_dtypes(self, variables, base_rule=self._vrgd_base_class)
        super().build(variables)
        self._vrgd_add_variables(variables)

    def _vrgd_var_key(self, variable):
        return self._var_key(variable)

    def _vrgd_make_variable(self, kind, index, shape, reference):
        colocate = reference.value if isinstance(reference, backend.Variable) else reference
        with self._distribution_strategy.extended.colocate_vars_with(colocate):
            with backend.name_scope(self.name, caller=self):
                variable = backend.Variable(
                    initializer=keras.initializers.Zeros(),
                    shape=tuple(shape),
                    dtype=state_lib.variable_dtype(kind, self._vrgd.state_dtype).name,
                    trainable=False,
                    synchronization="on_read",
                    aggregation="only_first_replica",
                    name=f"vrgd_{kind}_{index}",
                )
        self._track_variable(variable)
        return variable

    # As written under AutoGraph, as Keras' own methods are (see GSNRAggregator.__call__).
    @tf.autograph.experimental.do_not_convert
    def apply(self, grads, trainable_variables=None):
        self._vrgd_hook_called = False
        result = super().apply(grads, trainable_variables)
        ctx = tf.distribute.get_replica_context()
        if (
            ctx is not None
            and ctx.num_replicas_in_sync > 1
            and not self._vrgd_hook_called
            and keras_internals.any_gradient_to_reduce(self, grads, trainable_variables)
        ):
            raise RuntimeError(
                f"{type(self).__name__}: Keras {keras.__version__} applied gradients "
                f"without calling {_HOOK}, so VRGD's GSNR step was bypassed. This Keras "
                f"version is not supported; install {versions.SUPPORTED}."
            )
        return result

    def _clip_gradients(self, grads):
        # Keras 3 calls this on each replica's gradients before the all-reduce; VRGD clips
        # the reduced gradients in _all_reduce_sum_gradients instead (see the class doc).
        return grads

    def _all_reduce_sum_gradients(self, grads_and_vars):
        self._vrgd_hook_called = True
        ctx = tf.distribute.get_replica_context()
        if ctx is None:
            reduced = super()._all_reduce_sum_gradients(grads_and_vars)
        else:
            reduced = self._vrgd_reduce(grads_and_vars, ctx)
        present = [i for i, (g, _) in enumerate(reduced) if g is not None]
        clipped = super()._clip_gradients([reduced[i][0] for i in present])
        reduced = list(reduced)
        for i, g in zip(present, clipped):
            reduced[i] = (g, reduced[i][1])
        return reduced


def make_vrgd_optimizer(
    base_class, *, name=None, default_beta_3=settings.DEFAULTS.beta_3, register=True, doc=None
):
    """Returns the VRGD version of a Keras 3 optimizer class.

    The new class takes the base class's arguments plus the VRGD settings
    (:class:`vrgd_tf.settings.VRGDSettings`), and differs from it only in how gradients are
    aggregated across replicas (see :mod:`vrgd_tf.gsnr`). Its update rule, slots and
    schedules are the base class's.

    Args:
      base_class: a subclass of ``keras.optimizers.Optimizer`` (TensorFlow backend), e.g.
        ``keras.optimizers.AdamW`` or ``keras.optimizers.Lion``.
      name: the new class's name; default ``"VRGD" + base_class.__name__``.
      default_beta_3: float in [0, 1), the default of ``beta_3`` (the paper:
        :data:`vrgd_tf.settings.ADAPTIVE_BETA_3` for Adam-type optimizers, 0 for SGD-type
        ones).
      register: register the class as Keras serializable under package ``"vrgd_tf"``, so
        ``keras.models.load_model`` finds it without ``custom_objects``.
      doc: the class docstring.

    Returns:
      The new class. Its constructor raises ``ValueError``/``TypeError`` for a VRGD setting
      or a base argument out of its range;
      its ``build`` raises ``ValueError`` for a bfloat16/float16 variable that the base
      rule cannot train (see ``vrgd_tf.validation.check_variable_dtypes``).

    Raises:
      TypeError: ``base_class`` is not a Keras 3 optimizer class, or is already a VRGD
        class (e.g. ``VRGDLamb``; the message names its base).
    """
    if not (isinstance(base_class, type) and issubclass(base_class, keras.optimizers.Optimizer)):
        raise TypeError(
            f"`base_class` must be a keras.optimizers.Optimizer subclass; got {base_class!r}."
        )
    return common.make_vrgd_class(
        _KerasVRGDMixin,
        base_class,
        name=name,
        default_beta_3=default_beta_3,
        doc=doc,
        module="vrgd_tf.optimizers" if register else base_class.__module__,
        register=_register if register else None,
    )


def _register(name):
    return keras.saving.register_keras_serializable(package="vrgd_tf", name=name)


@common.vrgd_class(register=_register, module="vrgd_tf.optimizers")
class VRGDSGD(_KerasVRGDMixin, keras.optimizers.SGD):
    """VR-SGD and VR-Momentum (Algorithm 1, eq. 10): `keras.optimizers.SGD`
    (`learning_rate`, `momentum`, `nesterov`, ...) fed the variance-reduced gradient.
    Variables of any float dtype (a `momentum` in [0, 1) that rounds to 1.0 in a
    bfloat16/float16 variable's dtype raises ValueError at build).
    """


@common.vrgd_class(
    default_beta_3=settings.ADAPTIVE_BETA_3, register=_register, module="vrgd_tf.optimizers"
)
class VRGDAdam(_KerasVRGDMixin, keras.optimizers.Adam):
    """VR-Adam (Section 4.2): `keras.optimizers.Adam` (`learning_rate`, `beta_1`, `beta_2`,
    `epsilon`, `amsgrad`, ...) with the factor applied before the moment estimates.
    Keras' Adam computes in the variable's dtype: for a bfloat16 or float16 variable,
    `build` raises ValueError when a hyper-parameter fails there (the default
    `beta_2=0.999` rounds to 1.0 in bfloat16; float16 cannot hold the second moment).
    """


@common.vrgd_class(register=_register, module="vrgd_tf.optimizers")
class VRGDLars(_KerasVRGDMixin, Lars):
    """VR-LARS: `vrgd_tf.optimizers.Lars` (Model Garden's LARS: `learning_rate`, `momentum`,
    `weight_decay_rate`, `eeta`, `nesterov`, `classic_momentum`,
    `exclude_from_weight_decay`, `exclude_from_layer_adaptation`) fed the variance-reduced
    gradient, which therefore enters the momentum, the weight-decay term and the trust
    ratio. Any float variable dtype (computed in float32). `weight_decay` is refused: use
    `weight_decay_rate`.
    """


@common.vrgd_class(
    default_beta_3=settings.ADAPTIVE_BETA_3, register=_register, module="vrgd_tf.optimizers"
)
class VRGDLamb(_KerasVRGDMixin, Lamb):
    """VR-LAMB: `vrgd_tf.optimizers.Lamb` (You et al. 2020 Algorithm 2 as in Model Garden:
    `learning_rate`, `beta_1`, `beta_2`, `epsilon`, `weight_decay_rate`,
    `exclude_from_weight_decay`, `exclude_from_layer_adaptation`) with the factor applied
    before the moment estimates. Any float variable dtype (computed in float32).
    `weight_decay` is refused: use `weight_decay_rate`.
    """
