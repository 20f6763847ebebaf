"""Keeping a claim: while a worker grades a submission, a thread of its own renews the claim
every few seconds (``Settings.heartbeat_s``). A worker that dies stops renewing it, and once
the claim has gone unrenewed for the lease (``Settings.lease_s``) any other worker takes the job
(``crud.claim_next``); the dead worker could no longer store a result, as its claim is gone."""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from sqlalchemy.orm import sessionmaker

from api.store import crud

__all__ = ["Heartbeat"]

log = logging.getLogger("mutagrade.queue")


class Heartbeat:
    """Renews ``worker``'s claim on a submission every ``every_s`` seconds, from entering the
    block to leaving it; stops once the claim is no longer ``worker``'s."""

    def __init__(self, *, make_session: sessionmaker, submission_id: int, worker: str, every_s: float) -> None:
        self.make_session = make_session
        self.submission_id = submission_id
        self.worker = worker
        self.every_s = every_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{submission_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self._stopping.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stopping.wait(self.every_s):
            try:
                with self.make_session() as session:
                    held = crud.renew_claim(session, self.submission_id, worker=self.worker)
            except Exception:  # noqa: BLE001 - the database may be away for a moment: beat again later
                log.warning("could not renew the claim on submission %d; trying again", self.submission_id,
                            exc_info=True)
                continue
            if not held:
                # Regraded, put back or retaken meanwhile: the grading goes on, but its result
                # will not be stored (crud.finish_submission checks the claim).
                log.warning("submission %d is no longer claimed by %s", self.submission_id, self.worker)
                return
