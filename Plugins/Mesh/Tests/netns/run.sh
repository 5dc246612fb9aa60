#!/usr/bin/env bash
# The mesh transport's network-namespace suite, as Tests/run.sh calls it: the line
# of four hubs (links, messages, partition, SIGKILL) and the ring of five (each
# envelope crosses each link at most once). Exit 0 = passed, 77 = skipped (no
# root or no `ip netns`), anything else = failed.
#   sudo BIN=.build-mesh/debug Plugins/Mesh/Tests/netns/run.sh
dir=$(dirname "$0")
rc=0
for t in line.sh ring.sh; do
    echo "-- mesh netns: $t"
    bash "$dir/$t"
    r=$?
    if [ $r -eq 77 ]; then exit 77; fi
    if [ $r -ne 0 ]; then rc=1; fi
done
exit $rc
