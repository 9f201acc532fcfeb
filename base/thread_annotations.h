// Clang thread-safety annotations (-Wthread-safety): which mutex guards a
// field, which a function needs held, which a function takes or releases.
// clang checks them at compile time (scripts/thread_safety.sh); other
// compilers see empty macros. See
// https://clang.llvm.org/docs/ThreadSafetyAnalysis.html for the semantics.
//
// Prefixed KVIDX_: abseil (which gRPC brings in) still defines GUARDED_BY,
// PT_GUARDED_BY and NO_THREAD_SAFETY_ANALYSIS unprefixed, differently
// spelt, so unprefixed names here would be redefinitions.
//
// Lambdas are analysed as functions of their own that hold nothing: a
// lambda run under a lock says so with the mutex's AssertHeld().
#pragma once

#if defined(__clang__)
#define KVIDX_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVIDX_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (kvidx::Mutex).
#define KVIDX_CAPABILITY(name) KVIDX_THREAD_ANNOTATION(capability(name))
// An RAII type that holds a lock for its scope (kvidx::MutexLock).
#define KVIDX_SCOPED_CAPABILITY KVIDX_THREAD_ANNOTATION(scoped_lockable)
// A field read or written only with the mutex held.
#define KVIDX_GUARDED_BY(mu) KVIDX_THREAD_ANNOTATION(guarded_by(mu))
// A pointer field whose pointee is accessed only with the mutex held.
#define KVIDX_PT_GUARDED_BY(mu) KVIDX_THREAD_ANNOTATION(pt_guarded_by(mu))
// A function called only with the mutexes held.
#define KVIDX_REQUIRES(...) KVIDX_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// A function that takes / releases the mutexes (none named: `this`).
#define KVIDX_ACQUIRE(...) KVIDX_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define KVIDX_RELEASE(...) KVIDX_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// A function called only without the mutexes held (it takes them).
#define KVIDX_EXCLUDES(...) KVIDX_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that returns only if the mutex is held (tells the analysis so).
#define KVIDX_ASSERT_CAPABILITY(mu) KVIDX_THREAD_ANNOTATION(assert_capability(mu))
// Opts a function out of the analysis (say why where it is used).
#define KVIDX_NO_THREAD_SAFETY_ANALYSIS KVIDX_THREAD_ANNOTATION(no_thread_safety_analysis)
