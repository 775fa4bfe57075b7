"""sparkcdc: change data capture with TiCDC's contract, on Apache Spark."""

__version__ = "0.1.0"
