"""Backend-neutral Keras 3 models of ``jax_cost.py``: the BERT-tiny-shaped encoder with its
masked-LM head and the 1-D CNN, with random batches. No TensorFlow: they run where only JAX
and Keras are installed.

BERT-tiny-shaped (:func:`bert_tiny`): the shapes of ``bert_shapes.BERT_TINY_SHAPES`` (Model
Garden's ``BertEncoder`` 2 x 128 with its tied masked-LM head) as far as Keras layers give
them: word (30522 x 128), position (128 x 128) and type (2 x 128) embeddings and their
LayerNorm; per layer ``keras.layers.MultiHeadAttention(num_heads=2, key_dim=64)`` (kernels
128 x 2 x 64, biases 2 x 64, output 2 x 64 x 128 and 128), LayerNorm, a 128 -> 512 -> 128
GELU feed-forward, LayerNorm; the masked-LM transform (128 x 128, GELU, LayerNorm) and the
output bias (30522) on logits tied to the word embedding, at ``num_masked`` positions per
sequence. Left out: the pooler (128 x 128 and 128; the masked-LM loss gives it no gradient,
and a Keras functional model drops a layer no output depends on), dropout, the attention
mask (every token is real). 42 variables, 4,367,546 elements (``bert_shapes.BERT_TINY_SHAPES``:
44, 4,384,058).

1-D CNN (:func:`cnn1d`): ``studies/shared.py``'s ``cnn1d(40)`` (conv5 -> conv3/2 -> conv3/2,
32 channels, ReLU -> dense 10), the studies' definition itself (that module imports
TensorFlow only for its strategies); random inputs (a step's time does not depend on the
values).
"""

import os
import sys

import keras
import numpy as np
from keras import layers, ops

__all__ = ["bert_tiny", "bert_batch", "cnn1d", "cnn1d_batch", "BERT_TINY", "BERT_QUICK"]

#: The BERT-tiny shapes (full run) and a small model of the same structure (``--quick``).
BERT_TINY = dict(vocab=30522, seq=128, hidden=128, num_layers=2, heads=2, ff=512, num_masked=20)
BERT_QUICK = dict(vocab=512, seq=16, hidden=32, num_layers=1, heads=2, ff=64, num_masked=4)


class Embeddings(layers.Layer):
    """Word + position + type embeddings and their LayerNorm (Model Garden's order)."""

    def __init__(self, vocab, seq, hidden, **kwargs):
        super().__init__(**kwargs)
        self.word = layers.Embedding(vocab, hidden, name="word_embeddings")
        self.types = layers.Embedding(2, hidden, name="type_embeddings")
        self.norm = layers.LayerNormalization(epsilon=1e-12, name="embeddings_layer_norm")
        self.seq, self.hidden = seq, hidden

    def build(self, input_shape):
        self.word.build(input_shape)
        self.types.build(input_shape)
        self.position = self.add_weight(
            shape=(self.seq, self.hidden), initializer="glorot_uniform", name="position"
        )
        self.norm.build(tuple(input_shape) + (self.hidden,))

    def call(self, ids):
        length = ops.shape(ids)[1]
        x = self.word(ids) + self.types(ops.zeros_like(ids)) + self.position[None, :length]
        return self.norm(x)


class TiedLogits(layers.Layer):
    """``x @ word_embeddings^T + bias``: the masked-LM logits tied to the word embedding."""

    def __init__(self, embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def build(self, input_shape):
        self.bias = self.add_weight(
            shape=(self.embedding.input_dim,), initializer="zeros", name="output_bias"
        )

    def call(self, x):
        return ops.matmul(x, ops.transpose(self.embedding.embeddings)) + self.bias


class Gather(layers.Layer):
    """The hidden states at the masked positions: ``[B, S, H], [B, P] -> [B, P, H]``."""

    def call(self, x, positions):
        return ops.take_along_axis(x, ops.expand_dims(positions, -1), axis=1)


def bert_tiny(vocab, seq, hidden, num_layers, heads, ff, num_masked):
    """The BERT-tiny-shaped masked-LM model (module docstring). Inputs ``ids [B, seq]``
    (int32) and ``positions [B, num_masked]`` (int32); output logits
    ``[B, num_masked, vocab]``; loss: sparse categorical cross-entropy from logits."""
    ids = keras.Input((seq,), dtype="int32", name="ids")
    positions = keras.Input((num_masked,), dtype="int32", name="positions")
    embeddings = Embeddings(vocab, seq, hidden, name="embeddings")
    x = embeddings(ids)
    for i in range(num_layers):
        attention = keras.layers.MultiHeadAttention(
            num_heads=heads, key_dim=hidden // heads, name=f"attention_{i}"
        )(x, x)
        x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"attention_norm_{i}")(
            x + attention
        )
        h = keras.layers.Dense(ff, activation="gelu", name=f"intermediate_{i}")(x)
        h = keras.layers.Dense(hidden, name=f"output_{i}")(h)
        x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"output_norm_{i}")(x + h)
    x = Gather(name="masked")(x, positions)
    x = keras.layers.Dense(hidden, activation="gelu", name="mlm_transform")(x)
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="mlm_norm")(x)
    logits = TiedLogits(embeddings.word, name="mlm_logits")(x)
    return keras.Model([ids, positions], logits, name="bert_tiny_shaped")


def bert_batch(batch, vocab, seq, num_masked, seed=0, **_):
    """A random masked-LM batch: ``([ids, positions], labels)`` as NumPy arrays."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, seq)).astype("int32")
    positions = np.stack(
        [rng.choice(np.arange(1, seq), num_masked, replace=False) for _ in range(batch)]
    ).astype("int32")
    labels = rng.integers(0, vocab, size=(batch, num_masked)).astype("int32")
    return [ids, positions], labels


def cnn1d(length=40, channels=1, num_classes=10, width=32):
    """``studies/shared.py``'s 1-D CNN (module docstring), the model the studies train."""
    studies = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "studies")
    if studies not in sys.path:
        sys.path.append(studies)
    import shared  # TensorFlow-free at import (its strategies import it when asked)

    return shared.cnn1d(length, channels, num_classes, width)


def cnn1d_batch(batch, length=40, num_classes=10, seed=0):
    """Random inputs ``[batch, length, 1]`` and labels in ``[0, num_classes)``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, length, 1)).astype("float32")
    return x, rng.integers(0, num_classes, size=(batch,)).astype("int32")
