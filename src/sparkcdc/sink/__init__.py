"""Sinks: wire codecs (`sink.codec`) and the storage sink (`sink.storage`)."""
