"""A capture: one `sparkcdc server` process with its puller, Spark session and changefeeds.

Without `--pd` it is a single node with an embedded SQLite store and always the owner; with
`--pd http://etcd:2379` it joins a cluster (server/cluster.py): the owner assigns changefeeds and
this capture runs the ones assigned to it. It is the API's
ChangefeedController (validate, resolve_start_ts, current_tso, start, stop, capture_info), so
the Open API layer stays free of Spark and binlog details.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from sparkcdc.config.replica import ReplicaConfig
from sparkcdc.errors import ErrAPIInvalidParam, ErrUpstreamUnreachable, SparkCDCError
from sparkcdc.model import tso
from sparkcdc.server.capture_store import CaptureStoreView
from sparkcdc.model.changefeed import ChangefeedInfo
from sparkcdc.server.metastore import MetaStore
from sparkcdc.sink.registry import parse_sink_spec
from sparkcdc.upstream.connection import UpstreamConfig
from sparkcdc.upstream.puller import FAILED, STARTING, STOPPED, Puller, PullerHealth
from sparkcdc.upstream.txn_index import TxnIndex

if TYPE_CHECKING:
    from sparkcdc.observability.metrics import Metrics
    from sparkcdc.pipeline.warmup import WarmUp

log = logging.getLogger(__name__)



def replication_server_ids(data_dir: str) -> tuple[int, int, int]:
    """(the puller's server_id, the first of its range readers' ids: each changefeed run takes the
    next 1000, the id of its walks over the binlog: back-fills) for a capture. Every replication
    connection to an upstream needs its own server_id: the upstream drops a connection when
    another registers with the same id, so two servers on one upstream (a cluster's captures, or
    independent single nodes) take theirs from a slot derived from their data dir."""
    slot = zlib.crc32(os.path.abspath(data_dir).encode()) % 3000
    return 1_000_000 + slot, 10_000_000 + slot * 1_000_000, 1_003_000 + slot
_ER_ACCESS_DENIED = 1045
# How long schema versions outlive the checkpoints that passed them: TiDB's tidb_gc_life_time
# default, the window in which TiCDC can `resume --overwrite-checkpoint-ts` back past its
# changefeeds' checkpoints (TiKV keeps the MVCC versions it reads the schema from that long).
SCHEMA_GC_LIFE_SECONDS = 600.0
# Seconds a single-node capture waits after start before warming Spark for its first changefeed.
LOCAL_WARM_UP_DELAY = 5.0


@dataclass(frozen=True)
class CaptureOptions:
    addr: str
    data_dir: str
    upstream_uri: str
    cluster_id: str = "default"
    spark_master: str = "local[*]"
    spark_remote: str = ""  # sc://host:port: changefeeds over Spark Connect instead of a local driver
    trigger_interval: str = "1 second"
    pd: str = ""  # etcd endpoint: cluster mode; empty: single node on SQLite
    capture_session_ttl: int = 10
    spark_conf: tuple[tuple[str, str], ...] = ()  # --spark-conf KEY=VALUE, over make_spark_session's own


class Capture:
    def __init__(self, options: CaptureOptions, metrics: Optional["Metrics"] = None):
        """`metrics`: where the changefeeds' per-batch numbers go (None: metrics off)."""
        self.options = options
        self.metrics = metrics
        self.id = str(uuid.uuid4())
        os.makedirs(options.data_dir, exist_ok=True)
        self.index_path = os.path.join(options.data_dir, "txn-index.sqlite")
        self.cluster = None
        self._puller_server_id, self._reader_server_id_base, self._walk_server_id = replication_server_ids(
            options.data_dir)
        self._backfill_lock = threading.Lock()
        if options.pd:
            from sparkcdc.server.cluster import ClusterMember
            from sparkcdc.server.etcd_client import EtcdClient
            from sparkcdc.server.etcd_store import EtcdMetaStore

            client = EtcdClient(options.pd.split(",")[0])
            self._etcd_store = EtcdMetaStore(client, options.cluster_id)
            self.store = CaptureStoreView(self._etcd_store, self.index_path, strict=False)
            self.cluster = ClusterMember(client, self._etcd_store, self.id, self._cluster_capture_info,
                                         options.capture_session_ttl)
        else:
            self.store = MetaStore(os.path.join(options.data_dir, "meta.sqlite"))
        self.upstream = UpstreamConfig.from_uri(options.upstream_uri)
        self._puller: Optional[Puller] = None
        self._puller_lock = threading.Lock()
        self._runner = None
        # processor_table_ids' last answer per changefeed, with the tables and config it was for.
        self._table_ids_memo: dict[tuple[str, str], tuple[tuple, list[int]]] = {}
        self._spark = None
        self._warm_up: Optional[WarmUp] = None  # a single node's delayed warm-up, cancelled by close()
        self._closed = threading.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    def open(self) -> None:
        """Start the puller and the Spark session, and resume every running changefeed."""
        began = time.monotonic()
        self._start_puller()
        try:
            self._wait_index_ready(timeout=30.0)
        except SparkCDCError as exc:
            # The server still serves its API (and its data); the puller keeps trying, and the
            # changefeeds wait for it in `warning`.
            log.error("upstream not ready: %s", exc)
        puller_ready = time.monotonic()
        from sparkcdc.pipeline.runner import ChangefeedRunner
        from sparkcdc.pipeline.spark_session import make_spark_session

        if self.options.spark_remote:
            from sparkcdc.pipeline.connect_loop import make_connect_session

            self._spark = make_connect_session(self.options.spark_remote)
        else:
            from sparkcdc.pipeline.class_archive import existing_archive

            class_archive = existing_archive()
            if class_archive is None:
                log.info("no class archive for this JDK and Spark: `python -m sparkcdc.pipeline.class_archive` "
                         "(scripts/setup.sh runs it) makes one and shortens Spark's start")
            else:
                log.info("Spark's JVM maps the class archive %s", class_archive)
            self._spark = make_spark_session(self.options.spark_master, spark_conf=dict(self.options.spark_conf),
                                             class_archive=class_archive)
        log.info("puller ready in %.1fs, Spark session in %.1fs", puller_ready - began, time.monotonic() - puller_ready)
        if self.cluster is not None and not self.options.spark_remote:
            self._warm_up_spark()  # runs to the end: a capture may take over at any time
        if self.cluster is not None:
            # The runner's writes carry this capture's fence; its reads map checkpoints into our index.
            runner_store = CaptureStoreView(self._etcd_store, self.index_path, self.cluster.fence_for)
        else:
            runner_store = self.store
        self._runner = ChangefeedRunner(
            self._spark,
            runner_store,
            self.index_path,
            self.options.upstream_uri,
            os.path.join(self.options.data_dir, "changefeeds"),
            self.options.addr,
            self.options.trigger_interval,
            cluster_id=self.options.cluster_id,
            server_id_base=self._reader_server_id_base,
            upstream_health=self.puller_health,
            metrics=self.metrics,
        )
        threading.Thread(target=self.gc_schema_versions, name="schema-gc", daemon=True).start()
        if self.cluster is not None:
            self.cluster.open(self._runner)
            return
        resumed = 0
        for info in self.store.list_changefeeds():
            if info.state in ("normal", "warning"):
                self._runner.start_or_retry_later(info)  # a failed start shows on the changefeed
                resumed += 1
        if not resumed and not self.options.spark_remote:
            # The next `changefeed create` would start Spark's first streaming query cold; a
            # resumed changefeed warms it by itself. A create right after start (scripts, tests)
            # goes first: a warm-up beside it would slow it down (docs/benchmarks.md).
            self._warm_up = self._warm_up_spark(delay=LOCAL_WARM_UP_DELAY)
            self._runner.before_start = self._warm_up.cancel

    def _warm_up_spark(self, delay: float = 0.0) -> WarmUp:
        """Warm Spark now, in the background, so that the first changefeed here (a takeover in a
        cluster, the next create on a single node) does not also pay for Spark's first query."""
        from sparkcdc.pipeline.warmup import start_warm_up

        return start_warm_up(self._spark, delay=delay)

    def close(self) -> None:
        self._closed.set()
        if self.cluster is not None:
            self.cluster.close()
        if self._warm_up is not None:
            self._warm_up.cancel()  # a server stopped within the delay never starts it
        if self._runner is not None:
            self._runner.stop_all()
        if self._puller is not None:
            self._puller.stop()
        if self._spark is not None:
            self._spark.stop()

    def gc_schema_versions(self, interval: float = 60.0, once: bool = False,
                           life_seconds: float = SCHEMA_GC_LIFE_SECONDS, now: Optional[float] = None) -> None:
        """Drop schema versions below the minimum checkpoint of all changefeeds (TiCDC's schema
        storage DoGC) and older than `life_seconds` (so a resume may go back that far past every
        checkpoint, as TiCDC within tidb_gc_life_time), every `interval` s until close. Failed and
        stopped changefeeds count: they may resume from their checkpoint. Without changefeeds
        nothing goes: a new one may start early. `now`: wall-clock seconds, for tests."""
        while True:
            try:
                checkpoints = [self.store.get_status(info.namespace, info.id).checkpoint_ts
                               for info in self.store.list_changefeeds()]
                if checkpoints:
                    life_ts = tso.compose(int(((now if now is not None else time.time()) - life_seconds) * 1000))
                    safe_ts = min(min(checkpoints), life_ts)
                    removed = TxnIndex(self.index_path).gc_schema_versions(safe_ts)
                    if removed:
                        log.info("schema GC below ts %d removed %d versions", safe_ts, removed)
            except Exception as exc:  # GC is an optimisation: never let it take the capture down
                log.warning("schema GC failed: %s", exc)
            if once or self._closed.wait(interval):
                return

    def _start_puller(self) -> Puller:
        """The puller, started again when it stopped for good (a resume or create retries it)."""
        with self._puller_lock:
            if self._puller is not None and self._puller.health().state not in (FAILED, STOPPED):
                return self._puller
            if self._puller is not None:
                log.error("binlog puller stopped with %s; starting it again", self._puller.health().error)
                self._puller.stop()
            self._puller = Puller(self.upstream, TxnIndex(self.index_path), self._puller_server_id,
                                  needed_from=self._oldest_checkpoint).start()
            return self._puller

    def _oldest_checkpoint(self) -> Optional[int]:
        """The oldest checkpoint of the changefeeds (paused and failed ones too: they may resume),
        in this capture's index: what a failover must re-map onto the new server. 0 (everything)
        when the store cannot say; None without changefeeds."""
        try:
            checkpoints = [self.store.get_status(info.namespace, info.id).checkpoint_ts
                           for info in self.store.list_changefeeds()]
        except Exception as exc:  # noqa: BLE001 - re-map too much rather than too little
            log.warning("failover: cannot read the changefeeds' checkpoints (%s); re-mapping the whole index", exc)
            return 0
        return min(checkpoints) if checkpoints else None

    def _ensure_puller(self) -> Puller:
        """A puller whose index is ready (it has a resolved-ts), for calls that read the index."""
        puller = self._start_puller()
        self._wait_index_ready()
        return puller

    def _wait_index_ready(self, timeout: float = 30.0) -> None:
        index = TxnIndex(self.index_path)
        deadline = time.monotonic() + timeout
        while index.resolved_ts() == 0:
            health = self.puller_health()
            if health.problem is not None:  # the upstream is down or misconfigured: say so now
                raise health.problem
            if time.monotonic() > deadline:
                raise ErrUpstreamUnreachable(
                    f"the binlog puller of upstream {self.upstream.masked_uri()} has not indexed it after "
                    f"{timeout:.0f}s (it is {health.state}"
                    + (f": {health.error.message}" if health.error is not None else "") + ")")
            time.sleep(0.1)

    def puller_health(self) -> PullerHealth:
        """The binlog puller's health (the runner shows its problems on every changefeed)."""
        puller = self._puller
        if puller is None:
            return PullerHealth(STARTING, self.upstream.masked_uri(), time.time())
        return puller.health()

    def puller_totals(self) -> tuple[int, int]:
        """(transactions, binlog bytes) the current puller has indexed since it started."""
        puller = self._puller
        return (puller.indexed_transactions, puller.indexed_binlog_bytes) if puller is not None else (0, 0)

    def last_triggers(self) -> dict[tuple[str, str], dict[str, float]]:
        """Spark's phases of the last trigger of each changefeed this capture runs (seconds)."""
        return self._runner.last_triggers() if self._runner is not None else {}

    def running_changefeeds(self) -> list[tuple[str, str]]:
        """(namespace, id) of the changefeeds this capture runs (or restarts after a failure)."""
        return self._runner.running() if self._runner is not None else []

    def puller_state(self) -> dict:
        """The puller as `changefeed query` shows it: this capture's, with its resolved-ts."""
        return {**self.puller_health().to_json(), "capture_id": self.id,
                "resolved_ts": TxnIndex(self.index_path).resolved_ts()}

    # -- ChangefeedController ----------------------------------------------------------------
    def validate(self, sink_uri: str, config: ReplicaConfig) -> None:
        spec = parse_sink_spec(sink_uri, config)
        self._ensure_puller()
        if config.bdr_mode:  # the downstream marks what the sink writes, its user can write every table
            from sparkcdc.sink.registry import verify_tables

            index = TxnIndex(self.index_path)
            eligible, _ = verify_tables(index.tables_at(index.resolved_ts()), config)
            spec.check_bdr_downstream(eligible)
        if config.snapshot.mode != "never":
            # Unreadable tables and chunk keys no index leads with fail the creation, not the copy.
            from sparkcdc.pipeline.snapshot import snapshot_tables, verify_snapshot

            index = TxnIndex(self.index_path)
            verify_snapshot(self.upstream,
                            snapshot_tables(index, index.resolved_ts(), config), config)

    def resolve_start_ts(self, start_ts) -> int:
        self._ensure_puller()
        return self._resolve_start(str(start_ts))

    def _resolve_start(self, start: str) -> int:
        """TxnIndex.resolve_start, back-filling the index first for a start before it that the
        upstream's binlog still has (upstream/backfill.py)."""
        from sparkcdc.upstream.txn_index import StartBeforeIndex

        index = TxnIndex(self.index_path)
        try:
            return index.resolve_start(start)
        except StartBeforeIndex:
            with self._backfill_lock:  # one walk at a time; a concurrent call may have done it
                try:
                    return index.resolve_start(start)
                except StartBeforeIndex as before:
                    from sparkcdc.upstream.backfill import Backfill

                    Backfill(self.upstream, index, self._walk_server_id).run(before)
            return index.resolve_start(start)

    def current_tso(self) -> int:
        return tso.compose(int(time.time() * 1000))

    def start(self, info: ChangefeedInfo) -> None:
        self._ensure_puller()
        if self.cluster is None:  # in a cluster the owner assigns it to a capture
            self._runner.start(info)

    def stop(self, namespace: str, changefeed_id: str) -> None:
        if self._runner is not None:
            self._runner.stop(namespace, changefeed_id)

    def verify_tables(self, config: ReplicaConfig, start_ts, sink_uri: str = "") -> tuple[list, list]:
        """(eligible, ineligible) tables at start_ts (0 = now) for the config's filter; a given
        sink URI is checked first, so a bad one is named before any table."""
        from sparkcdc.sink.registry import verify_tables

        if sink_uri:
            parse_sink_spec(sink_uri, config)
        self._ensure_puller()
        index = TxnIndex(self.index_path)
        ts = self._resolve_start(str(start_ts)) if start_ts else index.resolved_ts()
        return verify_tables(index.tables_at(ts), config)

    def processors(self) -> list[tuple[str, str, str]]:
        """(namespace, changefeed id, capture id) of every changefeed a capture runs."""
        if self.cluster is None:
            running = self._runner.running() if self._runner is not None else []
            return sorted((namespace, changefeed_id, self.id) for namespace, changefeed_id in running)
        return sorted((namespace, changefeed_id, assignment.capture_id)
                      for (namespace, changefeed_id), assignment in self.cluster.assignments().items())

    def processor_table_ids(self, info: ChangefeedInfo) -> list[int]:
        """Ids of the tables the changefeed replicates at its checkpoint (TiCDC's ProcessorDetail)."""
        from sparkcdc.config.replica import replica_config_from_dict
        from sparkcdc.sink.registry import verify_tables

        index = TxnIndex(self.index_path)
        checkpoint = self.store.get_status(info.namespace, info.id).checkpoint_ts
        ts = checkpoint or index.resolved_ts()
        # Asked by every changefeed query: the filter runs again only when the tables or the config change.
        key = (json.dumps(info.config, sort_keys=True, default=str), index.tables_key_at(ts))
        memo = self._table_ids_memo.get((info.namespace, info.id))
        if memo is None or memo[0] != key:
            eligible, _ = verify_tables(index.tables_at(ts), replica_config_from_dict(info.config))
            memo = (key, sorted(table.table_id for table in eligible))
            if len(self._table_ids_memo) > 64:  # removed changefeeds' answers go some time
                self._table_ids_memo.clear()
            self._table_ids_memo[(info.namespace, info.id)] = memo
        return list(memo[1])

    def puller_resolved_ts(self) -> int:
        return TxnIndex(self.index_path).resolved_ts()

    def upstream_tso(self) -> int:
        """The TSO of `sparkcdc cli tso query` (Puller.tso): the upstream's present, as PD's."""
        return self._ensure_puller().tso() or self.current_tso()

    def last_synced_ts(self, checkpoint_ts: int, lookback_ms: int = 600_000) -> int:
        """Commit ts of the newest upstream transaction at or below the checkpoint, i.e. the last
        change the sink has passed (before filtering). Looks back in growing windows, so a long
        idle history costs a few indexed range reads; 0 when none is found within ~1 year."""
        index = TxnIndex(self.index_path)
        window = tso.compose(lookback_ms)
        while window <= tso.compose(400 * 86_400_000):
            txns = index.txns_between(max(0, checkpoint_ts - window), checkpoint_ts)
            if txns:
                return txns[-1].commit_ts
            if checkpoint_ts - window <= 0:
                return 0
            window *= 16
        return 0

    def metadata(self) -> list[tuple[str, str]]:
        if self.cluster is None:
            return self.store.metadata()
        return [(kv.key, kv.value.decode("utf-8", errors="replace"))
                for kv in self.cluster.client.get_prefix(self.cluster.keys.prefix)]

    def verify_user(self, user: str, password: str) -> bool:
        """TiCDC checks a client user by logging in to the upstream; so do we."""
        from dataclasses import replace as with_fields

        try:
            with_fields(self.upstream, user=user, password=password).connect_any(connect_timeout=5).close()
        except SparkCDCError as exc:
            cause = exc.__cause__
            if cause is not None and cause.args and cause.args[0] == _ER_ACCESS_DENIED:
                return False
            raise  # the upstream is down: say so (503) rather than blame the password
        return True

    def capture_info(self) -> dict:
        is_owner = True if self.cluster is None else self.cluster.is_owner()
        return {"id": self.id, "address": self.options.addr, "cluster_id": self.options.cluster_id,
                "is_owner": is_owner}

    def _cluster_capture_info(self) -> dict:
        from sparkcdc import __version__
        from sparkcdc.server.cluster import capture_info_document

        index = TxnIndex(self.index_path)
        start, start_gtid = index.start_position(), index.start_gtid()
        return capture_info_document(self.id, self.options.addr, str(start) if start else "", __version__,
                                     str(start_gtid) if start_gtid is not None else "")

    # -- cluster (Open API: captures, drain, owner resign) -------------------------------------
    def list_captures(self) -> list[dict]:
        if self.cluster is None:
            info = self.capture_info()
            return [{"id": info["id"], "is_owner": True, "address": info["address"], "cluster_id": info["cluster_id"]}]
        return self.cluster.captures()

    def drain_capture(self, capture_id: str) -> int:
        if self.cluster is None:
            raise ErrAPIInvalidParam(
                "drain needs a cluster (`sparkcdc server --pd`); a single node has nowhere to move its changefeeds to")
        return self.cluster.drain(capture_id)

    def resign_owner(self) -> bool:
        return self.cluster.resign() if self.cluster is not None else False
