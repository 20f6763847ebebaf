"""mutagrade: grades the modules of a course and the test suites students write for them."""

__version__ = "0.1.0"
