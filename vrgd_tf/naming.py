"""Variable names as users write them in exclusion patterns and see them in summaries."""

import re

__all__ = ["variable_name", "matches_any", "display_names", "unmatched_patterns"]


def variable_name(variable) -> str:
    """Keras 3 ``variable.path`` (e.g. ``"dense/kernel"``) if there is one, else
    ``variable.name`` without its ``:0`` suffix (tf_keras, ``tf.Variable``)."""
    name = getattr(variable, "path", None) or variable.name
    return re.sub(r":\d+$", "", name)


def matches_any(patterns, name: str) -> bool:
    """True if any regex in ``patterns`` (None or list of str) is found by ``re.search``
    in ``name``."""
    return any(re.search(p, name) is not None for p in patterns or ())


def unmatched_patterns(patterns, names):
    """The regexes of ``patterns`` (None or list of str) that ``re.search`` finds in none of
    ``names``, in their order."""
    return [p for p in patterns or () if not any(re.search(p, n) for n in names)]


def display_names(names):
    """``names`` (paths such as ``"sequential/dense1/kernel"``) without the leading path
    components that all of them share, keeping at least the last component of each.

    Keras 3 prefixes a variable's path with the scope it was built in, which differs between a
    model built in its own scope and the same model after ``keras.models.load_model``
    (``sequential/dense1/kernel`` vs ``dense1/kernel``). Diagnostics named by this function
    stay the same across such a save and load, so TensorBoard curves continue on resume.

    Names that would still be equal (e.g. tf_keras variables loaded without their layer
    scope: ``kernel``, ``kernel``) get a suffix ``_1``, ``_2``... in order, so no two
    variables ever share a diagnostic.

    Args:
      names: sequence of str, ``/``-separated.

    Returns:
      list of distinct str, in the same order.
    """
    parts = [n.split("/") for n in names]
    if not parts:
        return []
    common = 0
    shortest = min(len(p) for p in parts)
    while common < shortest - 1 and all(p[common] == parts[0][common] for p in parts):
        common += 1
    out, seen = [], {}
    for p in parts:
        name = "/".join(p[common:])
        count = seen.get(name, 0)
        seen[name] = count + 1
        out.append(name if count == 0 else f"{name}_{count}")
    return out
