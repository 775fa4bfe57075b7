"""Owner election the way etcd's concurrency package does it, which TiCDC uses.

Each capture puts `__cdc_meta__/owner/<lease hex>` bound to its lease; the key with the lowest
create revision is the owner. Keys only vanish (lease expiry, resign), so a capture that sees
its own key lowest stays owner for as long as that key exists with the same create revision:
that compare fences every owner write.
"""

from __future__ import annotations

from typing import Optional

from sparkcdc.server.etcd_client import EtcdClient, KeyValue, delete_op, key_exists_at, key_missing, put_op
from sparkcdc.server.etcd_store import ClusterKeys


class OwnerElection:
    def __init__(self, client: EtcdClient, keys: ClusterKeys, capture_id: str):
        self.client = client
        self.keys = keys
        self.capture_id = capture_id
        self._key: Optional[str] = None
        self._create_revision = 0

    def campaign(self, lease_id: int) -> None:
        """Join the queue (idempotent for one lease)."""
        key = self.keys.owner(lease_id)
        self.client.txn([key_missing(key)], [put_op(key, self.capture_id, lease_id)])
        kv = self.client.get(key)
        if kv is not None and kv.value.decode() == self.capture_id:
            self._key, self._create_revision = key, kv.create_revision

    def candidates(self) -> list[KeyValue]:
        return sorted(self.client.get_prefix(self.keys.owner()), key=lambda kv: kv.create_revision)

    def owner_id(self) -> Optional[str]:
        candidates = self.candidates()
        return candidates[0].value.decode() if candidates else None

    def is_owner(self) -> bool:
        candidates = self.candidates()
        return bool(candidates) and candidates[0].key == self._key \
            and candidates[0].create_revision == self._create_revision

    def fence(self) -> list[dict]:
        """Compares that hold only while this capture's election key is the one it created."""
        return [key_exists_at(self._key or self.keys.owner(0), self._create_revision)]

    def in_queue(self) -> bool:
        return self._key is not None and self.client.txn(self.fence(), [])[0]

    def resign(self) -> bool:
        """Leave the queue; the next campaign queues this capture last. False if not queued."""
        if self._key is None:
            return False
        ok, _ = self.client.txn(self.fence(), [delete_op(self._key)])
        self._key, self._create_revision = None, 0
        return ok
