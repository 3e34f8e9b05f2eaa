"""Which activations to quantize to 16 bits: the fewest NPU cycles whose output meets an SQNR budget.

The search only; onnxruntime's quantizer does the mechanics (the ``quantize`` callable, which
:func:`tvm_npu.tools.quantize.quantize_model` binds to its settings and calibration samples). The unit
is an activation tensor, as onnxruntime's ``TensorQuantOverrides`` sets it: a tensor in 16 bits makes
its producer write and its consumers read 16 bits, and a consumer with a 16-bit input runs the tensor
engine at the target's 16-bit rate (cycles: :mod:`tvm_npu.tools.layer_cost`).

1. All-int8 meets the budget: done. All-16-bit does not: the budget is unreachable (weights stay int8),
   and the error says what is reachable.
2. Each tensor's sensitivity: the output noise it adds in 8 bits when every other tensor has 16 (one
   quantization per tensor), beside the cycles 16 bits cost it over 8.
3. Tensors ranked by noise removed per extra cycle; the additive noise model predicts the shortest
   prefix of the ranking that meets the budget, and a bisection over prefix lengths, each measured,
   finds the shortest that does. Then each chosen tensor, dearest first, goes back to 8 bits if the
   budget still holds without it (the additive model is only a model).

SQNR is measured on the calibration samples, over every graph output together (float64).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from tvm_npu.config import parse_target
from tvm_npu.report.text import columns
from tvm_npu.tools.layer_cost import layers, model_cycles
from tvm_npu.tools.sqnr import Energy, OrtModel, Sample, output_energy, quantized_tensors

#: ``quantize(output, int16=tensors)`` writes the QDQ model with ``tensors`` in 16 bits and returns its path
#: (given a list, even empty, :func:`tvm_npu.tools.quantize.quantize_model` names tensors alike in every model).
Quantizer = Callable[..., Path]


@dataclass(frozen=True)
class TensorChoice:
    """One activation tensor: what keeping it in 8 bits costs in error, and 16 bits in cycles."""

    tensor: str
    producer: str  # the op writing it ("input" for a graph input)
    alone_8bit_db: float  # output SQNR with only this tensor in 8 bits, every other in 16
    extra_cycles: float  # the model's cycles with this tensor in 16 bits, minus all-int8's
    bits: int  # chosen


@dataclass(frozen=True)
class PrecisionChoice:
    """The search's result: the model written, its figures and one row per activation tensor."""

    output: Path
    target_db: float
    achieved_db: float
    int8_db: float
    int16_db: float
    cycles: float  # cost model (datasheet bound) of the chosen model
    int8_cycles: float
    int16_cycles: float
    rows: tuple[TensorChoice, ...]
    quantizations: int  # onnxruntime quantize_static calls the search made

    def table(self) -> str:
        """The choices, most noise per cycle first, and the summary."""
        head = ("tensor", "producer", "SQNR if only it is 8-bit", "extra cycles in 16-bit", "bits")
        rows = [(r.tensor, r.producer, f"{r.alone_8bit_db:.1f} dB", f"{r.extra_cycles:,.0f}", str(r.bits))
                for r in self.rows]
        wide = sum(r.bits == 16 for r in self.rows)
        return "\n".join([*columns(head, rows), "",
                          f"output SQNR against fp32: {self.achieved_db:.1f} dB (target {self.target_db:g} dB; "
                          f"all-int8 {self.int8_db:.1f} dB, all-16-bit {self.int16_db:.1f} dB)",
                          f"16-bit activations: {wide} of {len(self.rows)} tensors; cost-model cycles "
                          f"{self.cycles:,.0f} (all-int8 {self.int8_cycles:,.0f}, all-16-bit "
                          f"{self.int16_cycles:,.0f}); {self.quantizations} quantize_static runs"])


class _Trials:
    """Quantizations by set of 16-bit tensors, each measured once against the fp32 outputs."""

    def __init__(self, quantize: Quantizer, reference: onnx.ModelProto, samples: Sequence[Sample], tmp: Path):
        self.quantize, self.samples, self.tmp = quantize, samples, tmp
        ref = OrtModel(reference)
        self.expected = [ref.run(s) for s in samples]
        self.seen: dict[frozenset[str], Energy] = {}
        self.paths: dict[frozenset[str], Path] = {}

    def energy(self, wide: frozenset[str]) -> Energy:
        if wide not in self.seen:
            path = self.paths[wide] = self.quantize(self.tmp / f"trial{len(self.seen)}.onnx", int16=sorted(wide))
            self.seen[wide] = output_energy(self.expected, onnx.load(str(path)), self.samples)
        return self.seen[wide]

    def meets(self, wide: frozenset[str], budget: float) -> bool:
        return self.energy(wide).db >= budget


def _check_budget(target_db: float) -> None:
    if not (isinstance(target_db, int | float) and math.isfinite(target_db) and target_db > 0):
        raise ValueError(f"the target SQNR must be a positive number of dB (e.g. 30), not {target_db!r}")


def _shortest_prefix(trials: _Trials, ranked: Sequence[str], noise: Sequence[float], floor: float,
                     budget: float) -> int:
    """The fewest leading tensors of ``ranked`` in 16 bits that meet ``budget`` (all of them do, none does
    not); the first probe is the additive model's prediction, then a bisection."""
    allowed = 10 ** (-budget / 10) - floor
    predicted = next((k for k in range(len(ranked) + 1) if sum(noise[k:]) <= allowed), len(ranked))
    lo, hi, probe = 0, len(ranked), min(max(predicted, 1), len(ranked) - 1)
    while hi - lo > 1:
        if trials.meets(frozenset(ranked[:probe]), budget):
            hi = probe
        else:
            lo = probe
        probe = (lo + hi) // 2
    return hi


def choose_precisions(quantize: Quantizer, reference: onnx.ModelProto, samples: Sequence[Sample],
                      output: str | Path, target_db: float, *, target: str = "npu") -> PrecisionChoice:
    """Write to ``output`` the QDQ model whose activations meet ``target_db`` at the fewest cost-model
    cycles of ``target`` (module docstring); ``reference`` is the fp32 model ``quantize`` quantizes."""
    _check_budget(target_db)
    hw = parse_target(target).hw
    with tempfile.TemporaryDirectory(prefix="tvm-npu-precision.") as tmp:
        trials = _Trials(quantize, reference, samples, Path(tmp))
        int8 = trials.energy(frozenset())
        q8 = onnx.load(str(trials.paths[frozenset()]))
        tensors = list(quantized_tensors(q8))
        everything = frozenset(tensors)
        int16 = trials.energy(everything)
        if int16.db < target_db:
            raise ValueError(f"target SQNR {target_db:g} dB is not reachable: with every activation in 16 bits "
                             f"(weights stay int8) the output reaches {int16.db:.1f} dB against fp32 on these "
                             f"samples (all-int8: {int8.db:.1f} dB); ask for at most {math.floor(int16.db * 10) / 10} "
                             f"dB, or keep layers in float with exclude")
        cost = layers(q8)
        base = model_cycles(hw, cost, "int8")
        extra = {t: model_cycles(hw, cost, {t: "int16"}) - base for t in tensors}
        alone = {t: trials.energy(everything - {t}) for t in tensors}
        noise = {t: max(alone[t].ratio - int16.ratio, 0.0) for t in tensors}
        ranked = sorted(tensors, key=lambda t: -noise[t] / extra[t] if extra[t] > 0 else -math.inf)
        chosen: set[str] = set()
        if int8.db < target_db:
            k = _shortest_prefix(trials, ranked, [noise[t] for t in ranked], int16.ratio, target_db)
            chosen = set(ranked[:k])
            for t in sorted(chosen, key=lambda t: -extra[t]):
                if trials.meets(frozenset(chosen - {t}), target_db):
                    chosen.discard(t)
        written = quantize(Path(output), int16=sorted(chosen))
    # what the written model has: onnxruntime gives an operator that only moves data (Flatten, Reshape, ...)
    # its input's parameters, so such a tensor follows its input into 16 bits
    bits = {t.name: t.bits for t in quantized_tensors(onnx.load(str(written))).values()}
    producers = {o: x.op for x in cost for o, _ in x.outputs}
    rows = tuple(TensorChoice(t, producers.get(t, "input"), alone[t].db, extra[t], bits.get(t, 8)) for t in ranked)
    return PrecisionChoice(written, target_db, trials.energy(frozenset(chosen)).db, int8.db, int16.db,
                           model_cycles(hw, cost, {t: "int16" for t, b in bits.items() if b == 16}), base,
                           model_cycles(hw, cost, {t: "int16" for t in tensors}), rows, len(trials.seen) + 1)
