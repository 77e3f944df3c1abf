"""VRGD's GSNR step as a stateful building block: :class:`GSNRAggregator`.

The VRGD optimizers of both families hold one and call it where their base optimizer would
sum the replicas' gradients; a custom loop under a ``tf.distribute`` strategy calls it with
each replica's gradients and applies the returned shares with any optimizer; a tf_keras or
Model Garden optimizer takes it as its ``gradient_aggregator``. The math is
:func:`vrgd_tf.gsnr.variance_reduce` (arXiv 2309.13681, Algorithm 1, eqs. 7 to 10; spec
``docs/spec.md``); this module holds its state and step counter, and hands the step's report
to :mod:`vrgd_tf.step_warnings`.
"""

import functools
import inspect
from typing import Callable, Dict, Optional, Sequence

import tensorflow as tf

from vrgd_tf import gsnr, step_warnings, strategies
from vrgd_tf.gsnr.statistics import has_gsnr
from vrgd_tf.settings import DEFAULTS, VRGDSettings, args_doc, expose, resolve, signature_parameters

__all__ = ["GSNRAggregator", "has_gsnr"]


@expose(lambda self: self.settings)
class GSNRAggregator(tf.Module):
    """The GSNR step of VRGD: all-reduce gradients with their squares, scale by the factor.

    Call it in the replica context (inside ``strategy.run``) with the replica's gradients.
    It all-reduces (SUM) the float32 ``sum_j x_j`` and then ``sum_j x_j**2`` over the ``R``
    replicas, each holding ``m = num_groups`` micro-batch gradients ``x_j`` (``k = R m``
    samples), computes per element the GSNR ``r = S1**2 / (k S2 - S1**2)`` (eq. 7), the
    factor ``clip(r / mean(r), gamma, 1)`` per variable (eqs. 8, 9), smoothed if
    ``beta_3 > 0``, and the variance-reduced sum ``factor * S1`` (eq. 10).

    **Output contract: each replica's share**, ``factor * S1 / R``. Whatever a custom loop
    does next with per-replica gradients ends in an all-reduce SUM (Keras 3 ``apply``, a
    tf_keras optimizer's default ``apply_gradients``, either ``LossScaleOptimizer``), and
    the sum of the shares is the variance-reduced sum, applied once; so it is after any
    linear step between (``tf.identity``, ``* c``, casts, loss-scale unscaling). Chosen
    because a sum is summed again by any optimizer not told otherwise, ``R`` times too far,
    and no error can catch that without patching Keras for the whole process (marks on
    tensors do not survive ``tf.identity`` or clipping). Clipping a share clips one
    replica's contribution, never further than the unclipped step: to clip the sum at
    ``c``, clip the shares at ``c / R``. *Limitation:* a plain tf_keras optimizer's
    ``apply_gradients(..., experimental_aggregate_gradients=False)`` steps ``R`` times short;
    give it :attr:`gradient_aggregator` instead. The VRGD optimizers use the sum itself.

    Example: replicas send ``[1, 1]`` and ``[3, -0.5]``; they agree on element 0 (GSNR 4)
    more than on element 1 (GSNR 1/9): factor ``[1, 0.1]``, ``S1 = [4, 0.5]`` becomes
    ``[4, 0.05]``, each replica's share ``[2, 0.025]``:

    >>> import keras
    >>> import tensorflow as tf
    >>> import vrgd_tf
    >>> from vrgd_tf import devices
    >>> strategy = devices.cpu_strategy(2)
    >>> with strategy.scope():
    ...     w = keras.Variable([0.0, 0.0], name="w")
    ...     aggregator = vrgd_tf.GSNRAggregator(gamma=0.1, statistics_interval=1)
    ...     aggregator.build([w])
    ...     optimizer = keras.optimizers.SGD(0.1)  # any optimizer, Keras 3 or tf_keras
    ...     optimizer.build([w])
    >>> @tf.function
    ... def train_step(inputs):
    ...     def replica_step(x):
    ...         with tf.GradientTape() as tape:
    ...             loss = tf.reduce_sum(w * x)  # this replica's gradient is x
    ...         shares = aggregator(tape.gradient(loss, [w]), [w])
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

    Every argument is keyword-only.

    Args:
      {settings}
      settings: a :class:`vrgd_tf.settings.VRGDSettings` instead of the settings one by one.
      owner: str, the name in warnings (the optimizer's class). Default ``name``.
      make_variable: ``fn(kind, index, shape, reference) -> variable`` creating the state
        (:class:`vrgd_tf.gsnr.VRGDState`), of dtype
        ``vrgd_tf.gsnr.state.variable_dtype(kind, state_dtype)`` (checked at :meth:`build`);
        the optimizers pass theirs. Default: variables tracked by this module
        (``tf.train.Checkpoint(aggregator=...)`` saves them).
      var_key: ``fn(variable) -> hashable``. Default ``id`` of the (distributed) variable.
      name: str, the module name. Default ``"gsnr_aggregator"``.

    Raises:
      TypeError, ValueError: a setting outside its range (named), both ``settings`` and
        single settings, or a ``CentralStorageStrategy``/``ParameterServerStrategy``.
    """

    def __init__(
        self,
        *,
        settings: Optional[VRGDSettings] = None,
        owner: Optional[str] = None,
        make_variable: Optional[Callable] = None,
        var_key: Optional[Callable] = None,
        name: str = "gsnr_aggregator",
        **setting_values,
    ):
        super().__init__(name=name)
        self.settings = resolve(settings, setting_values, "GSNRAggregator")
        self._owner = owner or name
        self._standalone = make_variable is None
        self._make_variable = make_variable or functools.partial(
            gsnr.state.standalone_variable, state_dtype=self.settings.state_dtype
        )
        self._var_key = var_key or gsnr.state.default_var_key
        self._warnings = step_warnings.StepWarnings(self._owner)
        self.state = None
        self._steps = None
        strategies.check_strategy(tf.distribute.get_strategy(), self._owner)

    def build(self, variables: Sequence) -> None:
        """Creates the state of ``variables`` not seen before (call in the strategy scope).

        Idempotent: variables that already have state are skipped.

        Raises:
          ValueError: under a strategy VRGD cannot run under
            (:func:`vrgd_tf.strategies.check_strategy`).
        """
        strategies.check_strategy(tf.distribute.get_strategy(), self._owner)
        if self.state is None:
            self.state = gsnr.VRGDState(
                self._make_variable, self._var_key, self.beta_3, self.state_dtype
            )
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

    # AutoGraph calls this as written, as it calls TensorFlow and Keras: otherwise a custom
    # loop's tf.function converts the whole GSNR step, statement by statement, and the
    # logging module behind a warning issued while tracing. Nothing here branches on
    # tensors in Python.
    @tf.autograph.experimental.do_not_convert
    def __call__(
        self,
        grads: Sequence,
        variables: Sequence,
        *,
        sq_sums=None,
        num_groups: int = 1,
        step=None,
        replica_context=None,
        num_contributing=None,
    ):
        """Each replica's share of the variance-reduced sum (call in the replica context).

        Args:
          grads: this replica's ``n`` gradients (``tf.Tensor``, ``tf.IndexedSlices`` or
            None, any float dtype): the sums over its ``num_groups`` micro-batches.
          variables: the ``n`` trainable variables, in the same order (built or not).
          sq_sums: None (``num_groups == 1``) or ``n`` dense tensors (None where ``grads``
            is None): the sums over the micro-batches of the squared gradients.
          num_groups: int >= 1, micro-batch groups per replica; ``k = replicas * num_groups``.
          step: None, or a scalar int tensor, the steps completed before this one (e.g.
            ``optimizer.iterations``), for ``statistics_interval``; None: this module's own
            counter (standalone only), advanced on every call with finite gradients.
          replica_context: default ``tf.distribute.get_replica_context()``.
          num_contributing: None, or this replica's contributing samples (``docs/spec.md``
            section 1: its groups that hold at least one example of nonzero weight), a
            Python int in ``[0, num_groups]`` or a scalar int or float tensor (clipped to
            that range). None: inferred, a replica counts its ``num_groups`` samples when
            some value of its gradients is nonzero or NaN (a real sample whose gradient is
            exactly zero is then left out, with a warning). A replica with count 0 that
            sends a nonzero gradient (a weight regularizer without examples) makes the step
            the base step, with a warning.

        Returns:
          List of ``n``: None where the gradient is None, else the variance-reduced SUM
          (:func:`vrgd_tf.gsnr.variance_reduce`) divided by ``R``, the same on every replica,
          in the gradient's shape and dtype (sparse: the strategy's own sparse SUM, rows
          scaled, values divided by ``R``): the class's output contract.

        Raises:
          RuntimeError: in a cross-replica context, or on a first call inside a
            ``tf.function`` under a multi-replica strategy before :meth:`build`.
          ValueError: ``grads`` and ``variables`` of different lengths, or
            ``num_contributing`` out of range or not a scalar; see also
            :func:`vrgd_tf.gsnr.variance_reduce`.
        """
        summed = self._aggregate_sum(
            grads,
            variables,
            sq_sums=sq_sums,
            num_groups=num_groups,
            step=step,
            replica_context=replica_context,
            num_contributing=num_contributing,
        )
        ctx = replica_context or tf.distribute.get_replica_context()
        replicas = ctx.num_replicas_in_sync
        if replicas == 1:
            return summed
        return [_share(g, replicas) for g in summed]

    def _aggregate_sum(
        self,
        grads,
        variables,
        *,
        sq_sums=None,
        num_groups=1,
        step=None,
        replica_context=None,
        num_contributing=None,
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
        reduced = gsnr.variance_reduce(
            [grads[i] for i in present],
            [variables[i] for i in present],
            state=self.state,
            replica_context=replica_context,
            record_statistics=self._record_statistics(step),
            step=step,
            squares=gsnr.GroupSquares(
                None if sq_sums is None else [sq_sums[i] for i in present],
                num_groups,
                num_contributing,
            ),
            settings=self.settings,
        )
        self._warnings.from_report(reduced.report, self.split_half)
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
            values = [g.values if isinstance(g, tf.IndexedSlices) else g for g in reduced]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in values])
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

    def statistics(self) -> Dict[str, Dict[str, float]]:
        """The last recorded step's diagnostics per variable (first replica's copy).

        Returns:
          ``{variable name: {field: value}}``, empty before :meth:`build`: the floats of
          :data:`vrgd_tf.gsnr.STATISTICS_FIELDS` (``mean_gsnr``, ``frac_at_gamma``,
          ``frac_at_one``, ``mean_factor``, ``norm_ratio``), ``has_gsnr`` (bool,
          :func:`vrgd_tf.aggregator.has_gsnr`) and, with ``split_half=True``, those of
          :data:`vrgd_tf.gsnr.SPLIT_HALF_FIELDS` (``reliability`` and
          ``reliability_correlation`` floats in [-1, 1], placeholders 0.0 where
          ``reliability_defined`` is False; ``reliability_pairs`` int). Values of the last
          recording step (``statistics_interval``) with finite gradients, zeros before.
          Meanings: ``docs/spec.md`` section 4. Names are the variables' paths without the
          scopes all share (``vrgd_tf.naming.display_names``), stable across save and load.

        Logs the inert-step warning if the recorded step had no defined GSNR in any variable.
        """
        if self.state is None:
            return {}
        out = self.state.rows(self.split_half)
        if out and all(v["frac_at_one"] == 1.0 and v["mean_gsnr"] == 0.0 for v in out.values()):
            self._warnings.inert()
        return out

    def get_config(self) -> dict:
        """The config-key settings (:data:`vrgd_tf.settings.CONFIG_KEYS`) and ``name``
        (:meth:`from_config` inverts it); the first call with ``factor_transforms``, which it
        leaves out, logs how to resume with them (:meth:`settings_config`)."""
        return dict(self.settings_config(), name=self.name)

    def settings_config(self) -> dict:
        """``settings.get_config()``, what the VRGD classes add to the base's config."""
        if self.factor_transforms:
            labels = enumerate(self.factor_transforms)
            self._warnings.unsaved_transforms(
                ", ".join(gsnr.options.transform_label(i, f) for i, f in labels)
            )
        return self.settings.get_config()

    @classmethod
    def from_config(cls, config: dict) -> "GSNRAggregator":
        """A new, unbuilt aggregator from a :meth:`get_config` dict."""
        return cls(**config)


GSNRAggregator.__doc__ = GSNRAggregator.__doc__.replace("      {settings}\n", args_doc(DEFAULTS))
GSNRAggregator.__signature__ = inspect.Signature(
    signature_parameters(DEFAULTS)
    + [
        p
        for p in inspect.signature(GSNRAggregator.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
)


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
