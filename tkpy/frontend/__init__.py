"""Tracing Python kernel functions into tkpy IR."""
