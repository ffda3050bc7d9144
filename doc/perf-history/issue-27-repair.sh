#!/bin/bash
# Time to repair a lost StoC: load, kill the StoC holding most table bytes, delete its directory, remove it as dead.
set -e
cd "$(dirname "$0")/../.."
mkdir -p /tmp/bench27
D=/tmp/bench27/repair-cluster
node bin/nova.js down --dir $D >/dev/null 2>&1 || true
rm -rf $D
node bin/nova.js up --dir $D --stocs ${STOCS:-4} --ranges 2 --bench-records ${RECORDS:-2000000} | tail -1
CO=$(node -e "console.log(JSON.parse(require('fs').readFileSync('$D/cluster.json')).coordinator)")
NOVA_SECRET_FILE=$D/secret node bin/nova.js bench run --engine nova --coordinator $CO --workload W100 --records ${RECORDS:-2000000} --duration 2 --quiet-wait 0 2>&1 | grep -v "^\[nova\] load" | tail -3
for i in $(seq 1 ${STOCS:-4}); do echo "stoc $i: $(du -sb $D/stoc-$i | cut -f1) bytes, $(ls $D/stoc-$i/*.sst 2>/dev/null | wc -l) sst, sst bytes $(cat $D/stoc-$i/*.sst 2>/dev/null | wc -c)"; done
BIG=$(for i in $(seq 1 ${STOCS:-4}); do echo "$(cat $D/stoc-$i/*.sst 2>/dev/null | wc -c) $i"; done | sort -n | tail -1 | cut -d' ' -f2)
echo "killing StoC $BIG and deleting its directory"
PID=$(node -e "console.log(JSON.parse(require('fs').readFileSync('$D/cluster.json')).components.find(c=>c.role==='stoc'&&c.id===$BIG).pid)")
kill -9 $PID; rm -rf $D/stoc-$BIG
sleep 3
T0=$(date +%s.%N)
node bin/nova.js stoc remove $BIG --dead --json --dir $D > /tmp/bench27/repair-report.json || true
T1=$(date +%s.%N)
echo "remove --dead took $(echo "$T1 - $T0" | bc) s"
cat /tmp/bench27/repair-report.json | head -c 1500; echo
node bin/nova.js status --dir $D | tail -4
node bin/nova.js down --dir $D | tail -1
