"""Helpers that start real services for tests and demos."""
