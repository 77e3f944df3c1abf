"""What this package's LAMB and LARS share: the trust ratio, the float32 compute dtype, and
one weight decay with its weight-decay and layer-adaptation exclusions
(:class:`LayerwiseOptimizer`), as in Model Garden's ``lamb.LAMB`` and ``lars.LARS``.

Backend-neutral (``keras.ops``): this module imports no TensorFlow, so that the JAX family
(``vrgd_tf.keras_jax``) can use these classes without it.
"""

import contextlib
import sys

import keras
from keras import ops

from vrgd_tf import validation
from vrgd_tf.naming import matches_any, variable_name

__all__ = ["LayerwiseOptimizer", "compute_dtype", "trust_ratio"]


def compute_dtype(variable_dtype) -> str:
    """The dtype this package's LAMB and LARS compute in for a variable of ``variable_dtype``.

    ``"float64"`` for float64 variables, else ``"float32"``: bfloat16 and float16 variables
    are read into float32, updated there and cast back, so that no coefficient
    (``beta_2 = 0.999`` is 1.0 in bfloat16), bias correction, square or norm is rounded to
    the variable's precision; their slots are float32. For float32 variables every cast is
    a no-op.
    """
    if keras.backend.standardize_dtype(variable_dtype) == "float64":
        return "float64"
    return "float32"


def trust_ratio(weight_norm, update_norm, coefficient=None):
    """``coefficient * weight_norm / update_norm`` where both norms are > 0, else 1.

    The trust ratio of You et al. 2020 (LAMB, coefficient None) and 2017 (LARS, coefficient
    ``eeta``), written as in Model Garden's LAMB and LARS. Scalars of the compute dtype
    (:func:`compute_dtype`).
    """
    numerator = weight_norm if coefficient is None else coefficient * weight_norm
    return ops.where(
        ops.greater(weight_norm, 0),
        ops.where(ops.greater(update_norm, 0), numerator / update_norm, 1.0),
        1.0,
    )


class LayerwiseOptimizer(keras.optimizers.Optimizer):
    """Base of :class:`Lamb` and :class:`Lars`: one weight decay, its exclusions, float32 math.

    Weight decay is the subclass's ``weight_decay_rate`` only. Keras' own ``weight_decay``
    argument (a second, different decay applied after the update) is refused, and Keras'
    ``exclude_from_weight_decay()`` method adds to the exclusions that ``weight_decay_rate``
    uses. ``exclude_from_layer_adaptation=None`` (or empty) means "the weight-decay
    exclusions", as in Model Garden.

    Args:
      learning_rate: float >= 0, tensor or schedule (checked by the subclass).
      exclude_from_weight_decay: None or list of regex strings matched with ``re.search``
        against ``variable.path``: matching variables get no weight decay.
      exclude_from_layer_adaptation: None or list of regex strings: matching variables get
        trust ratio 1; None or empty means the weight-decay exclusions.
      **kwargs: the Keras 3 optimizer base arguments; ``weight_decay`` must be None or 0.

    Raises:
      ValueError: ``weight_decay`` is neither None nor 0 (the message names
        ``weight_decay_rate``), or a pattern is not a valid regular expression.
      TypeError: an exclusion list is a bare string or holds a non-string.

    Attributes:
      computes_in_float32: True (class attribute): the update of a bfloat16 or float16
        variable is computed in float32 and cast back, and its slots are float32 (see
        :func:`compute_dtype`, :meth:`_add_slots`). Read by
        ``vrgd_tf.validation.check_variable_dtypes``.
      exclude_from_weight_decay_patterns: None or list of regex strings (read-only): the
        ``exclude_from_weight_decay`` argument plus the ``var_names`` added by
        :meth:`exclude_from_weight_decay`; saved by ``get_config``.
      exclude_from_layer_adaptation: None or list of regex strings: the patterns whose
        matches get trust ratio 1; the ``exclude_from_layer_adaptation`` argument, or when
        that is None or empty, ``exclude_from_weight_decay_patterns``. Assigning it sets
        the argument (checked as in the constructor).
    """

    computes_in_float32 = True
    #: What ``weight_decay_rate`` is, for the message refusing ``weight_decay``.
    _weight_decay_rate_doc = "the weight decay of this optimizer"

    def __init__(
        self, learning_rate, *, exclude_from_weight_decay, exclude_from_layer_adaptation, **kwargs
    ):
        weight_decay = kwargs.get("weight_decay")
        if weight_decay is not None and not (
            validation.is_plain_number(weight_decay) and float(weight_decay) == 0.0
        ):
            raise ValueError(
                f"{type(self).__name__}: `weight_decay` (Keras' decoupled weight decay, "
                "applied after the update and outside the trust ratio) is not supported; "
                f"got weight_decay={weight_decay!r}. Use `weight_decay_rate` (float >= 0, "
                f"{self._weight_decay_rate_doc}) and `exclude_from_weight_decay` instead, "
                "or leave `weight_decay` None."
            )
        super().__init__(learning_rate=learning_rate, **kwargs)
        self._exclusion_patterns = validation.check_exclusion_list(
            "exclude_from_weight_decay", exclude_from_weight_decay
        )
        self._explicit_layer_adaptation = validation.check_exclusion_list(
            "exclude_from_layer_adaptation", exclude_from_layer_adaptation
        )
        self._exclusion_keys = set()

    @property
    def exclude_from_weight_decay_patterns(self):
        return None if self._exclusion_patterns is None else list(self._exclusion_patterns)

    @property
    def exclude_from_layer_adaptation(self):
        patterns = self._explicit_layer_adaptation or self._exclusion_patterns
        return None if patterns is None else list(patterns)

    @exclude_from_layer_adaptation.setter
    def exclude_from_layer_adaptation(self, patterns):
        self._explicit_layer_adaptation = validation.check_exclusion_list(
            "exclude_from_layer_adaptation", patterns
        )

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Keras' method: excludes variables from weight decay (``weight_decay_rate``).

        Adds to the ``exclude_from_weight_decay`` argument's exclusions (a second call adds
        more; nothing is removed). With ``exclude_from_layer_adaptation`` None, the
        excluded variables also get trust ratio 1, as the argument's do.

        Args:
          var_list: None or a list of variables (``keras.Variable``) to exclude. Kept by
            identity: ``get_config`` cannot save them, as with Keras' optimizers.
          var_names: None or a list of regex strings matched with ``re.search`` against
            ``variable.path``, e.g. ``["bias"]``. Appended to
            ``exclude_from_weight_decay_patterns`` and so saved by ``get_config``.

        Raises:
          ValueError: the optimizer is already built (the exclusions are read when the
            update is traced), or a name is not a valid regular expression.
          TypeError: ``var_names`` is a bare string or holds a non-string.
        """
        if self.built:
            raise ValueError(
                "`exclude_from_weight_decay()` can only be configured before the optimizer "
                f"is built; {self.name} is built. Pass `exclude_from_weight_decay=[...]` to "
                "the constructor, or call it before the first `apply`/`fit`."
            )
        names = validation.check_exclusion_list("var_names", var_names)
        if names:
            patterns = list(self._exclusion_patterns or [])
            self._exclusion_patterns = patterns + [n for n in names if n not in patterns]
        for variable in var_list or ():
            self._exclusion_keys.add(self._var_key(variable))

    def _add_slots(self, var_list, names):
        """``add_optimizer_variables(var_list, names)`` with float32 slots for 16-bit variables.

        Slots of float32 and float64 variables are made exactly as Keras makes them (same
        names, dtype, order). Those of bfloat16/float16 variables are float32 (see
        :func:`compute_dtype`): Adam moments and momenta need float32's precision and range
        across steps (in bfloat16 ``0.999 * v`` rounds back to ``v``, so ``v`` never
        decays; in float16 ``(1 - beta_2) * g**2`` is 0 for ``|g| < 7.7e-3``).

        Returns:
          A list of slots per name (a tuple of lists), None for variables that Keras
          overwrites with their gradient.
        """
        slots = tuple([] for _ in names)
        for variable in var_list:
            for slot_list, name in zip(slots, names):
                if self._overwrite_variable_with_gradient(variable):
                    slot_list.append(None)
                elif keras.backend.standardize_dtype(variable.dtype) == compute_dtype(
                    variable.dtype
                ):
                    slot_list.append(self.add_variable_from_reference(variable, name=name))
                else:
                    slot_list.append(self._add_float32_slot(variable, name))
        return slots

    def _add_float32_slot(self, variable, name):
        """A zero float32 slot named and placed as ``add_variable_from_reference`` would."""
        reference = (
            variable.path.replace("/", "_")
            if hasattr(variable, "path")
            else str(variable.name).replace("/", "_").replace(":", "_")
        )
        colocate = variable.value if isinstance(variable, keras.Variable) else variable
        # Keras' TensorFlow optimizer has a tf.distribute strategy; the JAX one has none.
        strategy = getattr(self, "_distribution_strategy", None)
        placement = (
            contextlib.nullcontext()
            if strategy is None
            else strategy.extended.colocate_vars_with(colocate)
        )
        with placement:
            return self.add_variable(
                shape=variable.shape,
                dtype="float32",
                name=f"{reference}_{name}",
                layout=getattr(variable, "_layout", None),
            )

    @staticmethod
    def _dense(gradient):
        """``gradient`` as a dense tensor: a ``tf.IndexedSlices`` (embedding gradient) is
        summed over duplicate rows into the variable's shape. LAMB and LARS take norms over
        the whole variable, so their sparse step is their dense step, as in Model Garden's
        LAMB (its LARS has no sparse rule)."""
        tf = sys.modules.get("tensorflow")  # an IndexedSlices exists only once TF is imported
        if tf is not None and isinstance(gradient, tf.IndexedSlices):
            return tf.convert_to_tensor(gradient)
        return gradient

    def _decays(self, variable) -> bool:
        """Whether ``weight_decay_rate`` applies to ``variable`` (Python bool, trace time)."""
        return not (
            self._var_key(variable) in self._exclusion_keys
            or matches_any(self._exclusion_patterns, variable_name(variable))
        )

    def _adapts(self, variable) -> bool:
        """Whether ``variable`` gets the trust ratio (Python bool, trace time)."""
        if self._explicit_layer_adaptation:
            return not matches_any(self._explicit_layer_adaptation, variable_name(variable))
        return self._decays(variable)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "exclude_from_weight_decay": self.exclude_from_weight_decay_patterns,
                "exclude_from_layer_adaptation": (
                    None
                    if self._explicit_layer_adaptation is None
                    else list(self._explicit_layer_adaptation)
                ),
            }
        )
        return config
