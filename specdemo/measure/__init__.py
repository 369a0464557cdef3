"""Measuring runs: benchmarks, the paper's formulas, precision, the divergence explainer, the χ² check,
the comparison record and a race's record. Imports decoding and models only."""
