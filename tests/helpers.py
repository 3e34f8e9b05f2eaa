"""Shared test helpers: operator-spec builders, a float64 numpy reference, one-op compile + simulate.

``run_op(spec, tile, hw)`` compiles one operator as the tuner does
(``codegen.operator.standalone_program``: the partition codegen's emitter and semaphore
pass on one operator) and runs it on the simulator with seeded random inputs; ``reference(spec, env)`` computes
what the operator means in float64 from the same (fp32) inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import erf
from tvm_npu.codegen.operator import standalone_program
from tvm_npu.simulator import RunStats, Simulator, isa
from tvm_npu.tir_schedules import tile_search

from tvm_npu.config import CompilerOptions, DType, HardwareConfig
from tvm_npu.core.ops import (
    Broadcast,
    Conv2dSpec,
    ElementwiseSpec,
    EpiKind,
    Epilogue,
    MatmulSpec,
    OpSpec,
    PoolKind,
    PoolSpec,
    TensorRef,
)
from tvm_npu.core.tiles import TileParams

F32 = DType.FP32
#: fp32 tolerance against the float64 reference (the brief's numbers).
RTOL, ATOL = 1e-4, 1e-5

# ------------------------------------------------------------------------------------ specs
#: Epilogue steps by short name: ``(kind, operand broadcast or None for unary, clip bounds)``.
EPILOGUES: dict[str, tuple[EpiKind, Broadcast | None]] = {
    "bias": (EpiKind.BIAS, Broadcast.CHANNEL),
    "add": (EpiKind.ADD, Broadcast.FULL),  # residual
    "add_c": (EpiKind.ADD, Broadcast.CHANNEL),
    "sub": (EpiKind.SUB, Broadcast.FULL),
    "sub_c": (EpiKind.SUB, Broadcast.CHANNEL),
    "mul": (EpiKind.MUL, Broadcast.FULL),
    "mul_c": (EpiKind.MUL, Broadcast.CHANNEL),
    "max": (EpiKind.MAX, Broadcast.FULL),
    "min_c": (EpiKind.MIN, Broadcast.CHANNEL),
    "relu": (EpiKind.RELU, None),
    "clip": (EpiKind.CLIP, None),
    "sigmoid": (EpiKind.SIGMOID, None),
    "tanh": (EpiKind.TANH, None),
    "gelu": (EpiKind.GELU, None),
}
CLIP_RANGE = (-0.5, 0.75)


def epilogue(names: Sequence[str], out: TensorRef, channels: int) -> tuple[Epilogue, ...]:
    """Epilogue steps named as in :data:`EPILOGUES`; operands get distinct DRAM names."""
    steps = []
    for i, name in enumerate(names):
        kind, bc = EPILOGUES[name]
        if bc is None:
            lo, hi = CLIP_RANGE if kind == EpiKind.CLIP else (0.0, 0.0)
            steps.append(Epilogue(kind, lo=lo, hi=hi))
        elif bc == Broadcast.CHANNEL:
            steps.append(Epilogue(kind, TensorRef(f"e{i}_{name}", (channels,), out.dtype), Broadcast.CHANNEL))
        else:
            steps.append(Epilogue(kind, TensorRef(f"e{i}_{name}", out.shape, out.dtype, out.layout)))
    return tuple(steps)


def _nchw_shape(layout: str, n: int, c: int, h: int, w: int) -> tuple[int, int, int, int]:
    return (n, c, h, w) if layout == "NCHW" else (n, h, w, c)


def conv_out(size: int, k: int, stride: int, dilation: int, pad_lo: int, pad_hi: int) -> int:
    return (size + pad_lo + pad_hi - dilation * (k - 1) - 1) // stride + 1


def conv(c: int, o: int, h: int, w: int | None = None, *, k: int = 3, kw: int | None = None, stride: int = 1,
         dilation: int = 1, pad: int | Sequence[int] | None = None, groups: int = 1, n: int = 1,
         layout: str = "NCHW", data_layout: str | None = None, epi: Sequence[str] = ()) -> Conv2dSpec:
    """A float32 conv2d spec; ``pad`` is one value or (top, left, bottom, right), default 'same' for stride 1.

    ``data_layout`` (default ``layout``) differs from ``layout`` when a layout transform was
    folded into the input DMA."""
    w = h if w is None else w
    kw = k if kw is None else kw
    if pad is None:
        pad = (dilation * (k - 1) // 2, dilation * (kw - 1) // 2) * 2
    pads = (pad,) * 4 if isinstance(pad, int) else tuple(pad)
    oh = conv_out(h, k, stride, dilation, pads[0], pads[2])
    ow = conv_out(w, kw, stride, dilation, pads[1], pads[3])
    data_layout = data_layout or layout
    data = TensorRef("x", _nchw_shape(data_layout, n, c, h, w), F32, data_layout)
    out = TensorRef("y", _nchw_shape(layout, n, o, oh, ow), F32, layout)
    weight = TensorRef("w", (o, c // groups, k, kw), F32, "OIHW")
    return Conv2dSpec("conv2d", out, data=data, weight=weight, strides=(stride, stride), dilation=(dilation, dilation),
                      padding=pads, groups=groups, epilogue=epilogue(epi, out, o))


def matmul(m: int, n: int, k: int, *, batch: int = 0, batch_b: bool = True, transpose_b: bool = False,
           epi: Sequence[str] = ()) -> MatmulSpec:
    """A float32 matmul ``[batch,] m x k @ k x n`` (``b`` as ``[n, k]`` when ``transpose_b``)."""
    lead = (batch,) if batch else ()
    a = TensorRef("a", (*lead, m, k), F32)
    b_shape = (n, k) if transpose_b else (k, n)
    b = TensorRef("b", (*(lead if batch_b else ()), *b_shape), F32)
    out = TensorRef("y", (*lead, m, n), F32)
    return MatmulSpec("matmul", out, a=a, b=b, transpose_b=transpose_b, epilogue=epilogue(epi, out, n))


def pool(c: int, h: int, w: int | None = None, *, kind: str = "max", k: int = 2, stride: int | None = None,
         pad: int | Sequence[int] = 0, count_include_pad: bool = False, n: int = 1, layout: str = "NCHW",
         data_layout: str | None = None, global_: bool = False, epi: Sequence[str] = ()) -> PoolSpec:
    """A float32 max/avg pool spec (``global_``: one window over the whole image; ``data_layout``
    as for :func:`conv`)."""
    w = h if w is None else w
    pads = (pad,) * 4 if isinstance(pad, int) else tuple(pad)
    kernel = (h, w) if global_ else (k, k)
    strides = (1, 1) if global_ else ((stride or k),) * 2
    oh = conv_out(h, kernel[0], strides[0], 1, pads[0], pads[2])
    ow = conv_out(w, kernel[1], strides[1], 1, pads[1], pads[3])
    data_layout = data_layout or layout
    data = TensorRef("x", _nchw_shape(data_layout, n, c, h, w), F32, data_layout)
    out = TensorRef("y", _nchw_shape(layout, n, c, oh, ow), F32, layout)
    return PoolSpec(f"{kind}_pool", out, data=data, kind=PoolKind(kind), kernel=kernel, strides=strides,
                    padding=pads, count_include_pad=count_include_pad, epilogue=epilogue(epi, out, c))


def eltwise(shape: Sequence[int], layout: str, epi: Sequence[str]) -> ElementwiseSpec:
    """A float32 elementwise chain over a tensor of ``shape`` (``layout`` names its channel axis)."""
    shape = tuple(shape)
    out = TensorRef("y", shape, F32, layout)
    return ElementwiseSpec("eltwise", out, data=TensorRef("x", shape, F32, layout),
                           epilogue=epilogue(epi, out, shape[layout.index("C")]))


# -------------------------------------------------------------------------------- reference
def _to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 3, 1, 2)


def _from_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 2, 3, 1)


def apply_epilogue(spec: OpSpec, acc: np.ndarray, env: Mapping[str, np.ndarray], chan_axis: int) -> np.ndarray:
    for e in spec.epilogue:
        y = None
        if e.operand is not None:
            y = env[e.operand.name].astype(np.float64)
            if e.broadcast == Broadcast.CHANNEL:
                shape = [1] * acc.ndim
                shape[chan_axis] = -1
                y = y.reshape(shape)
        k = e.kind
        if k in (EpiKind.BIAS, EpiKind.ADD):
            acc = acc + y
        elif k == EpiKind.SUB:
            acc = acc - y
        elif k == EpiKind.MUL:
            acc = acc * y
        elif k == EpiKind.MAX:
            acc = np.maximum(acc, y)
        elif k == EpiKind.MIN:
            acc = np.minimum(acc, y)
        elif k == EpiKind.RELU:
            acc = np.maximum(acc, 0.0)
        elif k == EpiKind.CLIP:
            acc = np.clip(acc, e.lo, e.hi)
        elif k == EpiKind.SIGMOID:
            acc = 1.0 / (1.0 + np.exp(-acc))
        elif k == EpiKind.TANH:
            acc = np.tanh(acc)
        elif k == EpiKind.GELU:
            acc = 0.5 * acc * (1.0 + erf(acc / math.sqrt(2.0)))
        else:  # pragma: no cover - a new EpiKind needs a reference here
            raise NotImplementedError(k)
    return acc


def reference(spec: OpSpec, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """What ``spec`` computes, in float64, from the arrays in ``env`` (by DRAM name)."""
    if isinstance(spec, Conv2dSpec):
        lay = spec.layout
        x = _to_nchw(env[spec.data.name].astype(np.float64), spec.data.layout)
        w = env[spec.weight.name].astype(np.float64)
        n, c = x.shape[:2]
        o, g = w.shape[0], spec.groups
        kh, kw = spec.kernel
        (sh, sw), (dh, dw), (pt, pl, pb, pr) = spec.strides, spec.dilation, spec.padding
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        cg, og = c // g, o // g
        out = np.zeros((n, o, oh, ow))
        for gi in range(g):
            for ky in range(kh):
                for kx in range(kw):
                    patch = xp[:, gi * cg:(gi + 1) * cg, ky * dh: ky * dh + (oh - 1) * sh + 1: sh,
                               kx * dw: kx * dw + (ow - 1) * sw + 1: sw]
                    out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch,
                                                               w[gi * og:(gi + 1) * og, :, ky, kx])
        return apply_epilogue(spec, _from_nchw(out, lay), env, lay.index("C"))
    if isinstance(spec, MatmulSpec):
        a = env[spec.a.name].astype(np.float64)
        b = env[spec.b.name].astype(np.float64)
        if spec.transpose_b:
            b = np.swapaxes(b, -1, -2)
        return apply_epilogue(spec, a @ b, env, len(spec.out.shape) - 1)
    if isinstance(spec, PoolSpec):
        lay = spec.layout
        x = _to_nchw(env[spec.data.name].astype(np.float64), spec.data.layout)
        kh, kw = spec.kernel
        (sh, sw), (pt, pl, pb, pr) = spec.strides, spec.padding
        oh, ow = spec.out.dim("H"), spec.out.dim("W")
        fill = -np.inf if spec.kind == PoolKind.MAX else 0.0
        fill = fill if spec.pad_value is None else spec.pad_value
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
        ones = np.pad(np.ones_like(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        view = np.lib.stride_tricks.sliding_window_view
        win = view(xp, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
        cnt = view(ones, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow].sum((-1, -2))
        if spec.kind == PoolKind.MAX:
            r = win.max((-1, -2))
        else:
            r = win.sum((-1, -2)) / (kh * kw if spec.count_include_pad else cnt)
        return apply_epilogue(spec, _from_nchw(r, lay), env, lay.index("C"))
    if isinstance(spec, ElementwiseSpec):
        lay = spec.out.layout
        chan = lay.index("C") if "C" in lay else len(spec.out.shape) - 1
        return apply_epilogue(spec, env[spec.data.name].astype(np.float64), env, chan)
    raise TypeError(type(spec).__name__)


def random_env(spec: OpSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded fp32 inputs, weights scaled by 1/sqrt(fan-in) so every output is O(1)."""
    rng = np.random.default_rng(seed)
    scale: dict[str, float] = {}
    if isinstance(spec, Conv2dSpec):
        scale[spec.weight.name] = 1.0 / math.sqrt(math.prod(spec.weight.shape[1:]))
    elif isinstance(spec, MatmulSpec):
        scale[spec.b.name] = 1.0 / math.sqrt(spec.mnk[2])
    env = {}
    for t in spec.inputs:
        if t.name not in env:
            env[t.name] = (rng.standard_normal(t.shape) * scale.get(t.name, 1.0)).astype(t.dtype.np)
    return env


# ----------------------------------------------------------------------------- compile + run
@dataclass(frozen=True)
class OpRun:
    """One operator compiled and simulated."""

    out: np.ndarray | None  # None in timing-only mode
    ref: np.ndarray | None
    stats: RunStats
    sram_peak: int  # what the emitter allocated (ProgramBuilder.sram_high_water)
    program: isa.Program


def run_op(spec: OpSpec, tile: TileParams, hw: HardwareConfig, seed: int = 0, timing_only: bool = False) -> OpRun:
    """Compile ``spec`` with ``tile``, simulate it on random inputs, return outputs, reference and stats."""
    program, peak = standalone_program(spec, tile, hw)
    if timing_only:
        r = Simulator(hw).run(program, timing_only=True)
        return OpRun(None, None, r.stats, peak, program)
    env = random_env(spec, seed)
    r = Simulator(hw).run(program, env)
    return OpRun(r.outputs[spec.out.name], reference(spec, env), r.stats, peak, program)


def assert_matches(out: np.ndarray | None, ref: np.ndarray | None, what: object = "") -> None:
    """fp32 result against the float64 reference (rtol 1e-4, atol 1e-5)."""
    assert out is not None and ref is not None
    assert out.shape == ref.shape, f"{what}: shape {out.shape} != {ref.shape}"
    assert out.dtype == np.float32, f"{what}: dtype {out.dtype}"
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=RTOL, atol=ATOL, err_msg=str(what))


def tight_budget(spec: OpSpec, stages: int, hw: HardwareConfig, cap: int = 65536) -> HardwareConfig:
    """A machine with a tight SRAM: at most ``cap`` bytes and at most half of what the tile the
    planner prefers on ``hw`` needs (so that tile no longer fits), but never less than the
    smallest footprint some candidate tile has (the operator still runs on the NPU)."""
    opts = CompilerOptions(pipeline_stages=stages)
    smallest = min(tile_search.footprint(spec, t, hw) for t in tile_search.candidates(spec, hw, opts))
    preferred = tile_search.footprint(spec, tile_search.choose(spec, hw, opts), hw)
    budget = hw.align(max(min(cap, preferred // 2), smallest, 4096))
    return HardwareConfig(**{**_fields(hw), "max_sram_bytes": budget})


def _fields(hw: HardwareConfig) -> dict[str, int]:
    return {f: getattr(hw, f) for f in hw.__dataclass_fields__}


def simulate(spec: OpSpec, tile: TileParams, hw: HardwareConfig, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """Compile ``spec`` with ``tile`` as :func:`run_op` does and simulate it on the caller's inputs
    (8-bit, int32, fp16 ... arrays of the declared dtypes; :func:`run_op` draws float32 ones);
    returns the output exactly as the simulator wrote it."""
    program, _ = standalone_program(spec, tile, hw)
    return Simulator(hw).run(program, dict(env)).outputs[spec.out.name]


def ort_session(model, *, basic: bool):
    """An onnxruntime CPU session of ``model`` (an ``onnx.ModelProto``): ``basic`` runs a QDQ graph as
    written (float DequantizeLinear -> op -> QuantizeLinear); otherwise the default level, which fuses
    it into integer kernels (QLinearConv, QLinearConcat ...), int8 activations kept int8."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if basic:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    else:
        options.add_session_config_entry("session.qdqisint8allowed", "1")
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def check_against_references(model, x: np.ndarray | None = None, *, target: str = "npu",
                             host_ops: Mapping[str, int] | None = None, partitions: int | None = 1,
                             scale: float = 1.0):
    """Build an fp32 ONNX ``model`` (one input) for ``target`` and run it on ``x`` (default: ``scale`` times a
    seeded standard normal): within rtol 1e-4 / atol 1e-5 of the llvm reference and of onnxruntime, exactly
    ``host_ops`` on the host (default none) and ``partitions`` NPU partitions (None: not checked). Returns
    the ``BuildInfo`` for further checks."""
    import onnxruntime
    import tvm
    from tvm import relax

    import tvm_npu

    if x is None:
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        x = (np.random.default_rng(1).standard_normal(shape) * scale).astype(np.float32)
    ex, info = tvm_npu.build_with_info(model, target)

    def run(executable: object) -> np.ndarray:
        return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()

    out, ref = run(ex), run(tvm_npu.build_reference(model))
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {model.graph.input[0].name: x})
    assert info.host_ops == dict(host_ops or {}), info.host_ops
    assert partitions is None or info.partitions == partitions, info.partitions
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    return info
