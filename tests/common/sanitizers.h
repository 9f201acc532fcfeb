// Whether this test binary runs under AddressSanitizer or ThreadSanitizer
// (GCC defines __SANITIZE_*__, clang answers __has_feature): tests that
// repeat work to find rare interleavings or states scale it down there,
// where code runs several times slower.
#pragma once

namespace kvidx {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace kvidx
