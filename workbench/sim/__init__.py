"""The simulated cluster: up to 1024 virtual GPU and CPU workers in this process, on a virtual clock.

`RunConfig(simulate=True, ...)` (CLI `--simulate`) runs the real algorithm classes and the
engine's one worker loop (`engine.worker_main` -> `algorithms.base.run_loop`) for every
virtual worker, as one more transport (`sim/transport.py: SimTransport`). What is simulated is
*time*; the maths is the real thing:

* every virtual worker is a greenlet; one driver thread switches them in virtual-time
  order (`sim.clock.Scheduler`), so the run is deterministic: the same seed and profiles
  give bitwise the same run, asynchronous algorithms included;
* compute is charged, not measured: `loss_and_grad` on a virtual worker costs what the
  device model says (`sim.profiles`: named devices with sources, the fixed `core` by
  default, or this machine's core when `cpu_device="local"` asks, timed once and cached by
  `sim.calibration`) for the model's FLOPs per sample, or for a named published
  network's (`sim.timing_models`: `--timing-model alexnet`), plus a per-step overhead and the update;
* communication is charged by the network model (`costmodel.NETWORKS` and host-device
  links, `sim.costs`) in each algorithm's own pattern (ring/tree allreduce, parameter
  server round trips serialised at the server, round-robin turns, LTFB swaps, cgdp's
  chunk transfers overlapping the backward pass);
* every read of a worker's clock is a synchronisation point: the worker's charged time
  is added and it yields until every event before that virtual time has happened, so
  asynchronous operations (server push/pull, elastic exchanges, Hogwild writes,
  tournaments) take effect in virtual-time order and staleness comes out of the timing.

Where an algorithm's declaration names a fast path (`AlgorithmSpec.fast_path`), every
virtual worker runs in one loop on stacks of rows, calling the family's own maths and the
loop's contract (`algorithms.base.close_step`), bitwise the per-worker run
(`sim/lockstep.py`, `sim/server.py`; docs/architecture.md).

Times in records are virtual seconds; `summary.json` says `simulated: true`, the device,
network and timing model, `sim_wall_s` (what the simulation itself took) and `sim_path`
(`lockstep`: a fast path ran; `per worker`: one greenlet per virtual worker).
"""
