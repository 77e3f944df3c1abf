"""ParameterServerStrategy over an in-process cluster (one worker, one parameter server):
each VRGD entry point must refuse it. Prints ``{case: error message}`` as JSON on its last
line (a case that did not raise prints ``"no error"``)."""

import importlib.util
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import vrgd_tf  # noqa: E402
from vrgd_tf import devices  # noqa: E402


def parameter_server_strategy():
    worker, ps = devices.local_worker_addresses(2)
    cluster = tf.train.ClusterSpec({"worker": [worker], "ps": [ps]})
    servers = [
        tf.distribute.Server(cluster, job_name=job, task_index=0, protocol="grpc", start=True)
        for job in ("worker", "ps")
    ]
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
    return tf.distribute.experimental.ParameterServerStrategy(resolver), servers


def outcome(fn):
    try:
        fn()
    except ValueError as e:
        return str(e)
    return "no error"


def main():
    strategy, _servers = parameter_server_strategy()
    with strategy.scope():
        variable = keras.Variable([1.0, 2.0], name="w")
    out = {}
    with strategy.scope():
        out["keras3_construct"] = outcome(lambda: vrgd_tf.VRGDLamb(0.01, statistics_interval=1))
        out["aggregator"] = outcome(lambda: vrgd_tf.GSNRAggregator(statistics_interval=1))
    outside = vrgd_tf.VRGDSGD(0.1, statistics_interval=1)
    with strategy.scope():
        out["keras3_build"] = outcome(lambda: outside.build([variable]))
    if all(importlib.util.find_spec(m) is not None for m in ("tf_keras", "official")):
        from vrgd_tf import tf_keras as vtk

        with strategy.scope():
            out["tf_keras_construct"] = outcome(lambda: vtk.VRGDSGD(0.1, statistics_interval=1))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
