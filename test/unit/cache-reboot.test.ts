/** A cache log written before the machine restarted, without sync, is set aside (cache-server.ts setAsideAfterReboot). */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { setAsideAfterReboot } from '../../src/stoc/cache-server.js';
import { tempDirs } from '../helpers/temp.js';

const temp = tempDirs('nova-cache-reboot-');
const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();

describe('cache log across a reboot', () => {
  it('keeps the log across a process restart, sets it aside (renamed) after a reboot without sync, keeps it with sync', () => {
    const dir = temp();
    writeFileSync(join(dir, 'cache.log'), 'entries');
    setAsideAfterReboot(dir, false);
    expect(readFileSync(join(dir, 'boot-id'), 'utf8').trim()).toBe(boot);
    setAsideAfterReboot(dir, false); // the same boot: a process restart
    expect(readFileSync(join(dir, 'cache.log'), 'utf8')).toBe('entries');

    writeFileSync(join(dir, 'boot-id'), 'another boot\n');
    const lines: string[] = [];
    setAsideAfterReboot(dir, false, (l) => lines.push(l));
    expect(existsSync(join(dir, 'cache.log'))).toBe(false);
    const aside = readdirSync(dir).find((f) => f.startsWith('cache.log.before-reboot-'))!;
    expect(readFileSync(join(dir, aside), 'utf8')).toBe('entries');
    expect(lines[0]).toMatch(/written before the machine restarted, without --sync/);

    writeFileSync(join(dir, 'cache.log'), 'synced entries');
    writeFileSync(join(dir, 'boot-id'), 'another boot\n');
    setAsideAfterReboot(dir, true);
    expect(readFileSync(join(dir, 'cache.log'), 'utf8')).toBe('synced entries');
    expect(readFileSync(join(dir, 'boot-id'), 'utf8').trim()).toBe(boot);
  });
});
