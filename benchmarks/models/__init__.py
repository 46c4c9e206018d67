"""Model builders for benchmarks and integration tests (random weights, nothing downloaded)."""
