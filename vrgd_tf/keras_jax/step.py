"""The grouped train step of the JAX path and its door, :func:`use_micro_batches`.

Samples (spec section 1, with micro-batch groups): the global batch ``B`` is split into
``k = n x m`` groups of ``B / k`` contiguous rows, ``n`` devices of the data axis of
``keras.distribution.DataParallel`` (1 without a distribution) and ``m`` groups per device.
Keras shards the batch contiguously over the devices, so device ``d`` holds samples
``d*m .. d*m + m - 1``. The same samples give the same weights whatever ``n`` and ``m`` are
(1 x 4, 2 x 2, 4 x 1), to float32 rounding.

How the per-group gradients are made: one ``jax.shard_map`` over the data axis, in which each
device runs its own ``m`` groups one after another (``jax.lax.scan``) into float32 running
sums of ``g`` and ``g*g`` (and the contributing groups, the losses and the non-trainable
floats); one ``psum`` over the data axis then gives ``S1`` and ``S2``, the step's only
collective (one all-reduce). Each device's program is the base's forward and backward pass
on ``B / k`` rows, ``m`` times, plus the GSNR math; nothing else is communicated.

* Not ``jax.vmap`` over the groups (the first design, ``spmd_axis_name=<data axis>``): for a
  convolution, vmap of the weight gradient over the groups is a grouped convolution
  (``feature_group_count=k``) that the SPMD partitioner does not split by group, so the
  activations were all-gathered and every device computed all ``k`` groups' weight
  gradients (1-D CNN, 8 CPU devices x 1 group, small and large batch: VR/base step 4.9 and
  8.8; with ``shard_map`` 1.4 and 1.1, one all-reduce and no all-gather), and that is slow on
  one device too (one H200, 8 groups: 3.4 to 4.5). Dense and attention layers were fine
  (BERT-tiny-shaped, 8 CPU devices: 1.9 and 1.2; with ``shard_map`` 1.7 and 1.1).
* ``shard_map`` runs with ``check_vma=False``: under the default check, ``jax.grad`` with
  respect to the replicated parameters inside ``shard_map`` is already summed over the
  devices, so each device's "own" gradient would be ``n`` times too large and ``g*g`` wrong,
  without an error (a test pins the per-device gradient).
* The loop rather than a vmap on each device: one group's activations at a time (memory of
  a ``B / k`` batch) and no grouped convolution. On XLA:CPU the loop is unrolled: there a
  convolution's weight gradient inside a loop body runs about 50 times slower than outside
  (a ``(8, 512, 40, 32)`` input: 6.3 s against 0.12 s), which made the rolled loop 6.7 to 9.6
  times the base's step for the 1-D CNN at 1 device x 8 groups; unrolled it is 1.1 and 0.6
  (and the BERT-tiny-shaped model 1.3 and 1.0; rolled 1.0 and 0.8; vmap 3.8 and 1.3; small
  and large batches, 2 loaded CPU cores). Elsewhere the loop stays rolled: the compile time
  and code of one group (unrolled, XLA compiles the model ``m`` times); not yet timed on an
  accelerator. ``use_micro_batches(..., unroll=)`` chooses either way.
* With one group per device (``m = 1``) there is no loop: each device runs the base's
  program on its rows.

Non-trainable state (BatchNorm): each group normalises with its own batch statistics (as
per-replica BatchNorm under ``TPUStrategy``; stock Keras-JAX ``DataParallel`` normalises over
the global batch), and the groups' new float values (moving mean and variance) are averaged;
integer state (seed generators, counters) takes group 0's. Every group draws the same
dropout mask pattern from the same seed state (as under the first design). The loss tracker
gets the mean of the groups' losses and the compiled metrics are computed once on the whole
batch.
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import keras
from jax.sharding import PartitionSpec
from keras.src import tree
from keras.src.trainers.data_adapters import data_adapter_utils

from vrgd_tf.keras_jax import optimizers as optimizers_lib

__all__ = ["use_micro_batches", "sample_plan"]


def use_micro_batches(
    model: keras.Model, num_groups: int, *, unroll: Optional[bool] = None
) -> keras.Model:
    """Makes ``model.fit`` take ``k = devices x num_groups`` GSNR samples per step (JAX).

    Sets the model instance's ``train_step`` to the grouped step (module docstring), the
    door a TensorFlow user already knows. Call it after ``model.compile`` with a VRGD
    optimizer; ``fit`` then trains with VRGD (always compiled by XLA on JAX). The setting is
    not saved: call it again after ``keras.models.load_model``.

    Args:
      model: a compiled Keras 3 model whose optimizer is a ``vrgd_tf`` VRGD optimizer.
      num_groups: int >= 1, the groups ``m`` per device; the global batch must be a
        multiple of ``k = n x m`` (``n`` devices of ``DataParallel``'s data axis).
      unroll: how a device's ``m`` groups run: None (default) unrolled on XLA:CPU and a
        rolled ``lax.scan`` elsewhere (module docstring); True unrolled (XLA compiles the
        model ``m`` times, ``m`` groups' activations may live at once); False rolled (one
        group's code and activations). The same sums either way, to float32 rounding.

    Returns:
      ``model``.

    Raises:
      TypeError: ``num_groups`` is not an int, ``unroll`` not None or a bool, or the
        optimizer is not a VRGD optimizer.
      ValueError: ``num_groups < 1``; a loss-scale optimizer (mixed ``float16``); or, at
        the first step, a batch that is not a multiple of ``k``.
    """
    if isinstance(num_groups, bool) or not isinstance(num_groups, int):
        raise TypeError(f"`num_groups` must be an int >= 1; got {num_groups!r}.")
    if num_groups < 1:
        raise ValueError(f"`num_groups` must be >= 1; got {num_groups}.")
    if unroll is not None and not isinstance(unroll, bool):
        raise TypeError(f"`unroll` must be None, True or False; got {unroll!r}.")
    optimizer = getattr(model, "optimizer", None)
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError(
            "use_micro_batches on JAX does not support a loss-scale optimizer (the "
            "'mixed_float16' policy). Use the 'mixed_bfloat16' policy, which needs no loss "
            "scaling, or the TensorFlow backend."
        )
    if not isinstance(optimizer, optimizers_lib.VRGDOptimizer):
        raise TypeError(
            "use_micro_batches: compile the model with a vrgd_tf VRGD optimizer first "
            f"(e.g. vrgd_tf.VRGDLamb); its optimizer is {type(optimizer).__name__}."
        )
    model.train_step = functools.partial(grouped_train_step, model, num_groups, unroll=unroll)
    model.train_function = None
    return model


def sample_plan(num_groups: int):
    """``(k, mesh, axis)``: the samples per step and the data axis of the current
    ``keras.distribution.DataParallel`` (``(num_groups, None, None)`` without one).

    Raises:
      ValueError: a distribution other than ``DataParallel``.
    """
    dist = keras.distribution.distribution()
    if dist is None:
        return num_groups, None, None
    if not isinstance(dist, keras.distribution.DataParallel):
        raise ValueError(
            f"use_micro_batches on JAX supports keras.distribution.DataParallel; got "
            f"{type(dist).__name__}. Use DataParallel (variables replicated)."
        )
    mesh = dist.device_mesh.backend_mesh
    axis = dist.batch_dim_name
    return mesh.shape[axis] * num_groups, mesh, axis


def _check_rows(t, k):
    if t is not None and t.shape[0] % k:
        raise ValueError(
            f"use_micro_batches: a batch of {t.shape[0]} rows cannot be split into k = {k} "
            "GSNR samples. Use a global batch that is a multiple of k and a data set whose "
            "size is a multiple of the batch (tf.data: `drop_remainder=True`), or "
            "`steps_per_epoch`."
        )


def _groups(t, m):
    """``t`` ``[R, ...]`` as ``[m, R / m, ...]`` (row-major: group ``i`` is the ``i``-th
    run of ``R / m`` contiguous rows)."""
    if t is None:
        return None
    return t.reshape((m, t.shape[0] // m) + tuple(t.shape[1:]))


def _summable(v):
    """Integer state as ``psum`` takes it (booleans as int32; cast back at the end)."""
    return v.astype("int32") if v.dtype == jnp.bool_ else v


def _is_float(v):
    return jnp.issubdtype(v.dtype, jnp.floating)


def _unroll(m, unroll):
    """The loop over a device's ``m`` groups: ``unroll`` if given, else rolled (``lax.scan``,
    one group's code and activations) but unrolled on XLA:CPU, whose weight-gradient
    convolution inside a loop body is about 50 times slower than outside (module docstring)."""
    if unroll is None:
        unroll = jax.default_backend() == "cpu"
    return m if unroll else 1


def grouped_train_step(model, num_groups, state, data, unroll=None):
    """``JAXTrainer.train_step`` (Keras 3.15) with ``k`` samples: per-group gradients (one
    ``shard_map`` over the data axis, the device's groups in a ``lax.scan``), their sums and
    the VRGD step (module docstring)."""
    trainable, non_trainable, optimizer_vars, metrics_vars = state
    x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(data)
    k, mesh, axis = sample_plan(num_groups)
    batch = (x, y, sample_weight)
    tree.map_structure(lambda t: _check_rows(t, k), batch)
    m = num_groups

    def device_part(trainable, non_trainable, metrics_vars, optimizer_vars, batch):
        """One device's ``m`` groups: the sums of ``g``, ``g*g``, the contributing groups,
        the losses and the float non-trainable values; integer state of group 0; the
        predictions ``[rows, ...]``. Summed over the data axis under ``shard_map``."""
        grad_fn = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)

        def group(xg, yg, swg):
            (_, aux), grads = grad_fn(
                trainable, non_trainable, metrics_vars, xg, yg, swg,
                training=True, optimizer_variables=optimizer_vars,
            )  # fmt: skip
            loss, y_pred, new_non_trainable, _ = aux
            return grads, loss, y_pred, new_non_trainable

        groups = tree.map_structure(lambda t: _groups(t, m), batch)
        acc, y_pred = _scan_groups(group, groups, m, trainable, non_trainable, unroll)
        y_pred = tree.map_structure(lambda t: t.reshape((-1,) + tuple(t.shape[2:])), y_pred)
        if mesh is not None:
            s1, s2, count, stray, loss, nt = acc
            first = jax.lax.axis_index(axis) == 0
            nt = [v if _is_float(v) else jnp.where(first, _summable(v), 0) for v in nt]
            acc = jax.lax.psum((s1, s2, count, stray, loss, nt), axis)
        return acc, y_pred

    args = (trainable, non_trainable, metrics_vars, optimizer_vars, batch)
    if mesh is not None:
        # check_vma=False: under the default check, jax.grad with respect to the replicated
        # parameters would already be summed over the devices (the "local" gradient n times
        # too large on n devices, g*g wrong, no error). Without it, each device's
        # gradient is that of its own rows (module docstring).
        rep, data_spec = PartitionSpec(), PartitionSpec(axis)
        device_part = jax.shard_map(
            device_part,
            mesh=mesh,
            in_specs=(rep, rep, rep, rep, data_spec),
            out_specs=(rep, data_spec),
            check_vma=False,
        )
    (s1, s2, count, stray, loss, nt), y_pred = device_part(*args)
    sums = optimizers_lib.GroupSums(list(s1), list(s2), count, stray, float(k))
    trainable, optimizer_vars = model.optimizer.vrgd_stateless_apply(
        optimizer_vars, sums, trainable
    )
    non_trainable = [
        (v / k).astype(old.dtype) if _is_float(old) else v.astype(old.dtype)
        for v, old in zip(nt, non_trainable)
    ]
    logs, metrics_vars = model._update_metrics_variables(
        metrics_vars, loss / k, x, y, y_pred, sample_weight
    )
    return logs, (trainable, non_trainable, optimizer_vars, metrics_vars)


def _group_contributes(swg):
    """Scalar bool: the group holds an example of nonzero weight (``swg``: its sample
    weights, a nest or None; a NaN weight is nonzero)."""
    weights = [w for w in tree.flatten(swg) if w is not None] if swg is not None else []
    if not weights:
        return jnp.array(True)
    return jnp.any(jnp.stack([jnp.any(jnp.asarray(w) != 0) for w in weights]))


def _scan_groups(group, groups, m, trainable, non_trainable, unroll):
    """The ``m`` groups one after another (``lax.scan``; straight-line code for ``m = 1``)
    with running sums: ``((S1, S2, contributing groups, stray groups, loss sum,
    non-trainable), y_pred)``, the non-trainable floats summed in float32 and the other
    values group 0's, the predictions ``[m, rows / m, ...]``. A group contributes when it
    holds an example of nonzero weight (``docs/spec.md`` section 1: no sample weight, or
    some weight != 0; its rows are static and > 0); one that does not but has a nonzero
    gradient (a weight regularizer) is stray."""

    def body(carry, item):
        i, xg, yg, swg = item
        s1, s2, count, stray, loss_sum, nt = carry
        grads, loss, y_pred, new_nt = group(xg, yg, swg)
        grads = [g.astype("float32") for g in grads]
        squares = [g * g for g in grads]
        counts = _group_contributes(swg)
        nonzero = jnp.any(jnp.stack([jnp.any(g != 0) for g in grads])) if grads else False
        carry = (
            [a + g for a, g in zip(s1, grads)],
            [a + sq for a, sq in zip(s2, squares)],
            count + counts.astype("float32"),
            stray + (~counts & nonzero).astype("float32"),
            loss_sum + loss.astype("float32"),
            [
                a + v.astype("float32") if _is_float(v) else jnp.where(i == 0, v, a)
                for a, v in zip(nt, new_nt)
            ],
        )
        return carry, y_pred

    zeros = [jnp.zeros(v.shape, "float32") for v in trainable]
    init = (
        zeros,
        [jnp.zeros_like(z) for z in zeros],
        jnp.zeros((), "float32"),
        jnp.zeros((), "float32"),
        jnp.zeros((), "float32"),
        [jnp.zeros(v.shape, "float32") if _is_float(v) else v for v in non_trainable],
    )
    items = (jnp.arange(m),) + tuple(groups)
    if m == 1:
        carry, y_pred = body(init, tree.map_structure(lambda t: None if t is None else t[0], items))
        return carry, tree.map_structure(lambda t: t[None], y_pred)
    return jax.lax.scan(body, init, items, unroll=_unroll(m, unroll))
