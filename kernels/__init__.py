"""Kernels written in tkpy, each a torch-facing function plus its tkpy kernel."""
