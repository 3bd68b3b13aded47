"""Lowering the IR to CUDA C++."""
from . import ops_warp  # noqa: F401 - registers the warp-level op emitters
from .abi import Slot, param_slots
from .emit import OP_EMITTERS, generate
from .prelude import PRELUDE
