"""The mutagrade grading service: FastAPI app, storage, queue, worker jobs and web pages."""
