"""The `sparkcdc` command line: `sparkcdc cli ...` (cli_cmd) and `sparkcdc server` (server_cmd)."""
