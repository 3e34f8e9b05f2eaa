"""``python -m tvm_npu``: the same as the ``tvm-npu`` console script."""

import sys

from tvm_npu.tools.cli import main

sys.exit(main())
