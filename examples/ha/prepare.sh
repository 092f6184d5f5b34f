#!/bin/sh
# Writes the config files compose.yaml mounts. Run it once, before the
# first "docker compose up"; afterwards the files belong to the nodes
# (Sentinel and CONFIG REWRITE change them).
set -eu
cd "$(dirname "$0")"
mkdir -p node1 node2 node3 sentinel1 sentinel2 sentinel3
printf '# cellserver-1 starts as the primary\n' > node1/cellserver.conf
for n in 2 3; do
  printf '# cellserver-%s starts as a replica\nreplicaof 172.28.0.11 6379\n' "$n" > "node$n/cellserver.conf"
done
for n in 1 2 3; do cp sentinel.conf "sentinel$n/sentinel.conf"; done
# cellserver runs as the image's nonroot user (65532), which must be able
# to replace its config file.
chown -R 65532:65532 node1 node2 node3 2>/dev/null || chmod -R a+rwX node1 node2 node3
