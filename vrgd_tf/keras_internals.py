"""Everything of vrgd_tf that patches or mirrors private Keras 3 internals, with its guard.

Keras 3 (TensorFlow backend) has no public API for three things the Keras 3 family needs.
Each is done here, against private code read from Keras 3.10-3.15's sources
(``keras/src/...`` paths below; the supported releases are :data:`vrgd_tf.versions.SUPPORTED`):

1. **The aggregation hook** (:data:`AGGREGATION_HOOK`). ``TFOptimizer._all_reduce_sum_gradients``
   (``backend/tensorflow/optimizer.py``) sums the replicas' gradients, called from
   ``_backend_update_step`` in the replica context since Keras 3.5. The VRGD mixin
   (:mod:`vrgd_tf.optimizers.vr`) overrides it, and ``_clip_gradients`` so that clipping
   acts on the reduced gradient.
2. **The loss-scale finiteness check** (:func:`install_loss_scale_check`, applied when this
   module is imported). ``LossScaleOptimizer.check_finite`` (``optimizers/loss_scale_optimizer.py``)
   tests one replica's local gradients only; for a VRGD inner optimizer the answer must be
   every replica's (see :func:`check_finite_on_every_replica`). Patched on the class, since
   the wrapper is Keras' own class that users construct; other inner optimizers keep
   Keras' own check. This is the one method of another library that importing vrgd_tf
   patches (the output of :class:`vrgd_tf.GSNRAggregator` needs no guard: each replica
   gets its share of the sum, so any further all-reduce leaves it correct).
3. **The micro-batch group step** of :func:`vrgd_tf.micro_batches.use_micro_batches`, which
   mirrors Keras' ``TensorFlowTrainer.train_step`` (``backend/tensorflow/trainer.py``: the
   model call with ``_call_has_training_arg``, ``_compute_loss``, ``_loss_tracker`` and
   ``losses.loss.unscale_loss_for_distribution``; :func:`group_loss`, :func:`track_loss`,
   :func:`compiled_loss_reductions`) and, under a loss-scale wrapper,
   ``LossScaleOptimizer._tf_apply`` (:func:`apply_grouped_loss_scaled`, using
   ``_stateful_handle_non_finite_grads``), because those take no squares.

Guard: importing this module runs :func:`vrgd_tf.versions.check_keras3` and checks that
every private class attribute used here exists, raising ``ImportError`` naming the supported
releases otherwise; :func:`check_model` does the same for a model's instance attributes. A
Keras that stops calling the hook is caught at the first multi-replica ``apply``
(:mod:`vrgd_tf.optimizers.vr`). Other private members the Keras 3 family calls, unchanged
from 3.8 (or earlier) to 3.15: ``Optimizer._var_key``, ``_track_variable``,
``_trainable_variables`` (:func:`any_gradient_to_reduce`),
``_distribution_strategy`` and ``add_variable(..., layout=)`` (``Lamb``/``Lars``).
"""

from typing import List, Sequence, Tuple

import keras
import tensorflow as tf
from keras.src.backend.tensorflow import optimizer as _tf_optimizer
from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
from keras.src.losses import loss as _loss_module

from vrgd_tf import common, versions
from vrgd_tf.gsnr import collectives

__all__ = [
    "AGGREGATION_HOOK",
    "KERAS_TRAIN_STEP",
    "any_gradient_to_reduce",
    "apply_grouped_loss_scaled",
    "check_finite_on_every_replica",
    "check_model",
    "compiled_loss_reductions",
    "group_loss",
    "install_loss_scale_check",
    "track_loss",
]

#: The name of the private Keras 3 method that sums the replicas' gradients.
AGGREGATION_HOOK = "_all_reduce_sum_gradients"
#: Keras 3's own ``train_step`` (a model class whose ``train_step`` is another overrides it).
KERAS_TRAIN_STEP = TensorFlowTrainer.train_step
#: The model instance attributes the group step reads.
_MODEL_INTERNALS = ("_compute_loss", "_loss_tracker", "_call_has_training_arg", "compute_metrics")
#: The class attributes used here, by class.
_CLASS_INTERNALS = (
    (_tf_optimizer.TFOptimizer, (AGGREGATION_HOOK, "_clip_gradients")),
    (keras.optimizers.LossScaleOptimizer, ("check_finite", "_stateful_handle_non_finite_grads")),
)


def _check_internals() -> None:
    """Raises ``ImportError`` unless Keras is supported and has every private attribute."""
    versions.check_keras3(tf.__version__, keras.__version__)
    for owner, names in _CLASS_INTERNALS:
        missing = [n for n in names if not hasattr(owner, n)]
        if missing:  # pragma: no cover - Keras upgrade guard
            raise ImportError(
                f"vrgd_tf needs Keras 3's {owner.__name__}.{', '.join(missing)}, which this "
                f"Keras ({keras.__version__}) does not have. Supported: {versions.SUPPORTED}."
            )
    if not hasattr(_loss_module, "unscale_loss_for_distribution"):  # pragma: no cover
        raise ImportError(
            f"vrgd_tf needs keras.src.losses.loss.unscale_loss_for_distribution, which this "
            f"Keras ({keras.__version__}) does not have. Supported: {versions.SUPPORTED}."
        )


_check_internals()


def check_model(model, caller: str) -> None:
    """Raises ``TypeError`` if ``model`` lacks an instance attribute the group step reads.

    Args:
      model: a Keras 3 model.
      caller: how the message names the caller, e.g. ``"use_micro_batches"``.
    """
    missing = [a for a in _MODEL_INTERNALS if not hasattr(model, a)]
    if missing:  # pragma: no cover - Keras upgrade guard
        raise TypeError(
            f"{caller} mirrors Keras 3.15's train_step, but this model (Keras "
            f"{keras.__version__}) has no {', '.join(missing)}. Supported: {versions.SUPPORTED}."
        )


# --- 2. the loss-scale finiteness check ------------------------------------------------------


def check_finite_on_every_replica(check_finite):
    """Wraps ``keras.optimizers.LossScaleOptimizer.check_finite`` for VRGD inner optimizers.

    Keras 3.15's loss-scale optimizer tests the finiteness of one replica's *local*
    gradients and takes that replica's answer for all (its comment assumes the gradients are
    already all-reduced, which Keras 3 does later, inside the inner optimizer). When only
    another replica overflows, the inner optimizer then applies a NaN step and the scale is
    not lowered. For a VRGD inner optimizer under more than one replica the local answer is
    all-reduced first, so every replica skips the step and the scale halves, as in tf_keras.
    The local test is ours, on the values of sparse gradients (Keras' ``ops.isfinite`` of a
    ``tf.IndexedSlices`` densifies the boolean rows by summing them, so a NaN row whose
    index repeats reads as finite). One extra scalar all-reduce per step; other inner
    optimizers are left as Keras has them.
    """

    def wrapped(self, grads):
        if not isinstance(self.inner_optimizer, common.VRGDCommon):
            return check_finite(self, grads)
        local = [
            tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
            for g in grads
            if g is not None
        ]
        finite = tf.reduce_all(tf.stack(local)) if local else tf.constant(True)
        return collectives.all_replicas_finite(finite, tf.distribute.get_replica_context())

    wrapped.vrgd_wraps = check_finite
    wrapped.__doc__ = check_finite.__doc__
    return wrapped


def install_loss_scale_check() -> None:
    """Replaces ``LossScaleOptimizer.check_finite`` by :func:`check_finite_on_every_replica`
    of it, once (idempotent: a module reload does not wrap twice)."""
    lso = keras.optimizers.LossScaleOptimizer
    if getattr(lso.check_finite, "vrgd_wraps", None) is None:
        lso.check_finite = check_finite_on_every_replica(lso.check_finite)


install_loss_scale_check()


def any_gradient_to_reduce(optimizer, grads, trainable_variables=None) -> bool:
    """Whether Keras 3's ``Optimizer.apply(grads, trainable_variables)`` reaches the
    aggregation hook: it does when a gradient is not None and its variable is not
    ``overwrite_with_gradient`` (``optimizers/base_optimizer.py``: ``apply`` drops None
    gradients, assigns ``overwrite_with_gradient`` variables directly, e.g. float8 scales
    and amax histories, and calls ``_backend_apply_gradients`` only for the rest).
    ``trainable_variables=None`` means the optimizer's own, as in ``apply``."""
    if trainable_variables is None:
        trainable_variables = optimizer._trainable_variables
    return any(
        g is not None and not getattr(v, "overwrite_with_gradient", False)
        for g, v in zip(grads, trainable_variables)
    )


# --- 3. the micro-batch group step -----------------------------------------------------------


def group_loss(model, x, y, sample_weight) -> Tuple[tf.Tensor, object]:
    """One group's forward pass and loss, as Keras 3.15's ``train_step`` computes them.

    Returns:
      ``(loss, y_pred)``: ``model._compute_loss(..., training=True)`` (compiled losses with
      their 1/replicas scaling, loss weights and ``model.losses``) and the predictions.
    """
    if model._call_has_training_arg:
        y_pred = model(x, training=True)
    else:
        y_pred = model(x)
    loss = model._compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
    return loss, y_pred


def track_loss(model, loss, x) -> None:
    """Keras 3.15's update of the loss tracker with the step's ``loss`` (batch of ``x``)."""
    model._loss_tracker.update_state(
        _loss_module.unscale_loss_for_distribution(loss),
        sample_weight=tf.shape(next(i for i in keras.tree.flatten(x) if i is not None))[0],
    )


def compiled_loss_reductions(model) -> List[Tuple[str, str]]:
    """``(name, reduction)`` of each compiled loss (built by the first ``_compute_loss``)."""
    out = []
    compile_loss = getattr(model, "_compile_loss", None)
    for entry in getattr(compile_loss, "_flat_losses", None) or ():
        fn = getattr(entry, "loss", None)
        out.append(
            (
                getattr(fn, "name", type(fn).__name__),
                getattr(fn, "reduction", "sum_over_batch_size"),
            )
        )
    return out


def _divide(g, scale):
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values / tf.cast(scale, g.values.dtype), g.indices, g.dense_shape)
    return g / tf.cast(scale, g.dtype)


def apply_grouped_loss_scaled(
    lso, pairs: Sequence, sq_sums: Sequence, num_groups: int, num_contributing=None
) -> None:
    """Keras 3.15's ``LossScaleOptimizer.apply`` (TensorFlow) for grouped gradients.

    As ``LossScaleOptimizer._tf_apply``: if every gradient is finite (the check is
    all-reduced for a VRGD inner optimizer, :func:`check_finite_on_every_replica`), divide
    the gradients by the dynamic scale and the squares by its square (not those of
    ``overwrite_with_gradient`` variables, whose "gradient" is their new value), hand them to
    the inner optimizer's ``apply_grouped_gradients`` and grow the scale every
    ``dynamic_growth_steps``; else skip the step and halve the scale.

    Raises:
      ValueError: called in a cross-replica context.
    """
    inner = lso.inner_optimizer
    grads = [g for g, _ in pairs]
    variables = [v for _, v in pairs]

    def apply_finite(grads, sq_sums):
        scale = lso.dynamic_scale
        unscaled, squares = [], []
        for g, q, v in zip(grads, sq_sums, variables):
            if g is None or getattr(v, "overwrite_with_gradient", False):
                unscaled.append(g)
                squares.append(q)
            else:
                unscaled.append(_divide(g, scale))
                squares.append(q / tf.cast(scale * scale, q.dtype))
        inner.apply_grouped_gradients(
            list(zip(unscaled, variables)),
            squares,
            num_groups=num_groups,
            num_contributing=num_contributing,
        )

        def upscale():
            lso.step_counter.assign(0)
            lso.dynamic_scale.assign(lso.dynamic_scale * 2.0)

        def increment():
            lso.step_counter.assign_add(1)

        keras.ops.cond(
            keras.ops.equal(lso.step_counter, lso.dynamic_growth_steps - 1), upscale, increment
        )

    if tf.distribute.in_cross_replica_context():  # pragma: no cover - fit is per replica
        raise ValueError("Grouped gradients must be applied in a replica context.")
    if tf.__internal__.distribute.strategy_supports_no_merge_call():
        finite = lso.check_finite(grads)
        keras.ops.cond(
            finite, lambda: apply_finite(grads, sq_sums), lso._stateful_handle_non_finite_grads
        )
        return

    def cross_replica(distribution, grads, sq_sums):
        finite_per_replica = distribution.extended.call_for_each_replica(
            lso.check_finite, args=(grads,)
        )
        finite = distribution.experimental_local_results(finite_per_replica)[0]

        def apply_fn():
            distribution.extended.call_for_each_replica(apply_finite, args=(grads, sq_sums))

        keras.ops.cond(finite, apply_fn, lso._stateful_handle_non_finite_grads)

    tf.distribute.get_replica_context().merge_call(cross_replica, args=(grads, sq_sums))
