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
KEYS = ("gamma", "beta_3", "statistics_interval", "squares_dtype", "split_half")


def keras3_classes():
    return [vrgd_tf.VRGDSGD, vrgd_tf.VRGDAdam, vrgd_tf.VRGDLars, vrgd_tf.VRGDLamb]


class SettingsTest(tf.test.TestCase):
    def test_the_definition(self):
        self.assertEqual(settings.CONFIG_KEYS, KEYS)
        self.assertEqual(settings.NAMES, KEYS + ("factor_transforms",))
        self.assertEqual(
            settings.DEFAULTS.get_config(),
            dict(
                gamma=0.1,
                beta_3=0.0,
                statistics_interval=1,
                squares_dtype="float32",
                split_half=False,
            ),
        )
        # The settings the step's record shares have the step's defaults (written once).
        step = vrgd_tf.gsnr.GSNROptions()
        for name in ("gamma", "beta_3", "squares_dtype", "factor_transforms"):
            self.assertEqual(getattr(settings.DEFAULTS, name), getattr(step, name), name)
        s = settings.VRGDSettings(gamma=1, factor_transforms=tf.math.multiply)
        self.assertEqual((type(s.gamma), s.factor_transforms), (float, (tf.math.multiply,)))
        for bad, error, text in (
            (dict(gamma=0.0), ValueError, "`gamma` must be in"),
            (dict(beta_3=1.0), ValueError, "`beta_3` must be in"),
            (dict(statistics_interval=-1), ValueError, "`statistics_interval` must be"),
            (dict(squares_dtype="float16"), ValueError, "`squares_dtype` must be one of"),
            (dict(factor_transforms=[1]), TypeError, "`factor_transforms` must be"),
            (dict(split_half=1), TypeError, "`split_half` must be a bool"),
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
                    split_half=False,
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
        agg = vrgd_tf.GSNRAggregator(0.2, 0.5, 4, squares_dtype="bfloat16", name="agg")
        self.assertEqual(
            agg.get_config(),
            dict(
                gamma=0.2,
                beta_3=0.5,
                statistics_interval=4,
                squares_dtype="bfloat16",
                split_half=False,
                sparse_statistics="rows",
                pack_limit=vrgd_tf.gsnr.PACK_LIMIT,
                name="agg",
            ),
        )
        self.assertEqual(
            vrgd_tf.GSNRAggregator.from_config(agg.get_config()).settings, agg.settings
        )
        # pack_limit, settable until the first step, survives the round trip (it used to
        # be left out: an aggregator made from the config packed at the default).
        agg.pack_limit = 0
        self.assertEqual(vrgd_tf.GSNRAggregator.from_config(agg.get_config()).pack_limit, 0)
        self.assertEqual(vrgd_tf.GSNRAggregator(settings=agg.settings).beta_3, 0.5)
        params = inspect.signature(vrgd_tf.GSNRAggregator).parameters
        self.assertEqual(list(params)[:3], ["gamma", "beta_3", "statistics_interval"])
        for name in settings.NAMES:
            self.assertEqual(params[name].default, getattr(settings.DEFAULTS, name))
            self.assertIn(f"      {name}: ", vrgd_tf.GSNRAggregator.__doc__)
        with self.assertRaisesRegex(TypeError, "both by position and by keyword"):
            vrgd_tf.GSNRAggregator(0.2, gamma=0.3)
        with self.assertRaisesRegex(TypeError, "either `settings` or the settings"):
            vrgd_tf.GSNRAggregator(0.2, settings=agg.settings)
        with self.assertRaisesRegex(TypeError, "at most 3 settings by position"):
            vrgd_tf.GSNRAggregator(0.2, 0.0, 1, "float32")

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
