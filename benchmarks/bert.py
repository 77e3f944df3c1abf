"""BERT-tiny for the cost benchmarks: Model Garden's ``BertEncoder`` (2 layers x 128 hidden,
tf_keras) with its tied masked-LM head, a fixed random masked-LM batch (timing only) and the
LAMB variants of ``variants.py`` against ``vrgd_tf.tf_keras.VRGDLamb``. Needs
``tf-models-official`` (the ``dev`` extra)."""

import numpy as np

import variants

#: Model Garden BERT's exclusions from weight decay (LAMB).
BERT_EXCLUDE = ["LayerNorm", "layer_norm", "bias"]


def bert_tiny(seq, vocab_size=30522):
    """Model Garden ``BertEncoder`` 2 layers x 128 hidden (tf_keras) in ``BertPretrainerV2``
    with its tied masked-LM head (``vocab_size`` other than BERT's 30522: a model of other
    size with the same layers, e.g. twice the parameters for the loopback benchmark)."""
    from official.nlp.modeling import models, networks

    encoder = networks.BertEncoder(
        vocab_size=vocab_size,
        hidden_size=128,
        num_layers=2,
        num_attention_heads=2,
        intermediate_size=512,
        max_sequence_length=seq,
        type_vocab_size=2,
    )
    return models.BertPretrainerV2(encoder_network=encoder)


def bert_random_batch(batch, seq, num_masked=20):
    """A fixed masked-LM batch of random token ids (timing only): (features, labels)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30522, size=(batch, seq)).astype(np.int32)
    pos = np.sort(
        np.stack([rng.choice(np.arange(1, seq), num_masked, replace=False) for _ in range(batch)]),
        axis=1,
    ).astype(np.int32)
    labels = np.take_along_axis(ids, pos, 1)
    return {
        "input_word_ids": ids,
        "input_mask": np.ones_like(ids),
        "input_type_ids": np.zeros_like(ids),
        "masked_lm_positions": pos,
    }, labels


def bert_lamb(variant, learning_rate=1e-3):
    """Model Garden ``lamb.LAMB`` (``variant='base'``) or a variant of ``variants.py``
    against ``vrgd_tf.tf_keras.VRGDLamb`` (``'vr'`` is the library's class), BERT's weight
    decay 0.01 and exclusions."""
    from official.modeling.optimization import lamb as mg_lamb

    from vrgd_tf import tf_keras as vtk

    cls, extra = variants.make_tf_keras_variant(variant, mg_lamb.LAMB, vtk.VRGDLamb)
    return cls(
        learning_rate=learning_rate,
        weight_decay_rate=0.01,
        exclude_from_weight_decay=BERT_EXCLUDE,
        **extra,
    )
