"""The compiled step kernels (numba), sealed: state arrays, KV blocks, prefix cache, plan/apply/price, the fleet loop."""
