"""The test session's defaults: first calls wait for their tuned kernels (TKPY_QUICK_FIRST_CALL=0), so that a test
comparing attention() or matmul() bit for bit with a kernel launched by name sees the kernel the policy picked on a
cold cache too. tests/test_quick_first_call.py turns quick first calls back on where it tests them."""
import os

os.environ.setdefault("TKPY_QUICK_FIRST_CALL", "0")
