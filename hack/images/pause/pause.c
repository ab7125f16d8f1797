/*
 * sendgroup-pause: the sandbox ("pause") process of a pod.
 *
 * It holds the pod's namespaces open and, as PID 1 of a shared PID namespace, reaps orphaned
 * children so they never stay zombies. It sleeps until a signal arrives: SIGTERM or SIGINT end
 * it with status 0, SIGCHLD reaps every exited child. Same contract as Kubernetes'
 * build/pause/linux/pause.c, written for this project so the image can be built offline.
 *
 * Build: gcc -static -Os -s -o pause pause.c   (no dynamic libraries: the image is FROM scratch)
 * Usage: pause [-v]   (-v prints the version and exits)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "3.10"

static void on_stop(int signo) {
	(void)signo;
	/* Exit without running atexit handlers or flushing stdio: async-signal-safe. */
	_exit(0);
}

static void on_child(int signo) {
	(void)signo;
	int saved = errno;
	/* Reap every child that has exited; WNOHANG so a live child never blocks us. */
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
	errno = saved;
}

static int install(int signo, void (*handler)(int)) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART | (signo == SIGCHLD ? SA_NOCLDSTOP : 0);
	return sigaction(signo, &sa, NULL);
}

int main(int argc, char **argv) {
	if (argc == 2 && strcmp(argv[1], "-v") == 0) {
		printf("sendgroup-pause %s\n", VERSION);
		return 0;
	}
	if (argc != 1) {
		fprintf(stderr, "usage: %s [-v]\n", argv[0]);
		return 2;
	}
	if (getpid() != 1) {
		/* Still useful outside a PID namespace (tests), but say what the contract assumes. */
		fprintf(stderr, "sendgroup-pause: warning: not PID 1, orphans are reaped by the real init\n");
	}
	if (install(SIGINT, on_stop) || install(SIGTERM, on_stop) || install(SIGCHLD, on_child)) {
		perror("sendgroup-pause: sigaction");
		return 1;
	}
	for (;;) {
		pause();
	}
}
