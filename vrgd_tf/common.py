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

from vrgd_tf import gsnr
from vrgd_tf import validation

_LOG = logging.getLogger("vrgd_tf")

# Constructor arguments checked by name, whatever the base optimizer.
_NON_NEGATIVE = ("learning_rate", "epsilon", "weight_decay", "weight_decay_rate", "eeta",
                 "momentum")
_UNIT_INTERVAL = ("beta_1", "beta_2")
_EXCLUSIONS = ("exclude_from_weight_decay", "exclude_from_layer_adaptation")


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
    for name in _NON_NEGATIVE:
        if name in values:
            validation.check_non_negative(name, values[name])
    for name in _UNIT_INTERVAL:
        if name in values:
            validation.check_in_range(name, values[name], 0.0, 1.0, high_open=True)
    for name in _EXCLUSIONS:
        if name in values:
            validation.check_exclusion_list(name, values[name])


def vrgd_signature(base_cls, default_beta_3: float, class_name: str) -> inspect.Signature:
    """The constructor signature of a VRGD class: the base class's (with ``name`` defaulting
    to ``class_name``), plus keyword-only ``gamma=0.1`` and ``beta_3=default_beta_3``."""
    params = [p.replace(default=class_name) if p.name == "name" else p
              for p in list(inspect.signature(base_cls.__init__).parameters.values())[1:]]
    var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
    params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
    extra = [inspect.Parameter("gamma", inspect.Parameter.KEYWORD_ONLY, default=0.1),
             inspect.Parameter("beta_3", inspect.Parameter.KEYWORD_ONLY,
                               default=default_beta_3)]
    return inspect.Signature(params + extra + var_kw)


class VRGDCommon:
    """Mixin state and helpers shared by both optimizer families.

    Attributes:
      gamma: float in (0, 1], lower bound of the factor (paper eq. 9; default 0.1).
      beta_3: float in [0, 1), decay of the factor momentum (paper Section 4.2).
    """

    @staticmethod
    def _vrgd_check(gamma, beta_3) -> Tuple[float, float]:
        """Validated ``(gamma, beta_3)``; call before the base constructor."""
        return gsnr.validate_gamma(gamma), gsnr.validate_beta_3(beta_3)

    def _vrgd_post_init(self, gamma: float, beta_3: float) -> None:
        """Sets the VRGD attributes; call after the base constructor."""
        self.gamma = gamma
        self.beta_3 = beta_3
        self._vrgd_state = None
        self._vrgd_warned_single_replica = False

    def _vrgd_warn_single_replica(self) -> None:
        if not self._vrgd_warned_single_replica:
            self._vrgd_warned_single_replica = True
            _LOG.warning(
                "%s: only one replica is in sync, so there is no gradient noise estimate; "
                "VRGD steps exactly as its base optimizer. Train with k >= 2 replicas "
                "(the paper uses at least 8) to get variance reduction.",
                type(self).__name__)

    def _vrgd_reduce(self, grads_and_vars, replica_context) -> List[Tuple]:
        """``(grad, var)`` pairs -> pairs of variance-reduced gradients; None stays None."""
        pairs = list(grads_and_vars)
        present = [(g, v) for g, v in pairs if g is not None]
        reduced = gsnr.variance_reduce(
            [g for g, _ in present], [v for _, v in present], gamma=self.gamma,
            beta_3=self.beta_3, state=self._vrgd_state, replica_context=replica_context,
            warn_single_replica=self._vrgd_warn_single_replica)
        it = iter(reduced)
        return [(next(it) if g is not None else None, v) for g, v in pairs]

    def _vrgd_config(self) -> Dict:
        return {"gamma": self.gamma, "beta_3": self.beta_3}

    def vrgd_statistics(self) -> Dict[str, Dict[str, float]]:
        """The last step's GSNR diagnostics per variable (first replica's copy).

        Returns:
          ``{variable name: {"mean_gsnr": float, "frac_at_gamma": float,
          "frac_at_one": float}}``; empty before the optimizer is built. The values are
          those of the last step taken with more than one replica (zeros before that).
        """
        if self._vrgd_state is None:
            return {}
        out = {}
        for name, var in zip(self._vrgd_state.variable_names, self._vrgd_state.statistics):
            values = [float(x) for x in var.numpy()]
            out[name] = dict(zip(("mean_gsnr", "frac_at_gamma", "frac_at_one"), values))
        return out

    def vrgd_statistics_tensors(self) -> List[Tuple[str, object]]:
        """``[(variable name, float32 variable of shape [3])]``, for summaries in a graph."""
        if self._vrgd_state is None:
            return []
        return list(zip(self._vrgd_state.variable_names, self._vrgd_state.statistics))
