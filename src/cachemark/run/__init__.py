"""Running workloads: the timed op loop (worker) and the process orchestration (runner)."""
