"""What every instruction computes: the numpy reference semantics of :mod:`.isa`.

Each instruction becomes an :data:`Executor`, built once per loaded program and
called as ``run(sram, dram)``: ``sram`` is the ``np.uint8`` buffer of exactly
``max_sram_bytes`` and ``dram`` the flat typed arrays of the program's tensors, in
table order. Operands are typed strided views straight onto those buffers (no
copies), built from the record's :meth:`accesses`, so an instruction reads and writes
exactly the bytes its operand descriptions name.
Validation (:mod:`.validate`) has already guaranteed every view is in bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import special

from tvm_npu.config import DType

from . import isa, quant

Executor = Callable[[np.ndarray, list[np.ndarray]], None]
Accesses = tuple[isa.Access, ...]
# shape, dtype, byte offset, byte strides: the positional arguments of np.ndarray after the buffer
_Operand = tuple[tuple[int, ...], np.dtype, int, tuple[int, ...]]

_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
#: Type the tensor engine computes each operand type in. The array sums one instruction's
#: products in a wide internal accumulator and rounds once into the SRAM accumulator
#: (fp32) per instruction: emulated in float64, so a result does not depend on where in
#: a tile an output sits. int8 goes through float64 too, which is exact for every sum an
#: SRAM-sized tile can produce, then wraps to int32; 16-bit x int8 products (at most 2**22) too, for
#: any sum of fewer than 2**31 of them, into int64.
_WORK = {DType.INT8: _F64, DType.UINT8: _F64, DType.INT16: _F64, DType.UINT16: _F64, DType.FP16: _F64,
         DType.FP32: _F64}


def _operand(acc: isa.Access) -> _Operand:
    """The view of one operand: SRAM bases are bytes, DRAM bases elements of the tensor."""
    dt = acc.dtype.np
    offset = acc.base if acc.space == isa.Space.SRAM else acc.base * dt.itemsize
    return acc.shape, dt, offset, tuple(s * dt.itemsize for s in acc.strides)


def _store_acc(out: np.ndarray, product: np.ndarray, accumulate: bool) -> None:
    """Write a tensor-engine result into its accumulator tile (int32 and int64 wrap, fp32 rounds)."""
    if out.dtype == np.int64:
        product = product.astype(_I64)
        out[...] = out + product if accumulate else product
    elif out.dtype == np.int32:
        product = product.astype(_I64)
        if accumulate:
            product += out
        out[...] = product.astype(np.int32)
    elif accumulate:
        np.add(out, product, out=out)
    else:
        out[...] = product


def _dma(ins: isa.DmaLoad | isa.DmaStore, accs: Accesses) -> Executor:
    dram_acc, sram_acc = accs
    shape, dt, addr, sram_strides = _operand(sram_acc)
    _, _, offset, dram_strides = _operand(dram_acc)
    t = dram_acc.tensor
    if isinstance(ins, isa.DmaLoad):

        def load(sram: np.ndarray, dram: list[np.ndarray]) -> None:
            np.ndarray(shape, dt, sram, addr, sram_strides)[...] = np.ndarray(shape, dt, dram[t], offset, dram_strides)

        return load

    def store(sram: np.ndarray, dram: list[np.ndarray]) -> None:
        np.ndarray(shape, dt, dram[t], offset, dram_strides)[...] = np.ndarray(shape, dt, sram, addr, sram_strides)

    return store


def _matmul(ins: isa.MatMul, accs: Accesses) -> Executor:
    a, b, c = (_operand(acc) for acc in accs)
    work, accumulate = _WORK[ins.in_dtype], ins.accumulate

    def run(sram: np.ndarray, dram: list[np.ndarray]) -> None:
        x = np.ndarray(a[0], a[1], sram, a[2], a[3]).astype(work, copy=False)
        y = np.ndarray(b[0], b[1], sram, b[2], b[3]).astype(work, copy=False)
        _store_acc(np.ndarray(c[0], c[1], sram, c[2], c[3]), x @ y, accumulate)

    return run


def _conv(ins: isa.Conv, accs: Accesses) -> Executor:
    """im2col over a zero-padded copy of the tile, then one batched matmul per group."""
    g = ins.groups
    cin_g, cout_g = ins.in_c // g, ins.out_c // g
    x_op, w_op, o_op = (_operand(acc) for acc in accs)
    accumulate = ins.accumulate
    work = _WORK[ins.in_dtype]
    padded = (ins.in_c, ins.pad_top + ins.in_h + ins.pad_bottom, ins.pad_left + ins.in_w + ins.pad_right)
    inner = (slice(None), slice(ins.pad_top, ins.pad_top + ins.in_h), slice(ins.pad_left, ins.pad_left + ins.in_w))
    k, m = cin_g * ins.kernel_h * ins.kernel_w, ins.out_h * ins.out_w
    sc, sh, sw = padded[1] * padded[2] * work.itemsize, padded[2] * work.itemsize, work.itemsize
    win_shape = (g, cin_g, ins.kernel_h, ins.kernel_w, ins.out_h, ins.out_w)
    win_strides = (cin_g * sc, sc, ins.dilation_h * sh, ins.dilation_w * sw, ins.stride_h * sh, ins.stride_w * sw)

    pad_value = float(ins.pad_value)

    def run(sram: np.ndarray, dram: list[np.ndarray]) -> None:
        xp = np.full(padded, pad_value, work)
        xp[inner] = np.ndarray(x_op[0], x_op[1], sram, x_op[2], x_op[3])
        cols = np.ndarray(win_shape, work, xp, 0, win_strides).reshape(g, k, m)
        w = np.ndarray(w_op[0], w_op[1], sram, w_op[2], w_op[3]).astype(work).reshape(g, cout_g, k)
        out = np.ndarray(o_op[0], o_op[1], sram, o_op[2], o_op[3])
        _store_acc(out, (w @ cols).reshape(o_op[0]), accumulate)

    return run


_BINARY = {
    isa.Opcode.VADD: np.add,
    isa.Opcode.VSUB: np.subtract,
    isa.Opcode.VMUL: np.multiply,
    isa.Opcode.VMAX: np.maximum,
    isa.Opcode.VMIN: np.minimum,
}
_TRANSCENDENTAL: dict[isa.Opcode, Callable[[np.ndarray], np.ndarray]] = {
    isa.Opcode.VSIGMOID: special.expit,
    isa.Opcode.VTANH: np.tanh,
    isa.Opcode.VGELU: lambda x: 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0))),
    isa.Opcode.VGELU_TANH: lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * (x * x * x)))),
    isa.Opcode.VEXP: np.exp,
    isa.Opcode.VLOG: np.log,
    isa.Opcode.VRECIP: np.reciprocal,
    isa.Opcode.VRSQRT: lambda x: 1.0 / np.sqrt(x),
    isa.Opcode.VSILU: lambda x: x * special.expit(x),
}


def _vec(accs: Accesses, f: Callable[[np.ndarray, np.ndarray], object]) -> Executor:
    """Executor calling ``f(src_view, dst_view)`` with the operand types of :meth:`isa._VecBase.types`."""
    d, s = (_operand(acc) for acc in accs[:2])

    def run(sram: np.ndarray, dram: list[np.ndarray]) -> None:
        f(np.ndarray(s[0], s[1], sram, s[2], s[3]), np.ndarray(d[0], d[1], sram, d[2], d[3]))

    return run


def _vec2(accs: Accesses, f: Callable[[np.ndarray, np.ndarray, np.ndarray], object]) -> Executor:
    """Executor calling ``f(src_view, other_view, dst_view)`` for the two-source vector records."""
    d, s, o = (_operand(acc) for acc in accs)

    def run(sram: np.ndarray, dram: list[np.ndarray]) -> None:
        f(np.ndarray(s[0], s[1], sram, s[2], s[3]), np.ndarray(o[0], o[1], sram, o[2], o[3]),
          np.ndarray(d[0], d[1], sram, d[2], d[3]))

    return run


def _vec_binary(ins: isa.VecBinary, accs: Accesses) -> Executor:
    ufunc = _BINARY[ins.op]
    return _vec2(accs, lambda x, y, out: ufunc(x, y, out=out))


def _copy(x: np.ndarray, out: np.ndarray) -> None:
    out[...] = x


def _vec_unary(ins: isa.VecUnary, accs: Accesses) -> Executor:
    if ins.op == isa.Opcode.VCOPY:
        return _vec(accs, _copy)
    if ins.op == isa.Opcode.VRELU:
        zero = ins.dtype.np.type(0)
        return _vec(accs, lambda x, out: np.maximum(x, zero, out=out))
    f = _TRANSCENDENTAL[ins.op]

    def transcendental(x: np.ndarray, out: np.ndarray) -> None:
        out[...] = f(x.astype(_F64))

    return _vec(accs, transcendental)


def _vec_clip(ins: isa.VecClip, accs: Accesses) -> Executor:
    lo, hi = ins.dtype.np.type(ins.lo), ins.dtype.np.type(ins.hi)
    return _vec(accs, lambda x, out: np.clip(x, lo, hi, out=out))


def _vec_scale(ins: isa.VecScale, accs: Accesses) -> Executor:
    scale, shift = ins.scale, ins.shift

    def run(x: np.ndarray, out: np.ndarray) -> None:
        out[...] = x.astype(_F64) * scale + shift

    return _vec(accs, run)


def _vec_hard_sigmoid(ins: isa.VecHardSigmoid, accs: Accesses) -> Executor:
    alpha, beta, swish = ins.alpha, ins.beta, ins.op == isa.Opcode.VHSWISH

    def run(x: np.ndarray, out: np.ndarray) -> None:
        x64 = x.astype(_F64)
        h = np.clip(x64 * alpha + beta, 0.0, 1.0)
        out[...] = x64 * h if swish else h

    return _vec(accs, run)


def _vec_pow(ins: isa.VecPow, accs: Accesses) -> Executor:
    exponent = ins.exponent

    def run(x: np.ndarray, out: np.ndarray) -> None:
        with np.errstate(divide="ignore", invalid="ignore"):  # 0 ** -p = inf, (-x) ** 0.5 = nan, as IEEE pow
            out[...] = np.power(x.astype(_F64), exponent)

    return _vec(accs, run)


def _vec_bias_add(ins: isa.VecBiasAdd, accs: Accesses) -> Executor:
    return _vec2(accs, lambda x, bias, out: np.add(x, bias, out=out))  # the bias broadcasts (stride 0)


def _vec_requant(ins: isa.VecRequant, accs: Accesses) -> Executor:
    args = ins.zero_point, ins.lo, ins.hi, ins.dst_dtype

    def run(x: np.ndarray, scale: np.ndarray, out: np.ndarray) -> None:
        out[...] = quant.requantize(x, scale, *args, quant.NUMPY)

    return _vec2(accs, run)


def _vec_qadd(ins: isa.VecQAdd, accs: Accesses) -> Executor:
    args = ins.scale_a, ins.scale_b, ins.offset, ins.lo, ins.hi, ins.dst_dtype

    def run(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        out[...] = quant.rescale_add(a, b, *args, quant.NUMPY)

    return _vec2(accs, run)


def _vec_qmul(ins: isa.VecQMul, accs: Accesses) -> Executor:
    args = ins.ratio, ins.zero_y, ins.lo, ins.hi, ins.dst_dtype

    def run(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        za, zb = np.int32(ins.zero_a), np.int32(ins.zero_b)
        out[...] = quant.rescale_mul(a.astype(np.int32) - za, b.astype(np.int32) - zb, *args, quant.NUMPY)

    return _vec2(accs, run)


def _vec_cast(ins: isa.VecCast, accs: Accesses) -> Executor:
    dst = ins.dst_dtype
    if dst.is_float:
        return _vec(accs, _copy)  # numpy rounds to nearest even, overflow gives inf
    info = np.iinfo(dst.np)
    lo, hi = int(info.min), int(info.max)
    if not ins.src_dtype.is_float:

        def int_to_int(x: np.ndarray, out: np.ndarray) -> None:
            out[...] = np.clip(x.astype(_I64), lo, hi)

        return _vec(accs, int_to_int)

    def float_to_int(x: np.ndarray, out: np.ndarray) -> None:
        r = np.rint(x.astype(_F64))
        r[np.isnan(r)] = 0
        top = r >= float(hi)  # saturate before converting: int64's max rounds up to 2**63 in float64
        r = np.clip(r, lo, hi)
        r[top] = 0
        out[...] = np.where(top, hi, r.astype(_I64))

    return _vec(accs, float_to_int)


def _vec_lut(ins: isa.VecLut, accs: Accesses) -> Executor:
    """Entry ``src - qmin`` of the table: every 8-bit value indexes one of its 256 entries."""
    qmin = int(np.iinfo(ins.src_dtype.np).min)

    def run(x: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
        out[...] = table[x.astype(_I64) - qmin]

    return _vec2(accs, run)


def _vec_reduce(ins: isa.VecReduce, accs: Accesses) -> Executor:
    """Max is exact in the dtype; sums run in float64 and round once."""
    is_max = ins.op == isa.Opcode.VRMAX

    def run(x: np.ndarray, out: np.ndarray) -> None:
        out[...] = x.max(axis=2) if is_max else x.astype(_F64).sum(axis=2)

    return _vec(accs, run)


def _pool(ins: isa.Pool, accs: Accesses) -> Executor:
    """Reduce sliding windows over a padded copy of the tile (padding never wins a max, except the
    :class:`~tvm_npu.simulator.isa.PaddedMaxPool`'s value)."""
    x_op, o_op = (_operand(acc) for acc in accs)
    padded = (ins.channels, ins.pad_top + ins.in_h + ins.pad_bottom, ins.pad_left + ins.in_w + ins.pad_right)
    inner = (slice(None), slice(ins.pad_top, ins.pad_top + ins.in_h), slice(ins.pad_left, ins.pad_left + ins.in_w))
    is_max = ins.op in (isa.Opcode.VMAXPOOL, isa.Opcode.VMAXPOOL_PAD)
    if is_max:
        work = ins.dtype.np
        fill = -np.inf if ins.dtype.is_float else np.iinfo(work).min
        if isinstance(ins, isa.PaddedMaxPool):
            fill = ins.pad_value
    else:
        work, fill = (_F64 if ins.dtype.is_float else _I64), 0
    def windows(a: np.ndarray) -> np.ndarray:
        """(c, out_h, out_w, kernel_h, kernel_w) view of a padded (c, h, w) array."""
        sc, sh, sw = a.strides
        shape = (a.shape[0], ins.out_h, ins.out_w, ins.kernel_h, ins.kernel_w)
        return np.ndarray(shape, a.dtype, a, 0, (sc, ins.stride_h * sh, ins.stride_w * sw, sh, sw))

    if is_max:
        divisor = None
    elif ins.count_include_pad:
        divisor = float(ins.kernel_h * ins.kernel_w)
    else:
        mask = np.zeros(padded[1:], _F64)
        mask[inner[1:]] = 1.0
        divisor = windows(mask[None]).sum(axis=(3, 4))[0]
    to_int = not ins.dtype.is_float

    def run(sram: np.ndarray, dram: list[np.ndarray]) -> None:
        xp = np.full(padded, fill, work)
        xp[inner] = np.ndarray(x_op[0], x_op[1], sram, x_op[2], x_op[3])
        out = np.ndarray(o_op[0], o_op[1], sram, o_op[2], o_op[3])
        if divisor is None:
            out[...] = windows(xp).max(axis=(3, 4))
            return
        mean = windows(xp).sum(axis=(3, 4)) / divisor
        out[...] = np.rint(mean) if to_int else mean

    return run


def _dwconv(ins: isa.DwConv, accs: Accesses) -> Executor:
    """Per channel, the window taps of a padded copy of the tile times that channel's kernel.

    Summed in float64 (exact for 8-bit operands) and stored like a tensor-engine result, so
    fp32 rounds once and int32 wraps, exactly as :func:`_conv` with one channel per group.
    """
    x_op, w_op, o_op = (_operand(acc) for acc in accs)
    c, kh, kw, oh, ow = ins.channels, ins.kernel_h, ins.kernel_w, ins.out_h, ins.out_w
    padded = (c, ins.pad_top + ins.in_h + ins.pad_bottom, ins.pad_left + ins.in_w + ins.pad_right)
    inner = (slice(None), slice(ins.pad_top, ins.pad_top + ins.in_h), slice(ins.pad_left, ins.pad_left + ins.in_w))
    sc, sh, sw = padded[1] * padded[2] * _F64.itemsize, padded[2] * _F64.itemsize, _F64.itemsize
    win_strides = (sc, ins.dilation_h * sh, ins.dilation_w * sw, ins.stride_h * sh, ins.stride_w * sw)
    pad_value, accumulate = float(ins.pad_value), ins.accumulate

    def run(sram: np.ndarray, dram: list[np.ndarray]) -> None:
        xp = np.full(padded, pad_value, _F64)
        xp[inner] = np.ndarray(x_op[0], x_op[1], sram, x_op[2], x_op[3])
        taps = np.ndarray((c, kh, kw, oh, ow), _F64, xp, 0, win_strides)
        w = np.ndarray(w_op[0], w_op[1], sram, w_op[2], w_op[3]).astype(_F64)
        product = np.einsum("cijyx,cij->cyx", taps, w)
        _store_acc(np.ndarray(o_op[0], o_op[1], sram, o_op[2], o_op[3]), product, accumulate)

    return run


_BUILDERS: dict[type, Callable[..., Executor]] = {
    isa.DmaLoad: _dma,
    isa.DmaStore: _dma,
    isa.MatMul: _matmul,
    isa.Conv: _conv,
    isa.VecBinary: _vec_binary,
    isa.VecUnary: _vec_unary,
    isa.VecClip: _vec_clip,
    isa.VecScale: _vec_scale,
    isa.VecHardSigmoid: _vec_hard_sigmoid,
    isa.VecPow: _vec_pow,
    isa.VecBiasAdd: _vec_bias_add,
    isa.VecRequant: _vec_requant,
    isa.VecQAdd: _vec_qadd,
    isa.VecQMul: _vec_qmul,
    isa.VecCast: _vec_cast,
    isa.VecLut: _vec_lut,
    isa.VecReduce: _vec_reduce,
    isa.Pool: _pool,
    isa.PaddedMaxPool: _pool,
    isa.DwConv: _dwconv,
}


def executor(ins: isa.Instruction, accesses: Accesses | None = None) -> Executor | None:
    """The executor of one validated instruction (None for Signal, Wait and End).

    ``accesses`` are its :meth:`accesses`, if already known.
    """
    build = _BUILDERS.get(type(ins))
    return None if build is None else build(ins, ins.accesses() if accesses is None else accesses)


def executors(
    instructions: Sequence[isa.Instruction], accesses: Sequence[Accesses]
) -> tuple[Executor | None, ...]:
    """Executors of a validated program; instructions sharing one accesses tuple (equal records) share one."""
    built: dict[int, Executor | None] = {}
    out = []
    for ins, accs in zip(instructions, accesses, strict=True):
        key = id(accs)
        if key not in built:
            built[key] = executor(ins, accs)
        out.append(built[key])
    return tuple(out)
