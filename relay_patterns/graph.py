"""The partition stage's hand-over: a ``Codegen="npu"`` Relax function as a :class:`PartitionGraph`.

The function's bindings are calls to composite functions, one per matched pattern;
each becomes an operator spec (``extract.py``), named in program order. Tensors get
DRAM names: ``in{i}_<param>`` for the function's parameters, ``t{k}_<var>`` for what
operator ``k`` computes, ``k{k}_{j}`` for the constants operator ``k`` names.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
from tvm import relax

from tvm_npu.ops import TensorRef
from tvm_npu.plan import GraphOp, PartitionGraph

from .extract import extract_op, tensor_type


class PartitionError(ValueError):
    """A function handed to the NPU is not a chain of ``npu.*`` composite calls (reported with its symbol)."""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def partition_graph(func: relax.Function, symbol: str) -> PartitionGraph:
    """The operators, DRAM inputs/outputs and constants of one NPU partition function."""
    names: dict[relax.Var, str] = {}
    inputs = []
    for i, p in enumerate(func.params):
        names[p] = f"in{i}_{_safe(p.name)}"
        shape, dtype = tensor_type(p)
        inputs.append(TensorRef(names[p], shape, dtype))
    local: dict[relax.Var, relax.Function] = {}
    ops: list[GraphOp] = []
    constants: dict[str, np.ndarray] = {}
    body = func.body
    for block in body.blocks:
        for b in block.bindings:
            value = b.value
            if isinstance(value, relax.Function):
                local[b.var] = value
                continue
            if not isinstance(value, relax.Call):
                raise PartitionError(f"{symbol}: unexpected binding in an NPU partition: {value}")
            callee = local.get(value.op) if isinstance(value.op, relax.Var) else value.op
            if not isinstance(callee, relax.Function) or "Composite" not in (callee.attrs or {}):
                raise PartitionError(f"{symbol}: binding {b.var.name} is not a call to an npu.* composite function")
            out = f"t{len(ops)}_{_safe(b.var.name)}"
            names[b.var] = out
            arg_names = []
            for a in value.args:
                if not isinstance(a, relax.Var) or a not in names:
                    raise PartitionError(f"{symbol}: argument {a} of {b.var.name} is not a tensor of the partition")
                arg_names.append(names[a])
            extracted = extract_op(callee, arg_names, out, f"k{len(ops)}")
            constants.update(extracted.constants)
            ops.append(GraphOp(replace(extracted.spec, name=f"{extracted.spec.name}_{len(ops)}"),
                               (str(callee.attrs["Composite"]),)))
    ret = body.body
    fields = ret.fields if isinstance(ret, relax.Tuple) else [ret]
    outputs = []
    for f in fields:
        if not isinstance(f, relax.Var) or f not in names:
            raise PartitionError(f"{symbol}: partition result {f} is not a tensor computed in the partition")
        outputs.append(names[f])
    return PartitionGraph(symbol, tuple(inputs), tuple(outputs), tuple(ops), constants)
