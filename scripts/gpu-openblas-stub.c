/* Stands in for OpenBLAS in the GPU test and benchmark binaries and the voxd command that
 * scripts/gpu-pack.sh carries to the GPU machine: they link voxd's CPU backend (through the
 * backend registry) but never run it there (`voxd serve --device cuda` makes no CPU backend; only
 * CpuBackend calls OpenBLAS: cblas_sgemm, and openblas_set_num_threads when it is made), and
 * Debian's libopenblas.so.0 (36 MB with its Fortran runtime) would not fit the carry. Any call
 * means a CPU kernel ran on the GPU machine: say so and stop. */
#include <stdio.h>
#include <stdlib.h>

static void no_cpu_backend(const char* name) {
  fprintf(stderr, "%s: voxd's CPU backend ran on the GPU machine, where OpenBLAS is a stub\n",
          name);
  abort();
}

void cblas_sgemm(void) { no_cpu_backend("cblas_sgemm"); }
void openblas_set_num_threads(void) { no_cpu_backend("openblas_set_num_threads"); }
