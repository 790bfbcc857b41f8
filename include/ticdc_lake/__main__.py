from ticdc_lake.cli import run

run()
