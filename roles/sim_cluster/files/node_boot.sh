#!/bin/sh
# What a simulated node does at boot that a Spark gets from its hardware and its packages (node_boot.service, before
# Docker): its Docker CLI talks to the node's own daemon (node_daemon.py runs it beside the node, its socket folder
# mounted here), and its /dev/shm starts empty (nothing held, nothing pinned, no page cache: a power cycle).
set -eu
sim=/run/dgx-spark-sim
ln -sf "$sim/docker/docker.sock" /run/docker.sock
find /dev/shm -mindepth 1 -delete
