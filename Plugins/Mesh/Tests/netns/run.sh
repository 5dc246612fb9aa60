#!/usr/bin/env bash
# The mesh transport's network-namespace suite, as Tests/run.sh calls it: the line
# of four hubs (links, messages, partition, SIGKILL), the ring of five (each envelope
# crosses each link at most once), spray-and-wait (bounded copies, wait phase, direct
# delivery to the recipient's hub) and IPv6 link-local only links (discovery, a static
# [fe80::…%if] peer, a message and its receipt) and three hubs whose clocks disagree
# (-2 d, true, +3 d under faketime: certified, time learnt, mail and receipts both ways). Exit 0 = passed, 77 = skipped (no
# root or no `ip netns`), anything else = failed.
#   sudo BIN=.build-mesh/debug Plugins/Mesh/Tests/netns/run.sh
dir=$(dirname "$0")
rc=0
for t in line.sh ring.sh spray.sh ipv6.sh clocks.sh; do
    echo "-- mesh netns: $t"
    bash "$dir/$t"
    r=$?
    if [ $r -eq 77 ]; then exit 77; fi
    if [ $r -ne 0 ]; then rc=1; fi
done
exit $rc
