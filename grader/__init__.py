"""mutagrade: grades a course's GRU module and the test suites students write for it."""

__version__ = "0.1.0"
