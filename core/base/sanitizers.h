// Which sanitizer this build runs under, for GCC and clang alike (GCC defines
// __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang 14 answers only __has_feature):
// SHOAL_ASAN in AddressSanitizer builds, SHOAL_TSAN in ThreadSanitizer builds.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define SHOAL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHOAL_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define SHOAL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHOAL_TSAN 1
#endif
#endif
