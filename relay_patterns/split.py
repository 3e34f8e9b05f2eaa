"""ONNX ``Split`` (Relax ``split`` and ``TupleGetItem``) as strided slices, which are views on the NPU.

Every output of ``split(x, indices_or_sections, axis)`` is the block ``[start_i, end_i)`` of ``x``
along ``axis``: exactly ``strided_slice(x, [axis], [start_i], [end_i])``. The partition graph reads
a static strided slice as a view of its input (``graph.selection``), so the parts move no data:
their readers load the blocks of ``x`` through offsets. The tuple itself has no NPU form (a
partition hands over tensors), hence the rewrite of each ``TupleGetItem`` rather than a pattern for
the tuple. An 8-bit split between equal-scale DQ / Q is a slice of the 8-bit tensor after the QDQ
rewrite (``quantized._SAME_SCALE``), so this runs before it.
"""

from __future__ import annotations

import itertools

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, is_tuple_get_item, rewrite_call, wildcard

from .extract import static_shape


def split_bounds(extent: int, indices_or_sections: object) -> list[tuple[int, int]]:
    """``[start, end)`` of every part of an axis of ``extent`` split as ``relax.split`` does: an integer
    is that many equal parts (the last one shorter when it does not divide), a list the split points."""
    if isinstance(indices_or_sections, int | tvm.tirx.IntImm):
        n = int(indices_or_sections)
        size = -(-extent // n)
        points = [min(size * i, extent) for i in range(1, n)]
    else:
        points = [int(p) for p in indices_or_sections]
    edges = [0, *points, extent]
    return [(min(a, extent), min(max(a, b), extent)) for a, b in itertools.pairwise(edges)]


def _split_to_slices(func: relax.Function) -> relax.Function:
    x = wildcard()
    split = is_op("relax.split")(x)
    root = is_tuple_get_item(split)

    def rewrite(orig: relax.TupleGetItem, m: dict) -> relax.Expr:
        shape = static_shape(m[x])
        if shape is None:
            return orig
        call = m[split]
        axis = int(call.attrs.axis) % len(shape)
        start, end = split_bounds(shape[axis], call.attrs.indices_or_sections)[int(orig.index)]
        return relax.op.strided_slice(m[x], axes=[axis], begin=[start], end=[end], strides=[1])

    return rewrite_call(root, rewrite, func)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.SplitToSlices")
def split_to_slices(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Each output of a static ``split`` -> the ``strided_slice`` it is (module docstring)."""
    return _split_to_slices(func)
