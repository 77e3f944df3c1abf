"""Argument checks shared by every optimizer family. Each raises before any state exists."""

import numbers
import re
from typing import List, Optional

__all__ = ["check_count", "check_exclusion_list", "check_non_negative", "check_in_range",
           "check_optimizer_arguments"]

# Optimizer constructor arguments checked by name, whatever the optimizer.
_NON_NEGATIVE = ("learning_rate", "epsilon", "weight_decay", "weight_decay_rate", "eeta",
                 "momentum")
_UNIT_INTERVAL = ("beta_1", "beta_2")
_EXCLUSIONS = ("exclude_from_weight_decay", "exclude_from_layer_adaptation")


def _is_plain_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


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


def check_in_range(name: str, value, low: float, high: float, *, low_open=False,
                   high_open=False):
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
        raise TypeError(f"`{name}` must be None or a list of regex strings, not a bare "
                        f"string; got {patterns!r}. Did you mean [{patterns!r}]?")
    if not isinstance(patterns, (list, tuple)):
        raise TypeError(f"`{name}` must be None or a list of regex strings; got "
                        f"{type(patterns).__name__}.")
    out = []
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(f"`{name}` must hold only regex strings; got {p!r} of type "
                            f"{type(p).__name__}.")
        try:
            re.compile(p)
        except re.error as e:
            raise ValueError(f"`{name}` holds an invalid regex {p!r}: {e}.") from e
        out.append(p)
    return out


def check_optimizer_arguments(values: dict) -> None:
    """Checks optimizer constructor arguments by name; unknown names pass.

    Plain numbers only (schedules and tensors pass): ``learning_rate``, ``epsilon``,
    ``weight_decay(_rate)``, ``eeta`` and ``momentum`` must be >= 0; ``beta_1`` and
    ``beta_2`` in [0, 1); the exclusion lists None or a list of regex strings.

    Raises:
      TypeError, ValueError: naming the argument and the allowed range.
    """
    for name in _NON_NEGATIVE:
        if name in values:
            check_non_negative(name, values[name])
    for name in _UNIT_INTERVAL:
        if name in values:
            check_in_range(name, values[name], 0.0, 1.0, high_open=True)
    for name in _EXCLUSIONS:
        if name in values:
            check_exclusion_list(name, values[name])
