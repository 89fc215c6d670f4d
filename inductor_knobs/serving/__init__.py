"""Serving: the warm-up, the stall guard, CUDA graphs per bucket, buckets, compile caches."""
