"""Sample data: the synthetic TiDB workload (workload/) and its value cases, for the
demo, the benchmarks and the tests."""
