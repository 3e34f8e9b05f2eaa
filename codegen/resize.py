"""Emit a linear resize (``tir_schedules/resize.py``) band by band, without a TIR template.

The instructions are a fixed function of the taps (which source rows and columns each output reads and
their weights), known at compile time: the same :func:`~tvm_npu.tir_schedules.resize.runs` and
:func:`~tvm_npu.tir_schedules.resize.bands` the cost model counts give every instruction, the emitter only
places buffers and addresses DRAM (through views, or on-chip residents, as the template emitter does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tvm_npu.simulator import ProgramBuilder, isa
from tvm_npu.simulator.builder import row_major
from tvm_npu.tir_schedules.dma import copy_plan, pad3, split_outer
from tvm_npu.tir_schedules.kind import kind_of
from tvm_npu.tir_schedules.resize import Run, band_source, bands, buffers, runs

from tvm_npu.core.ops import ResizeSpec, TensorRef
from tvm_npu.core.tiles import ResizeTile
from tvm_npu.core.views import compose, reshape, shape_of, view_pieces

from .emit import Resident

_IDENTITY = tuple(tuple(int(d == v) for v in range(4)) for d in range(4))


class _Bands:
    """One resize's emission state: the program, its layer tag, the on-chip residents."""

    def __init__(self, asm: ProgramBuilder, spec: ResizeSpec, layer: int, resident: Mapping[str, Resident]) -> None:
        self.asm, self.spec, self.layer, self.resident = asm, spec, layer, resident
        self.dtype = spec.data.dtype
        self.isz = spec.data.dtype.itemsize

    def emit(self, instr: isa.Instruction) -> None:
        self.asm.emit(instr, self.layer)

    def copy(self, ref: TensorRef, lo: Sequence[int], ext: Sequence[int], sram: int, sram_strides: Sequence[int],
             load: bool) -> None:
        """DMA (or, for a resident, on-chip copies) of the NCHW box ``lo`` + ``ext`` of ``ref``."""
        if ref.view is None:
            strides = row_major(ref.shape)
            pieces = [(sum(a * s for a, s in zip(lo, strides, strict=True)), 0, list(ext), list(strides),
                       list(sram_strides))]
            name = ref.name
        else:  # the tensor lives in another one (a concat slice, a reshape): address that one
            view = ref.view if shape_of(ref.view) == tuple(ref.shape) else compose(reshape(ref.name, ref.shape),
                                                                                   ref.view)
            pieces = view_pieces(view, _IDENTITY, lo, [0] * 4, ext, sram_strides)
            name = view.base
        for d_off, s_extra, p_ext, p_dstr, p_sstr in pieces:
            for (od, osr), inner in split_outer(copy_plan(p_ext, p_dstr, p_sstr)):
                self._descriptor(name, d_off + od, sram + (s_extra + osr) * self.isz, inner, load)

    def _descriptor(self, name: str, d_off: int, addr: int, inner: list, load: bool) -> None:
        shape, dstr = pad3(inner, 0)
        _, sstr = pad3(inner, 1)
        resident = self.resident.get(name)
        if resident is not None:  # an on-chip intermediate (-fusion=2): the vector engine copies within SRAM
            region = resident.addr + d_off * self.isz
            src, s_st, dst, d_st = (region, dstr, addr, sstr) if load else (addr, sstr, region, dstr)
            self.emit(isa.VecUnary(shape, dst, d_st, src, s_st, self.dtype, isa.Opcode.VCOPY))
            return
        cls = isa.DmaLoad if load else isa.DmaStore
        self.emit(cls(self.asm.tensor_index(name), d_off, addr, self.dtype, shape, dstr, sstr))

    def lerp(self, run: Run, shape: tuple[int, int, int], dst: tuple[int, tuple], lo: tuple[int, tuple],
             hi: tuple[int, tuple], tmp: int) -> None:
        """``dst = lo * w0 + hi * w1`` over ``shape``: float32 products rounded once, then one add
        (TVM's ``A * (1 - t) + B * t``)."""
        self.emit(isa.VecScale(shape, *dst, *lo, self.dtype, run.w0, 0.0))
        if run.w1 == 0.0:
            return
        dense = (shape[1] * shape[2], shape[2], 1)
        self.emit(isa.VecScale(shape, tmp, dense, *hi, self.dtype, run.w1, 0.0))
        self.emit(isa.VecBinary(shape, *dst, *dst, tmp, dense, self.dtype, isa.Opcode.VADD))


def emit_resize(asm: ProgramBuilder, spec: ResizeSpec, tile: ResizeTile, layer: int,
                resident: Mapping[str, Resident]) -> None:
    """Every band of ``spec``: load its source rows, the W pass into ``mid``, the H pass into the output band,
    store it (``src`` and ``out`` rotate through the pipeline's versions, ``mid`` and ``tmp`` have one)."""
    if spec.epilogue:  # the scheduler fuses nothing into a directly emitted kind (scheduler._fused_into)
        raise ValueError(f"{spec.name}: a resize takes no epilogue steps ({len(spec.epilogue)} given)")
    em = _Bands(asm, spec, layer, resident)
    sizes, isz = buffers(spec, tile), em.isz
    versions = tile.stages if kind_of(spec).pipelining(spec, tile).pipelined else 1
    src = [asm.alloc(sizes.src * isz, "resize_src") for _ in range(versions)]
    mid = asm.alloc(sizes.mid * isz, "resize_mid")
    out = [asm.alloc(sizes.out * isz, "resize_out") for _ in range(versions)]
    tmp = asm.alloc(sizes.tmp * isz, "resize_tmp")
    w, wo = spec.data.shape[3], len(spec.cols)
    cols = runs(spec.cols, 0, wo)
    for k, (b, c0, ch, o0, rows) in enumerate(bands(spec, tile)):
        r0, r1 = band_source(spec, o0, o0 + rows)
        nr = r1 - r0
        s, o = src[k % versions], out[k % versions]
        em.copy(spec.data, (b, c0, r0, 0), (1, ch, nr, w), s, (0, nr * w, w, 1), load=True)
        for r in cols:  # along W on the band's source rows
            em.lerp(r, (ch, nr, r.n), (mid + r.o0 * isz, (nr * wo, wo, r.step)),
                    (s + r.lo0 * isz, (nr * w, w, r.src_step)), (s + r.hi0 * isz, (nr * w, w, r.src_step)), tmp)
        for r in runs(spec.rows, o0, o0 + rows):  # then along H, whole rows of ``mid``
            em.lerp(r, (ch, r.n, wo), (o + (r.o0 - o0) * wo * isz, (rows * wo, r.step * wo, 1)),
                    (mid + (r.lo0 - r0) * wo * isz, (nr * wo, r.src_step * wo, 1)),
                    (mid + (r.hi0 - r0) * wo * isz, (nr * wo, r.src_step * wo, 1)), tmp)
        em.copy(spec.out, (b, c0, o0, 0), (1, ch, rows, wo), o, (0, rows * wo, wo, 1), load=False)
