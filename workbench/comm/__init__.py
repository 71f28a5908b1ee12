"""Communication: the interface (base) and its implementations (threads, shm, dask, nccl)."""
