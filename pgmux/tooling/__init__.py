"""Tooling around pgmux, not part of its runtime: the ``pgmux`` command, benchmarks,
throwaway servers, the delay proxy, test certificates and progress output.

Nothing under ``pgmux`` outside this package imports it (the layering test checks).
"""
