"""VRGD's GSNR step as a stateful building block: :class:`GSNRAggregator`.

The VRGD optimizers of both families hold one and call it where their base optimizer would
sum the replicas' gradients. It can equally serve a custom training loop under a
``tf.distribute`` strategy: called with each replica's own gradients, it returns each
replica's share of the variance-reduced sum, which any optimizer then applies as it applies
per-replica gradients (Keras 3 ``apply``/``apply_gradients``, a tf_keras optimizer's
default ``apply_gradients``; see the class's output contract). Or it is the cross-replica
aggregation of a tf_keras or Model Garden optimizer
(:attr:`GSNRAggregator.gradient_aggregator`).

The math is :func:`vrgd_tf.gsnr.variance_reduce` (paper arXiv 2309.13681, Algorithm 1 and
eqs. 7 to 10; spec ``docs/spec.md``); this module holds its state, its step counter and its
warnings.
"""

import dataclasses
import inspect
import logging
from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from vrgd_tf import gsnr, naming, strategies
from vrgd_tf.settings import DEFAULTS, VRGDSettings, args_doc, expose, signature_parameters

__all__ = ["GSNRAggregator", "has_gsnr"]

_LOG = logging.getLogger("vrgd_tf")


def _replica_local_variable(kind, index, shape, reference):
    """A zero float32 ON_READ / ONLY_FIRST_REPLICA ``tf.Variable`` (standalone state)."""
    del reference
    return gsnr.state.replica_local_variable(shape, f"vrgd_{kind}_{index}")


@expose(lambda self: self.settings)
class GSNRAggregator(tf.Module):
    """The GSNR step of VRGD: all-reduce gradients with their squares, scale by the factor.

    Call it in the replica context (inside ``strategy.run``) with the replica's own
    gradients, where an optimizer would sum the replicas' gradients. It all-reduces (SUM)
    the float32 ``sum_j x_j`` and then ``sum_j x_j**2`` (two calls; the squares in float32
    or bfloat16) over the ``R`` replicas in sync, each holding
    ``m = num_groups`` micro-batch gradients ``x_j``, so ``k = R * m`` GSNR samples; computes
    per element the GSNR ``r = S1**2 / (k S2 - S1**2)`` (eq. 7), the factor
    ``clip(r / mean(r), gamma, 1)`` per variable (eqs. 8, 9), its momentum if
    ``beta_3 > 0`` (Section 4.2, *our reading*), and the variance-reduced sum
    ``factor * S1`` (eq. 10), which the base update rule then uses.

    **The output: each replica's share.** Every replica gets ``factor * S1 / R``, so the
    sum of the outputs over the replicas is the variance-reduced sum. Whatever a custom loop
    does next with per-replica gradients ends in an all-reduce SUM over the replicas (Keras
    3's ``apply``/``apply_gradients`` under a strategy, a tf_keras optimizer's default
    ``apply_gradients``, either ``LossScaleOptimizer``), and that sum of the shares is the
    variance-reduced sum applied once; so it is after any step in between that is linear
    in the gradient: ``tf.identity``, ``* c``, a cast to float16 and back, a loss scale's
    unscaling. Why a share and not the sum: a sum is summed again by every optimizer not
    told otherwise, ``R`` times too far, with no error that vrgd_tf could raise without
    patching Keras and tf_keras for the whole process (and marks on the tensors do not
    survive ``tf.identity`` or clipping); an apply owned by the aggregator, or a type that
    the optimizers refuse, would shut out the optimizers users already have. With one
    replica the share is the sum. The VRGD optimizers and :attr:`gradient_aggregator` use
    the sum itself (their hosts expect the aggregation there). A VRGD optimizer or a second
    call handed the shares finds them equal on every replica, warns that no variable had a
    GSNR and steps their sum, once.

    *Clipping* a share clips one replica's contribution, as plain Keras clips per-replica
    gradients in a custom loop: ``tf.clip_by_global_norm(shares, c)`` and
    ``tf.clip_by_norm`` clip the sum at ``R * c``, ``tf.clip_by_value(shares, -c, c)``
    bounds each element of the sum by ``R * c``, and so do a Keras 3 optimizer's
    ``clipnorm``, ``global_clipnorm`` and ``clipvalue`` (Keras 3 clips before its
    all-reduce). Never further than the unclipped step. To clip the variance-reduced sum
    at ``c``, clip the shares at ``c / R`` (``R = strategy.num_replicas_in_sync``), or give
    the shares to a tf_keras optimizer with ``global_clipnorm=c`` (tf_keras clips after its
    all-reduce).

    *Limitation:* ``apply_gradients(..., experimental_aggregate_gradients=False)`` of a
    plain tf_keras optimizer takes the shares for the sum and steps ``R`` times short (no
    error: only a patch of tf_keras could tell). Leave the default there; to have a tf_keras
    optimizer skip its own all-reduce, give it ``gradient_aggregator=`` this aggregator's
    :attr:`gradient_aggregator` and pass each replica's own gradients to its default
    ``apply_gradients``. A VRGD tf_keras optimizer refuses ``False`` for gradients its own
    aggregation did not return.

    Example: a custom training step with a Keras 3 optimizer, on 2 logical CPU replicas.
    Replica 0's gradient is ``[1, 1]`` and replica 1's ``[3, -0.5]``: the replicas agree on
    element 0 (GSNR 4) more than on element 1 (GSNR 1/9), so the factor
    ``clip(r / mean(r), 0.1, 1)`` is ``[1, 0.1]`` and the summed gradient ``S1 = [4, 0.5]``
    becomes ``[4, 0.05]``, of which each replica gets the share ``[2, 0.025]``:

    >>> import keras
    >>> import tensorflow as tf
    >>> import vrgd_tf
    >>> from vrgd_tf import devices
    >>> strategy = devices.cpu_strategy(2)
    >>> with strategy.scope():
    ...     w = keras.Variable([0.0, 0.0], name="w")
    ...     aggregator = vrgd_tf.GSNRAggregator(gamma=0.1)
    ...     aggregator.build([w])
    ...     optimizer = keras.optimizers.SGD(0.1)  # any optimizer, Keras 3 or tf_keras
    ...     optimizer.build([w])
    >>> @tf.function
    ... def train_step(inputs):
    ...     def replica_step(x):
    ...         with tf.GradientTape() as tape:
    ...             loss = tf.reduce_sum(w * x)  # this replica's gradient is x
    ...         grads = tape.gradient(loss, [w])
    ...         shares = aggregator(grads, [w])  # all-reduce with the squares, GSNR factor
    ...         optimizer.apply_gradients(zip(shares, [w]))  # sums the shares: [4, 0.05]
    ...         return shares[0]
    ...     return strategy.run(replica_step, args=(inputs,))
    >>> inputs = strategy.experimental_distribute_values_from_function(
    ...     lambda ctx: tf.constant([[1.0, 1.0], [3.0, -0.5]])[ctx.replica_id_in_sync_group]
    ... )
    >>> print(strategy.experimental_local_results(train_step(inputs))[0].numpy())
    [2.    0.025]
    >>> print(w.numpy())  # SGD with learning rate 0.1 on the variance-reduced sum
    [-0.4   -0.005]
    >>> stats = aggregator.statistics()["w"]
    >>> print(round(stats["mean_gsnr"], 4), stats["frac_at_gamma"], stats["frac_at_one"])
    2.0556 0.5 0.5

    In a real step the loss is divided by the global batch size, so that the summed gradient
    is the batch mean, as ``apply_gradients`` expects. The aggregator can also be the
    ``gradient_aggregator`` of any tf_keras or Model Garden optimizer (see
    :attr:`gradient_aggregator`).

    A ``factor_transforms`` entry gets the flat float32 factor of one variable and a
    :class:`vrgd_tf.gsnr.FactorContext` (the variable, its index, ``S1`` and ``S2`` on the
    factor's elements, ``k`` and the step) and returns float32 of the factor's shape, the
    same on every replica, with no Python side effects (it is traced into the step); see
    the second example below.

    ``gamma``, ``beta_3`` and ``statistics_interval`` may also be given by position, in this
    order; the settings are :class:`vrgd_tf.settings.VRGDSettings`.

    Args:
      {settings}
      settings: a :class:`vrgd_tf.settings.VRGDSettings` instead of the settings one by
        one (not combined with them).
      sparse_statistics: ``"rows"`` (default) or ``"dense"``, the statistics path of
        ``tf.IndexedSlices`` gradients (spec section 4): ``"rows"`` takes exact statistics
        on the rows some replica touched, with one all-gather and nothing of the variable's
        dense shape (where the indices have a static length, the values are not float64
        and no micro-batch squares are handed over; otherwise the dense form); ``"dense"`` always the statistics of the
        dense form, all-reduced with the dense gradients (the same numbers, to float
        rounding; for comparisons and benchmarks). Also settable as the attribute before
        the first step, e.g. ``optimizer.vrgd_aggregator.sparse_statistics = "dense"``.
      pack_limit: int >= 0, default :data:`vrgd_tf.gsnr.PACK_LIMIT` (16384): the dense
        gradients of at most this many elements are computed on as one buffer after the
        all-reduce (fewer ops per step for many small variables, the same values bit for
        bit outside XLA, to float32 rounding under XLA: ``docs/spec.md`` section 1; 0
        packs none, for comparisons and benchmarks). Also settable as the attribute before the
        first step.
      owner: str, the name used in warnings (the optimizer's class). Default the name.
      make_variable: ``fn(kind, index, shape, reference) -> variable`` creating the state
        (see :class:`vrgd_tf.gsnr.VRGDState`); the optimizer families pass theirs so the
        state is checkpointed as the optimizer's. Default: plain ``tf.Variable`` objects
        tracked by this module, so ``tf.train.Checkpoint(aggregator=...)`` saves them.
      var_key: ``fn(variable) -> hashable`` identifying a trainable variable. Default
        ``id`` of the variable (of its distributed container under a strategy).
      name: str, the module name. Default ``"gsnr_aggregator"``.

    State (after :meth:`build`): per variable ``statistics`` (float32 ``[5]``, the fields of
    :data:`vrgd_tf.gsnr.STATISTICS_FIELDS`), and if
    ``beta_3 > 0`` ``deficit`` (float32, the variable's shape) and ``correction`` (float32
    ``[]``); standalone also ``steps`` (int64 ``[]``, completed calls). All replica-local
    (``ON_READ``, ``ONLY_FIRST_REPLICA``): every replica computes the same values.

    Raises:
      ValueError, TypeError: at construction, an argument outside its range (named), or
        under a ``CentralStorageStrategy`` or ``ParameterServerStrategy`` (also at
        :meth:`build`; :mod:`vrgd_tf.strategies`).

    Example: a factor transform that makes the factor one number per variable, the update
    norm ratio ``||f * S1|| / ||S1||`` (here ``||[4, 0.05]|| / ||[4, 0.5]|| = 0.99236``), on
    the replicas and gradients of the first example:

    >>> def scalar(factor, context):
    ...     s1 = context.summed
    ...     ratio = tf.math.divide_no_nan(tf.norm(factor * s1), tf.norm(s1))
    ...     ratio = tf.where(tf.norm(s1) > 0, ratio, 1.0)
    ...     return tf.fill(tf.shape(factor), ratio)
    >>> with strategy.scope():
    ...     scalar_aggregator = vrgd_tf.GSNRAggregator(gamma=0.1, factor_transforms=[scalar])
    ...     scalar_aggregator.build([w])
    >>> @tf.function
    ... def summed_gradient(inputs):
    ...     shares = strategy.run(lambda x: scalar_aggregator([x], [w])[0], args=(inputs,))
    ...     return strategy.reduce("SUM", shares, axis=None)  # the shares' sum
    >>> print(summed_gradient(inputs).numpy())
    [3.9694214  0.49617767]
    """

    def __init__(
        self,
        *args,
        settings: Optional[VRGDSettings] = None,
        sparse_statistics="rows",
        pack_limit: int = gsnr.PACK_LIMIT,
        owner=None,
        make_variable: Optional[Callable] = None,
        var_key: Optional[Callable] = None,
        name="gsnr_aggregator",
        **kwargs,
    ):
        super().__init__(name=name)
        self.settings = _settings(args, kwargs, settings)
        self._options = gsnr.GSNROptions(
            gamma=self.settings.gamma,
            beta_3=self.settings.beta_3,
            squares_dtype=self.settings.squares_dtype,
            factor_transforms=self.settings.factor_transforms,
            sparse_statistics=sparse_statistics,
            split_half_stride=self.settings.statistics_interval if self.settings.split_half else 0,
            pack_limit=pack_limit,
        )
        self._owner = owner or name
        self._standalone = make_variable is None
        self._make_variable = make_variable or _replica_local_variable
        self._var_key = var_key or _default_var_key
        self.state = None
        self._steps = None
        self._warned = set()
        self._traced = False
        self._num_samples = "several"
        strategies.check_strategy(tf.distribute.get_strategy(), self._owner)

    @property
    def options(self) -> gsnr.GSNROptions:
        """The :class:`vrgd_tf.gsnr.GSNROptions` of the step (checked at construction)."""
        return self._options

    @property
    def sparse_statistics(self) -> str:
        """``"rows"`` or ``"dense"``: the statistics path of ``tf.IndexedSlices`` gradients
        (see the class's Args). May be set until the first step is traced.

        Raises:
          ValueError: set to another value, or after the first step was traced.
        """
        return self._options.sparse_statistics

    @sparse_statistics.setter
    def sparse_statistics(self, value) -> None:
        self._set_option("sparse_statistics", value, "their statistics path")

    def _set_option(self, name: str, value, kept: str) -> None:
        """Sets the step's option ``name`` (checked by :class:`vrgd_tf.gsnr.GSNROptions`);
        a ValueError once a step was traced (the steps traced so far keep ``kept``)."""
        if self._traced:
            raise ValueError(
                f"{self._owner}: `{name}` must be set before the first step (the steps "
                f"traced so far keep {kept})."
            )
        self._options = dataclasses.replace(self._options, **{name: value})

    @property
    def pack_limit(self) -> int:
        """The largest dense gradient (elements) packed with the others into one buffer
        (see the class's Args). May be set until the first step is traced.

        Raises:
          TypeError, ValueError: set to a value that is not an int >= 0, or after the first
            step was traced.
        """
        return self._options.pack_limit

    @pack_limit.setter
    def pack_limit(self, value) -> None:
        self._set_option("pack_limit", value, "their layout")

    # --- state -----------------------------------------------------------------------------

    def build(self, variables: Sequence) -> None:
        """Creates the state of ``variables`` not seen before (call in the strategy scope).

        Idempotent: variables that already have state are skipped.

        Raises:
          ValueError: under a strategy VRGD cannot run under
            (:func:`vrgd_tf.strategies.check_strategy`).
        """
        strategies.check_strategy(tf.distribute.get_strategy(), self._owner)
        if self.state is None:
            self.state = gsnr.VRGDState(self._make_variable, self._var_key, self.beta_3)
            if self._standalone:
                self._steps = tf.Variable(
                    tf.zeros([], tf.int64),
                    trainable=False,
                    name="vrgd_steps",
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                )
        self.state.add_variables(variables)
        if self._standalone:  # tracked by this module for checkpoints
            self._tracked = (
                list(self.state.statistics)
                + list(self.state.deficits)
                + list(self.state.corrections)
            )

    @property
    def built(self) -> bool:
        return self.state is not None

    # --- the step ----------------------------------------------------------------------------

    def __call__(
        self,
        grads: Sequence,
        variables: Sequence,
        *,
        sq_sums=None,
        num_groups: int = 1,
        step=None,
        replica_context=None,
    ):
        """Each replica's share of the variance-reduced sum (call in the replica context).

        Args:
          grads: list of ``n`` gradients of this replica (``tf.Tensor``,
            ``tf.IndexedSlices`` or None): the sum over its ``num_groups`` micro-batches.
            Any float dtype.
          variables: the ``n`` trainable variables, in the same order (built or not).
          sq_sums: None (``num_groups == 1``) or ``n`` dense tensors (None where ``grads``
            is None): the sums over the micro-batches of the squared gradients.
          num_groups: int >= 1, micro-batch groups per replica; ``k = replicas * num_groups``.
          step: None, or a scalar int tensor: the steps completed before this one (e.g.
            ``optimizer.iterations``), for ``statistics_interval``. None: this module's own
            counter (standalone only), advanced on every call with finite gradients.
          replica_context: default ``tf.distribute.get_replica_context()``.

        Returns:
          List of ``n``: None where the gradient is None, else the variance-reduced SUM
          over all ``R`` replicas divided by ``R`` (see :func:`vrgd_tf.gsnr.variance_reduce`
          for the sum), the same on every replica, in the gradient's shape and dtype (a
          sparse gradient gives the strategy's own sparse SUM, row-scaled, its values
          divided by ``R``). An all-reduce SUM of it, as every optimizer does with
          per-replica gradients, is the variance-reduced sum (the class's output
          contract); with one replica it is the sum.

        Raises:
          RuntimeError: in a cross-replica context, or on a first call inside a
            ``tf.function`` under a multi-replica strategy before :meth:`build`.
          ValueError: ``grads`` and ``variables`` of different lengths; see also
            :func:`vrgd_tf.gsnr.variance_reduce`.
        """
        summed = self._aggregate_sum(
            grads,
            variables,
            sq_sums=sq_sums,
            num_groups=num_groups,
            step=step,
            replica_context=replica_context,
        )
        ctx = replica_context or tf.distribute.get_replica_context()
        replicas = ctx.num_replicas_in_sync
        if replicas == 1:
            return summed
        return [_share(g, replicas) for g in summed]

    def _aggregate_sum(
        self, grads, variables, *, sq_sums=None, num_groups=1, step=None, replica_context=None
    ):
        """The variance-reduced SUM over all replicas, the same on every replica: what the
        VRGD optimizers and :attr:`gradient_aggregator` hand their base optimizer, whose
        aggregation it replaces. :meth:`__call__`'s arguments and errors."""
        grads, variables = list(grads), list(variables)
        if len(grads) != len(variables):
            raise ValueError(
                f"{self._owner}: `grads` and `variables` must have the same length; got "
                f"{len(grads)} gradients for {len(variables)} variables."
            )
        present = [i for i, g in enumerate(grads) if g is not None]
        self._build_in_step([variables[i] for i in present], replica_context)
        if step is None and self._steps is not None:
            step = self._steps
        self._traced = True
        reduced = gsnr.variance_reduce(
            [grads[i] for i in present],
            [variables[i] for i in present],
            state=self.state,
            replica_context=replica_context,
            record_statistics=self._record_statistics(step),
            step=step,
            squares=gsnr.GroupSquares(
                None if sq_sums is None else [sq_sums[i] for i in present], num_groups
            ),
            options=self._options,
        )
        self._report(reduced.report)
        if self._steps is not None:
            self._count_step(reduced)
        out = [None] * len(grads)
        for i, g in zip(present, reduced):
            out[i] = g
        return out

    def _build_in_step(self, variables, replica_context) -> None:
        """Creates the state of ``variables`` not built yet, which a step can only do
        eagerly or on one replica (a strategy cannot create variables inside ``strategy.run``
        in a ``tf.function``)."""
        if self.state is not None and all(v in self.state for v in variables):
            return
        ctx = replica_context or tf.distribute.get_replica_context()
        if ctx is None:
            return  # the step raises: it must run in a replica context
        if ctx.num_replicas_in_sync > 1 and not tf.executing_eagerly():
            raise RuntimeError(
                f"{self._owner}: build the GSNR state in the strategy scope before the "
                "first step: `aggregator.build(model.trainable_variables)`."
            )
        with tf.init_scope():
            self.build(variables)

    def _count_step(self, reduced) -> None:
        """Advances the standalone step counter on a step whose sums were finite (the test
        the step's state commit uses; computed here only for a one-sample step)."""
        finite = reduced.report.finite
        if finite is None:
            finite = tf.reduce_all(
                [
                    tf.reduce_all(
                        tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g)
                    )
                    for g in reduced
                ]
            )
        self._steps.assign_add(tf.cast(finite, tf.int64))

    @property
    def gradient_aggregator(self) -> Callable:
        """This aggregator as a ``gradient_aggregator`` callable,
        ``fn(grads_and_vars) -> grads_and_vars``: the hook of tf_keras optimizers
        (``tf_keras.optimizers.legacy.*(gradient_aggregator=...)``) and of Model Garden's
        ``OptimizerFactory.build_optimizer(gradient_aggregator=...)``, so any of their
        optimizers aggregates with VRGD. It returns the variance-reduced sum itself (what
        the hook must return), not the shares of a call. Build the aggregator first
        (strategy scope)."""

        def aggregate(grads_and_vars):
            pairs = list(grads_and_vars)
            variables = [v for _, v in pairs]
            return list(zip(self._aggregate_sum([g for g, _ in pairs], variables), variables))

        return aggregate

    def _record_statistics(self, step):
        """True, False, or a scalar bool tensor: whether this step records diagnostics."""
        if self.statistics_interval <= 1 or step is None:
            return self.statistics_interval >= 1
        step = tf.cast(step, tf.int64) + 1
        return tf.equal(step % self.statistics_interval, 0)

    # --- warnings ----------------------------------------------------------------------------

    def _warn_once(self, key, message, *args) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _LOG.warning(message, *args)

    def _report(self, report) -> None:
        """Turns the step's :class:`vrgd_tf.gsnr.StepReport` into warnings, each once."""
        self._num_samples = report.num_samples
        if self.split_half and not report.split_half_measured:
            self._warn_once(
                "split_half",
                "%s: `split_half=True`, but a step of %s GSNR samples (replicas x "
                "micro-batch groups) cannot measure the split-half reliability: it needs two "
                "halves of >= 2 samples each, split by replica (>= 4 replicas, or >= 2 "
                "replicas with >= 2 micro-batch groups each: `vrgd_tf.use_micro_batches`), "
                "and a dense gradient (sparse gradients on the exact rows path are not "
                "measured). `reliability` stays undefined (`reliability_defined` False and a "
                "placeholder 0.0 in `vrgd_statistics()`, NaN in the logs). Train on more "
                "replicas or groups, or set `split_half=False`.",
                self._owner,
                report.num_samples,
            )
        if report.num_samples == 1:
            self._warn_once(
                "single",
                "%s: only one GSNR sample per step (one replica in sync, no "
                "micro-batch groups), so there is no gradient noise estimate; VRGD steps "
                "exactly as its base optimizer. Train with k >= 2 replicas or micro-batch "
                "groups (the paper uses at least 8) to get variance reduction. If you made a "
                "tf.distribute strategy, build (or load) the model and create the optimizer "
                "inside `strategy.scope()`: outside it they train on one replica.",
                self._owner,
            )
            return
        self._warn_from_step(report.inert, "inert", self._log_inert)
        self._warn_from_step(report.too_few_samples, "too_few", self._log_too_few_samples)
        self._warn_from_step(
            report.transforms_not_finite, "transforms", self._log_transforms_not_finite
        )

    def _log_transforms_not_finite(self) -> None:
        self._warn_once(
            "transforms",
            "%s: a factor returned by `factor_transforms` was NaN or infinite in a step whose "
            "summed gradients were finite, so the update is not finite either. Check the "
            "transforms (e.g. divide with `tf.math.divide_no_nan`, guard norms that can be "
            "0); VRGD's own factor is always in [gamma, 1].",
            self._owner,
        )

    def _log_inert(self) -> None:
        self._warn_once(
            "inert",
            "%s: in a step with %s GSNR samples (replicas x micro-batch groups) no "
            "variable had a defined GSNR: every replica sent the same (or an all-zero) "
            "gradient, or the gradients were too small for their squares in float32 "
            "(|g| below ~1e-19; scale the loss up), so VRGD stepped exactly as its base "
            "optimizer. The first happens when "
            "every replica gets the same batch, e.g. Keras `model.train_on_batch` under a "
            "tf.distribute strategy, or a custom loop that hands the same tensor to every "
            "replica. Feed each replica its own shard: `model.fit` on a dataset, or "
            "`strategy.experimental_distribute_dataset` in a custom loop.",
            self._owner,
            self._num_samples,
        )

    def _log_too_few_samples(self) -> None:
        self._warn_once(
            "too_few",
            "%s: in a step of %s GSNR samples (replicas x micro-batch groups) fewer than 2 "
            "contributed a nonzero gradient, so there was no noise estimate and VRGD "
            "stepped exactly as its base optimizer (its statistics read zeros). This "
            "happens when replicas get no examples, e.g. the last, short batch of a "
            "dataset split over the replicas: batch with `drop_remainder=True` "
            "(`dataset.batch(global_batch, drop_remainder=True)`) so every replica gets "
            "its share of every batch.",
            self._owner,
            self._num_samples,
        )

    def _warn_from_step(self, flag, key, log) -> None:
        """Emits ``log()`` from the step when ``flag`` (scalar bool tensor) is True.

        Outside XLA, a ``tf.cond`` whose taken branch is a ``tf.py_function`` (a scalar
        predicate per step; the Python call happens only then). Inside an XLA context
        (``jit_compile=True``, TPU) no host call is compiled in: the step stays XLA-pure;
        ``statistics`` gives the inert warning when it reads the recorded diagnostics
        of an inert step, and a step without enough samples records zeros.
        """
        if flag is False or key in self._warned:
            return
        if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
            return

        def emit():
            log()
            return True

        tf.cond(flag, lambda: tf.py_function(emit, [], tf.bool), lambda: tf.constant(False))

    # --- diagnostics and config --------------------------------------------------------------

    def statistics(self) -> Dict[str, Dict[str, float]]:
        """The last recorded step's diagnostics per variable (first replica's copy).

        Returns:
          ``{variable name: {field: float}}`` with the fields of
          :data:`vrgd_tf.gsnr.STATISTICS_FIELDS`: ``mean_gsnr`` (mean GSNR over the
          elements where it is defined), ``frac_at_gamma`` and ``frac_at_one`` (fractions of
          elements whose raw factor is clipped at ``gamma`` / equal to 1), ``mean_factor``
          (mean factor applied, after smoothing: the step's scale relative to the base
          optimizer), ``norm_ratio`` (``||f * S1|| / ||S1||``, the length of the
          variance-reduced summed gradient over the plain one, in [gamma, 1]; 1 when
          ``S1 = 0``); and ``has_gsnr`` (bool, :func:`~vrgd_tf.aggregator.has_gsnr`: whether a recording step
          measured the variable; the rows without are zeros and stay out of the summaries
          over variables, ``docs/spec.md`` section 4); and the split-half fields of
          :data:`vrgd_tf.gsnr.SPLIT_HALF_FIELDS` (``split_half=True``): ``reliability``
          and ``reliability_correlation`` (floats in [-1, 1]), ``reliability_pairs`` (int)
          and ``reliability_defined`` (bool; always False with ``split_half=False``). Where
          ``reliability_defined`` is False the two floats are 0.0, a placeholder, not a
          measurement (every value in a row stays finite; the logs leave such rows out and
          their headline reads NaN). Empty before :meth:`build`. Values of
          the last recording step (see ``statistics_interval``) with finite gradients, zeros
          before that. Variable names
          are the variables' paths without the leading scopes that all of them share
          (``vrgd_tf.naming.display_names``), so they stay the same when a model is
          saved and loaded again.

        Logs the inert-step warning if the recorded step had no defined GSNR in any
        variable.
        """
        if self.state is None:
            return {}
        names = naming.display_names(self.state.variable_names)
        out = {}
        for name, var, half in zip(names, self.state.statistics, self.state.split_half):
            out[name] = dict(zip(gsnr.STATISTICS_FIELDS, (float(x) for x in var.numpy())))
            out[name]["has_gsnr"] = has_gsnr(out[name])
            out[name].update(_split_half_row(half.numpy()))
        if out and all(v["frac_at_one"] == 1.0 and v["mean_gsnr"] == 0.0 for v in out.values()):
            self._log_inert()
        return out

    def get_config(self) -> dict:
        """The config-key settings (:data:`vrgd_tf.settings.CONFIG_KEYS`),
        ``sparse_statistics``, ``pack_limit`` and ``name``: the constructor's serializable
        arguments (:meth:`from_config` inverts it). With ``factor_transforms``, which it leaves out,
        the first call logs a warning (:meth:`settings_config`)."""
        return dict(
            self.settings_config(),
            sparse_statistics=self.sparse_statistics,
            pack_limit=self.pack_limit,
            name=self.name,
        )

    def settings_config(self) -> dict:
        """``settings.get_config()`` (what the VRGD classes' ``get_config`` adds to the
        base's); the first call with ``factor_transforms`` logs that the config leaves them
        out, so that an object made from it (``from_config``, ``keras.models.load_model``)
        steps without them, and how to resume with them."""
        if self.factor_transforms:
            self._warn_once(
                "unsaved_transforms",
                "%s: the config (`get_config`: `model.save`, `from_config`) leaves out %s: "
                "callables do not serialize, so an optimizer (or aggregator) made from it, "
                "e.g. by `keras.models.load_model`, steps without them. To resume with them, "
                "build the model and the optimizer again with the same `factor_transforms`, "
                "call `optimizer.build(model.trainable_variables)` and restore the weights "
                "and the optimizer's state (`model.load_weights` of the `.keras` file, or a "
                "`tf.train.Checkpoint`).",
                self._owner,
                ", ".join(
                    gsnr.options.transform_label(i, f) for i, f in enumerate(self.factor_transforms)
                ),
            )
        return self.settings.get_config()

    @classmethod
    def from_config(cls, config: dict) -> "GSNRAggregator":
        """A new, unbuilt aggregator from a :meth:`get_config` dict (``factor_transforms``,
        ``owner``, ``make_variable`` and ``var_key`` take their defaults unless added)."""
        return cls(**config)


#: The settings :class:`GSNRAggregator` takes by position, in order.
_POSITIONAL = ("gamma", "beta_3", "statistics_interval")

GSNRAggregator.__doc__ = GSNRAggregator.__doc__.replace("      {settings}\n", args_doc(DEFAULTS))
GSNRAggregator.__signature__ = inspect.Signature(
    [
        p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) if p.name in _POSITIONAL else p
        for p in signature_parameters(DEFAULTS)
    ]
    + [
        p
        for p in inspect.signature(GSNRAggregator.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
)


def _settings(args, kwargs, settings) -> VRGDSettings:
    """The aggregator's settings from its positional and keyword arguments (checked)."""
    if len(args) > len(_POSITIONAL):
        raise TypeError(
            f"GSNRAggregator takes at most {len(_POSITIONAL)} settings by position "
            f"({', '.join(_POSITIONAL)}); got {len(args)}."
        )
    given = dict(zip(_POSITIONAL, args))
    twice = sorted(set(given) & set(kwargs))
    if twice:
        raise TypeError(f"GSNRAggregator got {twice} both by position and by keyword.")
    given.update(kwargs)
    if settings is None:
        return DEFAULTS.replace(**given)
    if given:
        raise TypeError(
            f"GSNRAggregator: pass either `settings` or the settings one by one, not both "
            f"(got `settings` and {sorted(given)})."
        )
    if not isinstance(settings, VRGDSettings):
        raise TypeError(
            f"`settings` must be a vrgd_tf.settings.VRGDSettings; got {type(settings).__name__}."
        )
    return settings


def _share(g, replicas: int):
    """``g / replicas``: one replica's share of a summed gradient (None stays None; a
    sparse gradient's values are divided)."""
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(
            g.values / tf.cast(replicas, g.values.dtype), g.indices, g.dense_shape
        )
    return g / tf.cast(replicas, g.dtype)


def _split_half_row(values) -> dict:
    """The ``vrgd_statistics()`` fields of one variable's split-half state (``[4]``)."""
    row = dict(zip(gsnr.SPLIT_HALF_FIELDS, (float(v) for v in values)))
    row["reliability_pairs"] = int(row["reliability_pairs"])
    row["reliability_defined"] = row["reliability_defined"] > 0.0
    return row


def has_gsnr(row) -> bool:
    """Whether a recorded row of diagnostics belongs to a variable that has a GSNR.

    A recording step writes, for every variable with at least one element whose gradient
    reached the GSNR step, a ``mean_factor`` in ``[gamma, 1]`` (``gamma > 0``); a variable
    no step measured keeps its row of zeros (its gradient is always None, or is not a
    gradient: Keras' ``overwrite_with_gradient`` variables such as float8 scale and amax
    histories), and one of no element records ``mean_factor = 0``. So the saved rows (five
    numbers, unchanged: checkpoints restore) tell it without a sixth (``docs/spec.md``
    section 4).

    Args:
      row: mapping with at least ``"mean_factor"`` (float), one row of
        :meth:`vrgd_tf.GSNRAggregator.statistics`.

    Returns:
      ``row["mean_factor"] > 0``.
    """
    return bool(row["mean_factor"] > 0.0)


def _default_var_key(variable):
    """``id`` of a variable, of its distributed container under a strategy."""
    v = getattr(variable, "value", variable)  # keras.Variable -> tf.Variable
    if callable(v) and not isinstance(v, tf.Variable):
        v = variable
    container = getattr(v, "_distributed_container", None)
    if container is not None:
        v = container()
    return id(v)
