"""The service's work side: jobs, queues, Celery tasks. It reaches the grader only through grader/flows (and grader/core's types)."""
