"""The maths every worker runs, free of any transport: the array backend (NumPy or CuPy),
the models over one flat parameter vector, the optimiser, the learning-rate schedules and
the evaluation metrics."""
