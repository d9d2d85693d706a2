/*
 * nsexec runs a program inside the cgroup, PID and mount namespaces of
 * another process (a systemd test bed's PID 1) and waits for it,
 * forwarding termination signals and passing on how it ended.
 *
 *   nsexec <pid> <program> [args...]
 *
 * util-linux's nsenter does the same, but when its child is stopped
 * (systemd-shutdown SIGSTOPs every process before killing it) it stops
 * itself too, outside the namespace where nobody continues it: the child
 * then stays a zombie and the bed's shutdown waits 90 s for it. nsexec
 * never waits for stops.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t child;

static void forward(int sig) {
	if (child > 0)
		kill(child, sig);
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: nsexec <pid> <program> [args...]\n");
		return 2;
	}
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof cwd))
		strcpy(cwd, "/");
	/* The mount namespace last: the /proc paths are the host's. */
	const char *kinds[] = {"cgroup", "pid", "mnt"};
	int fds[3];
	for (int i = 0; i < 3; i++) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%s/ns/%s", argv[1], kinds[i]);
		if ((fds[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			fprintf(stderr, "nsexec: %s: %s\n", path, strerror(errno));
			return 1;
		}
	}
	for (int i = 0; i < 3; i++) {
		if (setns(fds[i], 0) < 0) {
			fprintf(stderr, "nsexec: entering the %s namespace: %s\n", kinds[i], strerror(errno));
			return 1;
		}
		close(fds[i]);
	}
	if (chdir(cwd) < 0 && chdir("/") < 0)
		return 1;
	int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
	struct sigaction sa = {.sa_handler = forward};
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
	child = fork();
	if (child < 0) {
		fprintf(stderr, "nsexec: fork: %s\n", strerror(errno));
		return 1;
	}
	if (child == 0) {
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
			sigaction(sigs[i], &dfl, NULL);
		execvp(argv[2], argv + 2);
		fprintf(stderr, "nsexec: %s: %s\n", argv[2], strerror(errno));
		_exit(127);
	}
	int status;
	while (waitpid(child, &status, 0) < 0) {
		if (errno != EINTR) {
			fprintf(stderr, "nsexec: waitpid: %s\n", strerror(errno));
			return 1;
		}
	}
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status)) {
		signal(WTERMSIG(status), SIG_DFL);
		kill(getpid(), WTERMSIG(status));
	}
	return 1;
}
