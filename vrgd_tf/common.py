"""What the Keras 3 and the tf_keras VRGD optimizers share, apart from the GSNR math.

A VRGD optimizer is its base optimizer with one change: where the base all-reduces (SUM) the
per-replica gradients, the VRGD one calls :func:`vrgd_tf.gsnr.variance_reduce`. This module
holds the family-independent glue: constructor checks, the ``gamma``/``beta_3`` config,
the call with ``None`` gradients kept in place, the one-time single-replica warning, and the
diagnostics accessor.
"""

import inspect
import logging
from typing import Dict, List, Tuple

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from vrgd_tf import gsnr
from vrgd_tf import naming
from vrgd_tf import validation

_LOG = logging.getLogger("vrgd_tf")

def check_base_arguments(base_cls, args, kwargs) -> None:
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
        raise ValueError("`gradient_aggregator` cannot be combined with VRGD: VRGD replaces "
                         "the cross-replica aggregation with its GSNR step.")
    validation.check_optimizer_arguments(values)


VRGD_ARGS_DOC = """
    VRGD arguments (arXiv 2309.13681; spec ``docs/spec.md``):
      gamma: float in (0, 1], lower bound of the per-element factor (eq. 9). Default 0.1.
        ``gamma=1`` with ``beta_3=0`` reproduces the base optimizer exactly.
      beta_3: float in [0, 1), decay of the factor's momentum with bias correction
        (Section 4.2; *our reading*). Default {beta_3}.
      statistics_interval: int >= 0, in steps. The GSNR diagnostics (``vrgd_statistics()``)
        are computed and stored on the steps that bring ``iterations`` to a multiple of it
        (every step for 1, never for 0); other steps skip that work. Set it to the
        summary interval (e.g. ``GSNRTensorBoard(update_freq=...)``). Default 1.

    Gradients are all-reduced together with their squares (one collective); the factor
    ``clip(r / mean(r), gamma, 1)`` of the GSNR ``r`` multiplies the summed gradient before
    the base update. With one replica the step equals the base optimizer's and a warning is
    logged once. Diagnostics: ``vrgd_statistics()``.

    Raises:
      ValueError, TypeError: at construction, for ``gamma``, ``beta_3``,
        ``statistics_interval`` or a base argument outside its range (the message names it).
"""


def make_vrgd_class(mixin, base_class, *, name, default_beta_3, doc, module, register):
    """Creates ``class name(mixin, base_class)``; used by both families' factories.

    Args:
      mixin: the family's subclass of :class:`VRGDCommon`.
      base_class: the optimizer class to extend.
      name: class name, or None for ``"VRGD" + base_class.__name__``.
      default_beta_3: float in [0, 1).
      doc: class docstring head, or None; :data:`VRGD_ARGS_DOC` is appended.
      module: ``__module__`` of the new class.
      register: callable ``(name) -> decorator`` registering it as serializable, or None.

    Returns:
      The class.

    Raises:
      ValueError, TypeError: ``default_beta_3`` outside [0, 1).
    """
    default_beta_3 = gsnr.validate_beta_3(default_beta_3)
    cls_name = name or "VRGD" + base_class.__name__
    head = doc or f"VRGD version of `{base_class.__module__}.{base_class.__name__}`."
    cls = type(cls_name, (mixin, base_class), {
        "_vrgd_base_class": base_class,
        "_vrgd_default_beta_3": default_beta_3,
        "__signature__": vrgd_signature(base_class, default_beta_3, cls_name),
        "__doc__": head + "\n" + VRGD_ARGS_DOC.format(beta_3=default_beta_3),
        "__module__": module,
    })
    return register(cls_name)(cls) if register is not None else cls


def vrgd_signature(base_cls, default_beta_3: float, class_name: str) -> inspect.Signature:
    """The constructor signature of a VRGD class: the base class's (with ``name`` defaulting
    to ``class_name``), plus keyword-only ``gamma=0.1``, ``beta_3=default_beta_3`` and
    ``statistics_interval=1``."""
    params = [p.replace(default=class_name) if p.name == "name" else p
              for p in list(inspect.signature(base_cls.__init__).parameters.values())[1:]]
    var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    extra = [inspect.Parameter("gamma", inspect.Parameter.KEYWORD_ONLY, default=0.1),
             inspect.Parameter("beta_3", inspect.Parameter.KEYWORD_ONLY,
                               default=default_beta_3),
             inspect.Parameter("statistics_interval", inspect.Parameter.KEYWORD_ONLY,
                               default=1)]
    return inspect.Signature(params + extra + var_kw)


class VRGDCommon:
    """Mixin shared by both optimizer families: constructor, config, the reduction call.

    A VRGD class is ``type(name, (FamilyMixin, base_class), ...)`` made by
    :func:`make_vrgd_class`; ``FamilyMixin`` subclasses this and adds the family's hook and
    state creation.

    Attributes:
      gamma: float in (0, 1], lower bound of the factor (paper eq. 9; default 0.1).
      beta_3: float in [0, 1), decay of the factor momentum (paper Section 4.2).
      statistics_interval: int >= 0, steps between two recordings of the diagnostics.
    """

    _vrgd_base_class = None
    _vrgd_default_beta_3 = 0.0
    #: True for a base optimizer without a sparse update rule: ``tf.IndexedSlices``
    #: gradients reach it dense, on every replica count.
    _vrgd_densify_sparse = False

    def __init__(self, *args, gamma=0.1, beta_3=None, statistics_interval=1, **kwargs):
        base = self._vrgd_base_class
        gamma = gsnr.validate_gamma(gamma)
        statistics_interval = validation.check_count("statistics_interval",
                                                     statistics_interval)
        beta_3 = gsnr.validate_beta_3(self._vrgd_default_beta_3 if beta_3 is None else beta_3)
        check_base_arguments(base, args, kwargs)
        params = list(inspect.signature(base.__init__).parameters)
        if "name" not in kwargs and ("name" not in params
                                     or len(args) < params.index("name") - 1):
            kwargs["name"] = type(self).__name__
        super().__init__(*args, **kwargs)
        self.gamma = gamma
        self.beta_3 = beta_3
        self.statistics_interval = statistics_interval
        self._vrgd_state = None
        self._vrgd_warned_single_replica = False
        self._vrgd_warned_inert = False
        self._vrgd_num_replicas = "several"  # the last traced step's k, for messages

    def get_config(self):
        config = super().get_config()
        # Model Garden's LAMB and LARS leave their exclusion lists out of get_config.
        params = inspect.signature(self._vrgd_base_class.__init__).parameters
        for arg in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
            if arg in params and arg not in config:
                config[arg] = getattr(self, arg, None)
        config.update({"gamma": self.gamma, "beta_3": self.beta_3,
                       "statistics_interval": self.statistics_interval})
        return config

    def _vrgd_add_variables(self, variables, make_variable, var_key) -> None:
        """Creates the VRGD state of ``variables`` (on the first call also the
        :class:`vrgd_tf.gsnr.VRGDState`, and logs exclusion patterns that match none of
        them)."""
        if self._vrgd_state is None:
            self._vrgd_state = gsnr.VRGDState(make_variable, var_key, self.beta_3)
            self._vrgd_log_unmatched_exclusions(variables)
        self._vrgd_state.add_variables(variables)

    def _vrgd_log_unmatched_exclusions(self, variables) -> None:
        """Logs one line per exclusion pattern that matches no variable name.

        Not an error: configs list several spellings on purpose (``"LayerNorm"``,
        ``"layer_norm"``), but a pattern that matches nothing usually means a variable that
        was meant to be excluded is not.
        """
        config = self.get_config()
        names = [naming.variable_name(v) for v in variables]
        seen = None
        for arg in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
            patterns = config.get(arg)
            if not patterns or patterns == seen:
                continue  # the layer-adaptation list falls back to the weight-decay list
            seen = patterns
            for pattern in naming.unmatched_patterns(patterns, names):
                _LOG.warning("%s: `%s` pattern %r matches none of the %d trainable "
                             "variables (e.g. %s).", type(self).__name__, arg, pattern,
                             len(names), ", ".join(repr(n) for n in names[:3]))

    def _vrgd_warn_single_replica(self) -> None:
        if not self._vrgd_warned_single_replica:
            self._vrgd_warned_single_replica = True
            _LOG.warning(
                "%s: only one replica is in sync, so there is no gradient noise estimate; "
                "VRGD steps exactly as its base optimizer. Train with k >= 2 replicas "
                "(the paper uses at least 8) to get variance reduction.",
                type(self).__name__)

    def _vrgd_log_inert(self) -> None:
        """Logs the inert-step warning, once per optimizer."""
        if not self._vrgd_warned_inert:
            self._vrgd_warned_inert = True
            _LOG.warning(
                "%s: in a step with %s replicas in sync no variable had a defined GSNR: "
                "every replica sent the same (or an all-zero) gradient, so VRGD stepped "
                "exactly as its base optimizer. This happens when every replica gets the "
                "same batch, e.g. Keras `model.train_on_batch` under a tf.distribute "
                "strategy, or a custom loop that hands the same tensor to every replica. "
                "Feed each replica its own shard: `model.fit` on a dataset, or "
                "`strategy.experimental_distribute_dataset` in a custom loop.",
                type(self).__name__, self._vrgd_num_replicas)

    def _vrgd_warn_inert(self, inert: tf.Tensor) -> None:
        """Emits :meth:`_vrgd_log_inert` from the step when ``inert`` (scalar bool) is True.

        Outside XLA, a ``tf.cond`` whose taken branch is a ``tf.py_function`` (a scalar
        predicate per step; the Python call happens only on an inert step). Inside an XLA
        context (``jit_compile=True``, TPU) no host call is compiled in: the step stays
        XLA-pure and :meth:`vrgd_statistics` gives the warning when it reads the recorded
        diagnostics of an inert step.
        """
        if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
            return

        def log():
            self._vrgd_log_inert()
            return True

        tf.cond(inert, lambda: tf.py_function(log, [], tf.bool), lambda: tf.constant(False))

    def _vrgd_reduce(self, grads_and_vars, replica_context) -> List[Tuple]:
        """``(grad, var)`` pairs -> pairs of variance-reduced gradients; None stays None."""
        pairs = list(grads_and_vars)
        present = [(g, v) for g, v in pairs if g is not None]
        self._vrgd_num_replicas = replica_context.num_replicas_in_sync
        reduced = gsnr.variance_reduce(
            [g for g, _ in present], [v for _, v in present], gamma=self.gamma,
            beta_3=self.beta_3, state=self._vrgd_state, replica_context=replica_context,
            warn_single_replica=self._vrgd_warn_single_replica,
            warn_inert=self._vrgd_warn_inert,
            record_statistics=self._vrgd_record_statistics())
        if self._vrgd_densify_sparse:
            reduced = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                       for g in reduced]
        it = iter(reduced)
        return [(next(it) if g is not None else None, v) for g, v in pairs]

    def _vrgd_record_statistics(self):
        """True, False, or a scalar bool tensor: whether this step records diagnostics.

        Called at the aggregation hook, where ``iterations`` still counts the completed
        steps (both families increment it after the update).
        """
        if self.statistics_interval <= 1:
            return self.statistics_interval == 1
        step = tf.cast(self.iterations, tf.int64) + 1
        return tf.equal(step % self.statistics_interval, 0)

    def vrgd_statistics(self) -> Dict[str, Dict[str, float]]:
        """The last recorded step's GSNR diagnostics per variable (first replica's copy).

        Returns:
          ``{variable name: {field: float}}`` with the fields of
          :data:`vrgd_tf.gsnr.STATISTICS_FIELDS`: ``mean_gsnr`` (mean GSNR over the
          elements where it is defined), ``frac_at_gamma`` and ``frac_at_one`` (fractions of
          elements whose raw factor is clipped at ``gamma`` / equal to 1), ``mean_factor``
          (mean factor applied, after smoothing: the step's scale relative to the base
          optimizer). Empty before the optimizer is built. The values are those of the last
          recording step (see ``statistics_interval``) with finite gradients (zeros before
          that). Variable names are the variables' paths without the leading scopes that
          all of them share (e.g. the model's name), so they stay the same when a model is
          saved and loaded again.

        Logs the inert-step warning (see the class docstring) if the recorded step had no
        defined GSNR in any variable.
        """
        if self._vrgd_state is None:
            return {}
        names = naming.display_names(self._vrgd_state.variable_names)
        out = {}
        for name, var in zip(names, self._vrgd_state.statistics):
            out[name] = dict(zip(gsnr.STATISTICS_FIELDS, (float(x) for x in var.numpy())))
        if out and all(v["frac_at_one"] == 1.0 and v["mean_gsnr"] == 0.0
                       for v in out.values()):
            self._vrgd_log_inert()
        return out
