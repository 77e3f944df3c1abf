"""The VRGD settings have one definition (vrgd_tf.settings.VRGDSettings) that every place
showing them derives from: the classes' signatures, docstrings, attributes and configs, the
aggregator's, and the Model Garden configs. The config keys and the checks' messages are
those the saved files and configs already use."""

import dataclasses
import inspect

import tensorflow as tf

import vrgd_tf
from vrgd_tf import settings

import util

#: The config keys, as saved in checkpoints' configs, ``.keras`` files and YAMLs.
KEYS = (
    "gamma",
    "beta_3",
    "statistics_interval",
    "squares_dtype",
    "state_dtype",
    "split_half",
    "sparse_statistics",
    "pack_limit",
    "xla_cluster",
)


def keras3_classes():
    return [vrgd_tf.VRGDSGD, vrgd_tf.VRGDAdam, vrgd_tf.VRGDLars, vrgd_tf.VRGDLamb]


class SettingsTest(tf.test.TestCase):
    def test_the_definition(self):
        self.assertEqual(settings.CONFIG_KEYS, KEYS)
        self.assertEqual(settings.NAMES, KEYS[:6] + ("factor_transforms",) + KEYS[6:])
        self.assertEqual(
            settings.DEFAULTS.get_config(),
            dict(
                gamma=0.1,
                beta_3=0.0,
                statistics_interval=100,
                squares_dtype="float32",
                state_dtype="float32",
                split_half=False,
                sparse_statistics="rows",
                pack_limit=vrgd_tf.gsnr.PACK_LIMIT,
                xla_cluster="auto",
            ),
        )
        # One record: the step's is the users' (no second record translated by hand).
        self.assertIs(vrgd_tf.gsnr.VRGDSettings, settings.VRGDSettings)
        self.assertFalse(hasattr(vrgd_tf.gsnr, "GSNROptions"))
        s = settings.VRGDSettings(gamma=1, factor_transforms=tf.math.multiply)
        self.assertEqual((type(s.gamma), s.factor_transforms), (float, (tf.math.multiply,)))
        for bad, error, text in (
            (dict(gamma=0.0), ValueError, "`gamma` must be in"),
            (dict(beta_3=1.0), ValueError, "`beta_3` must be in"),
            (dict(statistics_interval=-1), ValueError, "`statistics_interval` must be"),
            (dict(squares_dtype="float16"), ValueError, "`squares_dtype` must be one of"),
            (dict(state_dtype="float16"), ValueError, "`state_dtype` must be one of"),
            (dict(factor_transforms=[1]), TypeError, "`factor_transforms` must be"),
            (dict(split_half=1), TypeError, "`split_half` must be a bool"),
            (dict(sparse_statistics="sparse"), ValueError, "`sparse_statistics` must be one"),
            (dict(pack_limit=-1), ValueError, "`pack_limit` must be an int >= 0"),
            (dict(xla_cluster="yes"), ValueError, "`xla_cluster` must be one of"),
            (dict(split_half=True, statistics_interval=0), ValueError, "`split_half=True` needs"),
        ):
            with self.assertRaisesRegex(error, text):
                settings.VRGDSettings(**bad)
        with self.assertRaisesRegex(TypeError, "Unknown VRGD setting.*'gama'"):
            settings.DEFAULTS.replace(gama=0.2)
        with self.assertRaisesRegex(ValueError, r"^a\.b\.gamma: `gamma` must be in"):
            settings.check_values({"gamma": 2.0}, prefix="a.b")
        # A check across settings names the config path too.
        with self.assertRaisesRegex(ValueError, r"^a\.b: `split_half=True` needs recording"):
            settings.check_values({"split_half": True, "statistics_interval": 0}, prefix="a.b")

    def test_every_class_derives_its_signature_doc_attributes_and_config(self):
        classes = keras3_classes()
        if util.HAS_TF_KERAS:
            from vrgd_tf import tf_keras as vtk

            classes += [vtk.VRGDSGD, vtk.VRGDAdam, vtk.VRGDLars, vtk.VRGDLamb]
        for cls in classes:
            defaults = cls.default_settings
            self.assertEqual(
                defaults.beta_3, 0.9 if "Adam" in cls.__name__ or "Lamb" in cls.__name__ else 0.0
            )
            params = inspect.signature(cls).parameters
            for name in settings.NAMES:
                self.assertEqual(params[name].default, getattr(defaults, name), (cls, name))
                self.assertIn(f"      {name}: ", cls.__doc__, (cls, name))
            opt = cls(gamma=0.5, statistics_interval=3, squares_dtype="bfloat16")
            self.assertEqual(
                {k: opt.get_config()[k] for k in KEYS},
                dict(
                    gamma=0.5,
                    beta_3=defaults.beta_3,
                    statistics_interval=3,
                    squares_dtype="bfloat16",
                    state_dtype="float32",
                    split_half=False,
                    sparse_statistics="rows",
                    pack_limit=vrgd_tf.gsnr.PACK_LIMIT,
                    xla_cluster="auto",
                ),
            )
            self.assertEqual(
                opt.vrgd_aggregator.settings,
                defaults.replace(gamma=0.5, statistics_interval=3, squares_dtype="bfloat16"),
            )
            self.assertEqual(
                (opt.gamma, opt.beta_3, opt.factor_transforms), (0.5, defaults.beta_3, ())
            )
            self.assertNotIn("factor_transforms", opt.get_config())
            rebuilt = cls.from_config(opt.get_config())
            self.assertEqual(rebuilt.vrgd_aggregator.settings, opt.vrgd_aggregator.settings)

    def test_the_aggregator(self):
        agg = vrgd_tf.GSNRAggregator(
            gamma=0.2, beta_3=0.5, statistics_interval=4, squares_dtype="bfloat16", name="agg"
        )
        self.assertEqual(
            agg.get_config(),
            dict(
                gamma=0.2,
                beta_3=0.5,
                statistics_interval=4,
                squares_dtype="bfloat16",
                state_dtype="float32",
                split_half=False,
                sparse_statistics="rows",
                pack_limit=vrgd_tf.gsnr.PACK_LIMIT,
                xla_cluster="auto",
                name="agg",
            ),
        )
        self.assertEqual(
            vrgd_tf.GSNRAggregator.from_config(agg.get_config()).settings, agg.settings
        )
        # pack_limit and sparse_statistics are settings like the others: constructor
        # keywords and config keys (no setters before the first step).
        agg = vrgd_tf.GSNRAggregator(pack_limit=0, sparse_statistics="dense", beta_3=0.5)
        again = vrgd_tf.GSNRAggregator.from_config(agg.get_config())
        self.assertEqual((again.pack_limit, again.sparse_statistics), (0, "dense"))
        with self.assertRaises(AttributeError):
            agg.pack_limit = 5
        self.assertEqual(vrgd_tf.GSNRAggregator(settings=agg.settings).beta_3, 0.5)
        params = inspect.signature(vrgd_tf.GSNRAggregator).parameters
        self.assertEqual(list(params)[:3], ["gamma", "beta_3", "statistics_interval"])
        self.assertTrue(all(p.kind is p.KEYWORD_ONLY for p in params.values()))
        for name in settings.NAMES:
            self.assertEqual(params[name].default, getattr(settings.DEFAULTS, name))
            self.assertIn(f"      {name}: ", vrgd_tf.GSNRAggregator.__doc__)
        with self.assertRaisesRegex(TypeError, "positional argument"):
            vrgd_tf.GSNRAggregator(0.2)
        with self.assertRaisesRegex(TypeError, "either `settings` or the settings"):
            vrgd_tf.GSNRAggregator(gamma=0.2, settings=agg.settings)

    def test_model_garden_configs(self):
        util.skip_without_tf_keras(self)
        from vrgd_tf.model_garden import configs, registry

        for key, config_cls in configs.VRGD_CONFIG_FIELDS.items():
            optimizer_cls = registry.LEGACY_CLASSES[key]
            fields = {f.name: f for f in dataclasses.fields(config_cls)}
            self.assertEqual(fields["name"].default, optimizer_cls.__name__)
            for name in KEYS:
                self.assertEqual(
                    fields[name].default, getattr(optimizer_cls.default_settings, name)
                )
                self.assertIn(f"      {name}: ", config_cls.__doc__)
            self.assertNotIn("factor_transforms", fields)
            self.assertEqual(config_cls.__module__, configs.__name__)


class NewSettingsRoundTripTest(tf.test.TestCase):
    """``sparse_statistics`` and ``pack_limit`` are kept by a ``.keras`` save and load and by a
    tf_keras config round trip (they used to reach an optimizer only through setters on its
    aggregator, and a loaded optimizer packed and took sparse statistics at the defaults)."""

    def test_keras_file_keeps_them(self):
        import os

        import keras

        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(
            optimizer=vrgd_tf.VRGDLamb(1e-2, pack_limit=7, sparse_statistics="dense"), loss="mse"
        )
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path).optimizer
        self.assertEqual((loaded.pack_limit, loaded.sparse_statistics), (7, "dense"))
        self.assertEqual(loaded.vrgd_aggregator.settings, model.optimizer.vrgd_aggregator.settings)

    def test_tf_keras_config_keeps_them(self):
        util.skip_without_tf_keras(self)
        from vrgd_tf import tf_keras as vtk

        for cls in (vtk.VRGDSGD, vtk.VRGDLamb):
            opt = cls(pack_limit=0, sparse_statistics="dense", gamma=0.3)
            again = cls.from_config(opt.get_config())
            self.assertEqual((again.pack_limit, again.sparse_statistics), (0, "dense"))
            self.assertEqual(again.vrgd_aggregator.settings, opt.vrgd_aggregator.settings)
