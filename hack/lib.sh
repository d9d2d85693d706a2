# Shared by the hack/ scripts (source it).

# nodelet_host_flags prints the flags nodelet needs on this host: like the
# upstream kubelet, nodelet refuses a cgroup v1 host unless told
# otherwise.
nodelet_host_flags() {
	if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
		echo "--fail-cgroupv1=false"
	fi
}
