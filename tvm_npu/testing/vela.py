"""Reading Arm Vela's performance CSVs (the peer compiler ``benchmarks/vela_compare.py`` measures against)
and pairing its layers with ours."""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def read_vela_summary(path: Path) -> dict[str, Any]:
    """Vela's ``*_summary_<config>.csv``: one row of named figures, numbers as floats."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 1 or "cycles_total" not in rows[0]:
        raise ValueError(f"{path}: expected Vela's summary CSV (one row with cycles_total)")
    out: dict[str, Any] = {}
    for k, v in rows[0].items():
        try:
            out[k] = float(v)
        except ValueError:
            out[k] = v
    return out


def read_vela_cpu_operators(log: Path) -> int:
    """How many operators Vela left on the CPU, from its printed summary (``CPU operators = N (x%)``). Its
    cycles cover only the NPU part, so a comparison with them holds only at 0 (a Keras model with a dynamic
    H and W, e.g. MobileNetV3 built without ``input_shape``, leaves everything after the first reshape there)."""
    found = re.search(r"^CPU operators = (\d+)", log.read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"{log}: no 'CPU operators = N' line; expected the output of Vela 5")
    return int(found.group(1))


def read_vela_layers(path: Path) -> list[dict[str, Any]]:
    """Vela's ``*_per-layer.csv`` folded to one entry per TFLite operator: consecutive rows of one original
    operator and output name (the NPU operations Vela lowers it to, e.g. a conv and its fused activation)
    summed. A Pad that Vela folds into the conv before it is listed under the conv's name, as its own entry."""
    layers: list[dict[str, Any]] = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            name, op = row["Name"].strip(), row["Original Operator"].strip()
            if not layers or (layers[-1]["name"], layers[-1]["op"]) != (name, op):
                layers.append({"name": name, "op": op, "cycles": 0, "macs": 0, "target": row["Target"].strip()})
            layers[-1]["cycles"] += int(float(row["Op Cycles"]))
            layers[-1]["macs"] += int(float(row["MAC Count"]))
    return layers


def match_layers(ours: Sequence[Any], vela: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Our layers with MACs (by index) paired with Vela's: the first unused Vela layer of equal MAC count,
    in order (both follow the graph; repeated blocks pair in turn)."""
    free = [v for v in vela if v["macs"]]
    pairs = {}
    for i, x in enumerate(ours):
        if not x.macs:
            continue
        hit = next((v for v in free if v["macs"] == x.macs), None)
        if hit is not None:
            free.remove(hit)
            pairs[i] = hit
    return pairs
