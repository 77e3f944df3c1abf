"""Registers the VRGD optimizers with Model Garden's ``OptimizerFactory``.

Importing this module (or :mod:`vrgd_tf.model_garden`) makes the optimizer types
``vrgd_sgd``, ``vrgd_adam``, ``vrgd_lars`` and ``vrgd_lamb`` known to
``official.modeling.optimization.optimizer_factory``:

==============  ===================================  ========================================
type            class (``vrgd_tf.tf_keras``)          config (``vrgd_tf.model_garden.configs``)
==============  ===================================  ========================================
``vrgd_sgd``    ``VRGDSGD`` (legacy ``SGD``)           ``VRGDSGDConfig`` (``SGDConfig``)
``vrgd_adam``   ``VRGDAdam`` (legacy ``Adam``)         ``VRGDAdamConfig`` (``AdamConfig``)
``vrgd_lars``   ``VRGDLars`` (``lars.LARS``)           ``VRGDLarsConfig`` (``LARSConfig``)
``vrgd_lamb``   ``VRGDLamb`` (``lamb.LAMB``)           ``VRGDLambConfig`` (``LAMBConfig``)
==============  ===================================  ========================================

The classes are tf_keras *legacy* optimizers (``OptimizerV2``), which is what
``OptimizerFactory.build_optimizer`` builds by default (``use_legacy_optimizer=True``) and
what every Model Garden task uses. Model Garden lists its own ``lamb`` and ``lars`` (also
``OptimizerV2`` classes) under both of its paths, so ``vrgd_lamb`` and ``vrgd_lars`` are
registered under both too. For ``vrgd_sgd`` and ``vrgd_adam`` the non-legacy path would
expect ``tf_keras.optimizers.experimental`` classes, so there they raise a ``ValueError``
that says to build with ``use_legacy_optimizer=True``.

Registration is idempotent: importing twice (or reloading) is harmless, but a different
class already registered under one of these names is an error.
"""

from official.modeling.optimization import optimizer_factory

from vrgd_tf import tf_keras as vrgd_tf_keras

__all__ = ["LEGACY_CLASSES", "register", "OPTIMIZER_TYPES"]

#: Model Garden optimizer type -> VRGD tf_keras class.
LEGACY_CLASSES = {
    "vrgd_sgd": vrgd_tf_keras.VRGDSGD,
    "vrgd_adam": vrgd_tf_keras.VRGDAdam,
    "vrgd_lars": vrgd_tf_keras.VRGDLars,
    "vrgd_lamb": vrgd_tf_keras.VRGDLamb,
}

#: The registered optimizer types.
OPTIMIZER_TYPES = tuple(LEGACY_CLASSES)

# Types whose class Model Garden would also accept on its non-legacy path (as it does for
# its own `lamb` and `lars`, which are OptimizerV2 classes too).
_SHARED = ("vrgd_lars", "vrgd_lamb")


def _legacy_only(key):
    """A stand-in for the non-legacy path that explains what to do instead."""

    def build(**kwargs):
        del kwargs
        raise ValueError(
            f"Optimizer type {key!r} is a tf_keras legacy optimizer "
            f"({LEGACY_CLASSES[key].__module__}.{LEGACY_CLASSES[key].__name__}); build it "
            "with OptimizerFactory.build_optimizer(..., use_legacy_optimizer=True), the "
            "default that Model Garden's tasks use."
        )

    build.__name__ = f"{key}_legacy_only"
    build.vrgd_legacy_only = key
    return build


def _register_one(table, key, value, use_legacy_optimizer):
    current = table.get(key)
    if current is None:
        optimizer_factory.register_optimizer_cls(key, value, use_legacy_optimizer)
        return
    same = (
        current is value
        or getattr(current, "vrgd_legacy_only", None) == key
        or (
            getattr(current, "__qualname__", None) == getattr(value, "__qualname__", None)
            and getattr(current, "__module__", None) == getattr(value, "__module__", None)
        )
    )
    if not same:
        raise ValueError(
            f"Model Garden optimizer type {key!r} is already registered as {current!r}; "
            "vrgd_tf.model_garden needs that name for its VRGD optimizer."
        )
    table[key] = value  # The same class re-imported (e.g. after a module reload).


def register() -> None:
    """Registers the four VRGD types with Model Garden (idempotent).

    Raises:
      ValueError: a different class is already registered under one of the names.
    """
    for key, cls in LEGACY_CLASSES.items():
        _register_one(optimizer_factory.LEGACY_OPTIMIZERS_CLS, key, cls, True)
        new_path_value = cls if key in _SHARED else _legacy_only(key)
        _register_one(optimizer_factory.NEW_OPTIMIZERS_CLS, key, new_path_value, False)


register()
