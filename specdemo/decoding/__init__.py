"""Decoding: the algorithm. Steps and the drive loop, the acceptance rule (engine), token trees,
drafters, sampling, the KV cache and the reduced draft vocabulary. Imports nothing above it."""
