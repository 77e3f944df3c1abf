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
:func:`vrgd_tf.validation.check_variable_dtypes`.

The VRGD state is registered as slots ``vrgd_<kind>`` of the model variables, so that
checkpoints key it like the base optimizer's slots; :class:`_VRGDSlotsMixin` makes every
slot creation (``add_slot``, also called by checkpoint and SavedModel restores) give it its
designed shape and kind.

The classes live in :mod:`vrgd_tf.tf_keras.optimizers`. Needs the ``model_garden`` extra (``tf-models-official``, ``tf-keras``).
"""

from vrgd_tf.tf_keras.optimizers import VRGDSGD, VRGDAdam, VRGDLamb, VRGDLars, make_vrgd_optimizer

__all__ = ["VRGDSGD", "VRGDAdam", "VRGDLars", "VRGDLamb", "make_vrgd_optimizer"]
