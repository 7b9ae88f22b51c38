#!/bin/sh
# docker.service's stand-in on a simulated node (node_docker.service): every unit ordered before Docker is done when
# systemd runs this, so it says so in $sim/booted (the start time of this boot's init, which tells this boot's mark
# from the last one's), which node_daemon.py waits for before it starts the node's dockerd; then it waits for that
# daemon to answer.
set -eu
sim=/run/dgx-spark-sim
awk '{print $22}' /proc/1/stat > "$sim/booted"
until docker info > /dev/null 2>&1; do sleep 0.5; done
