// The trainer's GEMMs are OpenBLAS's. When the OpenBLAS it loaded took the
// CPU for an older one (env/openblas.hpp: Debian 12's takes an Emerald
// Rapids Xeon for a Prescott, and multiplies at a third of the speed) and the
// user chose no core (OPENBLAS_CORETYPE), the trainer runs itself again with
// the kernels the CPU runs: the same process (exec), before anything else,
// so ddprun's supervision does not see it. It says so once (rank 0, or a run
// outside ddprun), on stderr.
#pragma once

namespace ddprun::train {

// Call before any training starts, with main's argv.
void UseTheCpusOpenBlasKernels(char** argv);

// Whether the address-space limit (ulimit -v) leaves room for OpenBLAS's work
// buffer (128 MiB, mapped at the first GEMM): OpenBLAS retries a failed
// mapping forever, so a rank that lacks it would spin at 100% CPU without a
// word. Says why on stderr when there is none (with `who`: "rank 3"); where
// there is, OpenBLAS maps its buffers at once, before the model and the
// process group take the room. Call before the model is made.
bool OpenBlasHasRoom(const char* who);

// The threads each GEMM runs on (OpenBLAS's, from OMP_NUM_THREADS or the
// CPUs; 1 for another BLAS). The sums inside a GEMM are split by it, so a
// checksum is reproduced bit for bit only with as many threads per process.
int GemmThreads();

}  // namespace ddprun::train
