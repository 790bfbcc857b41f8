"""What the stages run on: Spark sessions and their JVM (spark.py, jars, the class
archive, huge pages, GC pauses) and how a process ends."""
