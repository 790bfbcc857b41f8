from ticdc_lake.app.cli import run

run()
