#!/bin/sh
# A simulated node's boot (installed by dgx_spark.vllm's sim_cluster role): its Docker CLI talks to the node's own
# daemon (node_daemon.py starts it beside the node on the machine, its socket folder mounted here), the controller's
# key is authorized for root, its /dev/shm starts empty, the nodes share a key and know each other's host keys (made by the role, kept across
# restarts of the node), its GB10 memory stand-in runs (writing what the node's /proc/meminfo and nvidia-smi show),
# then sshd serves in the foreground.
# The node has no systemd: what systemd does at a Spark's boot before Docker, this does. It starts the units the
# collection enabled (multi-user.target.wants/dgx-spark-vllm-*.service: its firewall) by their ExecStart, then says
# so in $sim/booted (the start time of this boot's init), which node_daemon.py waits for before it starts Docker; the
# units ordered after Docker (the supervisor) start once that daemon answers.
# earlyoom, when host_guard enabled it (its sysvinit link), starts here too, as its unit does on a Spark.
set -eu
sim=/run/dgx-spark-sim
ln -sf "$sim/docker/docker.sock" /var/run/docker.sock
find /dev/shm -mindepth 1 -delete  # a boot: the node's tmpfs starts empty (nothing held, nothing pinned, no page cache)
after_docker=
for unit in /etc/systemd/system/multi-user.target.wants/dgx-spark-vllm-*.service; do
  [ -e "$unit" ] || continue
  if grep -q '^After=.*docker.service' "$unit"; then after_docker="$after_docker $unit"; continue; fi
  sed -n 's/^ExecStart=//p' "$unit" | while read -r command; do
    sh -c "$command" >> "$sim/units.log" 2>&1 && echo "started $unit" >> "$sim/units.log" || echo "FAILED $unit" >> "$sim/units.log"
  done
done
for script in /etc/rc2.d/S*earlyoom; do  # host_guard's earlyoom, enabled the sysvinit way on a node without systemd
  [ -e "$script" ] && "$script" start >> "$sim/units.log" 2>&1 || true
done
awk '{print $22}' /proc/1/stat > "$sim/booted"
# The units ordered after Docker (the supervisor that brings the model back): started once the node's daemon answers,
# in the background, as systemd starts them once docker.service is up.
for unit in $after_docker; do
  command=$(sed -n 's/^ExecStart=//p' "$unit")
  (until docker info >/dev/null 2>&1; do sleep 0.5; done; echo "started $unit" >> "$sim/units.log"
   exec setsid sh -c "$command" </dev/null >> "$sim/units.log" 2>&1) &
done
install -d -m 0700 /root/.ssh
for name in authorized_keys id_ed25519 known_hosts; do ln -sf "$sim/$name" "/root/.ssh/$name"; done
python3 /usr/local/sbin/sim-gb10-memory "$sim" >> "$sim/gb10_memory.log" 2>&1 &
exec /usr/sbin/sshd -D -e -h "$sim/ssh_host_ed25519_key"
