"""The suites a user or CI runs against XLA's SPMD partitioner, for planning time and for proofs,
on one harness (``benchmarks.harness``); one-off studies apart in ``benchmarks.studies``.
Layout and methodology: docs/design.md section 11; current figures: docs/results.md."""
