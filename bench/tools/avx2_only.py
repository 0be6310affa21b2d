"""Run a command with every kernel library this project calls held to AVX2: a CPU with AVX-512 (and
bf16 units) imitating an AVX2-only one, as a lower bound on that CPU's time.

    python bench/tools/avx2_only.py --check                      # what each library does held, as figures
    python bench/tools/avx2_only.py -- .venv/bin/grebench run full  # any command, the limits in its environment

The limits, one per library, because each picks its own instructions at run time:

* torch's own kernels (ATen: SDPA, norms, elementwise): `ATEN_CPU_CAPABILITY=avx2`;
* MKL (torch's float32 matmuls): `MKL_ENABLE_INSTRUCTIONS=AVX2`;
* oneDNN (bfloat16 matmuls and convolutions): `ONEDNN_MAX_CPU_ISA=AVX2`;
* FBGEMM (the dynamic int8 layers the generating roles decode with, tasks/lm/loading.py
  `quantize_int8`): `FBGEMM_ENABLE_INSTRUCTIONS=AVX2`, without which they keep their AVX-512 VNNI
  kernels (torch's other limits leave them alone);
* this project's own choices: `GREBENCH_CPU_BF16=0` (no bf16 units: "auto" is float32, a pinned
  bfloat16 model multiplies in float32, tasks/lm/wide_bf16.py) and `GREBENCH_CPU_KERNEL=0` (no AVX-512
  BF16 C kernels, tasks/lm/cpu_kernels.py).

The host's caches, clock and memory bandwidth stay: a real AVX2-only CPU is as fast or slower (a real
AVX2-only EPYC ran the demo 1.6x slower than this imitation, docs/figures.md). `--check` prints what torch
reports and the speed of a float32, a bfloat16 and an int8 product of the engine's shapes, not held, held
but for FBGEMM, and held, side by side in one run; last line JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

LIMITS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    "GREBENCH_CPU_BF16": "0",
    "GREBENCH_CPU_KERNEL": "0",
}

# One process's measurement, run once per condition: each library reads its limit once, at its start.
PROBE = """
import json, time, warnings
import torch
warnings.filterwarnings("ignore")
torch.set_num_threads(2)
rows, width, inner = 1024, 576, 1536          # a SmolLM2-135M MLP layer on a batch of the engine's
x = torch.randn(rows, width)
dense = torch.nn.Linear(width, inner)
int8 = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(width, inner)),
                                              {torch.nn.Linear}, dtype=torch.qint8)
def rate(run, seconds=1.5):
    run(); best = 0.0; end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter(); run(); run()
        best = max(best, 2 * 2 * rows * width * inner / (time.perf_counter() - start) / 1e9)
    return round(best, 1)
xb, wb = x.bfloat16(), dense.weight.detach().bfloat16()
with torch.inference_mode():
    print(json.dumps({"torch_capability": torch.backends.cpu.get_cpu_capability(),
                      "float32_gflops": rate(lambda: dense(x)),
                      "bfloat16_gflops": rate(lambda: torch.nn.functional.linear(xb, wb)),
                      "int8_gops": rate(lambda: int8(x))}))
"""


def check() -> dict:
    """The probe's figures not held, held as this project's figures before FBGEMM's limit was added (int8 left
    on its AVX-512 kernels), and held, one after the other."""
    bare = {k: v for k, v in os.environ.items() if k not in LIMITS}
    but_fbgemm = {k: v for k, v in LIMITS.items() if k != "FBGEMM_ENABLE_INSTRUCTIONS"}
    figures = {}
    for name, limits in (("not_held", {}), ("held_but_fbgemm", but_fbgemm), ("held", LIMITS)):
        environment = {**bare, **limits}
        done = subprocess.run([sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True,
                              check=True)
        figures[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:15s} {figures[name]}")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="measure what the limits do here, then stop")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run held (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.check:
        started = time.perf_counter()
        figures = check()
        print(json.dumps({"limits": LIMITS, **figures, "seconds": round(time.perf_counter() - started, 1)}))
        return 0
    if not command:
        parser.error("name a command after --, or ask for --check")
    print("held to AVX2: " + " ".join(f"{k}={v}" for k, v in LIMITS.items()), file=sys.stderr)
    os.execvpe(command[0], command, {**os.environ, **LIMITS})


if __name__ == "__main__":
    sys.exit(main())
