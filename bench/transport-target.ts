/**
 * The passive side of `nova bench transport`: opens a fabric (UCX_TLS from its environment),
 * exposes one region, serves RPC `echo`, prints {address, key} as one JSON line, and exits
 * when its stdin closes.
 */
import { Fabric } from '../src/transport/fabric.js';
import { Rpc } from '../src/transport/rpc.js';

const size = Number(process.argv[2] ?? 64 * 1024 * 1024);
const fabric = Fabric.open({ spinUs: Number(process.env.NOVA_SPIN_US ?? 200) });
const region = fabric.allocate(size);
region.buffer.fill(0x5a);
new Rpc(fabric).serve('echo', (args) => args);
process.stdout.write(JSON.stringify({ address: fabric.address.toString('hex'), key: region.key.serialize().toString('hex') }) + '\n');
process.stdin.resume();
process.stdin.on('end', () => {
  void fabric.close().then(() => process.exit(0));
});
