// ThreadSanitizer suppressions for the ingest tests, compiled into the test
// binary so that every runner (ctest, CI, a developer) gets them without
// TSAN_OPTIONS.
//
// libzmq (Debian's, not instrumented) hands messages and file descriptors
// between application threads and its I/O threads through its own lock-free
// pipes and mailboxes. TSan sees only the intercepted libc calls at each end
// (socket/close/epoll_ctl/malloc/free) and none of the synchronisation in
// between, so it reports races inside libzmq that are not races. Only frames
// in libzmq itself are suppressed; a race with kvidx code on both sides would
// still be reported.
//
// The function is looked up by TSan at start-up; in other builds it is an
// unused symbol.

extern "C" const char* __tsan_default_suppressions();  // NOLINT(bugprone-reserved-identifier)

extern "C" const char* __tsan_default_suppressions() {
  return "called_from_lib:libzmq.so\n"
         "race:libzmq.so\n";
}
