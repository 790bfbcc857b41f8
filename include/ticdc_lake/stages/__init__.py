"""The pipeline's stages: land → decode → watermark → compact. Each is a function
`stage(spark, config, ...) -> Result` over Delta tables; spark_jobs/ wraps each for spark-submit."""
