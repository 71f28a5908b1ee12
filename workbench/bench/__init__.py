"""The benchmarks and measurement tools: `python -m workbench bench` and its variants.

`command` is the command (arguments, sizes and rounds, the printout); `throughput` its
measurements (each algorithm against its limits); `allreduce` the exchanges beside gloo's;
`torchpeer` the optional PyTorch peer; `simulated` what simulating P workers costs
(`--simulated`); `checkpoints` what checkpoints cost; `gpt` and `adapter` our GPT and the
PyTorch adapter beside PyTorch eager; `records` a long run's memory and stop measured from
outside; `gpucheck` the GPU paths on a machine with an NVIDIA GPU. Benchmarks, not tests:
they print ratios measured in one run (docs/benchmarks.md).
"""
