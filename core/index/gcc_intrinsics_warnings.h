// Included after <immintrin.h> by the files that use AVX-512 intrinsics: GCC 12 reports a false
// "uninitialized" inside avx512fintrin.h's masked loads and conversions (GCC bug 105593; the
// masked-out lanes are zeroed, the pass-through operand unused). Silences it for that file only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
