"""Changefeed configuration: TiCDC's TOML keys, defaults in one place, validated at the edge."""
