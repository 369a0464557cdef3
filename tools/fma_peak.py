"""Probe: how many 16-lane fp32 multiply-adds a second one core of this CPU runs, from registers only
(12 independent chains, so latency does not bound it), and the clock that a dependent chain implies.

    python -m tools.fma_peak

The compact kernel's extra cost per verify row is its multiply-adds (134.5 M per row for SmolLM2):
this is the ceiling to compare its per-row time against. Needs a C compiler and AVX-512.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

SOURCE = r"""
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
#define CHAIN(x) x = _mm512_fmadd_ps(x, b, c)
int main(void) {
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3),
         a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7),
         a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  const long n = 100000000;
  double t = now();
  for (long k = 0; k < n; ++k) {  // 12 chains in registers (the asm keeps the compiler from folding them)
    CHAIN(a0); CHAIN(a1); CHAIN(a2); CHAIN(a3); CHAIN(a4); CHAIN(a5);
    CHAIN(a6); CHAIN(a7); CHAIN(a8); CHAIN(a9); CHAIN(a10); CHAIN(a11);
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
  }
  t = now() - t;
  const __m512 all[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
  float sum = 0;
  for (int i = 0; i < 12; ++i) sum += _mm512_reduce_add_ps(all[i]);
  __m512 d = _mm512_set1_ps(1);
  double u = now();
  for (long k = 0; k < n; ++k) { d = _mm512_fmadd_ps(d, b, c); __asm__ volatile("" : "+v"(d)); }
  u = now() - u;
  printf("%.2f G 16-lane multiply-adds a second on one core; a dependent one takes %.2f ns "
         "(%.2f GHz at 4 cycles) [%g]\n", 12.0 * n / t / 1e9, u / n * 1e9, 4.0 / (u / n * 1e9),
         sum + _mm512_reduce_add_ps(d));
  return 0;
}
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        source, binary = Path(folder) / "fma_peak.c", Path(folder) / "fma_peak"
        source.write_text(SOURCE)
        subprocess.run(["cc", "-O2", "-mavx512f", "-mfma", "-o", str(binary), str(source)], check=True)
        print(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout, end="")


if __name__ == "__main__":
    main()
