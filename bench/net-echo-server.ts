/**
 * The `net` baseline's server: echoes length-prefixed frames on a loopback TCP port.
 * Prints {port} as one JSON line; exits when stdin closes. Writes are corked per read
 * chunk, so replies to a pipelined batch leave in one write.
 */
import { createServer } from 'node:net';

const server = createServer((socket) => {
  socket.setNoDelay(true);
  let pending: Buffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    let at = 0;
    socket.cork();
    while (pending.length - at >= 4) {
      const length = pending.readUInt32LE(at);
      if (pending.length - at < 4 + length) break;
      socket.write(pending.subarray(at, at + 4 + length));
      at += 4 + length;
    }
    socket.uncork();
    pending = pending.subarray(at);
  });
  socket.on('error', () => socket.destroy());
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 }) + '\n');
});
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
