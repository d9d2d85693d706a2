/*
 * pause: the process that holds a pod sandbox's namespaces open.
 *
 * It must reap orphaned children (it is PID 1 when the pod shares its PID
 * namespace) and exit promptly on SIGINT/SIGTERM so StopPodSandbox is fast.
 * Built statically so the image needs nothing but this one file.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_terminate(int sig) { _exit(0); }

static void on_child(int sig) {
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void) {
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_terminate;
	if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
		return 1;
	sa.sa_handler = on_child;
	sa.sa_flags = SA_NOCLDSTOP;
	if (sigaction(SIGCHLD, &sa, NULL) < 0)
		return 2;
	for (;;)
		pause();
	return 42;
}
