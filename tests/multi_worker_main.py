"""One worker of the multi-worker test: MultiWorkerMirroredStrategy over processes on
127.0.0.1 (one CPU replica per worker), ``VRGDLamb`` of the family named by the third
argument (``keras3``, the default, or ``tf_keras``). Prints the final weights as JSON on its
last line."""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import vrgd_tf  # noqa: E402


def _tf(variable):
    """The tf.Variable of a keras.Variable (a tf.Variable as is)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def main():
    grads = np.load(sys.argv[1])  # [steps, k, n]
    init = np.load(sys.argv[2])
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        )
    )
    assert strategy.num_replicas_in_sync == grads.shape[1], strategy.num_replicas_in_sync
    family = sys.argv[3] if len(sys.argv) > 3 else "keras3"
    with strategy.scope():
        if family == "tf_keras":
            from vrgd_tf import tf_keras as vtk

            w = tf.Variable(init, name="w")
            opt = vtk.VRGDLamb(learning_rate=0.01, weight_decay_rate=0.01, statistics_interval=1)
        else:
            w = keras.Variable(init, name="w")
            opt = vrgd_tf.VRGDLamb(
                learning_rate=0.01, weight_decay_rate=0.01, statistics_interval=1
            )
            opt.build([w])
    const = tf.constant(grads)

    @tf.function
    def step(i):
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            opt.apply_gradients([(tf.gather(const[i], rid), w)])

        strategy.run(fn)

    for i in range(grads.shape[0]):
        step(tf.constant(i))
    copies = [v.numpy().tolist() for v in strategy.experimental_local_results(_tf(w))]
    deficit = [
        v.numpy().tolist()
        for v in strategy.experimental_local_results(_tf(opt.vrgd_aggregator.state.deficits[0]))
    ]
    print(json.dumps({"w": copies, "deficit": deficit}))


if __name__ == "__main__":
    main()
