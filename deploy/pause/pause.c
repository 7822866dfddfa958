/* The pod sandbox's process ("pause"): holds the pod's namespaces open, reaps the zombies of a pod
 * that shares its PID namespace, and exits on SIGINT/SIGTERM. The e2e node cannot pull
 * registry.k8s.io/pause, so deploy/build-images compiles this (static, no libc at run time). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("switchyard pause");
    return 0;
  }
  if (getpid() != 1) {
    fprintf(stderr, "pause: warning: not PID 1, zombies will not be reaped\n");
  }
  struct sigaction term = {.sa_handler = stop};
  struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
