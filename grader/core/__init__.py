"""The grader's types and rules: models, the assignment, the journal's format, scoring, caps, the
policy and the worker protocol. Nothing here starts a process, and the protocol (``protocol``)
imports nothing outside the standard library, so the worker can load it in its sandbox."""
