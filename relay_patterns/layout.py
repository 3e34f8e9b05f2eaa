"""Activation layout planning (before partitioning).

Each convolution prefers the layout in which the cost model predicts it runs
fastest on the NPU (NCHW or NHWC; pooling and elementwise ops follow their
producer). ``-layout-pref=NCHW|NHWC`` forces one layout; ``auto`` weighs the
preferences by the cycles at stake and converts the model when the other layout
wins overall. The conversion is TVM's own ``ConvertLayout``, which inserts a
transform only where two layouts meet; a transform next to a convolution or a
pooling window is then folded into that operator (its input DMA reads, or its
output DMA writes, the other layout through strides), so it never runs on the host.
"""

from __future__ import annotations

import itertools
import math

import tvm
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.relax.dpl import is_op, rewrite_call, wildcard
from tvm_npu.tir_schedules import tile_search
from tvm_npu.tir_schedules.kind import kind_of

from tvm_npu.config import CompilerOptions, DType, HardwareConfig, Layout, NpuTarget
from tvm_npu.core.ops import Conv2dSpec, TensorRef, spec_key
from tvm_npu.core.tiles import ConvTile, Order

from .lifted import with_lifted_constants

_TO = {"NCHW": "NHWC", "NHWC": "NCHW"}
_PERM = {("NCHW", "NHWC"): [0, 2, 3, 1], ("NHWC", "NCHW"): [0, 3, 1, 2]}
_POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d")


def _shape(expr: relax.Expr) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in expr.ty.shape)
    except (AttributeError, TypeError, ValueError):
        return None


def _relayout(shape: tuple[int, ...], src: str, dst: str) -> tuple[int, ...]:
    return tuple(shape[src.index(a)] for a in dst)


#: Row tiles the reference tile leaves at least (where the map has the rows): the pipeline then
#: overlaps loads and stores with compute, as the planner's tiles do.
PIPELINED_TILES = 4


def _reference_tile(spec: Conv2dSpec, target: NpuTarget) -> ConvTile | None:
    """The tile a layout is judged with: the largest that fits the SRAM, preferring whole rows, then the
    whole reduction, then all output channels, then the most rows (None: nothing fits).

    The footprint of a tile does not depend on the layout, so both layouts are judged on the same
    tile and the estimates differ only by what the layout changes: DMA runs, bursts and descriptors,
    and how much of them the pipeline hides. Chosen without estimating (the planner's search costs
    ~0.2 s per operator and layout; the vote only needs the difference the layout makes)."""
    hw, opts = target.hw, target.options
    kind = kind_of(spec)
    axes = kind.axes(spec, hw, opts)
    rows = spec.out.dim("H")
    axes["toh"] = [t for t in axes["toh"] if -(-rows // t) >= min(rows, PIPELINED_TILES)] or axes["toh"][:1]
    for engine in axes["engine"]:
        for tow, tic, tg, toc, toh in itertools.product(*(axes[a][::-1] for a in ("tow", "tic", "tg", "toc", "toh"))):
            tile = ConvTile(toc=toc, toh=toh, tow=tow, tic=tic, order=Order.B_STATIONARY,
                            stages=opts.pipeline_stages, tg=tg, engine=engine)
            if kind.admits(spec, tile) and kind.footprint(spec, tile, hw) <= hw.max_sram_bytes:
                return tile
    return None


def _conv_cycles(call: relax.Call, layout: str, target: NpuTarget) -> float | None:
    """Estimated NPU cycles of a conv2d computed in ``layout`` on its reference tile (None: cannot be
    estimated)."""
    attrs = call.attrs
    src = str(attrs.data_layout)
    dshape, oshape, wshape = _shape(call.args[0]), _shape(call), _shape(call.args[1])
    if src not in _TO or None in (dshape, oshape, wshape) or str(attrs.out_layout or src) != src:
        return None
    try:
        dt, out_dt = DType.from_str(str(call.args[0].ty.dtype)), DType.from_str(str(call.ty.dtype))
    except ValueError:
        return None
    klay = str(attrs.kernel_layout)
    w = tuple(wshape[klay.index(a)] for a in "OIHW")
    pad = [int(p) for p in attrs.padding]
    spec = Conv2dSpec(
        "conv2d",
        TensorRef("y", _relayout(oshape, src, layout), out_dt, layout),
        data=TensorRef("x", _relayout(dshape, src, layout), dt, layout),
        weight=TensorRef("w", w, dt, "OIHW"),
        strides=tuple(int(s) for s in attrs.strides),
        dilation=tuple(int(d) for d in attrs.dilation),
        padding=(pad[0], pad[1], pad[2], pad[3]) if len(pad) == 4 else (pad[0], pad[1], pad[0], pad[1]),
        groups=int(attrs.groups),
    )
    key = (spec_key(spec), target.hw, target.options)
    if key not in _CYCLES:
        tile = _reference_tile(spec, target)
        _CYCLES[key] = None if tile is None else tile_search.estimate(spec, tile, target.hw).cycles
    return _CYCLES[key]


#: Memo of :func:`_conv_cycles` per operator signature and target (repeated blocks are estimated once).
_CYCLES: dict[tuple[str, HardwareConfig, CompilerOptions], float | None] = {}


def preferred_layout(mod: tvm.IRModule, target: NpuTarget) -> tuple[str, float] | None:
    """The layout the model's convolutions prefer and the NPU cycles it saves, by the cost
    model (None: keep the model's layout): one estimate per convolution signature and layout, on
    the layout-independent :func:`_reference_tile`, summed over the convolutions."""
    votes: dict[str, float] = {"NCHW": 0.0, "NHWC": 0.0}
    current: set[str] = set()
    for _, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue

        def visit(e: relax.Expr) -> None:
            if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.conv2d":
                src = str(e.attrs.data_layout)
                costs = {lay: _conv_cycles(e, lay, target) for lay in votes}
                if src in votes and None not in costs.values():
                    current.add(src)
                    best = min(costs, key=costs.get)
                    votes[best] += costs[_TO[best]] - costs[best]  # cycles saved by the preference

        relax.analysis.post_order_visit(func.body, visit)
    if len(current) != 1:
        return None
    (src,) = current
    other = _TO[src]
    return (other, votes[other] - votes[src]) if votes[other] > votes[src] else None


def _host_transform_cycles(mod: tvm.IRModule, target: NpuTarget) -> float:
    """What the layout transforms left in ``mod`` after folding cost: each is charged a DRAM
    round trip of its tensor (the host transposes it in memory, as a separate NPU op would)."""
    total = 0.0

    def visit(e: relax.Expr) -> None:
        nonlocal total
        if is_layout_transform(e):
            shape = _shape(e)
            if shape is not None:
                total += 2 * math.prod(shape) * DType.from_str(str(e.ty.dtype)).itemsize
    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return total / target.hw.dram_bytes_per_cycle


def _uses(func: relax.Function) -> dict[relax.Expr, int]:
    """How many times each bound value's variable is read in ``func`` (by the bound expression)."""
    reads: dict[relax.Var, int] = {}
    bound: dict[relax.Var, relax.Expr] = {}

    @relax.expr_functor.visitor
    class _Count(relax.PyExprVisitor):
        def visit_var_binding_(self, binding: relax.VarBinding) -> None:
            bound[binding.var] = binding.value
            self.visit_expr(binding.value)

        def visit_var_(self, var: relax.Var) -> None:
            reads[var] = reads.get(var, 0) + 1

        def visit_dataflow_var_(self, var: relax.DataflowVar) -> None:
            reads[var] = reads.get(var, 0) + 1

    _Count().visit_expr(func)
    return {value: reads.get(var, 0) for var, value in bound.items()}


def _fold_transforms(func: relax.Function) -> relax.Function:
    """Absorb NCHW<->NHWC ``permute_dims`` next to conv2d / pooling into their layout attributes
    (and turn a permutation that moves only unit dims into a reshape)."""
    x = wildcard()
    perm = is_op("relax.permute_dims")(x)
    conv_in = is_op("relax.nn.conv2d")(perm, wildcard())

    def into_input(orig: relax.Call, m: dict) -> relax.Expr:
        attrs, axes = orig.attrs, [int(a) for a in m[perm].attrs.axes or []]
        dst = str(attrs.data_layout)
        src = _TO.get(dst)
        if src is None or _PERM.get((src, dst)) != axes or int(attrs.groups) != 1:
            return orig
        return relax.op.nn.conv2d(m[x], orig.args[1], strides=attrs.strides, padding=attrs.padding,
                                  dilation=attrs.dilation, groups=int(attrs.groups), data_layout=src,
                                  kernel_layout=str(attrs.kernel_layout), out_layout=str(attrs.out_layout or dst),
                                  out_dtype=str(attrs.out_dtype) if attrs.out_dtype else None)

    func = rewrite_call(conv_in, into_input, func)
    # a permutation that only moves unit dims keeps the element order: it is a reshape
    any_perm = is_op("relax.permute_dims")(wildcard())

    def unit_moves(orig: relax.Call, _m: dict) -> relax.Expr:
        shape = _shape(orig.args[0])
        axes = [int(a) for a in orig.attrs.axes or []]
        if shape is None or not axes:
            return orig
        moved = [a for a in axes if shape[a] != 1]
        return relax.op.reshape(orig.args[0], _shape(orig)) if moved == sorted(moved) else orig

    func = rewrite_call(any_perm, unit_moves, func)
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    conv_out = is_op("relax.permute_dims")(conv)
    uses = _uses(func)

    def into_output(orig: relax.Call, m: dict) -> relax.Expr:
        c = m[conv]
        attrs, axes = c.attrs, [int(a) for a in orig.attrs.axes or []]
        src = str(attrs.out_layout or attrs.data_layout)
        dst = _TO.get(src)
        if dst is None or _PERM.get((src, dst)) != axes or int(attrs.groups) != 1 or uses.get(c, 1) > 1:
            return orig  # (read in its own layout too: folding would compute it twice, once per layout)
        return relax.op.nn.conv2d(c.args[0], c.args[1], strides=attrs.strides, padding=attrs.padding,
                                  dilation=attrs.dilation, groups=int(attrs.groups),
                                  data_layout=str(attrs.data_layout), kernel_layout=str(attrs.kernel_layout),
                                  out_layout=dst, out_dtype=str(attrs.out_dtype) if attrs.out_dtype else None)

    func = rewrite_call(conv_out, into_output, func)
    for name in _POOLS:
        pool = is_op(name)(wildcard())
        pool_out = is_op("relax.permute_dims")(pool)
        uses = _uses(func)

        def pool_output(orig: relax.Call, m: dict, pool: object = pool, uses: dict = uses) -> relax.Expr:
            p = m[pool]
            src = str(p.attrs.out_layout or p.attrs.layout)
            dst = _TO.get(src)
            if dst is None or _PERM.get((src, dst)) != [int(a) for a in orig.attrs.axes or []] or uses.get(p, 1) > 1:
                return orig  # (a stem max pool read in both layouts: folding would compute it twice)
            return _rebuild_pool(p, out_layout=dst)

        func = rewrite_call(pool_out, pool_output, func)
    return func


def _rebuild_pool(p: relax.Call, out_layout: str) -> relax.Call:
    a = p.attrs
    name = p.op.name
    if name == "relax.nn.adaptive_avg_pool2d":
        return relax.op.nn.adaptive_avg_pool2d(p.args[0], a.output_size, layout=str(a.layout), out_layout=out_layout)
    fn = relax.op.nn.max_pool2d if name == "relax.nn.max_pool2d" else relax.op.nn.avg_pool2d
    extra = {} if name == "relax.nn.max_pool2d" else {"count_include_pad": bool(a.count_include_pad)}
    return fn(p.args[0], a.pool_size, a.strides, a.padding, a.dilation, bool(a.ceil_mode), layout=str(a.layout),
              out_layout=out_layout, **extra)


@relax.transform.function_pass(opt_level=0, name="tvm_npu.FoldLayoutTransforms")
def fold_layout_transforms(func: relax.Function, _mod: tvm.IRModule,
                           _ctx: tvm.transform.PassContext) -> relax.Function:
    """Fold NCHW<->NHWC transforms into the conv2d / pooling next to them."""
    return with_lifted_constants(func, lambda open_func, _lifted: _fold_transforms(open_func))


def _unfold(func: relax.Function) -> relax.Function:
    """conv2d / pooling that change layout, left on the host: compute, then transpose."""
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())

    def conv_back(orig: relax.Call, _m: dict) -> relax.Expr:
        a = orig.attrs
        src, dst = str(a.data_layout), str(a.out_layout or a.data_layout)
        if src == dst or (src, dst) not in _PERM:
            return orig
        same = relax.op.nn.conv2d(orig.args[0], orig.args[1], strides=a.strides, padding=a.padding,
                                  dilation=a.dilation, groups=int(a.groups), data_layout=src,
                                  kernel_layout=str(a.kernel_layout), out_layout=src,
                                  out_dtype=str(a.out_dtype) if a.out_dtype else None)
        return relax.op.permute_dims(same, _PERM[(src, dst)])

    func = rewrite_call(conv, conv_back, func)
    for name in _POOLS:
        pool = is_op(name)(wildcard())

        def pool_back(orig: relax.Call, _m: dict) -> relax.Expr:
            src, dst = str(orig.attrs.layout), str(orig.attrs.out_layout or orig.attrs.layout)
            if src == dst or (src, dst) not in _PERM:
                return orig
            return relax.op.permute_dims(_rebuild_pool(orig, out_layout=src), _PERM[(src, dst)])

        func = rewrite_call(pool, pool_back, func)
    return func


@relax.transform.function_pass(opt_level=0, name="tvm_npu.UnfoldHostLayoutTransforms")
def unfold_host_layouts(func: relax.Function, _mod: tvm.IRModule,
                        _ctx: tvm.transform.PassContext) -> relax.Function:
    """Undo a folded transform on operators the partitioner left on the host: TVM's llvm
    lowering of conv2d / pooling needs the output in the input's layout."""
    if func.attrs and "Codegen" in func.attrs:
        return func
    return with_lifted_constants(func, lambda open_func, _lifted: _unfold(open_func))


def choose_layouts(mod: tvm.IRModule, target: NpuTarget) -> tvm.IRModule:
    """Convert activation layouts by ``-layout-pref``, or for ``auto`` by the cost model's vote;
    the transforms this inserts are folded by :func:`fold_layout_transforms` afterwards.

    ``auto`` converts only when the NPU cycles the vote saves exceed the cost of the
    transforms that folding cannot remove (they would run on the host, e.g. around the
    reshapes of a channel shuffle)."""
    pref = target.options.layout_pref
    if pref != Layout.AUTO:
        return _convert(mod, pref.value)
    if _has_quantized_convs(mod):
        return mod
    vote = preferred_layout(mod, target)
    if vote is None:
        return mod
    layout, saved = vote
    converted = _convert(mod, layout)
    with tvm.transform.PassContext(opt_level=3):
        left = fold_layout_transforms(converted)
    return converted if _host_transform_cycles(left, target) < saved else mod


def _has_quantized_convs(mod: tvm.IRModule) -> bool:
    """Whether ``mod`` has 8- or 16-bit convolutions. ``auto`` keeps such a model in its own layout: TVM's
    ConvertLayout does not convert ``quantize``, ``clip`` or ``nn.pad``, which the integer form of
    a quantized convolution ends or starts with, so converting would leave transposes in the middle
    of every requantisation (correct, on the host, and slower than any layout gain)."""
    found = False

    def visit(e: relax.Expr) -> None:
        nonlocal found
        if (isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.nn.conv2d"
                and str(e.args[0].ty.dtype) in ("int8", "uint8", "int16", "uint16")):
            found = True

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return found


def _convert(mod: tvm.IRModule, layout: str) -> tvm.IRModule:
    # pooling and elementwise ops follow their producer (ConvertLayout takes no desired layout for them)
    desired = {"relax.nn.conv2d": [layout, "OIHW"],
               # a transposed conv left on the host stays NCHW: TVM 0.27 cannot legalise it in NHWC
               "relax.nn.conv2d_transpose": ["NCHW", "IOHW"],
               # a linear resize left for the resize operator (resize.py) runs in NCHW only
               "relax.image.resize2d": ["NCHW"]}
    with tvm.transform.PassContext(opt_level=3):
        return relax.transform.ConvertLayout(desired)(mod)


def is_layout_transform(e: relax.Expr) -> bool:
    """An NCHW<->NHWC transform of an activation (a ``layout_transform``, or a ``permute_dims``
    by one of the two permutations; other permutes, e.g. a channel shuffle, are computation)."""
    if not (isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)) or isinstance(e.args[0], GenericConst):
        return False
    if e.op.name == "relax.layout_transform":
        return True
    if e.op.name != "relax.permute_dims" or e.attrs.axes is None:
        return False
    return [int(a) for a in e.attrs.axes] in _PERM.values()


def count_transforms(mod: tvm.IRModule) -> int:
    """Layout transforms of activations in ``mod`` (see :func:`is_layout_transform`)."""
    count = 0

    def visit(e: relax.Expr) -> None:
        nonlocal count
        count += is_layout_transform(e)

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return count
