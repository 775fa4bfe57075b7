"""The Kafka sink: TiCDC's MQ sink (cdc/sink/dmlsink/mq) producing with librdkafka."""
