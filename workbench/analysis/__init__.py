"""What is made of runs: the cost model, scaling sweeps, benchmarks and the shape checks
of the paper reproductions."""
