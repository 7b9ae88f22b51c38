#!/bin/sh
# A simulated node's init (installed by dgx_spark.vllm's sim_cluster role): systemd, as on a Spark. The node container
# runs with SYS_ADMIN, a private cgroup namespace and tmpfs on /run and /run/lock (roles/sim_cluster/tasks/node.yml);
# Docker mounts the cgroup hierarchies read-only, so the one systemd keeps its services in (name=systemd on this
# machine's cgroup v1, or the unified one) is made writable first, inside the node's own cgroup namespace.
# What the node runs at boot is systemd's units: node_boot.service (its Docker socket, an empty /dev/shm), sshd, the
# GB10 memory stand-in, the collection's firewall and supervisor units when serve.yml enabled them, and a stand-in
# docker.service (node_docker_ready.sh) that says when the units ordered before Docker are done and waits for the
# node's Docker daemon, which node_daemon.py runs beside the node.
set -eu
for hierarchy in /sys/fs/cgroup/systemd /sys/fs/cgroup; do
  if mountpoint -q "$hierarchy" && grep -q " $hierarchy [^ ]* ro," /proc/self/mountinfo; then
    mount -o remount,rw "$hierarchy"
  fi
done
exec /lib/systemd/systemd
