"""Running suites: the worker processes (``runner``), the staged schedule over a pair of them
(``scheduler``), their launch and the compiled variants they are sent (``codecache``)."""
