"""Micro-batch groups in Keras 3 ``model.fit``: ``k = replicas x groups`` GSNR samples.

VRGD (arXiv 2309.13681, Algorithm 1) estimates each gradient element's GSNR from ``k``
gradient samples per step; the paper's samples are the ``k`` data-parallel replicas' shard
gradients. Our extension: each replica splits its per-replica batch into ``m`` micro-batch
groups, computes their gradients at the same weights and hands the optimizer their sum and
the sum of their element-wise squares
(:meth:`~vrgd_tf.VRGDLamb.apply_grouped_gradients`, a method of every VRGD optimizer). Then
``k = replicas * m`` with the collectives of one step as before, and one device with
``m >= 2`` does real VRGD.

:func:`use_micro_batches` makes ``model.fit`` do this for a Sequential, functional or
subclassed Keras 3 model, without a hand-written ``train_step``::

    model.compile(optimizer=vrgd_tf.VRGDLamb(0.01), loss="mse")
    vrgd_tf.micro_batches.use_micro_batches(model, num_groups=4)
    model.fit(dataset.batch(256, drop_remainder=True), epochs=3)
"""

import inspect
import warnings
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from vrgd_tf import common, keras_internals
from vrgd_tf.gsnr import samples as samples_lib
from vrgd_tf.optimizers import vr as _vr

__all__ = [
    "use_micro_batches",
    "micro_batch_groups",
    "split_batch",
    "run_groups",
    "group_contributes",
    "GroupGradients",
    "sum_group_gradients",
    "add_square",
    "overwrites_with_gradient",
]

# Instance attribute that holds the group count of a model set up by use_micro_batches.
_ATTR = "_vrgd_micro_batch_groups"
# Loss reductions whose value is a mean over the batch: the mean of the m groups' losses is
# then the whole batch's loss (equal group sizes).
_MEAN_REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")


def use_micro_batches(model: keras.Model, num_groups: int) -> keras.Model:
    """Makes ``model.fit`` split each replica's batch into ``num_groups`` GSNR samples.

    Sets the model instance's ``train_step`` (and a checking ``train_on_batch``) to one
    that, on each replica, splits the
    per-replica batch into ``m = num_groups`` equal, contiguous micro-batches (group ``j``
    is rows ``j*b .. (j+1)*b - 1``, ``b = per-replica batch / m``), runs the forward pass
    and a ``tf.GradientTape`` per group at the same weights, and calls
    ``optimizer.apply_grouped_gradients`` with the sum of the groups' gradients and the sum
    of their element-wise squares. VRGD then has ``k = replicas * m`` GSNR samples per step
    (paper arXiv 2309.13681, Algorithm 1 with ``k`` samples; the groups are our extension),
    with the collectives of one step as before. With Keras' contiguous sharding of the global
    batch over replicas, sample ``d*m + j`` (replica ``d``, group ``j``) is the
    ``(d*m + j)``-th contiguous ``1/k`` of the global batch, whatever ``replicas`` and
    ``m`` are: 1 replica x 4 groups, 2 x 2 and 4 x 1 train the same weights (float
    rounding aside).

    Why replace ``train_step`` on the instance: ``train_step`` is Keras' documented hook
    for changing what ``fit`` does per batch, and ``fit`` looks it up on the instance, so
    everything else of ``fit`` stays Keras' own (callbacks, ``tf.distribute``,
    ``steps_per_execution``, ``jit_compile``, ``evaluate``/``predict``); Sequential and
    functional models get it without being rebuilt as a subclass; the model's class,
    variables and saved format do not change (the setting is not saved: call this again
    after ``keras.models.load_model``).

    The step is :func:`run_groups` over Keras' own TensorFlow ``train_step`` (Keras 3.15,
    ``keras/src/backend/tensorflow/trainer.py``, mirrored in ``vrgd_tf.keras_internals``):
    per group ``model(x_j, training=True)``
    and ``model._compute_loss(..., training=True)`` (so compiled losses, their 1/replicas
    scaling, loss weights and ``model.losses`` are Keras'), multiplied by ``1/m`` so that
    the sum of the group gradients is the whole per-replica batch's gradient, then
    ``optimizer.scale_loss``; the loss tracker gets the mean of the group losses (the
    batch's loss) once per step, and the compiled metrics are computed once on the whole
    batch (the groups' predictions concatenated in order). The squares are those of the
    scaled group gradients, ``sum_j (g_j / m)**2``. A ``tf.IndexedSlices`` gradient
    (``Embedding``) stays sparse in the sum (the groups' rows concatenated); its square is
    that of each group's dense gradient. Groups run one after another (each group's
    forward pass waits for the previous group's gradients), so activation memory is that
    of one micro-batch, plus two gradient-sized accumulators.

    ``num_groups = 1`` is exactly Keras' ``fit`` (the same weights, bit for bit, when every
    replica's batch holds an example of nonzero weight): the step then calls
    ``optimizer.apply_gradients`` as Keras does (the optimizer squares the gradient itself,
    which is what ``apply_grouped_gradients`` with one group would be given).

    Contributing samples (``docs/spec.md`` section 1): each group counts when it holds at
    least one example of nonzero weight (:func:`group_contributes`: rows, and no sample
    weight or some weight != 0), and that count, not one inferred from the gradients, is
    the replica's (any ``m``, 1 too): a masked group (sample weights 0) or the empty replica
    of a short last batch is left out, and one that sends a nonzero gradient all the same
    (a weight regularizer) makes the step the base step, with a warning.

    What the groups change:

    * Layers whose output depends on the whole batch see micro-batches: ``BatchNormalization``
      normalizes each group with that group's mean and variance (noisier for small groups,
      as with a smaller per-replica batch) and updates its moving statistics ``m`` times
      per step (so they decay ``m`` times faster per step). Stateful random layers
      (``Dropout``) draw a new mask per group.
    * Keras' float8 layers (``Dense``/``EinsumDense`` after ``quantize("float8")``, or with
      a ``"float8_from_float32"`` dtype policy) keep scales and amax histories that Keras
      overwrites with their "gradient": the groups' values are combined by their maximum
      (:func:`sum_group_gradients`), which is what the whole batch gives, so they end as
      without groups.
    * The summed gradient equals the whole batch's only for a loss that is a mean over the
      batch (Keras' default reduction ``"sum_over_batch_size"``, or ``"mean"``; for
      ``"mean_with_sample_weight"`` the groups' weight sums must be equal) plus terms that
      do not depend on the batch (weight regularizers). Terms that sum over the batch
      (``add_loss`` of a batch sum, activity regularizers) count ``1/m`` of their value.
      Compiled losses with reduction ``"sum"`` or ``None`` are refused (see Raises).

    Batch size: the per-replica batch (global batch / replicas) must be a multiple of
    ``m``, in every step. Batch a ``tf.data.Dataset`` with ``drop_remainder=True`` and a
    global batch that is a multiple of ``replicas * m``: the batch dimension is then static
    and checked when the step is traced. ``fit(x, y, batch_size=...)`` with NumPy arrays
    (or a dataset without ``drop_remainder``) has a dynamic batch dimension and a partial
    last batch unless the number of examples is a multiple of the batch size: it is
    checked by a ``tf.debugging`` assertion when the step runs. ``train_on_batch`` checks
    its batch (every replica gets all of it) before tracing. ``evaluate``, ``predict``,
    ``test_on_batch`` and ``predict_on_batch`` are Keras' own (no groups).

    Args:
      model: a Keras 3 ``keras.Model`` (TensorFlow backend) whose class does not override
        ``train_step``: Sequential, functional, or a subclass with its own ``call`` (and
        ``compute_loss`` if it likes). Compiled (``model.compile``) before or after this
        call; its optimizer must be a Keras 3 VRGD optimizer (``vrgd_tf.VRGDSGD``,
        ``VRGDAdam``, ``VRGDLars``, ``VRGDLamb`` or a class made by
        ``vrgd_tf.make_vrgd_optimizer``), possibly inside
        ``keras.optimizers.LossScaleOptimizer`` (mixed precision: its dynamic scale is
        applied to each group's loss and removed from the gradients, and ``scale**2`` from
        the squares, before the GSNR step; a step with a non-finite gradient is skipped
        and the scale halved, as Keras does). An optimizer's own ``loss_scale_factor`` is
        removed the same way.
      num_groups: int >= 1, the number ``m`` of micro-batch groups per replica. Calling
        again replaces the previous value.

    Returns:
      ``model`` (the same object).

    Raises:
      TypeError: ``model`` is not a Keras 3 model, its class overrides ``train_step``
        (add the groups to your own ``train_step`` by calling
        ``optimizer.apply_grouped_gradients``), ``num_groups`` is not an int, or the
        compiled optimizer (``model.compile(optimizer=...)``) is not a Keras 3 VRGD
        optimizer. The optimizer is checked here if the model is compiled, and when the
        step is traced otherwise.
      ValueError: ``num_groups`` < 1; the Keras backend is not TensorFlow; the optimizer
        has ``gradient_accumulation_steps``; and, when the step is traced (the first
        ``fit``), a per-replica batch with a static size that is not a multiple of ``m``,
        or (``m > 1``) a compiled loss with reduction ``"sum"`` or ``None``; from
        ``train_on_batch``, a batch that is not a multiple of ``m``.
      tf.errors.InvalidArgumentError: when a step runs, a per-replica batch with a dynamic
        size that is not a multiple of ``m``.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"use_micro_batches: `model` must be a Keras 3 keras.Model; got "
            f"{type(model).__module__}.{type(model).__name__}. (For a tf_keras "
            "model, call optimizer.apply_grouped_gradients in its train_step.)"
        )
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"use_micro_batches needs the TensorFlow backend of Keras; this "
            f"Keras runs on {keras.backend.backend()!r} "
            "(set KERAS_BACKEND=tensorflow)."
        )
    if isinstance(num_groups, bool) or not isinstance(num_groups, int):
        raise TypeError(f"use_micro_batches: `num_groups` must be an int >= 1; got {num_groups!r}.")
    if num_groups < 1:
        raise ValueError(f"use_micro_batches: `num_groups` must be an int >= 1; got {num_groups}.")
    step = type(model).train_step
    if step is not keras_internals.KERAS_TRAIN_STEP:
        raise TypeError(
            f"use_micro_batches: {type(model).__name__} overrides `train_step` "
            f"(defined in {step.__module__}.{step.__qualname__}); use_micro_batches "
            "replaces Keras' own train_step and would silently discard yours. Split the "
            "batch in your train_step instead and call "
            "`self.optimizer.apply_grouped_gradients(grads_and_vars, sq_sums, "
            "num_groups=m)` with the groups' summed gradients and squares."
        )
    keras_internals.check_model(model, "use_micro_batches")
    if getattr(model, "optimizer", None) is not None:
        _check_optimizer(model.optimizer, num_groups)

    def train_step(data):
        return _grouped_train_step(model, num_groups, data)

    train_step.__doc__ = (
        f"Keras' train_step with {num_groups} micro-batch group(s) per "
        "replica (vrgd_tf.micro_batches.use_micro_batches)."
    )
    # Plain attributes: not tracked (no variables, nothing to save).
    object.__setattr__(model, "train_step", train_step)
    object.__setattr__(model, "train_on_batch", _checked_train_on_batch(model, num_groups))
    object.__setattr__(model, _ATTR, num_groups)
    # fit() reuses a train function made before; make it trace the new step.
    model.train_function = None
    return model


def _checked_train_on_batch(model, num_groups) -> Callable:
    """``model.train_on_batch`` that first checks the batch splits into the groups.

    Keras' ``train_on_batch`` traces its step with a dynamic batch dimension once the batch
    size has changed between calls, where :func:`split_batch` can only check at run time
    (a graph ``InvalidArgumentError``); the batch's NumPy or tensor rows are known here,
    before any tracing. Every replica gets the whole batch in ``train_on_batch``, so the
    batch itself must split into ``num_groups``.
    """
    keras_train_on_batch = type(model).train_on_batch
    signature = inspect.signature(keras_train_on_batch)

    def train_on_batch(*args, **kwargs):
        bound = signature.bind(model, *args, **kwargs).arguments
        data = tuple(bound.get(k) for k in ("x", "y", "sample_weight"))
        rows = {_static_rows(t) for t in keras.tree.flatten(data) if _has_rows(t)} - {None}
        for size in sorted(rows):
            if size % num_groups:
                raise ValueError(
                    _indivisible(
                        "`train_on_batch` batch",
                        size,
                        num_groups,
                        f"Pass a batch whose size is a multiple of num_groups={num_groups} "
                        "(train_on_batch gives every replica the whole batch), or call "
                        "`use_micro_batches(model, num_groups=...)` with a divisor of it.",
                    )
                )
        return keras_train_on_batch(model, *args, **kwargs)

    train_on_batch.__doc__ = keras_train_on_batch.__doc__
    return train_on_batch


def _has_rows(t) -> bool:
    """Whether ``t`` (a leaf of the batch) is an array or tensor with a batch dimension."""
    return hasattr(t, "shape") and tf.TensorShape(t.shape).rank not in (0, None)


def _indivisible(what: str, size: int, num_groups: int, fix: str) -> str:
    """The message for a batch of ``size`` examples that ``num_groups`` does not divide."""
    return (
        f"Micro-batch groups: the {what} of {size} examples does not split into "
        f"num_groups={num_groups} equal micro-batches ({size} % {num_groups} = "
        f"{size % num_groups}). {fix}"
    )


def micro_batch_groups(model: keras.Model) -> int:
    """The ``num_groups`` that :func:`use_micro_batches` set on ``model``; 1 if none."""
    return int(getattr(model, _ATTR, 1))


def split_batch(data, num_groups: int, *, what: str = "per-replica batch") -> List:
    """Splits every tensor of a nested batch into ``num_groups`` equal, contiguous parts.

    Args:
      data: a nest (tuples, lists, dicts) of ``tf.Tensor``/``tf.RaggedTensor`` (and None)
        sharing the batch dimension 0.
      num_groups: int >= 1.
      what: how the messages name the batch.

    Returns:
      A list of ``num_groups`` nests of ``data``'s structure: part ``j`` holds rows
      ``j*b .. (j+1)*b - 1`` of every tensor, ``b = batch / num_groups``; None stays None.

    Raises:
      ValueError: the batch size is static and not a multiple of ``num_groups`` (at trace
        time), or the tensors' static batch sizes differ.
      TypeError: a leaf that is neither a tensor nor a ragged tensor (e.g. a SparseTensor).
      tf.errors.InvalidArgumentError: (when run) a dynamic batch size that is not a multiple
        of ``num_groups``.
    """
    flat = keras.tree.flatten(data)
    leaves = [t for t in flat if t is not None]
    if num_groups == 1 or not leaves:
        return [data] * num_groups
    for t in leaves:
        if not isinstance(t, (tf.Tensor, tf.RaggedTensor, tf.Variable)):
            raise TypeError(
                f"Micro-batch groups: cannot split a {type(t).__name__} of the "
                f"{what} along its batch dimension; only tf.Tensor and "
                "tf.RaggedTensor inputs are supported."
            )
    fix = (
        f"Make it a multiple of num_groups={num_groups}: a global batch that is a "
        f"multiple of (replicas x {num_groups}), and `drop_remainder=True` in "
        "`Dataset.batch` (or a number of examples that is a multiple of `batch_size` "
        "in `fit(x, y, batch_size=...)`) so that the last batch is not partial."
    )
    static = {_static_rows(t) for t in leaves} - {None}
    if len(static) > 1:
        raise ValueError(
            f"Micro-batch groups: the tensors of the {what} have different "
            f"batch sizes {sorted(static)}; they must share dimension 0."
        )
    checks = []
    if static:
        size = static.pop()
        if size % num_groups:
            raise ValueError(_indivisible(what, size, num_groups, fix))
    else:
        rows = _dynamic_rows(leaves[0])
        checks.append(
            tf.debugging.Assert(
                tf.equal(tf.math.floormod(rows, num_groups), 0),
                [
                    f"Micro-batch groups: the {what} size (the number after this message) is "
                    f"not a multiple of num_groups={num_groups}. {fix} Size:",
                    rows,
                ],
            )
        )
    with tf.control_dependencies(checks):
        parts = [None if t is None else _split(t, num_groups) for t in flat]
    return [
        keras.tree.pack_sequence_as(data, [None if p is None else p[j] for p in parts])
        for j in range(num_groups)
    ]


def _static_rows(t) -> Optional[int]:
    """Static size of dimension 0 (tensors, ragged tensors, NumPy arrays), None if unknown."""
    shape = tf.TensorShape(t.shape)
    return None if shape.rank == 0 or shape[0] is None else int(shape[0])


def _dynamic_rows(t):
    if isinstance(t, tf.RaggedTensor):
        return t.nrows(out_type=tf.int32)
    return tf.shape(t, out_type=tf.int32)[0]


def _split(t, num_groups):
    if isinstance(t, tf.RaggedTensor):
        size = _dynamic_rows(t) // num_groups
        return [t[j * size : (j + 1) * size] for j in range(num_groups)]
    t = tf.convert_to_tensor(t)
    if t.shape.rank == 0:
        raise ValueError(
            "Micro-batch groups: cannot split a scalar input along a batch "
            "dimension; every input, target and sample weight needs one."
        )
    # A no-op identity keeps the control dependencies (the divisibility check) on the parts.
    return tf.split(tf.identity(t), num_groups, axis=0)


def _inner_optimizer(optimizer):
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.inner_optimizer
    return optimizer


def _check_optimizer(optimizer, num_groups) -> None:
    """Raises unless ``optimizer`` is a Keras 3 VRGD optimizer (possibly loss-scaled)."""
    inner = _inner_optimizer(optimizer)
    if not isinstance(inner, _vr._KerasVRGDMixin):
        kind = f"{type(optimizer).__module__}.{type(optimizer).__name__}"
        if inner is not optimizer:
            kind += f" around {type(inner).__module__}.{type(inner).__name__}"
        hint = ""
        if isinstance(inner, common.VRGDCommon):
            hint = (
                " (a tf_keras-family VRGD optimizer: use the Keras 3 class of the same "
                "name, vrgd_tf.VRGDSGD etc., with a Keras 3 model)"
            )
        raise TypeError(
            f"use_micro_batches(model, num_groups={num_groups}): the model's optimizer "
            f"(`optimizer` of model.compile) must be a Keras 3 VRGD optimizer: "
            f"vrgd_tf.VRGDSGD, VRGDAdam, VRGDLars, VRGDLamb or a class made by "
            f"vrgd_tf.make_vrgd_optimizer, possibly inside "
            f"keras.optimizers.LossScaleOptimizer; got {kind}{hint}. The groups are GSNR "
            "samples for VRGD: compile with a VRGD optimizer, e.g. "
            "vrgd_tf.make_vrgd_optimizer(keras.optimizers.AdamW)(...)."
        )
    if inner.gradient_accumulation_steps:
        raise ValueError(
            f"use_micro_batches(model, num_groups={num_groups}): the optimizer's "
            f"`gradient_accumulation_steps={inner.gradient_accumulation_steps}` cannot be "
            "combined with micro-batch groups: Keras would apply the accumulated gradient "
            "with the squares of the last step only. Leave it unset; the groups already "
            "accumulate within a step (raise the batch and num_groups instead)."
        )


def _check_loss_reductions(model, num_groups) -> None:
    """Refuses compiled losses whose value sums (not averages) over the batch."""
    for name, reduction in keras_internals.compiled_loss_reductions(model):
        if reduction not in _MEAN_REDUCTIONS:
            raise ValueError(
                f"use_micro_batches(model, num_groups={num_groups}): the compiled loss "
                f"{name!r} has reduction={reduction!r}, so the whole batch's loss is the "
                f"sum, not the mean, of the {num_groups} groups' losses and the groups' "
                "gradients would be scaled by 1/num_groups. Compile with a loss that "
                "averages over the batch (reduction='sum_over_batch_size', Keras' default)."
            )


# --- the group loop ---------------------------------------------------------------------------


class GroupGradients(NamedTuple):
    """One replica's step in micro-batch groups, as :func:`run_groups` returns it.

    Attributes:
      grads_and_vars: list of ``(gradient, variable)``, the variables in the order they
        first appeared: the groups' gradients combined by :func:`sum_group_gradients` (None
        if no group had one). What ``apply_grouped_gradients`` takes.
      sq_sums: list, one per pair: the sum over the groups of the squared dense gradient
        (the variable's shape), None where the gradient is None, for an
        ``overwrite_with_gradient`` variable, or with ``squares=False``.
      outputs: list, one per group: the second item ``group_step`` returned.
      num_contributing: None (no ``contributes`` given), or float32 scalar: this replica's
        count for the GSNR step (``docs/spec.md`` section 1), the groups that contribute,
        or 0 when a group that does not sent a nonzero gradient (a weight regularizer on a
        group without examples: the step then sees a stray gradient and is the base step).
    """

    grads_and_vars: List[Tuple[Any, Any]]
    sq_sums: List[Any]
    outputs: List[Any]
    num_contributing: Any = None


def group_contributes(group, sample_weight=None) -> tf.Tensor:
    """Scalar bool: whether a micro-batch group is a GSNR sample (``docs/spec.md`` section
    1): it holds at least one example of nonzero weight.

    Args:
      group: the group's nest of tensors (e.g. its inputs ``x``); its rows are those of the
        first tensor with a batch dimension (no such tensor: it has rows).
      sample_weight: None, or the group's sample weights (a tensor or a nest of them, None
        leaves ignored); None: every example has weight 1. A NaN weight is nonzero.

    Returns:
      tf.Tensor: scalar bool, rows > 0 and (no weights, or some weight != 0).
    """
    leaves = [t for t in keras.tree.flatten(group) if t is not None and _has_rows(t)]
    has = tf.constant(True) if not leaves else _dynamic_rows(leaves[0]) > 0
    weights = [] if sample_weight is None else keras.tree.flatten(sample_weight)
    weights = [tf.convert_to_tensor(w) for w in weights if w is not None]
    if weights:
        nonzero = [tf.reduce_any(tf.not_equal(w, tf.zeros([], w.dtype))) for w in weights]
        has = tf.logical_and(has, tf.reduce_any(tf.stack(nonzero)))
    return has


def _stray(pairs) -> tf.Tensor:
    """Scalar bool: some gradient of ``pairs`` (one group's) is nonzero or NaN (its
    ``overwrite_with_gradient`` variables aside)."""
    values = [
        g.values if isinstance(g, tf.IndexedSlices) else tf.convert_to_tensor(g)
        for g, v in pairs
        if g is not None and not overwrites_with_gradient(v)
    ]
    return samples_lib.nonzero_or_nan(values)


def _num_contributing(contributes, strays) -> tf.Tensor:
    """float32 scalar: the count of ``contributes`` (scalar bools), 0 if some ``strays``."""
    count = tf.add_n([tf.cast(c, tf.float32) for c in contributes])
    if not strays:
        return count
    return tf.where(tf.reduce_any(tf.stack(strays)), 0.0, count)


def run_groups(
    groups: Sequence,
    group_step: Callable,
    *,
    scale: Optional[float] = None,
    squares=True,
    contributes: Optional[Sequence] = None,
) -> GroupGradients:
    """The micro-batch group loop: each group's gradients at the same weights, combined.

    The one loop behind :func:`use_micro_batches` (Keras 3 ``fit``), Model Garden's
    :class:`vrgd_tf.model_garden.trainer.VRGDTrainer` and ``benchmarks/groups.py``. The
    groups run one after another: group ``j + 1``'s ``group_step`` waits (control
    dependencies) for group ``j``'s squares (or, with ``squares=False``, its gradients), so
    that only one micro-batch's activations are alive at a time, plus two gradient-sized
    accumulators.

    Args:
      groups: the ``m`` parts of the per-replica batch (e.g. :func:`split_batch`), m >= 1.
      group_step: ``fn(group) -> (grads_and_vars, output)``: one group's forward and
        backward pass; ``grads_and_vars`` a list of ``(gradient or None, variable)``
        (``tf.Tensor`` or ``tf.IndexedSlices``), ``output`` anything (losses, predictions,
        logs), collected in :attr:`GroupGradients.outputs`.
      scale: None, or a float each group's gradient is multiplied by before it is summed
        and squared (e.g. ``1 / m`` when each group's loss is the mean over the group).
        Not applied to ``overwrite_with_gradient`` variables.
      squares: whether to sum the squared gradients (False: a control run without GSNR).
      contributes: None, or one scalar bool per group (:func:`group_contributes`): then
        :attr:`GroupGradients.num_contributing` is the replica's count, and with ``m >= 2``
        each group that does not contribute has its gradient checked for a stray nonzero
        value (read only for such a group).

    Returns:
      A :class:`GroupGradients`.
    """
    variables, parts, sq_sums, outputs, strays = {}, {}, {}, [], []
    previous = []
    for j, group in enumerate(groups):
        with tf.control_dependencies(previous):
            pairs, output = group_step(group)
        outputs.append(output)
        if contributes is not None and len(groups) > 1:
            strays.append(
                tf.cond(contributes[j], lambda: tf.constant(False), lambda p=pairs: _stray(p))
            )
        previous = []
        for g, v in pairs:
            key = id(v)
            if key not in variables:
                variables[key], parts[key], sq_sums[key] = v, [], None
            if g is None:
                continue
            overwrite = overwrites_with_gradient(v)
            if scale is not None and not overwrite:
                g = _scale(g, scale)
            parts[key].append(g)
            if squares and not overwrite:
                sq_sums[key] = add_square(sq_sums[key], g)
                previous.append(sq_sums[key])
            else:
                previous += tf.nest.flatten(g, expand_composites=True)
    return GroupGradients(
        [(sum_group_gradients(parts[k], v), v) for k, v in variables.items()],
        [sq_sums[k] for k in variables],
        outputs,
        None if contributes is None else _num_contributing(contributes, strays),
    )


def _grouped_train_step(model, num_groups, data):
    """The train step installed by :func:`use_micro_batches` (runs on each replica)."""
    optimizer = model.optimizer
    _check_optimizer(optimizer, num_groups)
    m = num_groups
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    trainable = model.trainable_weights
    if trainable and not optimizer.built:
        # Without a tf.distribute strategy Keras builds the optimizer at its first apply,
        # inside the traced step; build it eagerly instead (the VRGD build reads its
        # config, which needs eager values).
        with tf.init_scope():
            optimizer.build(trainable)

    def group_step(group):
        with tf.GradientTape() as tape:
            loss, y_pred = keras_internals.group_loss(model, *group)
            scaled = loss * tf.cast(1.0 / m, loss.dtype) if m > 1 else loss
            scaled = optimizer.scale_loss(scaled)
        grads = tape.gradient(scaled, trainable) if trainable else []
        return list(zip(grads, trainable)), (loss, y_pred)

    groups = split_batch((x, y, sample_weight), m)
    contributes = [group_contributes(group[0], group[2]) for group in groups]
    result = run_groups(groups, group_step, squares=m > 1, contributes=contributes)
    if m > 1:
        _check_loss_reductions(model, m)  # (Keras builds the compiled losses at first use)
    losses = [loss for loss, _ in result.outputs]
    loss = losses[0] if m == 1 else tf.add_n(losses) / tf.cast(m, losses[0].dtype)
    keras_internals.track_loss(model, loss, x)
    if not trainable:
        warnings.warn("The model does not have any trainable weights.")
    elif m == 1:
        # apply_grouped_gradients with the squares equals this up to graph rewrites
        # of the gradient's rounding; Keras' own call keeps m = 1 bit for bit. The count
        # from the data goes beside it (spec section 1).
        with _inner_optimizer(optimizer)._vrgd_counting(result.num_contributing):
            optimizer.apply_gradients(result.grads_and_vars)
    elif isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        keras_internals.apply_grouped_loss_scaled(
            optimizer,
            result.grads_and_vars,
            result.sq_sums,
            num_groups=m,
            num_contributing=result.num_contributing,
        )
    else:  # (an optimizer's own loss_scale_factor is divided out by apply_grouped_gradients)
        optimizer.apply_grouped_gradients(
            result.grads_and_vars,
            result.sq_sums,
            num_groups=m,
            num_contributing=result.num_contributing,
        )
    y_preds = [y_pred for _, y_pred in result.outputs]
    y_pred = y_preds[0] if m == 1 else _concat_structures(y_preds)
    return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)


def overwrites_with_gradient(variable) -> bool:
    """Whether Keras overwrites ``variable`` with its "gradient" instead of descending on it
    (``keras.Variable.overwrite_with_gradient``: the scales and amax histories of Keras'
    float8 layers, whose gradient is their new value)."""
    return bool(getattr(variable, "overwrite_with_gradient", False))


def sum_group_gradients(parts: Sequence, variable=None):
    """One variable's group gradients combined: their sum (their maximum for an
    ``overwrite_with_gradient`` variable).

    Args:
      parts: list of the groups' gradients of one variable (``tf.Tensor`` or
        ``tf.IndexedSlices``), possibly empty.
      variable: the variable, or None. If :func:`overwrites_with_gradient` holds for it
        (Keras' float8 scales and amax histories), each group's "gradient" is the value the
        variable is overwritten with: the groups' element-wise maximum, as Keras' own
        gradient accumulation combines them, which is the whole batch's value (the new
        scales depend only on the state before the step, the new amax-history entry is the
        largest ``|x|`` over the batch).

    Returns:
      None for an empty list; the one gradient for a list of one; the element-wise maximum
      for an overwritten ``variable``; a ``tf.IndexedSlices`` of all the groups' rows
      (indices and values concatenated, duplicates kept) if every part is sparse; else the
      dense sum.
    """
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    if variable is not None and overwrites_with_gradient(variable):
        out = tf.convert_to_tensor(parts[0])
        for g in parts[1:]:
            out = tf.maximum(out, tf.convert_to_tensor(g))
        return out
    if all(isinstance(g, tf.IndexedSlices) for g in parts):
        return tf.IndexedSlices(
            tf.concat([g.values for g in parts], 0),
            tf.concat([g.indices for g in parts], 0),
            parts[0].dense_shape,
        )
    return tf.add_n([tf.convert_to_tensor(g) for g in parts])


def add_square(total, gradient):
    """``total + gradient**2``, one group's term of the per-element sum of squares that
    ``apply_grouped_gradients`` takes as ``sq_sums`` (``docs/spec.md`` section 1).

    Args:
      total: None (the first group) or the dense sum so far, the variable's shape.
      gradient: the group's gradient, ``tf.Tensor`` or ``tf.IndexedSlices`` (squared in
        its dense form).

    Returns:
      The dense new sum, the gradient's dtype.
    """
    square = tf.square(tf.convert_to_tensor(gradient))
    return square if total is None else total + square


def _scale(g, factor):
    """``g * factor`` for a dense or a sparse gradient."""
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(
            g.values * tf.cast(factor, g.values.dtype), g.indices, g.dense_shape
        )
    return g * tf.cast(factor, g.dtype)


def _concat_structures(structures: Sequence):
    """The groups' predictions, concatenated along the batch dimension, in group order."""
    flat = [keras.tree.flatten(s) for s in structures]
    joined = []
    for leaves in zip(*flat):
        if leaves[0] is None:
            joined.append(None)
        elif isinstance(leaves[0], tf.RaggedTensor):
            joined.append(tf.concat(list(leaves), axis=0))
        else:
            joined.append(tf.concat([tf.convert_to_tensor(t) for t in leaves], axis=0))
    return keras.tree.pack_sequence_as(structures[0], joined)
