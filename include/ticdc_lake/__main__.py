from ticdc_lake.cli import main

raise SystemExit(main())
