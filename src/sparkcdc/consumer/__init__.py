"""Consumers of sink output: rebuild table contents from what a sink wrote."""
