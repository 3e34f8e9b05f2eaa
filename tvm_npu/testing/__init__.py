"""Differential testing of the NPU compiler, for this project's tests and benchmarks and for users who
check their own models the same way (as ``tvm.testing`` serves TVM's): random valid ONNX graphs of the
operators the NPU supports (:mod:`.graphs`, a hypothesis strategy: needs ``pip install "tvm-npu[test]"``),
the oracle that builds one for the NPU and judges it against llvm and onnxruntime (:mod:`.oracle`), and
the compiler bugs the fuzzer has found and that are not fixed yet (:mod:`.known_bugs`)."""
