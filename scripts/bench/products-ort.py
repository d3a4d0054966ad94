"""onnxruntime's matrix products at the encoder's product shapes: f32 MatMul,
and what its int8 dynamic quantisation runs per product (DynamicQuantizeLinear
of the activations, MatMulInteger u8 x s8 -> s32, then the scale multiply),
all in one graph per shape. Prints the same CSV columns as the embed crate's
`product_speed` measurement. Run by scripts/bench/products.sh."""
import os
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SHAPES = [("qkv", 384, 1152), ("attention out", 384, 384), ("ff in", 384, 1536), ("ff out", 1536, 384)]


def session(graph, threads):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def f32_graph(inp, out, w):
    return helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "f32",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", inp])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", out])],
        [numpy_helper.from_array(w, "w")],
    )


def int8_graph(inp, out, w):
    scale = np.abs(w).max(axis=0) / 127.0
    wq = np.round(w / scale).astype(np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("MatMulInteger", ["xq", "wq", "xz"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xs", "ws"], ["s"]),
        helper.make_node("Mul", ["accf", "s"], ["y"]),
    ]
    return helper.make_graph(
        nodes,
        "int8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", inp])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", out])],
        [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(scale.astype(np.float32), "ws")],
    )


def median_seconds(sess, x):
    sess.run(None, {"x": x})
    times = []
    for _ in range(15):
        t = time.perf_counter()
        sess.run(None, {"x": x})
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    rows = int(os.environ.get("REFSCORE_PRODUCT_ROWS", "2048"))
    threads = int(os.environ.get("THREADS", "2"))
    rng = np.random.default_rng(7)
    print(f"product,rows,inputs,outputs,threads,fp32_gflops,int8_gops (onnxruntime {ort.__version__})")
    for name, inp, out in SHAPES:
        x = rng.uniform(-1, 1, (rows, inp)).astype(np.float32)
        w = rng.uniform(-1, 1, (inp, out)).astype(np.float32)
        ops = 2.0 * rows * inp * out / 1e9
        f = median_seconds(session(f32_graph(inp, out, w), threads), x)
        i = median_seconds(session(int8_graph(inp, out, w), threads), x)
        print(f"{name},{rows},{inp},{out},{threads},{ops / f:.1f},{ops / i:.1f}")


if __name__ == "__main__":
    main()
