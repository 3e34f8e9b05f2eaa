"""Symbolic sizes that must agree but that TVM cannot prove equal: checked at run time instead.

An FPN adds a nearest-upsampled map to a lateral one: with symbolic ``H`` the lateral map has
``(H - 1) // 4 + 1`` rows and the upsampled one ``2 * ((H - 1) // 8 + 1)``. The two agree for every
``H`` the model accepts (ONNX requires it of an ``Add``), but not for every integer, so TVM 0.27's
importer cannot prove them equal, gives the sum an unknown shape, and the next operator that needs a
rank (``Resize``) fails. :class:`RelatingImporter` is TVM's ONNX importer that, before converting an
operator whose inputs must agree in a dimension (a broadcasting elementwise operator: two symbolic sizes,
a static one may be a broadcast 1; ``Concat``: every axis but the joined one), reshapes each later input to
the first input's sizes where they are not provably equal: the relation is then known to every later
operator (the sum has the lateral map's shape). A reshape rather than ``R.match_cast``: TVM's
``MergeCompositeFunctions`` cannot take a ``match_cast`` binding inside a partition, and the NPU reads a
reshape as a view (no data moves). It is checked where the sizes become numbers: binding them to a JIT
partition (a size at which the two disagree, ``H = 36``, is a one-line ``ValueError``, as onnxruntime refuses
it), or the VM's reshape on the host. At the sizes of a call both sides are the same number, the reshape an
identity, so the partition compiled for a shape runs the program a static build of that shape makes.

Resize output sizes TVM writes through float32 (``int64(2.0f * float32(n))``) are rewritten to the integer
``2 * n`` (equal below 2**24), so that they can be compared with integer sizes at all.
"""

from __future__ import annotations

import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter
from tvm.sym.analyzer import Analyzer

from tvm_npu.models.registry import opset as model_opset

#: ONNX operators whose inputs broadcast against each other (numpy rules).
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "PRelu", "Where",
                           "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor",
                           "BitShift", "Mod"})


def _agreeing(ty: relax.TensorType, like: relax.TensorType, skip: int | None,
              analyzer: Analyzer) -> list[tvm.tirx.Expr] | None:
    """``ty``'s shape with each dimension that must equal ``like``'s (aligned at the right, as numpy broadcasts;
    ``skip`` a concatenated axis of equal-rank inputs) but is not provably equal replaced by ``like``'s; None
    when none is."""
    dims, ref = list(ty.shape.values), list(like.shape.values)
    changed = False
    for i in range(1, min(len(dims), len(ref)) + 1):
        a, b = dims[-i], ref[-i]
        if len(dims) - i == skip or analyzer.can_prove_equal(a, b):
            continue
        if isinstance(a, tvm.tirx.IntImm) or isinstance(b, tvm.tirx.IntImm):
            continue  # a static size may be a broadcast 1; only two expressions of the symbolic sizes are related
        dims[-i], changed = b, True
    return dims if changed else None


def _shaped(expr: object) -> relax.TensorType | None:
    ty = getattr(expr, "ty", None)
    ok = isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr)
    return ty if ok else None


def _times(d: tvm.tirx.Expr) -> tvm.tirx.Expr:
    """``d`` = ``int64(s * float32(e))`` with an integer ``s`` as ``s * e`` (else ``d``): the size of a resize by an
    integer scale, equal for every ``e < 2**24`` (a float32 holds it and ``s * e`` exactly)."""
    if not (isinstance(d, tvm.tirx.Cast) and isinstance(d.value, tvm.tirx.Mul)):
        return d
    a, b = d.value.a, d.value.b
    scale, cast = (a, b) if isinstance(a, tvm.tirx.FloatImm) else (b, a)
    if not (isinstance(scale, tvm.tirx.FloatImm) and isinstance(cast, tvm.tirx.Cast)
            and float(scale.value).is_integer() and str(cast.ty) == "float32"):
        return d
    return tvm.tirx.IntImm(str(d.ty), int(scale.value)) * cast.value.astype(str(d.ty))


def _integer_sizes(bb: relax.BlockBuilder, call: relax.Expr) -> relax.Expr:
    """A ``resize2d`` whose output sizes TVM wrote through float32 (``int64(2.0f * float32(H))``) with them as
    integer expressions (``2 * H``), so that they can be related to other sizes (the same numbers)."""
    if not (isinstance(call, relax.Call) and call.op == tvm.ir.Op.get("relax.image.resize2d")
            and isinstance(call.args[1], relax.ShapeExpr)):
        return call
    sizes = [_times(d) for d in call.args[1].values]
    if all(a.same_as(b) for a, b in zip(sizes, call.args[1].values, strict=True)):
        return call
    return bb.normalize(relax.Call(call.op, [call.args[0], relax.ShapeExpr(sizes), *call.args[2:]], call.attrs))


class RelatingImporter(ONNXGraphImporter):
    """TVM's ONNX importer, casting inputs that must agree in a dimension it cannot prove equal (module doc)."""

    def _convert_operator(self, op_name: str, inputs: list, attrs: dict, opset: int) -> relax.Expr:
        if op_name in _BROADCASTING or op_name == "Concat":
            inputs = self._related(op_name, inputs, attrs)
        out = super()._convert_operator(op_name, inputs, attrs, opset)
        return _integer_sizes(self.bb, out) if op_name == "Resize" else out

    def _related(self, op_name: str, inputs: list, attrs: dict) -> list:
        """``inputs`` with the later ones cast to the first shaped input's sizes where they must agree."""
        shaped = [i for i, x in enumerate(inputs) if x is not None and _shaped(x) is not None]
        if len(shaped) < 2:
            return inputs
        first = _shaped(inputs[shaped[0]])
        skip = None
        if op_name == "Concat":
            skip = int(attrs.get("axis", 0)) % first.ndim
        analyzer = Analyzer()
        out = type(inputs)(inputs)  # TVM's onnx_input: a list reading None past its end
        for i in shaped[1:]:
            ty = _shaped(out[i])
            if op_name == "Concat" and ty.ndim != first.ndim:
                continue
            dims = _agreeing(ty, first, skip, analyzer)
            if dims is not None:
                out[i] = self.bb.emit(relax.op.reshape(out[i], dims))
        return out


def import_related(model: onnx.ModelProto) -> tvm.IRModule:
    """``model`` in Relax (constants kept in the module, as ``from_onnx(keep_params_in_input=False)``), inputs that
    must agree in a symbolic dimension cast to agree (:class:`RelatingImporter`)."""
    if model.ir_version < 3:
        raise ValueError(f"ONNX IR version {model.ir_version} is not supported (TVM's importer takes 3 and later)")
    importer = RelatingImporter(None, "float32", keep_params_in_input=False, sanitize=True)
    return importer.from_onnx(model.graph, model_opset(model))
