"""tidb-lakehouse: TiCDC Kafka exports → bronze → silver → gold Delta tables."""

__version__ = "0.1.0"
