"""``tvm_npu.run``: call a built model's ``main`` on numpy arrays, with one-line errors for bad inputs.

The Relax VM checks each input against its annotation (rank, dtype, static sizes, a symbolic size shared
by several dimensions) and fails with TVM's ``Check failed: ... match_cast error``. Its message names the
parameter and its annotation (``ErrorContext(fn=main, loc=param[0], param=x, annotation=R.Tensor(...))``);
:func:`run` reads those and raises a ``ValueError`` naming the input, the dimension, what is accepted and
what was given. Errors from inside the model (an NPU partition's shape profile, ``jit="off"``) pass as they are.
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

    arrays = [np.asarray(a) for a in inputs]
    vm = relax.VirtualMachine(executable, device or tvm.cpu())
    try:
        out = vm["main"](*(tvm.runtime.tensor(a) for a in arrays))
    except (RuntimeError, ValueError, TypeError) as e:
        error = input_error(str(e), arrays)
        if error is None:
            raise
        raise error from None
    return out.numpy() if hasattr(out, "numpy") else [o.numpy() for o in out]
