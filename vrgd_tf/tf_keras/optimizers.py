"""VRGD optimizers for tf_keras (Keras 2), the Keras that TF Model Garden uses.

Model Garden builds legacy optimizers (``tf_keras.optimizers.legacy``, i.e. ``OptimizerV2``)
by default, so this family is built on them: ``VRGDSGD`` from ``legacy.SGD``, ``VRGDAdam``
from ``legacy.Adam``, and ``VRGDLars``/``VRGDLamb`` from Model Garden's own
``official.modeling.optimization.lars.LARS`` and ``lamb.LAMB``. The GSNR step
(:func:`vrgd_tf.gsnr.variance_reduce`) replaces ``OptimizerV2._aggregate_gradients``, the
override point that ``OptimizerV2`` documents for subclasses; the base update rules are
untouched.

Works inside ``tf_keras.mixed_precision.LossScaleOptimizer``: that wrapper calls
``_aggregate_gradients`` on the unscaled gradients, and on a step with a non-finite
gradient it skips the update while the VRGD state stays as it was.

Low-precision variables: ``VRGDSGD`` trains bfloat16 and float16 variables (its rule
has no coefficient that breaks in them). ``VRGDAdam`` and ``VRGDLamb`` (default ``beta_2``;
Adam and LAMB compute in the variable's dtype) and ``VRGDLars`` (Model Garden's LARS fails
to trace for them) raise ``ValueError`` when their slots are created for such a variable,
naming it; keep float32 variables (``mixed_bfloat16``/``mixed_float16`` policies do). See
``vrgd_tf.validation.check_variable_dtypes``.

The VRGD state is registered as slots ``vrgd_<kind>`` of the model variables, so that
checkpoints key it like the base optimizer's slots; ``_VRGDSlotsMixin`` makes every
slot creation (``add_slot``, also called by checkpoint and SavedModel restores) give it its
designed shape and kind.

Needs the ``model-garden`` extra (``tf-models-official``, ``tf-keras``).
"""

import os
import weakref

import tensorflow as tf
import tf_keras
from official.modeling.optimization import lamb as _mg_lamb
from official.modeling.optimization import lars as _mg_lars
from tensorflow.python.saved_model import registration as _registration
from tf_keras.src.optimizers.legacy import optimizer_v2 as _optimizer_v2

from vrgd_tf import common, settings, validation
from vrgd_tf.gsnr import state as state_lib
from vrgd_tf.gsnr.statistics import NUM_STATISTICS

__all__ = ["VRGDSGD", "VRGDAdam", "VRGDLars", "VRGDLamb", "make_vrgd_optimizer"]

_OptimizerV2 = tf_keras.optimizers.legacy.Optimizer

# Base update rules that cannot run on bfloat16/float16 variables at all, and why (a clause
# after "its update rule (...)"); see validation.check_variable_dtypes.
_FLOAT32_ONLY = {
    _mg_lars.LARS: (
        "multiplies its momentum slot by the Python float `momentum` with tf.multiply, "
        "which raises a TypeError inside a tf.function (model.fit, Model Garden's trainer) "
        "for a variable that is not float32 (e.g. \"Input 'y' of 'Mul' Op has type bfloat16 "
        'that does not match type float32")'
    ),
}
_FIX = (
    "Keep the variables float32: tf_keras' 'mixed_bfloat16' and 'mixed_float16' dtype "
    "policies (tf_keras.mixed_precision.set_global_policy; Model Garden's "
    "`runtime.mixed_precision_dtype`) compute the layers in low precision but keep "
    "float32 variables."
)


_SLOT_PREFIX = "vrgd_"


def _state_shape(kind, variable):
    """The designed shape of the VRGD state ``kind`` of ``variable`` (see gsnr.VRGDState).

    Returns:
      ``[NUM_STATISTICS]`` for ``"statistics"``, ``variable.shape`` for ``"deficit"``,
      ``[]`` for ``"correction"``.

    Raises:
      ValueError: an unknown ``kind``.
    """
    if kind == "statistics":
        return [NUM_STATISTICS]
    if kind == "deficit":
        return variable.shape
    if kind == "correction":
        return []
    raise ValueError(f"Unknown VRGD state slot {_SLOT_PREFIX}{kind!r}.")


class _VRGDSlotsMixin:
    """Creates the VRGD state slots of an ``OptimizerV2`` with their designed shape and kind.

    The state (float32, ``vrgd_deficit`` bfloat16 with ``state_dtype="bfloat16"``;
    ``vrgd_statistics`` ``[NUM_STATISTICS]``, ``vrgd_deficit`` the variable's shape,
    ``vrgd_correction`` ``[]``) must be ON_READ / ONLY_FIRST_REPLICA (see
    ``gsnr.VRGDState``). ``OptimizerV2.add_slot`` cannot make ON_READ variables and gives a
    slot the variable's shape, yet it is what every restore path calls for a slot that does
    not exist yet:

    * ``_create_or_restore_slot_variable`` (``tf.train.Checkpoint`` / ``load_weights``
      restoring before the optimizer is built) calls ``add_slot`` with the checkpoint's
      value as initializer;
    * the SavedModel loader calls ``add_slot(var, slot_name)`` on the revived optimizer.

    So ``add_slot`` is overridden: a ``vrgd_`` slot comes from :meth:`_vrgd_make_variable`,
    zero-initialised, whatever the initializer and shape asked for. The value is restored
    afterwards by the caller (``_create_or_restore_slot_variable``'s caller restores into the
    slot it returns; the SavedModel loader restores every object after creating them;
    deferred restorations are applied by ``_restore_slot_variable``).
    """

    def add_slot(self, var, slot_name, initializer="zeros", shape=None):
        if not slot_name.startswith(_SLOT_PREFIX):
            return super().add_slot(var, slot_name, initializer=initializer, shape=shape)
        kind = slot_name[len(_SLOT_PREFIX) :]
        return self._vrgd_make_variable(kind, None, _state_shape(kind, var), var)

    def _vrgd_make_variable(self, kind, index, shape, reference):
        """A replica-local slot ``vrgd_<kind>`` of ``reference``; the existing one if any.

        Zeros, non-trainable, ON_READ / ONLY_FIRST_REPLICA, of shape ``shape`` and dtype
        ``vrgd_tf.gsnr.state.variable_dtype(kind, state_dtype)`` (float32; the deficit
        bfloat16 with ``state_dtype="bfloat16"``).
        Registered exactly as ``OptimizerV2.add_slot`` registers slots (``add_slot`` itself
        cannot make ON_READ variables), so checkpoints key the state to its model variable
        object, like the base optimizer's own slots, and restore it (deferred if need be)
        whatever the variables' names or the order they first get gradients in. ``index``
        (the position in ``VRGDState``) is unused.
        """
        del index
        slot_name = f"{_SLOT_PREFIX}{kind}"
        if slot_name not in self._slot_names:
            self._slot_names.append(slot_name)
        slot_dict = self._slots.setdefault(_var_key(reference), {})
        if slot_name in slot_dict:
            return slot_dict[slot_name]
        with self._distribution_strategy_scope():
            strategy = tf.distribute.get_strategy()
            with strategy.extended.colocate_vars_with(reference):
                variable = tf.Variable(
                    tf.zeros(shape, state_lib.variable_dtype(kind, self._vrgd_state_dtype())),
                    name=f"{reference._shared_name}/{slot_name}",
                    trainable=False,
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                )
        slot_dict[slot_name] = variable
        self._restore_slot_variable(slot_name=slot_name, variable=reference, slot_variable=variable)
        self._weights.append(variable)
        return variable


class _TfKerasVRGDMixin(_VRGDSlotsMixin, common.VRGDCommon):
    """Overrides of an ``OptimizerV2`` that insert the GSNR step. Use make_vrgd_optimizer."""

    def _create_slots(self, var_list):
        base = self._vrgd_base_class
        validation.check_variable_dtypes(
            self,
            var_list,
            base_rule=base,
            fix=_FIX,
            float32_only=next(
                (why for cls, why in _FLOAT32_ONLY.items() if issubclass(base, cls)), None
            ),
        )
        super()._create_slots(var_list)
        self._vrgd_add_variables(var_list)

    def _vrgd_var_key(self, variable):
        return _var_key(variable)

    def _vrgd_state_dtype(self) -> str:
        """The ``state_dtype`` setting: the dtype of the ``vrgd_deficit`` slots."""
        return self._vrgd.state_dtype

    def _aggregate_gradients(self, grads_and_vars):
        grads_and_vars = list(grads_and_vars)
        # LossScaleOptimizer aggregates before the inner apply_gradients creates the slots.
        with tf.init_scope():
            self._create_all_weights([v for g, v in grads_and_vars if g is not None])
        ctx = tf.distribute.get_replica_context()
        if ctx is None:  # pragma: no cover - apply_gradients refuses cross-replica calls
            return super()._aggregate_gradients(grads_and_vars)
        reduced = self._vrgd_reduce(grads_and_vars, ctx)
        sums = self._vrgd_own_sums()
        for g, _ in reduced:
            if g is not None:
                sums[id(g)] = g
        return reduced

    def _vrgd_own_sums(self) -> weakref.WeakValueDictionary:
        """``{id: gradient}`` of the gradients this optimizer's own aggregation returned
        (weakly held: an entry goes with its tensor), for :meth:`apply_gradients`' check.
        Per instance: nothing of tf_keras is patched."""
        sums = self.__dict__.get("_vrgd_sums")
        if sums is None:
            sums = weakref.WeakValueDictionary()
            object.__setattr__(self, "_vrgd_sums", sums)
        return sums

    # As written under AutoGraph, as tf_keras' own methods are (see GSNRAggregator.__call__).
    @tf.autograph.experimental.do_not_convert
    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        """``OptimizerV2.apply_gradients``; refuses to skip the VRGD aggregation.

        Raises:
          ValueError: ``experimental_aggregate_gradients=False`` with gradients that this
            optimizer's own aggregation did not return (tf_keras' ``LossScaleOptimizer``
            aggregates through it and then passes False: that is allowed). Skipping the
            aggregation would skip the GSNR step and train the base optimizer.
        """
        grads_and_vars = list(grads_and_vars)
        _check_variables(self, [v for _, v in grads_and_vars])
        if not experimental_aggregate_gradients:
            _check_aggregated_by_vrgd(self, [g for g, _ in grads_and_vars], self._vrgd_own_sums())
        return super().apply_gradients(
            grads_and_vars,
            name=name,
            experimental_aggregate_gradients=experimental_aggregate_gradients,
        )


def _check_variables(optimizer, variables) -> None:
    """Raises the base's ``NotImplementedError`` for a ``Tensor`` given as a variable before
    the VRGD state is keyed by it (that failed with ``AttributeError: '_unique_id'``)."""
    for v in variables:
        if isinstance(v, (tf.Tensor, tf.IndexedSlices)) and not isinstance(v, tf.Variable):
            raise NotImplementedError(
                f"{type(optimizer).__name__}: updating a `Tensor` is not implemented (as "
                f"in tf_keras' optimizers). Received: var={v!r}. Pass the `tf.Variable`s "
                "(e.g. `model.trainable_variables`) with their gradients."
            )


def _check_aggregated_by_vrgd(optimizer, grads, own_sums) -> None:
    """Raises unless every gradient in ``grads`` came out of ``optimizer``'s own VRGD
    aggregation (``own_sums``, :meth:`_TfKerasVRGDMixin._vrgd_own_sums`)."""
    if all(g is None or own_sums.get(id(g)) is g for g in grads):
        return
    name = type(optimizer).__name__
    raise ValueError(
        f"{name}.apply_gradients(..., experimental_aggregate_gradients=False) would skip "
        "the cross-replica aggregation, which is where VRGD runs its GSNR step: the step "
        "would be the base optimizer's, without variance reduction. Leave "
        "`experimental_aggregate_gradients=True` (the default) and pass each replica's own "
        f"gradients to {name}. If you aggregate the gradients yourself, do it with "
        "`vrgd_tf.GSNRAggregator` and give its output (each replica's share of the "
        "variance-reduced sum) to a plain optimizer's default `apply_gradients`."
    )


def _var_key(variable):
    """The key ``OptimizerV2`` uses for slots (distributed container aware)."""
    return _optimizer_v2._var_key(variable)


def _has_vrgd_slots(obj):
    """Whether ``obj`` is an ``OptimizerV2`` whose slots include VRGD state: a built VRGD
    optimizer, or a wrapper that exposes its slots (tf_keras ``LossScaleOptimizer``)."""
    return isinstance(obj, _OptimizerV2) and any(
        name.startswith(_SLOT_PREFIX) for name in obj.get_slot_names()
    )


@_registration.register_serializable(
    package="vrgd_tf", name="TfKerasVRGDOptimizer", predicate=_has_vrgd_slots
)
class _RestoredVRGDOptimizer(_VRGDSlotsMixin, _optimizer_v2.RestoredOptimizer):
    """What a SavedModel load revives a VRGD optimizer as: tf_keras's stand-in optimizer.

    tf_keras revives every saved ``OptimizerV2`` as ``RestoredOptimizer`` and makes its slots
    with ``add_slot`` (the variable's shape, ON_WRITE), so the VRGD state could not be
    restored into it and loading failed. An optimizer with VRGD slots is saved with this
    class's registered name, so the loader revives it as this ``RestoredOptimizer`` whose
    ``add_slot`` makes the VRGD slots with their designed shape and kind (loading such a
    SavedModel in Python needs ``vrgd_tf.tf_keras`` imported). As for any tf_keras
    optimizer, ``load_model`` then compiles a fresh optimizer; the stand-in stays on the model
    with ``compile=False``, and ``model.load_weights(<dir>/variables/variables)`` restores
    the saved state into the compiled one.
    """

    _vrgd_saved_state_dtype = "float32"

    @classmethod
    def _deserialize_from_proto(cls, export_dir=None, **kwargs):
        """The stand-in, knowing the dtype the SavedModel stores the deficits in (the
        ``state_dtype`` they were saved with; the loader's ``add_slot`` names no dtype)."""
        del kwargs
        restored = cls()
        restored._vrgd_saved_state_dtype = _saved_deficit_dtype(export_dir)
        return restored

    def _vrgd_state_dtype(self) -> str:
        return self._vrgd_saved_state_dtype

    def _add_trackable_child(self, name, value):
        # The setter tf_keras registers for revived optimizers (iterations, hyperparameters).
        self._set_hyper(name, value)


def _saved_deficit_dtype(export_dir) -> str:
    """The dtype of the ``vrgd_deficit`` slots in the SavedModel at ``export_dir``'s
    checkpoint (its index only); ``"float32"`` without one.

    Raises:
      ValueError: deficits of more than one dtype (optimizers of different ``state_dtype``
        in one SavedModel), which one stand-in class cannot tell apart.
    """
    if export_dir is None:
        return "float32"
    reader = tf.train.load_checkpoint(os.path.join(export_dir, "variables", "variables"))
    marker = f"/{_SLOT_PREFIX}deficit/"
    dtypes = {d.name for k, d in reader.get_variable_to_dtype_map().items() if marker in k}
    if len(dtypes) > 1:
        raise ValueError(
            f"The SavedModel at {export_dir} holds VRGD deficits of several dtypes "
            f"({sorted(dtypes)}: optimizers of different `state_dtype`), which its stand-in "
            "optimizer cannot restore. Save the models separately, or with one `state_dtype`."
        )
    return dtypes.pop() if dtypes else "float32"


def make_vrgd_optimizer(
    base_class, *, name=None, default_beta_3=settings.DEFAULTS.beta_3, register=True, doc=None
):
    """Returns the VRGD version of a tf_keras legacy optimizer (``OptimizerV2``) class.

    Args:
      base_class: a subclass of ``tf_keras.optimizers.legacy.Optimizer``, e.g.
        ``tf_keras.optimizers.legacy.RMSprop`` or Model Garden's ``lamb.LAMB``.
      name: the new class's name; default ``"VRGD" + base_class.__name__``.
      default_beta_3: float in [0, 1), default of ``beta_3``.
      register: register with ``tf_keras.saving.register_keras_serializable`` under
        package ``"vrgd_tf"``.
      doc: the class docstring.

    Returns:
      The new class, taking the base class's arguments plus the VRGD settings
      (``vrgd_tf.settings.VRGDSettings``); its constructor raises
      ``ValueError``/``TypeError`` for values outside their ranges.
      Creating its slots raises ``ValueError`` for a bfloat16/float16 variable that the
      base rule cannot train (see ``vrgd_tf.validation.check_variable_dtypes``).

    Raises:
      TypeError: ``base_class`` is not an ``OptimizerV2`` subclass, or is already a VRGD
        class (e.g. ``VRGDLamb``; the message names its base).
    """
    if not (isinstance(base_class, type) and issubclass(base_class, _OptimizerV2)):
        raise TypeError(
            "`base_class` must be a tf_keras.optimizers.legacy.Optimizer "
            f"subclass; got {base_class!r}."
        )
    return common.make_vrgd_class(
        _TfKerasVRGDMixin,
        base_class,
        name=name,
        default_beta_3=default_beta_3,
        doc=doc,
        module="vrgd_tf.tf_keras" if register else base_class.__module__,
        register=_register if register else None,
    )


def _register(name):
    """Registers a class as ``vrgd_tf>name`` and, unless taken, under its bare ``name``:
    tf_keras's ``LossScaleOptimizer.get_config`` writes the inner optimizer's bare class
    name in the legacy (h5) format, which loading then looks up."""
    register = tf_keras.saving.register_keras_serializable(package="vrgd_tf", name=name)

    def decorator(cls):
        cls = register(cls)
        tf_keras.utils.get_custom_objects().setdefault(name, cls)
        return cls

    return decorator


@common.vrgd_class(register=_register, module="vrgd_tf.tf_keras")
class VRGDSGD(_TfKerasVRGDMixin, tf_keras.optimizers.legacy.SGD):
    """VR-SGD / VR-Momentum for tf_keras: `tf_keras.optimizers.legacy.SGD` (`learning_rate`,
    `momentum`, `nesterov`) fed the variance-reduced gradient.
    """


@common.vrgd_class(
    default_beta_3=settings.ADAPTIVE_BETA_3, register=_register, module="vrgd_tf.tf_keras"
)
class VRGDAdam(_TfKerasVRGDMixin, tf_keras.optimizers.legacy.Adam):
    """VR-Adam for tf_keras: `tf_keras.optimizers.legacy.Adam` with the factor applied
    before the moment estimates (paper Section 4.2).
    """


@common.vrgd_class(register=_register, module="vrgd_tf.tf_keras")
class VRGDLars(_TfKerasVRGDMixin, _mg_lars.LARS):
    """VR-LARS for tf_keras: Model Garden's `official.modeling.optimization.lars.LARS`
    (`learning_rate`, `momentum`, `weight_decay_rate`, `eeta`, `nesterov`,
    `classic_momentum`, `exclude_from_weight_decay`, `exclude_from_layer_adaptation`) fed
    the variance-reduced gradient. Sparse gradients reach it dense (Model Garden's LARS has
    no sparse rule).
    """

    _vrgd_densify_sparse = True


@common.vrgd_class(
    default_beta_3=settings.ADAPTIVE_BETA_3, register=_register, module="vrgd_tf.tf_keras"
)
class VRGDLamb(_TfKerasVRGDMixin, _mg_lamb.LAMB):
    """VR-LAMB for tf_keras: Model Garden's `official.modeling.optimization.lamb.LAMB`
    (`learning_rate`, `beta_1`, `beta_2`, `epsilon`, `weight_decay_rate`,
    `exclude_from_weight_decay`, `exclude_from_layer_adaptation`) with the factor applied
    before the moment estimates. ``epsilon`` must be > 0 (ValueError): Model Garden's
    LAMB would replace 0 by a backend constant that TensorFlow 2.20 no longer has.
    """

    _vrgd_positive_args = ("epsilon",)
