"""The worker: runs a test suite against variants in its sandbox (see :mod:`grader.worker.serve`).

- :mod:`~grader.worker.serve`: the worker's loop, started as ``python -m grader.worker``;
- :mod:`~grader.worker.zygote`: forks every run's test process from one memory;
- :mod:`~grader.worker.child`: a run's test process (pytest, its report);
- :mod:`~grader.worker.watch`: a run's limits, enforced from outside, and its judgement;
- :mod:`~grader.worker.impl`: a run's implementation process;
- :mod:`~grader.worker.standin`: the module under test as the tests see it, made from its contract;
- :mod:`~grader.worker.boundary`: the data-only messages between the last two.
"""

from grader.worker.serve import NICENESS, main

__all__ = ["NICENESS", "main"]
