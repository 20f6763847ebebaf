"""``python -m grader.worker``: the worker's entry point."""

from grader.worker.serve import main

main()
