"""The application: the ticdc-lake command line, a whole pipeline run and its report,
and the demo."""
