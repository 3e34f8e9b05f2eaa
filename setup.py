"""Install tvm-npu; the four stage folders become subpackages of ``tvm_npu``."""

from setuptools import setup

STAGES = ("relay_patterns", "tir_schedules", "codegen", "simulator")
# the subpackages of tvm_npu/ itself, one job each (docs/architecture.md, "Floors")
FLOORS = ("core", "runtime", "models", "compiler", "tuning", "report", "tools", "testing")
# meta_schedule's XGBoost cost model (the CPU build: the default wheel pulls in 470 MB of CUDA NCCL)
# and TVM's RPC tracker and popen workers (what apache-tvm[rpc] lists)
TUNE = ["xgboost-cpu>=2.1", "tornado>=6", "psutil>=5.9", "cloudpickle>=2"]

setup(
    name="tvm-npu",
    version="0.1.0",
    description="A TVM BYOC backend for a simulated NPU, with its simulator",
    python_requires=">=3.11",
    packages=["tvm_npu", *(f"tvm_npu.{f}" for f in FLOORS), *(f"tvm_npu.{s}" for s in STAGES)],
    package_dir={"tvm_npu": "tvm_npu", **{f"tvm_npu.{s}": s for s in STAGES}},
    package_data={"tvm_npu.runtime": ["*.cc"]},
    install_requires=[
        "apache-tvm==0.27.0.post1",
        "apache-tvm-ffi==0.1.14.post1",
        "numpy>=1.26",
        "scipy>=1.11",
        "onnx>=1.16",
        "tqdm>=4.66",
        "matplotlib>=3.8",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-xdist>=3.5", "hypothesis>=6.100", "ruff>=0.6", "onnxruntime>=1.17",
                 "onnxconverter-common>=1.16",
                 *TUNE],
        "quantize": ["onnxruntime>=1.17"],
        "benchmark": ["onnxruntime>=1.17"],  # the CPU reference column of bench and benchmarks/compare_llvm.py
        "tune": TUNE,
        # benchmarks/vela_compare.py only: Keras -> TFLite int8 -> ONNX, and Arm's Vela as the peer compiler
        "vela": ["tensorflow-cpu>=2.21", "tf2onnx>=1.17", "ethos-u-vela>=5.2,<6", "onnxruntime>=1.17"],
    },
    entry_points={"console_scripts": ["tvm-npu=tvm_npu.tools.cli:main"]},
)
