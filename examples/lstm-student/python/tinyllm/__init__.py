"""tinyllm: a small numpy deep-learning framework, written to be read."""
