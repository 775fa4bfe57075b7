"""Sinks, chosen by URI scheme in `sink.registry`: storage, MySQL and Kafka, over the wire codecs of `sink.codec`."""
