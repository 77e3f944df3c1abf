#!/usr/bin/env bash
# benchmarks/jax_cost.py on one GPU, where JAX (with CUDA) and NumPy are installed but neither
# TensorFlow nor Keras: Keras 3.15.1 and the dependencies that image lacks (namex, optree)
# come as wheels in .whl/ (made by `pip download`, see benchmarks/README.md) and are
# installed to /tmp/site. The benchmark imports no TensorFlow. Run from the repository root;
# the JSON goes to $OUT (default: /tmp). About 3 to 4 minutes, compiles included.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH="/tmp/site:$PWD"
export PYTHONUNBUFFERED=1
KERAS_BACKEND=jax python3 -c "import jax, keras; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__)"
timeout 290 python3 benchmarks/jax_cost.py --device=gpu --out "$OUT/jax_cost_gpu.json" "$@"
