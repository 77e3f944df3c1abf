"""The Keras 3 models and data the cost benchmarks time, and the optimizer pairs they time them
with: the sweep's 1-D CNN on a fixed MNIST-1D batch, a CIFAR-layout ResNet-(6n+2) on
scikit-learn's digits upscaled to 32x32x3. The 1-D CNN, MNIST-1D, the optimizer pairs and the
initial weights are ``studies/shared.py``'s (see :mod:`harness`), imported here under their
names. BERT-tiny (tf_keras, Model Garden) is :mod:`bert`'s."""

import numpy as np

import harness  # noqa: F401  (puts studies/ on sys.path for shared)

# isort: split
from shared import (  # noqa: F401  (the benchmarks' names for them)
    cnn1d,
    init_weights,
    load_mnist1d,
    optimizer_classes,
)


def resnet_cifar(depth=20, input_shape=(32, 32, 3), num_classes=10, width=16):
    """ResNet-(6n+2) for 32x32 inputs (He et al. 2016, CIFAR variant), Keras 3 functional."""
    import keras

    layers = keras.layers
    n = (depth - 2) // 6
    inp = keras.Input(input_shape)
    x = layers.Conv2D(width, 3, padding="same", use_bias=False)(inp)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    for stage in range(3):
        filters = width * (2**stage)
        for block in range(n):
            strides = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            y = layers.Conv2D(filters, 3, strides=strides, padding="same", use_bias=False)(x)
            y = layers.BatchNormalization()(y)
            y = layers.Activation("relu")(y)
            y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
            y = layers.BatchNormalization()(y)
            if strides != 1 or shortcut.shape[-1] != filters:
                shortcut = layers.Conv2D(filters, 1, strides=strides, use_bias=False)(shortcut)
                shortcut = layers.BatchNormalization()(shortcut)
            x = layers.Activation("relu")(layers.Add()([y, shortcut]))
    x = layers.GlobalAveragePooling2D()(x)
    out = layers.Dense(num_classes)(x)
    return keras.Model(inp, out, name=f"resnet{depth}")


def load_digits_images(size=32):
    """scikit-learn digits as ``size`` x ``size`` x 3 images (nearest upscaling), labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    img = digits.images.astype(np.float32) / 16.0
    rep = size // 8
    img = np.repeat(np.repeat(img, rep, axis=1), rep, axis=2)
    img = np.repeat(img[..., None], 3, axis=-1)
    return img, digits.target.astype(np.int32)


def cnn1d_timing_data(batch):
    """The 1-D CNN builder and a fixed batch of ``batch`` MNIST-1D examples (the sweep's
    data at a small size, repeated if needed) for timing."""
    d = load_mnist1d(8000, 2000, 0)
    x, y = d["x"], d["y"]
    reps = int(np.ceil(batch / len(y)))
    x, y = np.concatenate([x] * reps)[:batch], np.concatenate([y] * reps)[:batch]
    return (lambda: cnn1d(40)), x, y
