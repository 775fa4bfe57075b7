package io.sparkcdc.bench;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Debezium's embedded engine with its MariaDB connector reading an existing binlog from its start
 * (catch-up mode), every change record serialized to schemaless JSON and counted, until
 * `expected` row changes have arrived. No Kafka: file offset store and file schema history.
 *
 * Usage: DebeziumBench HOST PORT EXPECTED_ROWS WORK_DIR [SNAPSHOT_MODE [TABLE]]
 * SNAPSHOT_MODE (default never) is Debezium's snapshot.mode; with initial_only the records are the
 * snapshot's reads of TABLE ("db.table"), taken without locks (snapshot.locking.mode=none).
 * Prints one line: rows=N seconds=S first_record_seconds=F bytes=B
 */
public final class DebeziumBench {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        String port = args[1];
        long expected = Long.parseLong(args[2]);
        String workDir = args[3];

        Properties props = new Properties();
        props.setProperty("name", "sparkcdc-bench");
        props.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
        props.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        props.setProperty("offset.storage.file.filename", workDir + "/offsets.dat");
        props.setProperty("offset.flush.interval.ms", "60000");
        props.setProperty("database.hostname", host);
        props.setProperty("database.port", port);
        props.setProperty("database.user", "root");
        props.setProperty("database.password", "");
        props.setProperty("database.server.id", "990777");
        props.setProperty("database.ssl.mode", "disable");
        props.setProperty("topic.prefix", "bench");
        props.setProperty("snapshot.mode", args.length > 4 ? args[4] : "never");
        if (args.length > 5) {
            props.setProperty("table.include.list", args[5]);
            props.setProperty("snapshot.locking.mode", "none");
        }
        props.setProperty("include.schema.changes", "false");
        props.setProperty("tombstones.on.delete", "false");
        props.setProperty("schema.history.internal", "io.debezium.storage.file.history.FileSchemaHistory");
        props.setProperty("schema.history.internal.file.filename", workDir + "/schema-history.dat");
        props.setProperty("converter.schemas.enable", "false");

        AtomicLong rows = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        AtomicLong firstRecord = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        long start = System.nanoTime();
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
            .using(props)
            .notifying((records, committer) -> {
                for (ChangeEvent<String, String> record : records) {
                    String value = record.value();
                    if (value != null) {
                        firstRecord.compareAndSet(0, System.nanoTime());
                        bytes.addAndGet(value.length());
                        if (rows.incrementAndGet() == expected) {
                            done.countDown();
                        }
                    }
                    committer.markProcessed(record);
                }
                committer.markBatchFinished();
            })
            .using((success, message, error) -> {
                if (!success) {
                    System.err.println("engine stopped: " + message);
                    if (error != null) {
                        error.printStackTrace();
                    }
                    System.exit(3);
                }
            })
            .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        done.await();
        long end = System.nanoTime();
        System.out.printf("rows=%d seconds=%.3f first_record_seconds=%.3f bytes=%d%n", rows.get(),
            (end - start) / 1e9, (firstRecord.get() - start) / 1e9, bytes.get());
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
