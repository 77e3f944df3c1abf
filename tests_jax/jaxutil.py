"""Shared helpers of the JAX tests: a small regression problem, models and fit runs."""

import jax
import keras
import numpy as np

import vrgd_tf


def data(rows=96, features=6, outputs=3, seed=0):
    """Inputs of different scales and targets with a different noise per output, so the
    GSNR varies by element, and by step as the weights move."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)) * np.linspace(0.3, 2.0, features)
    w = rng.normal(size=(features, outputs))
    noise = rng.normal(size=(rows, outputs)) * np.array([0.1, 1.0, 4.0][:outputs])
    return x.astype("float32"), (x @ w + noise).astype("float32")


def use_devices(n):
    """``DataParallel`` over the first ``n`` devices (none for ``n = 1``)."""
    if n == 1:
        keras.distribution.set_distribution(None)
    else:
        dist = keras.distribution.DataParallel(devices=jax.devices()[:n])
        keras.distribution.set_distribution(dist)


def linear(features, outputs, seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((features,)), keras.layers.Dense(outputs)])


def mlp(features, outputs, seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(8, activation="tanh"),
            keras.layers.Dense(outputs),
        ]
    )


def fit(make_optimizer, x, y, batch, *, devices=1, groups=None, make_model=mlp, epochs=1):
    """Trains a fresh model on ``devices`` with ``groups`` per device (None: Keras' own
    ``fit``); returns the model."""
    use_devices(devices)
    model = make_model(x.shape[1], y.shape[1])
    model.compile(make_optimizer(), "mse")
    if groups is not None:
        vrgd_tf.use_micro_batches(model, num_groups=groups)
    model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    return model


def max_diff(a, b):
    return max(float(np.max(np.abs(p - q))) for p, q in zip(a.get_weights(), b.get_weights()))
