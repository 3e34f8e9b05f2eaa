"""The meta_schedule components of NPU tuning (:mod:`tvm_npu.tuning.tuner`): the postprocessor rejecting
illegal tiles, the mutator re-drawing a template parameter, the cost model's feature extractor and the
builder. A module of their own, imported when tuning starts: importing it imports meta_schedule."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import tvm
from tvm import s_tir
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.feature_extractor import PyFeatureExtractor
from tvm.s_tir.meta_schedule.mutator import PyMutator
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

from tvm_npu.core.tiles import tile_to_json
from tvm_npu.tuning.candidate import build_candidate, features
from tvm_npu.tuning.measure import shutdown_pool
from tvm_npu.tuning.space import SPEC_ATTR, TARGET_ATTR, space_of, tile_of


@derived_object
class LegalTile(PyPostproc):
    """Rejects a sampled combination of parameters that is not a legal tile."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch: s_tir.Schedule) -> bool:
        try:
            return tile_of(sch.mod) in space_of(sch.mod["main"]).legal
        except (TypeError, ValueError, KeyError, IndexError):
            return False

    def clone(self) -> LegalTile:
        return LegalTile()


@derived_object
class MutateParameter(PyMutator):
    """Re-draws one template parameter (meta_schedule's own mutators change tile-size splits,
    unrolling, parallelism and compute locations, none of which this space has)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.rng = random.Random(seed)

    def _initialize_with_tune_context(self, context) -> None:
        self.rng = random.Random(int(context.rand_state))

    def apply(self, trace: s_tir.Trace, _) -> s_tir.Trace | None:
        sampled = [i for i in trace.insts if i.kind.name == "SampleCategorical"]
        if not sampled:
            return None
        inst = self.rng.choice(sampled)
        n = len(inst.attrs[0])
        old = int(trace.decisions[inst])
        new = self.rng.choice([i for i in range(n) if i != old])
        return trace.with_decision(inst, new, remove_postproc=True)

    def clone(self) -> MutateParameter:
        return MutateParameter(self.rng.randrange(1 << 30))


@derived_object
class TileFeatures(PyFeatureExtractor):
    """Per candidate: the tile's parameters and the analytic cost model's breakdown of it."""

    def extract_from(self, context, candidates) -> list:
        return [tvm.runtime.tensor(np.asarray([features(c.sch.mod)], dtype="float32")) for c in candidates]


@derived_object
class NpuBuilder(PyBuilder):
    """Compiles candidates with the template and the codegen, in ``workers`` processes."""

    def __init__(self, workers: int | None = None, timeout_sec: float = 600.0, out_dir: str | None = None) -> None:
        super().__init__()
        self.workers = workers or os.cpu_count() or 1
        self.timeout_sec = timeout_sec
        self.out_dir = out_dir

    def build(self, build_inputs: list) -> list:
        results: list = [None] * len(build_inputs)
        jobs = []
        for i, inp in enumerate(build_inputs):
            try:
                func = inp.mod["main"]
                jobs.append((i, (str(func.attrs[SPEC_ATTR]), json.dumps(tile_to_json(tile_of(inp.mod))),
                                 str(func.attrs[TARGET_ATTR]), self.out_dir)))
            except (TypeError, ValueError, KeyError, IndexError) as e:
                results[i] = BuilderResult(None, f"NpuBuilder: malformed candidate: {e}")
        pool = PopenPoolExecutor(max_workers=min(self.workers, max(1, len(jobs))), timeout=self.timeout_sec)
        try:
            for (i, _), res in zip(jobs, pool.map_with_error_catching(lambda a: build_candidate(*a),
                                                                      [a for _, a in jobs]), strict=True):
                if res.status == StatusKind.COMPLETE:
                    results[i] = BuilderResult(res.value, None)
                elif res.status == StatusKind.TIMEOUT:
                    results[i] = BuilderResult(None, f"NpuBuilder: timeout after {self.timeout_sec} s")
                else:
                    results[i] = BuilderResult(None, f"NpuBuilder: {res.value}")
        finally:
            shutdown_pool(pool)
        return results
