#!/bin/bash
# Coordinator failover on etcd: three coordinators, 3 StoCs, 1 LTC, YCSB A through NovaClient; the leader is
# SIGKILLed KILLS times (then started again, to stand by); each takeover is timed from the kill until another
# coordinator answers status as leader. The bench's own throughput and errors show what the clients saw.
set -e
cd "$(dirname "$0")/../.."
B=/tmp/bench27/failover
pkill -f "$B/" 2>/dev/null || true
rm -rf $B; mkdir -p $B
port() { node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"; }
EP=$(port); PP=$(port)
etcd --name bench --data-dir $B/etcd --listen-client-urls http://127.0.0.1:$EP --advertise-client-urls http://127.0.0.1:$EP \
  --listen-peer-urls http://127.0.0.1:$PP --initial-advertise-peer-urls http://127.0.0.1:$PP --initial-cluster bench=http://127.0.0.1:$PP > $B/etcd.log 2>&1 &
sleep 2
P=($(port) $(port) $(port)); LIST=127.0.0.1:${P[0]},127.0.0.1:${P[1]},127.0.0.1:${P[2]}
coord() { node bin/nova.js coordinator --dir $B/c$1 --port ${P[$1]} --etcd 127.0.0.1:$EP >> $B/c$1.log 2>&1 & echo $! > $B/c$1.pid; }
for i in 0 1 2; do coord $i; done
sleep 2
for i in 1 2 3; do node bin/nova.js stoc --id $i --coordinator $LIST --dir $B/stoc-$i > $B/stoc-$i.log 2>&1 & done
NODE_OPTIONS=--max-semi-space-size=64 node bin/nova.js ltc --id 1 --coordinator $LIST --dir $B/ltc-1 > $B/ltc-1.log 2>&1 &
sleep 3
node bin/nova.js bench run --engine nova --coordinator $LIST --workload A --records ${RECORDS:-200000} --duration ${DURATION:-90} --quiet-wait 0 --json $B/bench.json > $B/bench.log 2>&1 &
BENCH=$!
while ! grep -q "loaded" $B/bench.log 2>/dev/null && kill -0 $BENCH 2>/dev/null; do sleep 1; done   # the load is done
sleep 10
for k in $(seq 1 ${KILLS:-5}); do
  node --input-type=module -e "
    import { fetchStatus } from './dist/src/control/cluster-control.js';
    import { readFileSync } from 'node:fs';
    const list = '$LIST';
    const first = await fetchStatus(list);
    const which = [0,1,2].find((i) => Number(readFileSync('$B/c' + i + '.pid', 'utf8')) === first.pid);
    process.kill(first.pid, 'SIGKILL');
    const t0 = performance.now();
    for (;;) {
      const s = await fetchStatus(list, 1000).catch(() => undefined);
      if (s && s.pid !== first.pid) { console.log('kill ' + $k + ': coordinator ' + which + ' killed; pid ' + s.pid + ' leads after ' + Math.round(performance.now() - t0) + ' ms (config ' + s.config.id + ')'); break; }
      await new Promise((r) => setTimeout(r, 20));
    }
    console.log('restart ' + which);
  " | tee -a $B/takeovers.log | grep -v restart
  W=$(tail -1 $B/takeovers.log | cut -d' ' -f2); coord $W
  sleep 12
done
wait $BENCH || true
tail -5 $B/bench.log
kill $(jobs -p) 2>/dev/null || true
pkill -f "$B/" 2>/dev/null || true
