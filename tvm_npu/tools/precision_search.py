"""Which activations to keep in 8 bits, which to quantize to 16 bits and which to leave in fp16: the fewest
NPU cycles whose output meets an SQNR budget.

The search only; onnxruntime's quantizer does the mechanics (the ``quantize`` callable, which
:func:`tvm_npu.tools.quantize.quantize_model` binds to its settings and calibration samples). The unit
is an activation tensor, with three precisions:

* int8 (the start);
* int16: onnxruntime's ``TensorQuantOverrides``: its producer writes and its consumers read 16 bits, and
  a consumer with a 16-bit input runs the tensor engine at the target's 16-bit rate;
* fp16: its producer left in float (``nodes_to_exclude``: float weights) and its QDQ pair removed
  (:mod:`tvm_npu.tools.fp16_tensors`): compiled with ``-precision=fp16`` the producer and the readers
  compute in fp16 on the NPU (at the int8 MAC rate on this machine, with 2-byte weights and tensors),
  the integer layers around them as before. Measured with casts to float16 in the graph (fp16's storage
  rounding included).

Cycles: :mod:`tvm_npu.tools.layer_cost` (conversion passes at int -> fp16 boundaries included).

1. All-int8 meets the budget: done. The best reachable (every tensor in fp16 where it can be, int16
   otherwise) does not: the error says what is reachable.
2. Each tensor's sensitivity: the output noise it adds in 8 bits when every other tensor has 16 (one
   quantization per tensor), and the noise with it in fp16 instead; per tensor the choice (int16 or fp16)
   that removes more noise per extra cycle.
3. Tensors ranked by noise removed per extra cycle; the additive noise model predicts the shortest
   prefix of the ranking that meets the budget, and a bisection over prefix lengths, each measured,
   finds the shortest that does. Then each chosen tensor, dearest first, goes back to 8 bits if the
   budget still holds without it (the additive model is only a model).

"Meets" means on the calibration samples *and* on held-out samples when there are any (``quantize_model``
draws them like random calibration, with the next seed): ranges are fitted to the calibration samples, so a
budget met only there slips on other inputs.
SQNR is over every graph output together (float64).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from tvm_npu.config import HardwareConfig, parse_target
from tvm_npu.report.text import columns
from tvm_npu.tools import fp16_tensors
from tvm_npu.tools.layer_cost import Layer, layers, model_cycles
from tvm_npu.tools.sqnr import Energy, OrtModel, Sample, output_energy, quantized_tensors

#: ``quantize(output, int16=tensors, exclude=nodes)`` writes the QDQ model with ``tensors`` in 16 bits and ``nodes``
#: left in float and returns its path (:func:`tvm_npu.tools.quantize.quantize_model`, which, given a list of
#: 16-bit tensors, even empty, names tensors alike in every model).
Quantizer = Callable[..., Path]
#: The target option an fp16 choice needs (without it the float layers run in fp32 on the NPU).
FP16_TARGET = "-precision=fp16"
#: A configuration: (tensors in 16 bits, tensors in fp16).
Config = tuple[frozenset[str], frozenset[str]]


@dataclass(frozen=True)
class TensorChoice:
    """One activation tensor: what keeping it in 8 bits costs in error, and 16 bits / fp16 in cycles."""

    tensor: str
    producer: str  # the op writing it ("input" for a graph input)
    alone_8bit_db: float  # output SQNR with only this tensor in 8 bits, every other in 16
    extra_cycles: float  # the model's cycles with this tensor in 16 bits, minus all-int8's
    fp16_db: float  # output SQNR with this tensor in fp16, every other in 16 bits (nan: no fp16 choice)
    fp16_extra_cycles: float  # the model's cycles with this tensor in fp16, minus all-int8's
    precision: str  # chosen: int8, int16 or fp16


@dataclass(frozen=True)
class PrecisionChoice:
    """The search's result: the model written, its figures and one row per activation tensor."""

    output: Path
    target_db: float
    achieved_db: float  # on the calibration samples
    held_out_db: float  # on the held-out samples (nan: none given)
    int8_db: float
    int16_db: float
    cycles: float  # cost model (datasheet bound) of the chosen model
    int8_cycles: float
    int16_cycles: float
    rows: tuple[TensorChoice, ...]
    quantizations: int  # onnxruntime quantize_static calls the search made
    float_nodes: tuple[str, ...] = ()  # producers left in float (fp16 on the NPU)

    @property
    def target(self) -> str:
        """The NPU target the written model is meant for: fp16 choices need ``-precision=fp16``."""
        return f"npu {FP16_TARGET}" if self.float_nodes else "npu"

    def table(self) -> str:
        """The choices, most noise per cycle first, and the summary."""
        head = ("tensor", "producer", "SQNR if only it is 8-bit", "extra cycles in 16-bit", "SQNR with it fp16",
                "extra cycles in fp16", "precision")
        rows = [(r.tensor, r.producer, f"{r.alone_8bit_db:.1f} dB", f"{r.extra_cycles:,.0f}",
                 "-" if math.isnan(r.fp16_db) else f"{r.fp16_db:.1f} dB",
                 "-" if math.isnan(r.fp16_db) else f"{r.fp16_extra_cycles:,.0f}", r.precision) for r in self.rows]
        count = {p: sum(r.precision == p for r in self.rows) for p in ("int16", "fp16")}
        held = (f"no held-out samples (target {self.target_db:g} dB" if math.isnan(self.held_out_db) else
                f"{self.held_out_db:.1f} dB held out (target {self.target_db:g} dB on both")
        return "\n".join([*columns(head, rows), "",
                          f"output SQNR against fp32: {self.achieved_db:.1f} dB on the calibration samples, {held}; "
                          f"all-int8 {self.int8_db:.1f} dB, all-16-bit {self.int16_db:.1f} dB)",
                          f"{count['int16']} of {len(self.rows)} tensors in 16 bits, {count['fp16']} in fp16; cost-"
                          f"model cycles {self.cycles:,.0f} (all-int8 {self.int8_cycles:,.0f}, all-16-bit "
                          f"{self.int16_cycles:,.0f}); {self.quantizations} quantize_static runs",
                          f"compile with: --target '{self.target}'" + (
                              f" (fp16 layers, left in float: {', '.join(self.float_nodes)})"
                              if self.float_nodes else "")])


class _Trials:
    """Quantizations by configuration, each measured once against the fp32 outputs on both sample sets."""

    def __init__(self, quantize: Quantizer, reference: onnx.ModelProto, samples: Sequence[Sample],
                 held_out: Sequence[Sample], tmp: Path, producers: dict[str, tuple[str, ...]],
                 exclude: Sequence[str]):
        self.quantize, self.samples, self.held_out, self.tmp = quantize, samples, held_out, tmp
        self.producers, self.exclude = producers, list(exclude)
        ref = OrtModel(reference)
        self.expected = [ref.run(s) for s in samples]
        self.expected_held = [ref.run(s) for s in held_out]
        self.seen: dict[Config, tuple[Energy, Energy]] = {}
        self.paths: dict[Config, Path] = {}

    def floats(self, fp16: frozenset[str]) -> list[str]:
        """The producers the fp16 tensors ``fp16`` need left in float (and the user's own)."""
        return sorted({*self.exclude, *(n for t in fp16 for n in self.producers.get(t, ()))})

    def run(self, config: Config, output: Path) -> tuple[Path, onnx.ModelProto]:
        """Quantize ``config`` to ``output``: (its path, the model to measure)."""
        wide, fp16 = config
        path = self.quantize(output, int16=sorted(wide), exclude=self.floats(fp16))
        model = onnx.load(str(path))
        if not fp16:
            return path, model
        onnx.save(fp16_tensors.written(model, fp16), str(path))
        return path, fp16_tensors.measured(model, fp16, self.floats(fp16))

    def energy(self, config: Config, held_out: bool = False) -> Energy:
        if config not in self.seen:
            path, model = self.run(config, self.tmp / f"trial{len(self.seen)}.onnx")
            self.paths[config] = path
            self.seen[config] = (output_energy(self.expected, model, self.samples),
                                 output_energy(self.expected_held, model, self.held_out))
        return self.seen[config][held_out]

    def meets(self, config: Config, budget: float) -> bool:
        return self.energy(config).db >= budget and (not self.held_out or self.energy(config, True).db >= budget)


def _check_budget(target_db: float) -> None:
    if not (isinstance(target_db, int | float) and math.isfinite(target_db) and target_db > 0):
        raise ValueError(f"the target SQNR must be a positive number of dB (e.g. 30), not {target_db!r}")


def _config(ranked: Sequence[tuple[str, str]]) -> Config:
    return (frozenset(t for t, p in ranked if p == "int16"), frozenset(t for t, p in ranked if p == "fp16"))


def _shortest_prefix(trials: _Trials, ranked: Sequence[tuple[str, str]], noise: Sequence[float], floor: float,
                     budget: float) -> int:
    """The fewest leading (tensor, precision) of ``ranked`` that meet ``budget`` (all of them do, none does
    not); the first probe is the additive model's prediction, then a bisection."""
    allowed = 10 ** (-budget / 10) - floor
    predicted = next((k for k in range(len(ranked) + 1) if sum(noise[k:]) <= allowed), len(ranked))
    lo, hi, probe = 0, len(ranked), min(max(predicted, 1), len(ranked) - 1)
    while hi - lo > 1:
        if trials.meets(_config(ranked[:probe]), budget):
            hi = probe
        else:
            lo = probe
        probe = (lo + hi) // 2
    return hi


def _fp16_candidates(q8: onnx.ModelProto, cost: list[Layer], source_nodes: set[str], tensors: list[str],
                     allow: bool) -> dict[str, tuple[str, ...]]:
    """Tensor -> the nodes the fp16 choice leaves in float (none for a graph input), for the tensors that can
    be fp16: not a graph output (its name is its DequantizeLinear's), written by nodes of the source model
    (onnxruntime's ``nodes_to_exclude`` names those) or a graph input. The nodes are its producer and, back
    through unquantized tensors, theirs: a Relu after a Conv writes the quantized tensor, and the Conv's
    weights should be float too."""
    if not allow:
        return {}
    outputs, inputs = {o.name for o in q8.graph.output}, {i.name for i in q8.graph.input}
    producers = {o: x for x in cost for o, _ in x.outputs}
    quantized = set(tensors)
    found: dict[str, tuple[str, ...]] = {}
    for t in tensors:
        chain, todo = [], [t] if t not in inputs else []
        while todo:
            layer = producers.get(todo.pop())
            if layer is None or layer.node not in source_nodes:
                chain = None
                break
            chain.append(layer.node)
            todo += [i for i, _ in layer.inputs if i not in quantized and i not in inputs]
        if chain is not None and t not in outputs:
            found[t] = tuple(chain)
    return found


def _unreachable(target_db: float, best: Energy, held: Energy, int8: Energy, what: str) -> ValueError:
    reach = min(best.db, held.db if held.signal else math.inf)
    return ValueError(f"target SQNR {target_db:g} dB is not reachable: with {what} the output reaches "
                      f"{best.db:.1f} dB against fp32 on the calibration samples"
                      + (f" and {held.db:.1f} dB held out" if held.signal else "") + " "
                      f"(all-int8: {int8.db:.1f} dB); ask for at most {math.floor(reach * 10) / 10} dB, or keep layers "
                      f"in float with exclude")


def _rank(tensors: list[str], noise16: dict[str, float], extra16: dict[str, float], noise_fp: dict[str, float],
          extra_fp: dict[str, float]) -> list[tuple[str, str, float]]:
    """(tensor, its better choice, noise it removes), most noise removed per extra cycle first."""
    def gain(noise: float, extra: float) -> float:
        return noise / extra if extra > 0 else math.inf if noise > 0 else 0.0

    best = []
    for t in tensors:
        options = [("int16", noise16[t], extra16[t])]
        if t in noise_fp:
            options.append(("fp16", noise_fp[t], extra_fp[t]))
        p, noise, extra = max(options, key=lambda o: (gain(o[1], o[2]), o[1]))
        best.append((t, p, noise, gain(noise, extra)))
    best.sort(key=lambda x: -x[3])
    return [(t, p, noise) for t, p, noise, _ in best]


def choose_precisions(quantize: Quantizer, reference: onnx.ModelProto, samples: Sequence[Sample],
                      output: str | Path, target_db: float, *, target: str = "npu",
                      held_out: Sequence[Sample] | None = None, exclude: Sequence[str] = (),
                      fp16: bool = True) -> PrecisionChoice:
    """Write to ``output`` the QDQ model whose activations meet ``target_db`` on ``samples`` and on ``held_out``
    (when given) at the fewest cost-model cycles of ``target`` (module docstring); ``reference`` is the fp32
    model ``quantize`` quantizes, ``exclude`` the nodes the user keeps in float, ``fp16=False`` leaves fp16
    out of the choices."""
    _check_budget(target_db)
    hw = parse_target(target).hw
    with tempfile.TemporaryDirectory(prefix="tvm-npu-precision.") as tmp:
        trials = _Trials(quantize, reference, samples, held_out or (), Path(tmp), {}, exclude)
        none: frozenset[str] = frozenset()
        int8 = trials.energy((none, none))
        q8 = onnx.load(str(trials.paths[(none, none)]))
        tensors, cost = list(quantized_tensors(q8)), layers(q8)
        source_nodes = {n.name or (n.output[0] if n.output else "") for n in reference.graph.node}
        candidates = _fp16_candidates(q8, cost, source_nodes, tensors, fp16)
        trials.producers = candidates
        return _search(trials, hw, cost, tensors, candidates, target_db, int8, Path(output))


def _search(trials: _Trials, hw: HardwareConfig, cost: list[Layer], tensors: list[str],
            candidates: dict[str, tuple[str, ...]],
            target_db: float, int8: Energy, output: Path) -> PrecisionChoice:
    """Steps 1-3 of the module docstring, from the all-int8 trial on."""
    none: frozenset[str] = frozenset()
    everything = frozenset(tensors)
    int16 = trials.energy((everything, none))
    fp_all = frozenset(candidates)
    best, held = (trials.energy((everything - fp_all, fp_all), h) for h in (False, True))
    if min(best.db, held.db if trials.held_out else math.inf) < target_db:
        raise _unreachable(target_db, best, held, int8, "every activation in fp16 where it can be, in 16 bits "
                           "otherwise" if fp_all else "every activation in 16 bits (weights stay int8)")

    def cycles(config: Config) -> float:
        precision = {**{t: "int16" for t in config[0]}, **{t: "fp16" for t in config[1]}}
        return model_cycles(hw, cost, precision, trials.floats(config[1]))

    base = cycles((none, none))
    extra16 = {t: cycles((frozenset([t]), none)) - base for t in tensors}
    extra_fp = {t: cycles((none, frozenset([t]))) - base for t in candidates}
    alone = {t: trials.energy((everything - {t}, none)) for t in tensors}
    alone_fp = {t: trials.energy((everything - {t}, frozenset([t]))) for t in candidates}
    noise16 = {t: max(alone[t].ratio - int16.ratio, 0.0) for t in tensors}
    noise_fp = {t: max(alone[t].ratio - alone_fp[t].ratio, 0.0) for t in candidates}
    ranked = _rank(tensors, noise16, extra16, noise_fp, extra_fp)
    order = [(t, p) for t, p, _ in ranked]
    chosen: list[tuple[str, str]] = []
    if not trials.meets((none, none), target_db):
        if not trials.meets(_config(order), target_db):  # the cheaper choices fall short: fp16 wherever it can be
            order = [(t, "fp16" if t in candidates else p) for t, p in order]
        k = _shortest_prefix(trials, order, [n for _, _, n in ranked], int16.ratio, target_db)
        chosen = order[:k]
        for item in sorted(chosen, key=lambda x: -(extra16 if x[1] == "int16" else extra_fp)[x[0]]):
            if trials.meets(_config([c for c in chosen if c != item]), target_db):
                chosen.remove(item)
    config = _config(chosen)
    written, _ = trials.run(config, output)
    # what the written model has: onnxruntime gives an operator that only moves data (Flatten, Reshape, ...)
    # its input's parameters, so such a tensor follows its input into 16 bits
    bits = {t.name: t.bits for t in quantized_tensors(onnx.load(str(written))).values()}
    wide = frozenset(t for t, b in bits.items() if b == 16)
    producers = {o: x.op for x in cost for o, _ in x.outputs}
    rows = tuple(TensorChoice(t, producers.get(t, "input"), alone[t].db, extra16[t],
                              alone_fp[t].db if t in alone_fp else math.nan, extra_fp.get(t, math.nan),
                              "fp16" if t in config[1] else "int16" if t in wide else "int8") for t, _, _ in ranked)
    held_db = trials.energy(config, True).db if trials.held_out else math.nan
    return PrecisionChoice(written, target_db, trials.energy(config).db, held_db, int8.db,
                           int16.db, cycles((wide, config[1])), base, cycles((everything, none)), rows,
                           len(trials.seen) + 1, tuple(sorted({n for t in config[1] for n in trials.producers[t]})))
