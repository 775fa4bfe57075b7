"""What a capture tells the outside about itself: Prometheus metrics (`metrics`), the status
page's recent history (`history`), the changefeed a log line belongs to (`log_context`) and the
progress of long work (`progress`).

The bottom of the layers (docs/architecture.md): any layer that owns a number may record it here,
and nothing here imports the rest of sparkcdc.
"""
