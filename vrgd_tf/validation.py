"""Argument checks shared by every optimizer family.

The constructor checks raise before any state exists; :func:`check_variable_dtypes` runs at
build time, the first moment the variables (and so their dtypes) are known.

This module imports no TensorFlow (the JAX family, ``vrgd_tf.keras_jax``, uses its
constructor checks); the two checks that read TensorFlow objects import it when they run,
from TensorFlow-family code, where it is already imported.
"""

import math
import numbers
import re
from typing import List, Optional

import ml_dtypes
import numpy as np

from vrgd_tf.naming import variable_name

__all__ = [
    "check_count",
    "check_exclusion_list",
    "check_non_negative",
    "check_in_range",
    "check_positive",
    "check_optimizer_arguments",
    "check_variable_dtypes",
    "is_plain_number",
    "KERAS_FIX",
    "SMALLEST_GRADIENT",
    "rule_name",
]

# Optimizer constructor arguments checked by name, whatever the optimizer.
_NON_NEGATIVE = (
    "learning_rate",
    "epsilon",
    "weight_decay",
    "weight_decay_rate",
    "eeta",
    "momentum",
)
_UNIT_INTERVAL = ("beta_1", "beta_2")
_EXCLUSIONS = ("exclude_from_weight_decay", "exclude_from_layer_adaptation")


def is_plain_number(value) -> bool:
    """True for a real Python/NumPy number that is not a bool (tensors are not)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


_is_plain_number = is_plain_number


def check_non_negative(name: str, value):
    """Raises ``ValueError`` if ``value`` is a plain number below 0.

    Tensors, variables, callables and learning-rate schedules are not inspected: they are
    checked by the framework when first used.

    Args:
      name: the argument's name, quoted in the message.
      value: the argument.

    Returns:
      ``value`` unchanged.

    Raises:
      ValueError: ``value`` is a number < 0 or NaN.
    """
    if _is_plain_number(value) and not float(value) >= 0.0:
        raise ValueError(f"`{name}` must be >= 0; got {value}.")
    return value


def check_count(name: str, value) -> int:
    """Returns ``value`` as an int if it is a non-negative integer (bools refused).

    Args:
      name: the argument's name, quoted in the message.
      value: the argument, e.g. ``statistics_interval``.

    Returns:
      ``int(value)``.

    Raises:
      TypeError: ``value`` is not an integer.
      ValueError: ``value`` < 0.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be an int >= 0; got {value!r}.")
    if value < 0:
        raise ValueError(f"`{name}` must be an int >= 0; got {value}.")
    return int(value)


def check_in_range(name: str, value, low: float, high: float, *, low_open=False, high_open=False):
    """Raises ``ValueError`` if the plain number ``value`` is outside the given interval.

    Args:
      name: the argument's name, quoted in the message.
      value: the argument; non-numbers (tensors, schedules) pass unchecked.
      low, high: the bounds.
      low_open, high_open: whether each bound is excluded.

    Returns:
      ``value`` unchanged.

    Raises:
      ValueError: ``value`` is outside the interval.
    """
    if not _is_plain_number(value):
        return value
    v = float(value)
    ok_low = v > low if low_open else v >= low
    ok_high = v < high if high_open else v <= high
    if not (ok_low and ok_high):
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"`{name}` must be in {interval}; got {value}.")
    return value


def check_exclusion_list(name: str, patterns) -> Optional[List[str]]:
    """Checks an exclusion argument such as ``exclude_from_weight_decay``.

    Args:
      name: the argument's name, quoted in the message.
      patterns: None, or a list or tuple of regular-expression strings matched with
        ``re.search`` against variable names.

    Returns:
      None, or the patterns as a new list.

    Raises:
      TypeError: ``patterns`` is a bare string (it would be iterated character by
        character), not a list or tuple, or holds a non-string.
      ValueError: a pattern is not a valid regular expression.
    """
    if patterns is None:
        return None
    if isinstance(patterns, (str, bytes)):
        raise TypeError(
            f"`{name}` must be None or a list of regex strings, not a bare "
            f"string; got {patterns!r}. Did you mean [{patterns!r}]?"
        )
    if not isinstance(patterns, (list, tuple)):
        raise TypeError(
            f"`{name}` must be None or a list of regex strings; got {type(patterns).__name__}."
        )
    out = []
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(
                f"`{name}` must hold only regex strings; got {p!r} of type {type(p).__name__}."
            )
        try:
            re.compile(p)
        except re.error as e:
            raise ValueError(f"`{name}` holds an invalid regex {p!r}: {e}.") from e
        out.append(p)
    return out


def check_positive(name: str, value, why: str = ""):
    """Raises ``ValueError`` if ``value`` is a plain number that is not > 0.

    Tensors, variables, callables and schedules are not inspected.

    Args:
      name: the argument's name, quoted in the message.
      value: the argument.
      why: what goes wrong with 0, appended to the message.

    Returns:
      ``value`` unchanged.

    Raises:
      ValueError: ``value`` is a number <= 0 or NaN.
    """
    if _is_plain_number(value) and not float(value) > 0.0:
        raise ValueError(f"`{name}` must be > 0; got {value}." + (f" {why}" if why else ""))
    return value


def check_optimizer_arguments(values: dict, positive=()) -> None:
    """Checks optimizer constructor arguments by name; unknown names pass.

    Plain numbers only (schedules and tensors pass): ``learning_rate``, ``epsilon``,
    ``weight_decay(_rate)``, ``eeta`` and ``momentum`` must be >= 0; ``beta_1`` and
    ``beta_2`` in [0, 1); the exclusion lists None or a list of regex strings.

    Args:
      values: argument name -> value.
      positive: names that must be > 0 for this optimizer (e.g. LAMB's ``epsilon``,
        which divides ``m_hat / (sqrt(v_hat) + epsilon)`` where ``v_hat`` can be 0).

    Raises:
      TypeError, ValueError: naming the argument and the allowed range.
    """
    for name in _NON_NEGATIVE:
        if name in values:
            if name in positive:
                check_positive(name, values[name], _POSITIVE.get(name, ""))
            else:
                check_non_negative(name, values[name])
    for name in _UNIT_INTERVAL:
        if name in values:
            check_in_range(name, values[name], 0.0, 1.0, high_open=True)
    for name in _EXCLUSIONS:
        if name in values:
            check_exclusion_list(name, values[name])


#: The smallest gradient magnitude (per element) a second moment kept in the variable's dtype
#: must still resolve: ``(1 - beta_2) * SMALLEST_GRADIENT**2`` must be a normal number of
#: that dtype. bfloat16 (the exponent range of float32) passes for any ``beta_2 < 1``;
#: float16 (smallest normal 6.1e-5) fails for every ``beta_2``: with ``beta_2 = 0.999``,
#: ``v`` is subnormal for ``|g| < 0.25`` and 0 for ``|g| < 7.7e-3``.
SMALLEST_GRADIENT = 1e-6

# Decay rates that an update rule computing in the variable's dtype needs below 1, and what
# goes wrong when one rounds to 1.0 in that dtype.
_DECAY_RATES = {
    "beta_1": "the bias correction 1 - beta_1**t is 0 and the step is Inf or NaN",
    "beta_2": "the bias correction 1 - beta_2**t is 0: Adam's step lr * sqrt(1 - beta_2**t) "
    "/ (1 - beta_1**t) is 0, LAMB's v / (1 - beta_2**t) is 0/0 = NaN",
    "momentum": "the momentum never decays",
    "rho": "the moving average never decays",
}
# Constants that must stay > 0, and what goes wrong when one rounds to 0 in the dtype.
_POSITIVE = {
    "epsilon": "a zero second moment gives 0 / (0 + epsilon) = NaN",
}

#: The fix quoted by :func:`check_variable_dtypes` for the Keras 3 family.
KERAS_FIX = (
    "Keep the variables float32: the 'mixed_bfloat16' and 'mixed_float16' dtype policies "
    "(keras.mixed_precision.set_dtype_policy) compute the layers in low precision but keep "
    "float32 variables. Or use an optimizer that computes its update in float32 whatever "
    "the variable dtype: vrgd_tf.VRGDLamb or vrgd_tf.VRGDLars."
)


def _hyperparameter(optimizer, name):
    """The optimizer's hyper-parameter ``name`` as a Python float, or None if it has none or
    it is not a constant (a schedule, a tensor without a value)."""
    try:
        value = getattr(optimizer, name, None)
    except Exception:  # pylint: disable=broad-except
        return None
    if value is None:
        return None
    if is_plain_number(value):
        return float(value)
    try:
        import tensorflow as tf  # only the TensorFlow families reach here with a non-number

        with tf.init_scope():
            if callable(value) and not hasattr(value, "numpy"):
                value = value()
            if hasattr(value, "numpy"):
                value = value.numpy()
            array = np.asarray(value, dtype=np.float64)
        return float(array) if array.shape == () else None
    except Exception:  # pylint: disable=broad-except
        return None


def rule_name(base_class) -> str:
    """The public dotted name of an optimizer class, e.g. ``keras.optimizers.Adam`` (not
    ``keras.src.optimizers.adam.Adam``); strings are returned unchanged."""
    if isinstance(base_class, str):
        return base_class
    module, name = base_class.__module__, base_class.__name__
    if ".src." in module:
        parts = module.replace(".src.", ".").split(".")
        if parts[-1] == name.lower():
            parts = parts[:-1]
        module = ".".join(parts)
    return f"{module}.{name}"


def _low_precision_problems(optimizer, dtype_name, np_dtype, finfo) -> List[str]:
    """Why an update rule computing in ``np_dtype`` fails with the optimizer's
    hyper-parameters: one clause per problem, empty if none."""
    problems = []
    for name, consequence in _DECAY_RATES.items():
        value = _hyperparameter(optimizer, name)
        if value is not None and 0.0 <= value < 1.0 and float(np_dtype(value)) >= 1.0:
            problems.append(f"{name}={value:.6g} rounds to 1.0 in {dtype_name}, so {consequence}")
    for name, consequence in _POSITIVE.items():
        value = _hyperparameter(optimizer, name)
        if value is not None and value > 0.0 and float(np_dtype(value)) == 0.0:
            problems.append(f"{name}={value:.6g} rounds to 0 in {dtype_name}, so {consequence}")
    beta_2 = _hyperparameter(optimizer, "beta_2")
    if (
        beta_2 is not None
        and 0.0 <= beta_2 < 1.0
        and _hyperparameter(optimizer, "epsilon") is not None
    ):
        one_minus = 1.0 - float(np_dtype(beta_2))
        tiny = float(finfo.tiny)
        if 0.0 < one_minus and one_minus * SMALLEST_GRADIENT**2 < tiny:
            floor = math.sqrt(tiny / one_minus)
            problems.append(
                f"its second moment v accumulates (1 - beta_2) * g**2 in {dtype_name}, "
                f"whose smallest normal number is {tiny:.3g}: with beta_2={beta_2:.6g}, v loses "
                f"precision for |g| < {floor:.2g} and is 0 for "
                f"|g| < {math.sqrt(float(finfo.smallest_subnormal) / one_minus):.2g}, so the "
                "step becomes lr * m / epsilon, orders of magnitude too large"
            )
    return problems


def check_variable_dtypes(
    optimizer, variables, *, base_rule, float32_only: Optional[str] = None, fix: str = KERAS_FIX
) -> None:
    """Raises at build time if the optimizer's update rule cannot train a variable's dtype.

    Float variables narrower than float32 (bfloat16, float16) are checked; float32 and
    float64 ones always pass. Data-driven, per class:

    * ``optimizer.computes_in_float32`` True (class attribute, e.g. this package's ``Lamb``
      and ``Lars``): the rule computes in float32 and casts back, so every dtype passes.
    * ``float32_only`` given: the rule cannot run on such variables at all; the reason (a
      clause following "its update rule (...)") is quoted.
    * Otherwise the rule computes in the variable's dtype, and its hyper-parameters are
      checked by name: decay rates in [0, 1) (``beta_1``, ``beta_2``, ``momentum``, ``rho``)
      must not round to 1.0, ``epsilon`` > 0 must not round to 0, and an Adam-type second
      moment (``beta_2`` with ``epsilon``) must hold ``(1 - beta_2) * g**2`` as a normal
      number down to ``|g| =`` :data:`SMALLEST_GRADIENT` (float16 cannot).

    Args:
      optimizer: the optimizer being built (Keras 3 or tf_keras ``OptimizerV2``).
      variables: its trainable variables (any with a ``dtype``).
      base_rule: the update rule for the message: its class (see :func:`rule_name`) or name.
      float32_only: None, or why the rule only runs on float32/float64 variables.
      fix: the advice ending the message; default :data:`KERAS_FIX`.

    Raises:
      ValueError: naming the optimizer class, the first failing variable, its dtype, why,
        and the fix (float32 variables, e.g. a mixed-precision policy, or an optimizer that
        computes in float32).
    """
    if getattr(optimizer, "computes_in_float32", False):
        return
    import tensorflow as tf  # called by the TensorFlow families only

    checked = {}
    for variable in variables:
        dtype = tf.as_dtype(variable.dtype)
        if not dtype.is_floating or dtype.size >= 4:
            continue
        if dtype.name not in checked:
            if float32_only:
                checked[dtype.name] = f"its update rule ({rule_name(base_rule)}) {float32_only}"
            else:
                np_dtype = dtype.as_numpy_dtype
                problems = _low_precision_problems(
                    optimizer, dtype.name, np_dtype, ml_dtypes.finfo(np_dtype)
                )
                checked[dtype.name] = problems and (
                    f"its update rule ({rule_name(base_rule)}) computes in the variable's "
                    "dtype, and " + "; and ".join(problems)
                )
        if checked[dtype.name]:
            raise ValueError(
                f"{type(optimizer).__name__} cannot train variable "
                f"'{variable_name(variable)}' of dtype {dtype.name}: {checked[dtype.name]}. " + fix
            )
