package io.sparkcdc.bench;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.cdc.connectors.mysql.source.MySqlSource;
import org.apache.flink.cdc.connectors.mysql.table.StartupOptions;
import org.apache.flink.cdc.debezium.JsonDebeziumDeserializationSchema;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.SinkFunction;

import java.util.concurrent.atomic.AtomicLong;

/**
 * Flink CDC's MySQL source (binlog only, from the earliest offset) on a local MiniCluster with
 * parallelism 1, every change as Debezium JSON, counted until `expected` row changes arrived.
 *
 * Usage: FlinkCdcBench HOST PORT EXPECTED_ROWS DATABASE TABLE [STARTUP [PARALLELISM]]
 * STARTUP earliest (default: the binlog from its start) or initial (scan.startup.mode=initial: the
 * incremental snapshot of the table's rows in chunks, then the binlog) with PARALLELISM readers.
 * Prints one line: rows=N seconds=S first_record_seconds=F bytes=B
 */
public final class FlinkCdcBench {
    static final AtomicLong ROWS = new AtomicLong();
    static final AtomicLong BYTES = new AtomicLong();
    static final AtomicLong FIRST = new AtomicLong();
    static long start;
    static long expected;

    static final class CountingSink implements SinkFunction<String> {
        @Override
        public void invoke(String value, Context context) {
            FIRST.compareAndSet(0, System.nanoTime());
            BYTES.addAndGet(value.length());
            if (ROWS.incrementAndGet() == expected) {
                long end = System.nanoTime();
                System.out.printf("rows=%d seconds=%.3f first_record_seconds=%.3f bytes=%d%n", ROWS.get(),
                    (end - start) / 1e9, (FIRST.get() - start) / 1e9, BYTES.get());
                System.out.flush();
                Runtime.getRuntime().halt(0);
            }
        }
    }

    public static void main(String[] args) throws Exception {
        start = System.nanoTime();
        expected = Long.parseLong(args[2]);
        String startup = args.length > 5 ? args[5] : "earliest";
        int parallelism = args.length > 6 ? Integer.parseInt(args[6]) : 1;
        MySqlSource<String> source = MySqlSource.<String>builder()
            .hostname(args[0])
            .port(Integer.parseInt(args[1]))
            .databaseList(args[3])
            .tableList(args[3] + "." + args[4])
            .username("root")
            .password("")
            .serverId(parallelism > 1 ? "990888-" + (990888 + parallelism - 1) : "990888")
            .startupOptions("initial".equals(startup) ? StartupOptions.initial() : StartupOptions.earliest())
            .deserializer(new JsonDebeziumDeserializationSchema())
            .build();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(parallelism);
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "mysql-cdc").addSink(new CountingSink());
        env.execute("sparkcdc-bench-flink-cdc");
    }
}
