"""Small Relax models built with ``relax.BlockBuilder`` for end-to-end tests, and how to run them.

Every builder takes its layout where it matters and a seed for its constants, and returns
an IRModule whose ``main`` takes the inputs listed by :func:`inputs_for`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tvm
from tvm import relax

R = relax.op


class _Builder:
    """Constants from a seeded generator and layout-aware helpers around ``relax.op``."""

    def __init__(self, bb: relax.BlockBuilder, layout: str, seed: int) -> None:
        self.bb, self.layout, self.rng = bb, layout, np.random.default_rng(seed)
        self.c_axis = layout.index("C")

    def const(self, shape: Sequence[int], scale: float = 1.0) -> relax.Constant:
        return relax.const((self.rng.standard_normal(tuple(shape)) * scale).astype("float32"))

    def emit(self, expr: relax.Expr) -> relax.Var:
        return self.bb.emit(expr)

    def channels(self, x: relax.Expr) -> int:
        return int(x.ty.shape.values[self.c_axis])

    def per_channel(self, c: int, scale: float = 0.5) -> relax.Constant:
        shape = [1, 1, 1, 1]
        shape[self.c_axis] = c
        return self.const(shape, scale)

    def conv(self, x: relax.Expr, out: int, k: int, stride: int = 1, pad: int | Sequence[int] = 0,
             groups: int = 1, dilation: int = 1) -> relax.Var:
        c = self.channels(x)
        w = self.rng.standard_normal((out, c // groups, k, k)) / np.sqrt(c // groups * k * k)
        kernel_layout = "OIHW" if self.layout == "NCHW" else "HWIO"
        if kernel_layout == "HWIO":
            w = w.transpose(2, 3, 1, 0)
        return self.emit(R.nn.conv2d(x, relax.const(w.astype("float32")), strides=stride, padding=pad,
                                     dilation=dilation, groups=groups, data_layout=self.layout,
                                     kernel_layout=kernel_layout))

    def bias(self, x: relax.Expr) -> relax.Var:
        return self.emit(R.add(x, self.per_channel(self.channels(x))))


def _shape(layout: str, n: int, c: int, h: int, w: int) -> tuple[int, int, int, int]:
    return (n, c, h, w) if layout == "NCHW" else (n, h, w, c)


def convnet(layout: str = "NCHW", seed: int = 0) -> tvm.IRModule:
    """conv/bias/relu, a residual block, max pool, depthwise conv, relu6, strided dilated conv with
    sigmoid, average pool, global mean and a dense classifier."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(_shape(layout, 1, 8, 20, 21), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, layout, seed)
            a = m.emit(R.nn.relu(m.bias(m.conv(x, 16, 3, pad=1))))
            b = m.emit(R.nn.relu(m.emit(R.add(m.bias(m.conv(a, 16, 3, pad=1)), a))))
            p = m.emit(R.nn.max_pool2d(b, pool_size=3, strides=2, padding=1, layout=layout))
            d = m.emit(R.nn.relu(m.bias(m.conv(p, 16, 3, pad=1, groups=16))))
            e = m.emit(R.clip(m.bias(m.conv(d, 32, 1)), 0.0, 6.0))
            f = m.emit(R.sigmoid(m.bias(m.conv(e, 32, 3, stride=2, pad=(2, 2, 1, 1), dilation=2))))
            g = m.emit(R.nn.avg_pool2d(f, pool_size=2, strides=1, padding=(0, 0, 1, 1), layout=layout,
                                       count_include_pad=False))
            gap = m.emit(R.mean(g, axis=[2, 3] if layout == "NCHW" else [1, 2], keepdims=True))
            flat = m.emit(R.reshape(gap, (1, 32)))
            w = m.const((10, 32), 1 / np.sqrt(32))
            out = m.emit(R.add(m.emit(R.matmul(flat, m.emit(R.permute_dims(w)))), m.const((10,), 0.1)))
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get()


def pools(layout: str = "NCHW", seed: int = 0) -> tvm.IRModule:
    """avg (count_include_pad) -> max -> avg (asymmetric padding) -> adaptive global average, + relu."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(_shape(layout, 2, 6, 13, 11), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, layout, seed)
            a = m.emit(R.nn.avg_pool2d(x, pool_size=3, strides=1, padding=1, layout=layout, count_include_pad=True))
            b = m.emit(R.nn.max_pool2d(a, pool_size=2, strides=2, layout=layout))
            c = m.emit(R.nn.avg_pool2d(b, pool_size=3, strides=2, padding=(1, 0, 1, 0), layout=layout))
            d = m.emit(R.nn.relu(m.emit(R.nn.adaptive_avg_pool2d(c, output_size=1, layout=layout))))
            gv = bb.emit_output(d)
        bb.emit_func_output(gv)
    return bb.get()


def mlp(seed: int = 0) -> tvm.IRModule:
    """dense + bias + gelu, dense with a transposed constant weight + bias + tanh, then a batched
    matmul of two inputs + relu (M/N/K not multiples of 16)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((5, 37), "float32"))
    y = relax.Var("y", relax.TensorType((3, 20, 11), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            m = _Builder(bb, "NC", seed)
            h = m.emit(R.nn.gelu(m.emit(R.add(m.emit(R.matmul(x, m.const((37, 50), 1 / np.sqrt(37)))),
                                              m.const((50,), 0.1)))))
            w2 = m.const((20, 50), 1 / np.sqrt(50))
            o = m.emit(R.tanh(m.emit(R.add(m.emit(R.matmul(h, m.emit(R.permute_dims(w2)))), m.const((20,), 0.1)))))
            o3 = m.emit(R.reshape(o, (1, 5, 20)))
            rep = m.emit(R.tile(o3, (3, 1, 1)))
            z = m.emit(R.nn.relu(m.emit(R.matmul(rep, y))))
            gv = bb.emit_output(z)
        bb.emit_func_output(gv)
    return bb.get()


def eltwise_chain(layout: str = "NCHW", seed: int = 0) -> tvm.IRModule:
    """Standalone elementwise ops (no producer to fuse into): per-channel, scalar and full operands."""
    bb = relax.BlockBuilder()
    shape = _shape(layout, 1, 12, 9, 10)
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    y = relax.Var("y", relax.TensorType(shape, "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            m = _Builder(bb, layout, seed)
            a = m.emit(R.multiply(x, m.per_channel(12)))
            b = m.emit(R.tanh(m.emit(R.add(a, y))))
            c = m.emit(R.maximum(b, relax.const(np.float32(-0.25))))
            d = m.emit(R.sigmoid(m.emit(R.subtract(c, m.per_channel(12)))))
            e = m.emit(R.minimum(d, y))
            gv = bb.emit_output(e)
        bb.emit_func_output(gv)
    return bb.get()


def silu(seed: int = 0) -> tvm.IRModule:
    """``x * sigmoid(x)`` on an input, then a per-channel scale (SiLU / swish, as in EfficientNet)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 10, 10), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, "NCHW", seed)
            y = m.emit(R.multiply(x, m.emit(R.sigmoid(x))))
            gv = bb.emit_output(m.emit(R.multiply(y, m.per_channel(8))))
        bb.emit_func_output(gv)
    return bb.get()


def dense_head(seed: int = 0) -> tvm.IRModule:
    """A one-unit logistic output: ``sigmoid(x @ w + b)`` with ``w`` of shape (64, 1)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, "NC", seed)
            logit = m.emit(R.add(m.emit(R.matmul(x, m.const((64, 1), 1 / 8))), m.const((1,), 0.1)))
            gv = bb.emit_output(m.emit(R.sigmoid(logit)))
        bb.emit_func_output(gv)
    return bb.get()


def conv_wide_pad(seed: int = 0) -> tvm.IRModule:
    """A 1x1 conv with padding 1 (the border outputs see only padding)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 5, 5), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, "NCHW", seed)
            gv = bb.emit_output(m.conv(x, 8, 1, pad=1))
        bb.emit_func_output(gv)
    return bb.get()


def conv1x1(c: int, o: int, h: int, layout: str = "NCHW", seed: int = 0) -> tvm.IRModule:
    """A single 1x1 conv + bias + relu on a ``h x h`` image."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(_shape(layout, 1, c, h, h), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, layout, seed)
            gv = bb.emit_output(m.emit(R.nn.relu(m.bias(m.conv(x, o, 1)))))
        bb.emit_func_output(gv)
    return bb.get()


def inputs_for(mod: tvm.IRModule, seed: int = 1) -> list[np.ndarray]:
    """Seeded standard-normal float32 arrays for the parameters of ``main``."""
    rng = np.random.default_rng(seed)
    arrays = []
    for p in mod["main"].params:
        shape = tuple(int(d) for d in p.ty.shape.values)
        arrays.append(rng.standard_normal(shape).astype(np.float32))
    return arrays


def run(executable: relax.VMExecutable, args: Sequence[np.ndarray]) -> np.ndarray:
    """Run ``main`` of a built module on the CPU and return its (single) output as numpy."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*(tvm.runtime.tensor(a) for a in args)).numpy()


def repeated_block(layout: str = "NCHW", repeats: int = 3, seed: int = 0) -> tvm.IRModule:
    """The same conv + bias + relu (one set of constants) applied ``repeats`` times, as in a
    ResNet whose blocks share weights: partitioning defines the composite function once."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(_shape(layout, 1, 16, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, layout, seed)
            w = relax.const((m.rng.standard_normal((16, 16, 3, 3)) / 12).astype("float32"))
            b = m.per_channel(16)
            y = x
            for _ in range(repeats):
                y = m.emit(R.nn.relu(m.emit(R.add(m.emit(R.nn.conv2d(y, w, padding=1)), b))))
            gv = bb.emit_output(y)
        bb.emit_func_output(gv)
    return bb.get()


def channel_shuffle(c: int = 64, hw: int = 8, groups: int = 4, seed: int = 0) -> tvm.IRModule:
    """conv 1x1 -> channel shuffle (reshape, transpose, reshape: host operators) -> conv 3x3,
    in NCHW as ShuffleNet exports it."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, c, hw, hw), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, "NCHW", seed)
            y = m.emit(R.nn.relu(m.bias(m.conv(x, c, 1))))
            y = m.emit(R.reshape(y, (1, groups, c // groups, hw, hw)))
            y = m.emit(R.permute_dims(y, [0, 2, 1, 3, 4]))
            y = m.emit(R.reshape(y, (1, c, hw, hw)))
            gv = bb.emit_output(m.emit(R.nn.relu(m.bias(m.conv(y, c, 3, pad=1)))))
        bb.emit_func_output(gv)
    return bb.get()


def repeated_operands(seed: int = 0) -> tvm.IRModule:
    """One tensor as both operands: ``relu(x @ x + x) * (y + y)``-style uses of a single value."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((24, 24), "float32"))
    y = relax.Var("y", relax.TensorType((1, 8, 6, 5), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            m = _Builder(bb, "NC", seed)
            xx = m.emit(R.nn.relu(m.emit(R.add(m.emit(R.matmul(x, x)), x))))
            yy = m.emit(R.multiply(m.emit(R.add(y, y)), y))
            gv = bb.emit_output(relax.Tuple([xx, yy]))
        bb.emit_func_output(gv)
    return bb.get()


def conv_chain(layout: str = "NCHW", c: int = 8, h: int = 24, seed: int = 0) -> tvm.IRModule:
    """Three 3x3 conv + bias + relu, the third with a residual add of the first's result, then a 3x3/2
    max pool and a last 3x3 conv: a chain of row windows for layer groups (``-fusion=3``)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(_shape(layout, 1, c, h, h), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, layout, seed)
            a = m.emit(R.nn.relu(m.bias(m.conv(x, c, 3, pad=1))))
            b = m.emit(R.nn.relu(m.bias(m.conv(a, c, 3, pad=1))))
            r = m.emit(R.nn.relu(m.emit(R.add(m.bias(m.conv(b, c, 3, pad=1)), a))))
            p = m.emit(R.nn.max_pool2d(r, pool_size=3, strides=2, padding=1, layout=layout))
            gv = bb.emit_output(m.emit(R.nn.relu(m.bias(m.conv(p, c, 3, pad=1)))))
        bb.emit_func_output(gv)
    return bb.get()


def pool_chain(layout: str = "NCHW", c: int = 16, h: int = 32, seed: int = 0) -> tvm.IRModule:
    """3x3 average pool, depthwise 3x3 conv + bias + relu, 3x3 max pool, depthwise conv again, 2x2/2
    average pool: DRAM-bound operators on a large map, which layer groups slice along H."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(_shape(layout, 1, c, h, h), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            m = _Builder(bb, layout, seed)
            a = m.emit(R.nn.avg_pool2d(x, pool_size=3, strides=1, padding=1, layout=layout))
            a = m.emit(R.nn.relu(m.bias(m.conv(a, c, 3, pad=1, groups=c))))
            b = m.emit(R.nn.max_pool2d(a, pool_size=3, strides=1, padding=1, layout=layout))
            b = m.emit(R.nn.relu(m.bias(m.conv(b, c, 3, pad=1, groups=c))))
            gv = bb.emit_output(m.emit(R.nn.avg_pool2d(b, pool_size=2, strides=2, layout=layout)))
        bb.emit_func_output(gv)
    return bb.get()
