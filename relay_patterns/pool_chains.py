"""Sibling max pools of one map as a chain (SPP -> SPPF): a large window from a smaller one's result.

A YOLOX / YOLOv5 SPP block pools one map ``x`` three times, 5 x 5, 9 x 9 and 13 x 13, all stride 1 with
'same' padding, and concatenates the results. With padding that never wins a max, a window of ``k`` is
the max over a window of ``k - j + 1`` of the windows of ``j`` around it (the union of those windows is
the larger one, clipped at the borders alike), so

    max_pool(x, k) == max_pool(max_pool(x, j), k - j + 1)        (stride 1, odd k > j, 'same' padding)

exactly, in any dtype. Each pool then reads its smaller sibling's result instead of ``x`` with a window
of 5: the 13 x 13 pool's lane work drops from 13 + 13 to 5 + 5 per output (separable pools,
``tir_schedules/pool.py``), which is what SPPF, the rewritten block, does by construction. Only a pool
with an earlier sibling of a smaller window on the same map is rewritten; a lone large pool stays (one
pass over ``x`` beats several).
"""

from __future__ import annotations

import tvm
from tvm import relax

_POOL = "relax.nn.max_pool2d"


def _ints(values: object) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _same_window(call: relax.Call) -> tuple[int, int] | None:
    """(kh, kw) of a stride-1, undilated max pool with 'same' padding and odd windows, else None."""
    if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op) or call.op.name != _POOL:
        return None
    a = call.attrs
    kh, kw = _ints(a.pool_size)
    pads = _ints(a.padding)
    pads = pads * 2 if len(pads) == 2 else pads
    if _ints(a.strides) != (1, 1) or _ints(a.dilation) != (1, 1) or a.ceil_mode or kh % 2 == 0 or kw % 2 == 0:
        return None
    if pads != ((kh - 1) // 2, (kw - 1) // 2, (kh - 1) // 2, (kw - 1) // 2):
        return None
    return kh, kw


def _plan(func: relax.Function) -> dict[relax.Var, tuple[relax.Var, int, int]]:
    """For each pool var to rewrite: (the sibling var it reads instead, new kh, new kw)."""
    seen: dict[tuple[relax.Expr, str], list[tuple[relax.Var, int, int]]] = {}
    plan: dict[relax.Var, tuple[relax.Var, int, int]] = {}
    body = func.body
    for block in body.blocks if isinstance(body, relax.SeqExpr) else ():
        for binding in block.bindings:
            window = _same_window(binding.value) if isinstance(binding, relax.VarBinding) else None
            if window is None:
                continue
            key = (binding.value.args[0], str(binding.value.attrs.layout))
            kh, kw = window
            smaller = [s for s in seen.get(key, ()) if s[1] < kh and s[2] < kw]
            if smaller:
                var, jh, jw = max(smaller, key=lambda s: (s[1], s[2]))
                plan[binding.var] = (var, kh - jh + 1, kw - jw + 1)
            seen.setdefault(key, []).append((binding.var, kh, kw))
    return plan


@relax.transform.function_pass(opt_level=0, name="tvm_npu.PoolChains")
def pool_chains(func: relax.Function, _mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
    """Max pools of one map with smaller earlier siblings -> pools of those siblings' results (module
    docstring)."""
    plan = _plan(func)
    if not plan:
        return func

    @relax.expr_functor.mutator
    class _Chain(relax.PyExprMutator):
        def visit_var_binding_(self, binding: relax.VarBinding) -> None:
            if binding.var not in plan:
                super().visit_var_binding_(binding)
                return
            src, kh, kw = plan[binding.var]
            a = binding.value.attrs
            pool = relax.op.nn.max_pool2d(self.visit_expr(src), pool_size=(kh, kw), strides=(1, 1),
                                          padding=((kh - 1) // 2, (kw - 1) // 2, (kh - 1) // 2, (kw - 1) // 2),
                                          layout=str(a.layout), out_layout=str(a.out_layout or a.layout))
            # the same var (it may be a dataflow block's output): only its value changes
            self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(pool)))

    return _Chain().visit_expr(func)
