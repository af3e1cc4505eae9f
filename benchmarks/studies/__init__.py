"""One-off studies: each asked one question of the library, and its answer is a committed result.

A study is run by hand (``python -m benchmarks.studies.NAME``; the command heads each module and
each result file in ``benchmarks/studies/results/``), not by ``redist bench``, CI or another
benchmark: nothing outside this package imports it (an import-linter contract in pyproject.toml).
The suites a user or CI runs stay one level up, on ``benchmarks.harness``.

- ``a2a_forms``, ``join_forms``, ``exchange_forms``: lowering forms of the executor, timed.
- ``families``: what each family of typed candidates buys in plans and planning time.
- ``unmeasured_ties``: plans the unmeasured cost model picks on a tie, timed.
- ``step_audit``: each step of the plans timed alone against its price.
- ``autotuned``: the model's plan against the autotuned plan and XLA, on the clock.
- ``plan_ab``: two plans of one move timed against each other across processes.
- ``bound_optimum``: the least point-to-point program per cell against the transfer bound.
- ``collective_groups``: a reproducer of XLA:CPU's explicit-groups slowdown.
"""
