/**
 * One process per journal (issue 42, item 4): opening a journal takes its lock; a second writer
 * is refused while the first lives, with a message naming its pid and the journal; a lock left by
 * a process that is gone (kill -9), or whose pid now names another process, is taken over; a
 * lock of another host is refused with what to do.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Journal } from '../../../../src/trading/runner/journal/journal';
import { JournalLockedError, lockJournal, lockPath, type LockOwner } from '../../../../src/trading/runner/journal/journal-lock';
import { processIdentity } from '../../../../src/platform/processes';
import { waitFor } from '../../../support/wait';

describe('the journal lock', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rr-journal-lock-'));
  });
  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('a second writer is refused while the first holds it, naming its pid and the journal; closing releases it', () => {
    const file = path.join(dir, 'journal.jsonl');
    const first = new Journal(file);
    first.append({ k: 'run', t: 1 });
    let refused: unknown;
    try {
      new Journal(file);
    } catch (e) {
      refused = e;
    }
    expect(refused).toBeInstanceOf(JournalLockedError);
    expect((refused as Error).message).toBe(
      `the journal ${file} is in use by process ${process.pid} on ${os.hostname()} (since ${(refused as JournalLockedError).owner.since}): a second runner must not write to it; stop that one first, or give this run another --journal`,
    );
    // the refused writer touched nothing
    expect(fs.readFileSync(file, 'utf8')).toBe('{"k":"run","t":1}\n');
    first.close();
    expect(fs.existsSync(lockPath(file))).toBe(false);
    const second = new Journal(file);
    expect(second.lock.tookOver).toBeUndefined();
    second.close();
  });

  test('a lock left by a process killed with kill -9 is taken over', async () => {
    const file = path.join(dir, 'journal.jsonl');
    const lockModule = path.join(__dirname, '../../../../dist/src/trading/runner/journal/journal-lock.js');
    const child = spawn(process.execPath, ['-e', `require(${JSON.stringify(lockModule)}).lockJournal(${JSON.stringify(file)}); console.log('locked'); setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
    const exited = new Promise((r) => child.once('exit', r));
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    await waitFor(() => out.includes('locked'), 'the child to take the lock');
    expect(() => lockJournal(file)).toThrow(`is in use by process ${child.pid} on ${os.hostname()}`);
    child.kill('SIGKILL');
    await exited;
    // the dead process's lock is still there, and no longer holds anyone off
    expect(JSON.parse(fs.readFileSync(lockPath(file), 'utf8')).pid).toBe(child.pid);
    const lock = lockJournal(file);
    expect(lock.tookOver?.pid).toBe(child.pid);
    expect(JSON.parse(fs.readFileSync(lockPath(file), 'utf8')).pid).toBe(process.pid);
    lock.release();
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  const write = (file: string, o: Partial<LockOwner>) => fs.writeFileSync(lockPath(file), JSON.stringify({ since: '2026-11-16T00:00:00.000Z', nonce: 'n1', ...o }));

  (processIdentity(process.pid) === undefined ? test.skip : test)('a pid used again by another process (its start time differs) is not the owner: taken over', () => {
    const file = path.join(dir, 'journal.jsonl');
    write(file, { pid: process.pid, host: os.hostname(), process: `${processIdentity(process.pid)}0` });
    const lock = lockJournal(file);
    expect(lock.tookOver?.pid).toBe(process.pid);
    lock.release();
  });

  test("another host's lock cannot be checked: refused, saying how to go on", () => {
    const file = path.join(dir, 'journal.jsonl');
    write(file, { pid: 4242, host: 'elsewhere' });
    expect(() => lockJournal(file)).toThrow(
      `the journal ${file} is in use by process 4242 on elsewhere (since 2026-11-16T00:00:00.000Z): this host (${os.hostname()}) cannot check whether that process still runs; if it does not, remove ${lockPath(file)} and start again`,
    );
  });

  test('a release leaves a lock that is no longer its own alone', () => {
    const file = path.join(dir, 'journal.jsonl');
    const lock = lockJournal(file);
    write(file, { pid: process.pid, host: os.hostname(), nonce: 'someone else' });
    lock.release();
    expect(JSON.parse(fs.readFileSync(lockPath(file), 'utf8')).nonce).toBe('someone else');
  });
});
