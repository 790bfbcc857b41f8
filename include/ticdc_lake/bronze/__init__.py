"""Bronze: TiCDC's Kafka export files landed as they are, one row per Kafka record
(land.py, the Land stage; the export readers in exports.py)."""
