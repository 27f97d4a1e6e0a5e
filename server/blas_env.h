// BLAS/OpenMP environment for shoald, fixed before the libraries initialise.
//
// OpenBLAS and libgomp read their settings from the environment when they are loaded, which
// happens before main(). So shoald checks the environment first thing and, when it is not
// what I-2 needs, sets it and re-executes itself once:
//   OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1  no library thread pools behind the arena
//   OPENBLAS_CORETYPE=SkylakeX                 on AVX-512 CPUs, which Debian's OpenBLAS
//                                              0.3.21 does not recognise (it would fall back
//                                              to Prescott kernels, ~6x slower sgemm)
// Variables the user set explicitly are left alone.
#pragma once

namespace shoal::server {

// Returns normally when the environment is right; otherwise re-executes (does not return)
// unless exec fails, in which case it logs nothing and returns (the server still works).
void EnsureBlasEnvironment(char** argv);

}  // namespace shoal::server
