/** Reading the listed config files within CONFIG_MAX_BYTES (src/providers/config-files.ts): what is over it is not read. */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { type ListedFile, readListedFiles } from '../../src/providers/config-files';
import { makeTmpDir } from './helpers';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function dir(files: Record<string, string>): string {
  const d = makeTmpDir();
  dirs.push(d);
  for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(d, name), content);
  return d;
}

const listed = (d: string, name: string, size: number): ListedFile => ({ name, path: path.join(d, name), size });

describe('readListedFiles within CONFIG_MAX_BYTES', () => {
  test('all the files together may hold the limit, not a byte more', () => {
    const d = dir({ 'a.yaml': 'x'.repeat(60), 'b.yaml': 'y'.repeat(40) });
    const files = [listed(d, 'a.yaml', 60), listed(d, 'b.yaml', 40)];
    expect(readListedFiles(files, 100).map((f) => f.content.length)).toEqual([60, 40]);
    expect(() => readListedFiles(files, 99)).toThrow(
      'b.yaml: the configuration files hold more than the 99 bytes set by CONFIG_MAX_BYTES; they were not loaded',
    );
    expect(readListedFiles(files, 0).length).toBe(2);
  });

  test('a file that grew after it was listed is refused at the limit, not read whole', () => {
    const d = dir({ 'a.yaml': 'domain: d\n' });
    const file = listed(d, 'a.yaml', 10);
    // Listed at 10 bytes; 50 MB by the time it is read.
    fs.writeFileSync(file.path, Buffer.alloc(50 * 1024 * 1024, 0x61));
    const before = process.memoryUsage().arrayBuffers;
    expect(() => readListedFiles([file], 1024 * 1024)).toThrow(
      'a.yaml: the configuration files hold more than the 1048576 bytes set by CONFIG_MAX_BYTES; they were not loaded',
    );
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(8 * 1024 * 1024);
  });

  test('a file replaced by a FIFO since it was listed is an error, not a read that waits for ever', () => {
    const d = dir({});
    const fifo = path.join(d, 'a.yaml');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    expect(() => readListedFiles([listed(d, 'a.yaml', 0)], 1000)).toThrow(`a.yaml: error loading config file: read ${fifo}: not a regular file`);
  });
});
