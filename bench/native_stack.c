/* A native stack on SIGSEGV/SIGBUS, for a crash inside a C++ library where no gdb is installed.
 *
 *   gcc -shared -fPIC -O1 -o libnative_stack.so bench/native_stack.c -ldl
 *   LD_PRELOAD=$PWD/libnative_stack.so python -X faulthandler crashing_script.py
 *
 * Prints each frame's library, offset and nearest exported symbol (dladdr), then lets the signal kill
 * the process as before (Python's faulthandler chains to it).  It found the AOTInductor loader crash of
 * bench/results/session-2026-11-26e: std::regex inside a package's wrapper library that had libstdc++
 * linked in statically.
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
#include <string.h>
#include <stdio.h>
#include <dlfcn.h>
static void handler(int sig, siginfo_t *info, void *ctx) {
  void *frames[64];
  char buf[256];
  int n = backtrace(frames, 64);
  int len = snprintf(buf, sizeof buf, "\n*** native signal %d at address %p; %d frames:\n", sig, info->si_addr, n);
  write(2, buf, len);
  for (int i = 0; i < n; i++) {
    Dl_info d;
    if (dladdr(frames[i], &d) && d.dli_fname) {
      len = snprintf(buf, sizeof buf, "#%d %s +0x%lx %s\n", i, d.dli_fname,
                     (unsigned long)((char *)frames[i] - (char *)d.dli_fbase), d.dli_sname ? d.dli_sname : "?");
    } else {
      len = snprintf(buf, sizeof buf, "#%d %p\n", i, frames[i]);
    }
    write(2, buf, len);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGBUS, &sa, 0);
}
