"""One rank of a captured TensorFlow job: `python -m simstudy.capturing.tf_worker CONFIG.json`.

Trains a Keras model (built from the zoo spec by `simstudy.capturing.keras_models`) on synthetic
data with `tf.distribute.MultiWorkerMirroredStrategy`: every rank is a `worker` task of the
cluster in TF_CONFIG (one gRPC server per rank), one CPU replica per worker. A training step is
a `tf.function` that runs, in the replica context, the forward pass and `tf.GradientTape`'s
gradients, then `optimizer.apply_gradients` (Keras SGD), which sums the gradients over the
workers with the replica context's `all_reduce` (Keras's `_all_reduce_sum_gradients`): in a
`tf.function` MWMS concatenates the gradients into packs of `bytes_per_pack` (0, the default:
one pack of all of them) in reverse variable order, and all-reduces each pack with the
implementation `CommunicationOptions` names (AUTO on CPU: RingReduce over gRPC).

TensorFlow gives the gradient of a gathered table (`keras.layers.Embedding`) as `IndexedSlices`,
which MWMS would all-gather (values and indices) instead of all-reducing; the worker converts
every gradient to a dense tensor first (`tf.convert_to_tensor`), so that every gradient byte is
all-reduced, as the `tensorflow_mwms` preset models.

Phases as in the torch worker: `calibration` passes without communication (forward, then
forward + backward, then a local SGD update, timed separately; the workers start each one
together after a 4-byte all-reduce that serves as a barrier), `warmup` steps (the first traces
the function and resolves the collective group), a barrier, then the recorded `iterations`,
each marked with wall-clock start and end times (the pcap clock). Per-layer times are not
measured (a graph function has no per-layer hooks): the calibration gives forward and backward
totals, which the simulation spreads over the layers by FLOPs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from simstudy.capturing.sockets import local_endpoints
from simstudy.files import write_json


def _setup(cfg: dict[str, Any]) -> None:
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": cfg["cluster"]},
                                          "task": {"type": "worker", "index": cfg["rank"]}})
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class _Worker:
    """The strategy, the Keras model and the `tf.function`s of one rank (set up in that order)."""

    def __init__(self, cfg: dict[str, Any], tf: Any, keras: Any) -> None:
        from simstudy.capturing.keras_models import build_keras_model

        tf.config.threading.set_intra_op_parallelism_threads(cfg["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(max(2, cfg["threads"]))
        tf_opts = cfg.get("tensorflow") or {}
        self.options = options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=int(tf_opts.get("bytes_per_pack", 0)),
            implementation=str(tf_opts.get("implementation", "auto")).upper())
        self.strategy = strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        with strategy.scope():
            km = build_keras_model(cfg["model"]["zoo"], cfg["model"].get("options") or {}, seed=cfg["seed"])
            optimizer = keras.optimizers.SGD(learning_rate=0.01)
            optimizer.build(km.model.trainable_variables)
        variables = km.model.trainable_variables
        self.local = local = [tf.Variable(tf.zeros(v.shape), trainable=False) for v in variables]  # SGD timing
        self.cfg, self.tf = cfg, tf
        self.result: dict[str, Any] = {"rank": cfg["rank"], "role": "worker", "iterations": [], "steps": []}

        def grads_of(x: Any, y: Any) -> tuple[Any, list[Any]]:
            with tf.GradientTape() as tape:
                loss = km.loss(km.model(x, training=True), y)
            return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]

        def replica_step(x: Any, y: Any) -> Any:
            loss, grads = grads_of(x, y)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        @tf.function
        def train_step(x: Any, y: Any) -> Any:
            return strategy.run(replica_step, args=(x, y))

        @tf.function
        def forward(x: Any, y: Any) -> Any:
            return strategy.run(lambda a, b: km.loss(km.model(a, training=True), b), args=(x, y))

        @tf.function
        def forward_backward(x: Any, y: Any) -> Any:
            return strategy.run(grads_of, args=(x, y))

        @tf.function
        def sgd(grads: list[Any]) -> None:
            for w, g in zip(local, grads, strict=True):
                w.assign_sub(0.01 * g)

        @tf.function
        def barrier() -> Any:
            return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0)))

        self.train_step, self.forward, self.forward_backward, self.sgd = train_step, forward, forward_backward, sgd
        self.barrier_fn = barrier
        seed = cfg["seed"] * 1000 + cfg["rank"]
        self.batches = [km.batch(cfg["batch"], seed + i) for i in range(4)]

    def local_value(self, v: Any) -> Any:
        return self.strategy.experimental_local_results(v)[0]

    def barrier(self) -> None:
        self.local_value(self.barrier_fn()).numpy()

    def calibrate(self) -> None:
        """Compute only, the workers in lock-step: forward, forward + backward, a local SGD update."""
        passes: list[dict[str, Any]] = []
        for i in range(self.cfg["calibration"] + 1):  # the first pass traces the functions: untimed
            x, y = self.batches[i % len(self.batches)]
            self.barrier()
            t0 = time.perf_counter()
            self.local_value(self.forward(x, y)).numpy()
            t1 = time.perf_counter()
            self.barrier()
            t2 = time.perf_counter()
            _, grads = _pair(self.strategy, self.forward_backward(x, y))
            grads[0].numpy()
            t3 = time.perf_counter()
            self.sgd(grads)
            self.local[0].numpy()
            t4 = time.perf_counter()
            if i > 0:
                fwd_us = (t1 - t0) * 1e6
                passes.append({"forward_us": fwd_us, "backward_us": max(0.0, (t3 - t2) * 1e6 - fwd_us),
                               "optimizer_us": (t4 - t3) * 1e6, "layers": {}})

        def mean(key: str) -> float:
            return sum(float(p[key]) for p in passes) / len(passes)

        self.result["calibration"] = {"forward_us": mean("forward_us"), "backward_us": mean("backward_us"),
                                      "optimizer_us": mean("optimizer_us"), "iterations": len(passes),
                                      "layers": {}, "passes": passes}

    def train(self) -> None:
        """The warm-up steps, a barrier, the recorded iterations (wall-clock marks) and a barrier."""
        for i in range(self.cfg["warmup"]):
            x, y = self.batches[i % len(self.batches)]
            self.local_value(self.train_step(x, y)).numpy()
        self.barrier()
        for i in range(self.cfg["iterations"]):
            x, y = self.batches[i % len(self.batches)]
            t0 = time.time()
            p0 = time.perf_counter()
            loss = float(self.local_value(self.train_step(x, y)).numpy())
            p1 = time.perf_counter()
            t1 = time.time()
            self.result["iterations"].append([t0, t1])
            self.result["steps"].append({"step_us": (p1 - p0) * 1e6, "loss": loss})
        self.barrier()

    def finish(self) -> NoReturn:
        """Write the result (whole or not at all) and leave without TensorFlow's teardown."""
        self.result["endpoints"] = local_endpoints()
        self.result["tensorflow"] = self.tf.__version__
        self.result["communication"] = {"bytes_per_pack": self.options.bytes_per_pack,
                                        "implementation": self.options.implementation.value}
        out = Path(self.cfg["out"])
        write_json(out, self.result, indent=None)
        # Let the peers finish reading this worker's last buffers before its gRPC server goes away.
        time.sleep(1.0)
        sys.stdout.flush()
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cfg: dict[str, Any] = json.loads(Path(args[0]).read_text())
    _setup(cfg)
    import keras
    import tensorflow as tf

    worker = _Worker(cfg, tf, keras)
    worker.calibrate()
    worker.train()
    worker.finish()


def _pair(strategy: Any, value: Any) -> tuple[Any, list[Any]]:
    """(loss, grads) of the local replica from `strategy.run(grads_of)`."""
    loss, grads = value
    local = strategy.experimental_local_results
    return local(loss)[0], [local(g)[0] for g in grads]


if __name__ == "__main__":
    raise SystemExit(main())
