"""Shared fixtures: the hardware configurations every exact-cycle test runs on."""

from __future__ import annotations

import pytest

from tvm_npu.config import HardwareConfig, parse_target

#: The default machine and one with a faster, lower-latency DRAM and a narrower array.
HW_CONFIGS = {
    "default": HardwareConfig(),
    "fastdram": parse_target("npu -dram-bytes-per-cycle=32 -dma-latency=50 -mac-rows=8").hw,
}


@pytest.fixture(params=list(HW_CONFIGS), ids=list(HW_CONFIGS))
def hw(request: pytest.FixtureRequest) -> HardwareConfig:
    return HW_CONFIGS[request.param]
