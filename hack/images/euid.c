/*
 * euid prints the effective user ID. Installed setuid root in the test
 * images, it shows whether a container can gain privileges: with
 * allowPrivilegeEscalation: false (no_new_privs) it prints the real uid.
 */
#include <stdio.h>
#include <unistd.h>

int main(void) {
	printf("%d\n", (int)geteuid());
	return 0;
}
