"""``tvm_npu.run``: call a built model's ``main`` on numpy arrays, with one-line errors for bad inputs.

The Relax VM checks each input against its annotation (rank, dtype, static sizes, a symbolic size shared
by several dimensions) and fails with TVM's ``Check failed: ... match_cast error``. Its message names the
parameter and its annotation (``ErrorContext(fn=main, loc=param[0], param=x, annotation=R.Tensor(...))``);
:func:`run` reads those and raises a ``ValueError`` naming the input, the dimension, what is accepted and
what was given. Before the VM runs, the number of inputs and, for a model built for every shape with a profile,
each symbolic size against the profile's bounds are checked (:func:`tvm_npu.runtime.jit.check_bounds`: the
message an NPU partition would give, before any host work). Errors from inside the model (``jit="off"``) pass
as they are.

Calling ``relax.VirtualMachine(executable, dev)["main"]`` directly is not wrapped (the VM is TVM's class: a
subclass or a patch would change it for every TVM user in the process); it gives TVM's ``Check failed`` for a
bad rank, dtype or static size, and the same one-line ``ValueError`` as :func:`run` for a size outside a
profile's bounds or a shape refused by ``jit="off"`` (those checks run inside the NPU partitions).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

_PARAM = re.compile(r"ErrorContext\(fn=main, loc=param\[(\d+)\], param=([^,]+), "
                    r"annotation=R\.Tensor\(\(([^)]*)\), dtype=\"(\w+)\"\)\)")


def _declared(text: str) -> list[int | str]:
    return [int(d) if d.strip().isdigit() else d.strip().strip('"') for d in text.split(",") if d.strip()]


def input_error(message: str, arrays: Sequence[np.ndarray]) -> ValueError | None:
    """The one-line error for the VM's check of an input that failed (None: not an input check)."""
    m = _PARAM.search(message)
    if m is None or int(m[1]) >= len(arrays):
        return None
    index, name, dims, dtype = int(m[1]), m[2], _declared(m[3]), m[4]
    a = arrays[index]
    head = f"input {name!r} of shape ({', '.join(map(str, dims))}) {dtype}: given {tuple(a.shape)} {a.dtype}"
    if a.ndim != len(dims):
        return ValueError(f"{head}: rank {a.ndim}, the input has rank {len(dims)}")
    if str(a.dtype) != dtype:
        return ValueError(f"{head}: dtype {a.dtype}; accepted: {dtype}")
    for i, (d, n) in enumerate(zip(dims, a.shape, strict=True)):
        if isinstance(d, int) and d != n:
            return ValueError(f"{head}: dimension {i} is {n}; it is static: {d}")
    for i, (d, n) in enumerate(zip(dims, a.shape, strict=True)):
        if isinstance(d, str) and any(e == d and k != n for e, k in zip(dims, a.shape, strict=True)):
            return ValueError(f"{head}: dimension {i} ({d!r}) is {n}, but {d!r} names one size in every place")
    return ValueError(f"{head}: {message.strip().splitlines()[-1][:200]}")


def run(executable: Any, *inputs: np.ndarray, device: Any = None) -> np.ndarray | list[np.ndarray]:
    """``executable``'s ``main`` (a ``relax.VMExecutable`` or a loaded library) on ``inputs``: the result as numpy
    (a list for a tuple). A bad input is a ``ValueError`` naming it (:func:`input_error`), not TVM's check."""
    import tvm
    from tvm import relax

    from tvm_npu.runtime.jit import check_bounds, programs_of

    arrays = [np.asarray(a) for a in inputs]
    vm = relax.VirtualMachine(executable, device or tvm.cpu())
    names = [vm._get_function_param_name("main", i) for i in range(vm._get_function_arity("main"))]
    if len(arrays) != len(names):
        raise ValueError(f"the model takes {len(names)} input(s) ({', '.join(map(repr, names))}); given {len(arrays)}")
    check_bounds(programs_of(executable), dict(zip(names, arrays, strict=True)))
    try:
        out = vm["main"](*(tvm.runtime.tensor(a) for a in arrays))
    except (RuntimeError, ValueError, TypeError) as e:
        error = input_error(str(e), arrays)
        if error is None:
            raise
        raise error from None
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]
