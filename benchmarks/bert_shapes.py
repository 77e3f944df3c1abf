"""BERT-tiny's trainable variable shapes, shared by the TensorFlow (``passes.py``) and JAX
(``jax_cost.py``, ``jax_models.py``) benchmarks. Pure Python: imports nothing."""

#: One transformer layer's variables (attention q/k/v kernels and biases, output, norms, FFN).
_LAYER = [(128, 2, 64), (2, 64)] * 3 + [(2, 64, 128), (128,), (128,), (128,)]
_LAYER += [(128, 512), (512,), (512, 128), (128,), (128,), (128,)]
#: BERT-tiny's trainable variables (``bert.bert_tiny(128)``, Model Garden ``BertEncoder``
#: 2 x 128 with its masked-LM head at sequence length 128), in model order: 44 variables,
#: N = 4,384,058 elements, the word embedding 3,906,816 of them.
BERT_TINY_SHAPES = (
    [(30522, 128), (128, 128), (2, 128), (128,), (128,)]
    + _LAYER * 2
    + [(128, 128), (128,), (30522,), (128, 128), (128,), (128,), (128,)]
)
#: Small shapes for smoke runs (``--quick``).
QUICK_SHAPES = [(2000, 32), (32, 32), (32,), (64, 16)]
