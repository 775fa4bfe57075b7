"""A capture's etcd session: one lease, kept alive by our own thread (etcd3gw has none).

`valid()` turns false `margin` seconds before etcd could expire the lease, judged by our own
clock from the last keepalive that etcd answered: a capture cut off from etcd stops writing
before the owner can give its changefeeds to another capture.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from sparkcdc.errors import SparkCDCError
from sparkcdc.server.etcd_client import EtcdClient

log = logging.getLogger(__name__)


class Session:
    def __init__(self, client: EtcdClient, ttl: int = 10, margin: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.ttl = max(2, int(ttl))  # etcd's minimum lease TTL
        self.margin = min(margin, self.ttl / 3)
        self.clock = clock
        self.lease_id = 0
        self._valid_until = 0.0
        self._lost = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def open(self) -> "Session":
        sent = self.clock()
        self.lease_id = self.client.lease_grant(self.ttl)
        self._valid_until = sent + self.ttl
        self._thread = threading.Thread(target=self._keep_alive, name=f"lease-{self.lease_id:x}", daemon=True)
        self._thread.start()
        return self

    def valid(self) -> bool:
        return not self._lost.is_set() and self.clock() < self._valid_until - self.margin

    @property
    def lost(self) -> bool:
        return self._lost.is_set() or self.clock() >= self._valid_until - self.margin

    def _keep_alive(self) -> None:
        interval = self.ttl / 3
        while not self._closed.wait(interval):
            sent = self.clock()
            try:
                remaining = self.client.lease_keepalive(self.lease_id, timeout=max(0.5, interval))
            except SparkCDCError as exc:
                log.warning("lease %x keepalive failed: %s", self.lease_id, exc)
                remaining = None
            if remaining is not None and remaining <= 0:
                log.error("lease %x expired in etcd; this capture lost its session", self.lease_id)
                self._lost.set()
                return
            if remaining is not None:
                self._valid_until = sent + remaining
            if self.lost:
                log.error("lease %x not renewed within its TTL; this capture lost its session", self.lease_id)
                self._lost.set()
                return

    def close(self, revoke: bool = True) -> None:
        self._closed.set()
        self._lost.set()
        if revoke and self.lease_id:
            try:
                self.client.lease_revoke(self.lease_id)
            except SparkCDCError as exc:
                log.warning("could not revoke lease %x: %s", self.lease_id, exc)
