"""What the Keras 3 and the tf_keras VRGD optimizers share, apart from the GSNR math.

A VRGD optimizer is its base optimizer with one change: where the base all-reduces (SUM) the
per-replica gradients, the VRGD one calls its :class:`vrgd_tf.GSNRAggregator` (which runs
:func:`vrgd_tf.gsnr.variance_reduce`). This module holds the family-independent glue: the
class decorator and factory, constructor checks, config, the micro-batch entry point
(``apply_grouped_gradients``), the exclusion-pattern check and the diagnostics accessor.
"""

import contextlib
import inspect
import logging
import threading
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from vrgd_tf import naming, settings, validation
from vrgd_tf.aggregator import GSNRAggregator
from vrgd_tf.gsnr.samples import GroupSquares  # the record the squares channel carries

_LOG = logging.getLogger("vrgd_tf")


def check_base_arguments(base_cls, args, kwargs, positive=()) -> None:
    """Checks the base optimizer's constructor arguments by name, before anything is built.

    Plain numbers only (schedules and tensors pass): ``learning_rate``, ``epsilon``,
    ``weight_decay(_rate)``, ``eeta`` and ``momentum`` must be >= 0; ``beta_1`` and
    ``beta_2`` in [0, 1); exclusion lists None or a list of regex strings.

    Raises:
      TypeError, ValueError: naming the argument and the allowed range.
    """
    try:
        bound = inspect.signature(base_cls.__init__).bind_partial(None, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{base_cls.__name__}: {e}") from e
    values = dict(bound.arguments)
    values.update(values.pop("kwargs", {}) or {})
    if values.get("gradient_aggregator") is not None:
        raise ValueError(
            "`gradient_aggregator` cannot be combined with VRGD: VRGD replaces "
            "the cross-replica aggregation with its GSNR step."
        )
    validation.check_optimizer_arguments(values, positive=positive)


_ARGS_HEAD = """
    VRGD arguments (arXiv 2309.13681; spec ``docs/spec.md``; :mod:`vrgd_tf.settings`):
"""

_ARGS_TAIL = """
    Gradients are all-reduced together with their squares (two calls); the factor
    ``clip(r / mean(r), gamma, 1)`` of the GSNR ``r`` multiplies the summed gradient before
    the base update. With one GSNR sample per step (one replica, no micro-batch groups) the
    step equals the base optimizer's and a warning is logged once; so does a step in which
    every replica sent the same gradient. Diagnostics: ``vrgd_statistics()``.

    Raises:
      ValueError, TypeError: at construction, for a VRGD argument or a base argument outside
        its range (the message names it).
      ValueError: at construction or build under a ``CentralStorageStrategy`` or
        ``ParameterServerStrategy`` (:mod:`vrgd_tf.strategies` says why and what works).
"""


def class_doc(defaults: settings.VRGDSettings) -> str:
    """The VRGD part of a VRGD class's docstring: its settings with ``defaults``' values."""
    return _ARGS_HEAD + settings.args_doc(defaults) + _ARGS_TAIL


def vrgd_class(*, default_beta_3=settings.DEFAULTS.beta_3, register=None, module=None):
    """Class decorator that completes a VRGD class written as ``class VRGDX(Mixin, Base)``.

    Sets ``_vrgd_base_class`` (the last base), :attr:`VRGDCommon.default_settings` (the
    settings' defaults with ``beta_3=default_beta_3``), a constructor ``__signature__`` (the
    base's arguments plus the keyword-only settings of :class:`vrgd_tf.settings.VRGDSettings`),
    appends their documentation to the docstring (a default head if there is none) and
    registers the class for serialization.

    Args:
      default_beta_3: float in [0, 1), the default of ``beta_3``.
      register: callable ``(name) -> decorator`` registering the class as serializable, or
        None.
      module: the public module to report as ``__module__`` (where users import the class
        from), or None to keep the defining module.

    Returns:
      The decorator.

    Raises:
      ValueError, TypeError: ``default_beta_3`` outside [0, 1).
    """
    defaults = settings.DEFAULTS.replace(beta_3=default_beta_3)

    def decorate(cls):
        base_class = cls.__bases__[-1]
        head = cls.__dict__.get("__doc__") or (
            f"VRGD version of `{base_class.__module__}.{base_class.__name__}`.\n"
        )
        cls._vrgd_base_class = base_class
        cls.default_settings = defaults
        default_name = cls.__name__ if cls._vrgd_name_is_class_name else None
        cls.__signature__ = vrgd_signature(base_class, defaults, default_name)
        cls.__doc__ = head + "\n" + class_doc(defaults)
        if module is not None:
            cls.__module__ = module
        return register(cls.__name__)(cls) if register is not None else cls

    return decorate


def make_vrgd_class(mixin, base_class, *, name, default_beta_3, doc, module, register):
    """Creates ``class name(mixin, base_class)`` at run time; the families' factories.

    Args:
      mixin: the family's subclass of :class:`VRGDCommon`.
      base_class: the optimizer class to extend.
      name: class name, or None for ``"VRGD" + base_class.__name__``.
      default_beta_3: float in [0, 1).
      doc: class docstring head, or None; the settings' documentation is appended.
      module: ``__module__`` of the new class.
      register: callable ``(name) -> decorator`` registering it as serializable, or None.

    Returns:
      The class, completed by :func:`vrgd_class`.

    Raises:
      ValueError, TypeError: ``default_beta_3`` outside [0, 1).
      TypeError: ``base_class`` is already a VRGD class (:func:`check_not_vrgd`).
    """
    check_not_vrgd(base_class)
    cls_name = name or "VRGD" + base_class.__name__
    cls = type(cls_name, (mixin, base_class), {"__doc__": doc, "__module__": module})
    return vrgd_class(default_beta_3=default_beta_3, register=register)(cls)


def exclusion_lists(optimizer) -> Dict[str, Optional[List[str]]]:
    """The optimizer's exclusion patterns, read from its attributes.

    Not from ``get_config``: that serializes the learning rate, and a user
    ``LearningRateSchedule`` without ``get_config`` (which trains with the base optimizer)
    raises ``NotImplementedError`` there. Only saving needs a serializable schedule.

    Returns:
      ``{"exclude_from_weight_decay": ..., "exclude_from_layer_adaptation": ...}``, each a
      list of regex strings or None: this package's ``Lamb``/``Lars`` give
      ``exclude_from_weight_decay_patterns`` and ``exclude_from_layer_adaptation`` (which
      falls back to the former), Model Garden's LAMB/LARS their attributes of those names;
      None where the optimizer has no such list (e.g. Keras' ``exclude_from_weight_decay``
      method).
    """
    out = {}
    for arg in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
        value = getattr(optimizer, arg + "_patterns", None)
        if value is None:
            value = getattr(optimizer, arg, None)
        out[arg] = list(value) if isinstance(value, (list, tuple)) else None
    return out


def check_not_vrgd(base_class) -> None:
    """Raises if ``base_class`` is a VRGD class: VRGD cannot wrap VRGD.

    Without this check Python's class creation fails with a bare MRO ``TypeError``
    ("Cannot create a consistent method resolution order").

    Raises:
      TypeError: naming the class, its own base and how to use either.
    """
    if isinstance(base_class, type) and issubclass(base_class, VRGDCommon):
        base = base_class._vrgd_base_class
        raise TypeError(
            f"make_vrgd_optimizer: `base_class={base_class.__name__}` is already a VRGD "
            f"optimizer (its base is {base.__module__}.{base.__name__}). Use "
            f"{base_class.__name__} directly, or pass a plain optimizer class, e.g. "
            f"make_vrgd_optimizer({base.__module__}.{base.__name__})."
        )


def vrgd_signature(
    base_cls, defaults: settings.VRGDSettings, default_name: Optional[str]
) -> inspect.Signature:
    """The constructor signature of a VRGD class: the base class's (with ``name`` defaulting
    to ``default_name``), plus the keyword-only settings with ``defaults``' values."""
    params = [
        p.replace(default=default_name) if p.name == "name" else p
        for p in list(inspect.signature(base_cls.__init__).parameters.values())[1:]
    ]
    var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    return inspect.Signature(params + settings.signature_parameters(defaults) + var_kw)


class SquaresChannel:
    """The one route by which :class:`GroupSquares` reach the GSNR step.

    Why a channel and not an argument: ``apply_grouped_gradients`` applies through the base
    optimizer's own ``apply_gradients``, so that everything the base does around the
    aggregation stays the base's (Keras 3: ``loss_scale_factor``, dropping None and
    ``overwrite_with_gradient`` variables, clipping, weight decay, EMA, the iteration
    counter; tf_keras: the loss-scale wrapper, the distribution merge call). Neither call
    chain takes an extra argument on its way to the aggregation hook: Keras 3's
    ``apply_gradients -> apply -> _backend_update_step -> _all_reduce_sum_gradients``,
    tf_keras' ``apply_gradients -> _aggregate_gradients``. So the squares are posted here
    around the one ``apply_gradients`` call (:meth:`sending`) and the hook takes them
    (:meth:`receive`): None there means plain ``apply_gradients`` (``m = 1``, the squares
    computed by the step).

    Per replica thread: under ``MirroredStrategy`` each replica's step function runs in its
    own Python thread, and the post and the receive of one replica happen in that thread,
    inside one ``apply_gradients`` call. It works at trace time (symbolic tensors of the
    same graph), so nothing of it is left in the compiled step (XLA-clean).
    """

    def __init__(self):
        self._local = threading.local()

    @contextlib.contextmanager
    def sending(self, squares: GroupSquares) -> Iterator[None]:
        """Holds ``squares`` for this thread's :meth:`receive` calls within the block."""
        previous = getattr(self._local, "squares", None)
        self._local.squares = squares
        try:
            yield
        finally:
            self._local.squares = previous

    def receive(self) -> Optional[GroupSquares]:
        """The squares posted by this thread's enclosing :meth:`sending`, or None."""
        return getattr(self._local, "squares", None)


@settings.expose(lambda self: self._vrgd.settings)
class VRGDCommon:
    """Mixin shared by both optimizer families: constructor, config, the reduction call.

    A VRGD class is ``class VRGDX(FamilyMixin, base_class)`` completed by :func:`vrgd_class`
    (or made at run time by :func:`make_vrgd_class`); ``FamilyMixin`` subclasses this and
    adds the family's hook, ``_vrgd_make_variable`` and ``_vrgd_var_key``.

    Attributes:
      default_settings: :class:`vrgd_tf.settings.VRGDSettings`, the class's defaults.
      gamma, beta_3, statistics_interval, squares_dtype, state_dtype, factor_transforms:
        this optimizer's settings (read-only; see :class:`vrgd_tf.settings.VRGDSettings`).
      vrgd_aggregator: the :class:`vrgd_tf.GSNRAggregator` holding the VRGD state (its
        variables are the optimizer's: checkpoints and ``optimizer.variables`` hold them).
    """

    _vrgd_base_class = None
    default_settings = settings.DEFAULTS
    #: True for a base optimizer without a sparse update rule: ``tf.IndexedSlices``
    #: gradients reach it dense, on every replica count.
    _vrgd_densify_sparse = False
    #: Constructor arguments the base needs > 0 (checked with the others, by name).
    _vrgd_positive_args = ()
    #: An instance made without ``name=`` is named as its family's Keras names its own
    #: optimizers: True, the class name (tf_keras: every ``SGD`` is "SGD"); False, the
    #: base's ``name=None`` (Keras 3: the class name in snake case, made unique in the
    #: process: "vrgd_lamb", "vrgd_lamb_1", as ``SGD`` gives "sgd", "sgd_1").
    _vrgd_name_is_class_name = True

    def __init__(self, *args, **kwargs):
        base = self._vrgd_base_class
        # Checks the VRGD arguments before anything else is built.
        aggregator = GSNRAggregator(
            settings=self.default_settings.pop_from(kwargs),
            owner=type(self).__name__,
            make_variable=self._vrgd_make_variable,
            var_key=self._vrgd_var_key,
        )
        check_base_arguments(base, args, kwargs, positive=self._vrgd_positive_args)
        params = list(inspect.signature(base.__init__).parameters)
        if "name" not in kwargs and ("name" not in params or len(args) < params.index("name") - 1):
            kwargs["name"] = type(self).__name__ if self._vrgd_name_is_class_name else None
        super().__init__(*args, **kwargs)
        # Not a checkpoint dependency of the optimizer: its variables are the optimizer's
        # own (each family's make_variable tracks them), keyed as before.
        object.__setattr__(self, "_vrgd", aggregator)
        object.__setattr__(self, "_vrgd_squares", SquaresChannel())

    @property
    def vrgd_aggregator(self) -> GSNRAggregator:
        """The :class:`vrgd_tf.GSNRAggregator` this optimizer aggregates its gradients with."""
        return self._vrgd

    def get_config(self):
        config = super().get_config()
        # Model Garden's LAMB and LARS leave their exclusion lists out of get_config.
        params = inspect.signature(self._vrgd_base_class.__init__).parameters
        for arg in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
            if arg in params and arg not in config:
                config[arg] = getattr(self, arg, None)
        config.update(self._vrgd.settings_config())
        return config

    def _vrgd_add_variables(self, variables) -> None:
        """Creates the VRGD state of ``variables`` (on the first call also logs exclusion
        patterns that match none of them)."""
        first = not self._vrgd.built
        self._vrgd.build(variables)
        if first:
            self._vrgd_log_unmatched_exclusions(variables)

    def _vrgd_log_unmatched_exclusions(self, variables) -> None:
        """Logs one line per exclusion pattern that matches no variable name.

        Not an error: configs list several spellings on purpose (``"LayerNorm"``,
        ``"layer_norm"``), but a pattern that matches nothing usually means a variable that
        was meant to be excluded is not.
        """
        lists = exclusion_lists(self)
        names = [naming.variable_name(v) for v in variables]
        seen = None
        for arg in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
            patterns = lists[arg]
            if not patterns or patterns == seen:
                continue  # the layer-adaptation list falls back to the weight-decay list
            seen = patterns
            for pattern in naming.unmatched_patterns(patterns, names):
                _LOG.warning(
                    "%s: `%s` pattern %r matches none of the %d trainable variables (e.g. %s).",
                    type(self).__name__,
                    arg,
                    pattern,
                    len(names),
                    ", ".join(repr(n) for n in names[:3]),
                )

    def _vrgd_reduce(self, grads_and_vars, replica_context) -> List[Tuple]:
        """``(grad, var)`` pairs -> pairs of variance-reduced gradients; None stays None.

        The micro-batch sums of squares and group count come through the
        :class:`SquaresChannel` when :meth:`apply_grouped_gradients` is the caller.
        """
        pairs = list(grads_and_vars)
        groups = self._vrgd_squares.receive() or GroupSquares(None, 1)
        if groups.sq_sums is not None:
            groups = groups.in_order(
                [None if g is None else self._vrgd_var_key(v) for g, v in pairs]
            )
        reduced = self._vrgd._aggregate_sum(
            [g for g, _ in pairs],
            [v for _, v in pairs],
            sq_sums=groups.sq_sums,
            num_groups=groups.num_groups,
            step=self.iterations,
            replica_context=replica_context,
            num_contributing=groups.count,
        )
        if self._vrgd_densify_sparse:
            reduced = [
                tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in reduced
            ]
        return list(zip(reduced, [v for _, v in pairs]))

    # As written under AutoGraph, as the base's apply_gradients is (see
    # GSNRAggregator.__call__).
    @tf.autograph.experimental.do_not_convert
    def apply_grouped_gradients(
        self, grads_and_vars, sq_sums: Sequence, num_groups: int, *, num_contributing=None
    ):
        """``apply_gradients`` for gradients summed over ``num_groups`` micro-batches.

        Each replica computed the gradients of ``m = num_groups`` micro-batches at the same
        weights; it passes their sum (as ``apply_gradients`` would get the whole batch's
        gradient) and the sum of their element-wise squares. VRGD then has
        ``k = replicas * m`` GSNR samples, with the collectives of one step as usual. ``m = 1`` with the
        squares of the gradients is ``apply_gradients`` up to float rounding (XLA or grappler
        may fuse the squares differently). Call where
        ``apply_gradients`` is called (the replica context).

        Args:
          grads_and_vars: list of ``(gradient, variable)``: each gradient is the sum over
            the micro-batches (``tf.Tensor``, ``tf.IndexedSlices`` or None).
          sq_sums: list, one per pair: the sum over the micro-batches of the squared dense
            gradient (float tensor of the variable's shape; None where the gradient is), in
            the units of the gradients handed over (a Keras 3 ``loss_scale_factor`` is
            divided out of both, as ``apply`` does for the gradients).
          num_groups: int >= 1.
          num_contributing: None, or this replica's contributing groups (``docs/spec.md``
            section 1: those holding at least one example of nonzero weight), a Python int
            in ``[0, num_groups]`` or a scalar tensor (clipped to that range). None:
            inferred from the gradients' values (:class:`vrgd_tf.GSNRAggregator`,
            ``num_contributing``).

        Returns:
          What ``apply_gradients`` returns.

        Raises:
          ValueError: ``sq_sums`` does not match ``grads_and_vars``, ``num_groups`` < 1, or
            (when the step is traced) ``num_contributing`` out of range or not a scalar.
        """
        pairs = list(grads_and_vars)
        if len(sq_sums) != len(pairs):
            raise ValueError(
                f"`sq_sums` must hold one entry per (gradient, variable) pair: "
                f"got {len(sq_sums)} for {len(pairs)}."
            )
        validation.check_count("num_groups", num_groups)
        if num_groups < 1:
            raise ValueError(f"`num_groups` must be an int >= 1; got {num_groups}.")
        factor = getattr(self, "loss_scale_factor", None)
        if factor is not None:
            # Keras 3's apply divides the gradients by loss_scale_factor: the squares go by
            # its square, so that the GSNR sees the squares of what it sums.
            sq_sums = [
                None if q is None else q / tf.cast(factor * factor, q.dtype) for q in sq_sums
            ]
        squares = GroupSquares(
            {self._vrgd_var_key(v): q for (_, v), q in zip(pairs, sq_sums)},
            num_groups,
            num_contributing,
        )
        with self._vrgd_squares.sending(squares):
            return self.apply_gradients(pairs)

    def _vrgd_counting(self, num_contributing):
        """A context in which this thread's ``apply_gradients`` calls (one sample per
        replica, ``m = 1``) take ``num_contributing`` (0 or 1: whether this replica's batch
        holds an example of nonzero weight, ``docs/spec.md`` section 1) as this replica's
        count instead of inferring it; the squares are taken by the step as usual, so
        every sample counting gives the step of plain ``apply_gradients`` bit for bit."""
        return self._vrgd_squares.sending(GroupSquares(None, 1, num_contributing))

    def vrgd_statistics(self) -> Dict[str, Dict[str, float]]:
        """The last recorded step's GSNR diagnostics per variable (first replica's copy).

        See :meth:`vrgd_tf.GSNRAggregator.statistics`: ``{variable name: {field: float}}``
        with the fields ``mean_gsnr``, ``frac_at_gamma``, ``frac_at_one``,
        ``mean_factor`` and ``norm_ratio``, ``has_gsnr`` (bool: whether a recording
        step measured the variable) and the split-half fields (``reliability``, a placeholder
        0.0 where ``reliability_defined`` is False, ...); empty before the optimizer is built. Logs the inert-step warning
        if the recorded step had no defined GSNR in any variable.
        """
        return self._vrgd.statistics()
