import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { JOURNAL_FILE, Journal, journalPath, previousJournalPath, readJournal, type JournalLine } from '../../../../src/trading/runner/journal/journal';

describe('run journal', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-journal-'));
  });
  afterEach(() => {
    jest.restoreAllMocks();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  describe('journalPath', () => {
    test('a directory gets journal.jsonl inside it', () => {
      expect(JOURNAL_FILE).toBe('journal.jsonl');
      expect(journalPath('runs/today')).toBe(path.join('runs/today', 'journal.jsonl'));
      expect(journalPath('/var/run/x/')).toBe(path.join('/var/run/x/', 'journal.jsonl'));
      expect(journalPath('runs/log.txt')).toBe(path.join('runs/log.txt', 'journal.jsonl'));
      expect(journalPath('runs/x.jsonl.bak')).toBe(path.join('runs/x.jsonl.bak', 'journal.jsonl'));
    });

    test('a .jsonl (or .json) file path is used as it is', () => {
      expect(journalPath('runs/today.jsonl')).toBe('runs/today.jsonl');
      expect(journalPath('/abs/j.jsonl')).toBe('/abs/j.jsonl');
      expect(journalPath('runs/today.json')).toBe('runs/today.json');
    });
  });

  describe('Journal', () => {
    const lines: JournalLine[] = [
      { k: 'run', t: 1000, strategy: 's.js', mode: 'paper', symbols: ['EUR/USD'], timeframes: ['m1'], params: { fast: 5 } },
      { k: 'price', t: 1001, p: { Symbol: 'EUR/USD', Rates: [1.1, 1.1002, 1.12, 1.09] } },
      { k: 'intent', id: 1, t: 1002, op: 'openTrade', args: { symbol: 'EUR/USD', isBuy: true, amount: 10 } },
      { k: 'answer', id: 1, ok: true, value: { tradeId: 'T1' } },
      { k: 'answer', id: 2, ok: false, error: 'code 3: Amount should be divisible by 10 ["10"]' },
    ];

    test('writes one JSON object per line, in order, and reads them back', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const j = new Journal(file);
      for (const l of lines) j.append(l, l.k === 'intent' || l.k === 'answer');
      j.close();
      expect(fs.readFileSync(file, 'utf8')).toBe(lines.map((l) => JSON.stringify(l) + '\n').join(''));
      expect(readJournal(file)).toEqual(lines);
    });

    test('strings with newlines stay on their line', () => {
      const file = path.join(dir, 'j.jsonl');
      const j = new Journal(file);
      j.append({ k: 'fatal', t: 5, error: 'first\nsecond\r\nthird' });
      j.append({ k: 'stop', t: 6 });
      j.close();
      expect(fs.readFileSync(file, 'utf8').split('\n')).toHaveLength(3);
      expect(readJournal(file)).toEqual([
        { k: 'fatal', t: 5, error: 'first\nsecond\r\nthird' },
        { k: 'stop', t: 6 },
      ]);
    });

    test('creates missing parent directories', () => {
      const file = path.join(dir, 'a', 'b', 'c', JOURNAL_FILE);
      const j = new Journal(file);
      j.append({ k: 'start', t: 1 });
      j.close();
      expect(readJournal(file)).toEqual([{ k: 'start', t: 1 }]);
    });

    test('a second Journal on the same file appends (a restarted run keeps the old lines)', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const a = new Journal(file);
      a.append({ k: 'run', t: 1 });
      a.append({ k: 'start', t: 2 });
      a.close();
      const b = new Journal(file);
      b.append({ k: 'resume', t: 3 });
      b.close();
      expect(readJournal(file).map((l) => l.k)).toEqual(['run', 'start', 'resume']);
    });

    test('lines are on disk as soon as append returns, before close', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const j = new Journal(file);
      try {
        j.append({ k: 'intent', id: 7, t: 1, op: 'closeTrade', args: {} }, true);
        expect(readJournal(file)).toEqual([{ k: 'intent', id: 7, t: 1, op: 'closeTrade', args: {} }]);
        j.append({ k: 'timer', t: 2, name: 'tick' });
        expect(readJournal(file)).toHaveLength(2);
      } finally {
        j.close();
      }
    });

    test('after close, append does nothing and close again is harmless', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const j = new Journal(file);
      j.append({ k: 'start', t: 1 });
      j.close();
      j.append({ k: 'stop', t: 2 });
      expect(() => j.close()).not.toThrow();
      expect(readJournal(file)).toEqual([{ k: 'start', t: 1 }]);
    });

    test('fsync: for sync appends when enabled, never for plain appends or when disabled; always on close', () => {
      const fsync = jest.spyOn(fs, 'fsyncSync');
      const synced = new Journal(path.join(dir, 'a.jsonl'));
      synced.append({ k: 'price', t: 1 });
      expect(fsync).not.toHaveBeenCalled();
      synced.append({ k: 'intent', id: 1, t: 2 }, true);
      expect(fsync).toHaveBeenCalledTimes(1);
      synced.close();
      expect(fsync).toHaveBeenCalledTimes(2);

      fsync.mockClear();
      const unsynced = new Journal(path.join(dir, 'b.jsonl'), false);
      unsynced.append({ k: 'intent', id: 1, t: 2 }, true);
      expect(fsync).not.toHaveBeenCalled();
      unsynced.close();
      expect(fsync).toHaveBeenCalledTimes(1);
    });
  });

  describe('compact', () => {
    const run: JournalLine = { k: 'run', t: 1, strategy: 's', mode: 'paper' };
    const checkpoint = (t: number): JournalLine => ({ k: 'checkpoint', t, v: 1, intents: t, strategy: { n: t }, engine: {} });
    const size = (lines: JournalLine[]) => lines.reduce((n, l) => n + Buffer.byteLength(JSON.stringify(l)) + 1, 0);
    const tail = (from: number, n: number): JournalLine[] => Array.from({ length: n }, (_, i) => ({ k: 'price', t: from + i, p: { Symbol: 'EUR/USD', Rates: [1.1, 1.1002] } }));

    test('the previous segment keeps the name of the journal with .prev before its extension', () => {
      expect(previousJournalPath(path.join('runs', JOURNAL_FILE))).toBe(path.join('runs', 'journal.prev.jsonl'));
      expect(previousJournalPath('runs/x.json')).toBe('runs/x.prev.json');
      expect(previousJournalPath('runs/x')).toBe('runs/x.prev');
    });

    test('the journal becomes its head; the segment it replaces is the one previous segment; appends go on after the head', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const j = new Journal(file);
      const first = [run, ...tail(2, 5)];
      for (const l of first) j.append(l);
      expect(j.bytesSinceCheckpoint).toBe(size(first));
      j.compact([run, checkpoint(7)]);
      expect(readJournal(file)).toEqual([run, checkpoint(7)]);
      expect(j.bytesSinceCheckpoint).toBe(0);
      const second = tail(8, 3);
      for (const l of second) j.append(l);
      expect(j.bytesSinceCheckpoint).toBe(size(second));
      expect(readJournal(file)).toEqual([run, checkpoint(7), ...second]);
      expect(readJournal(previousJournalPath(file))).toEqual(first);
      // a second compaction replaces the previous segment: one is kept, never a series
      j.compact([run, checkpoint(11)]);
      j.append({ k: 'stop', t: 12 });
      j.close();
      expect(readJournal(file)).toEqual([run, checkpoint(11), { k: 'stop', t: 12 }]);
      expect(readJournal(previousJournalPath(file))).toEqual([run, checkpoint(7), ...second]);
      expect(fs.readdirSync(dir).sort()).toEqual(['journal.jsonl', 'journal.prev.jsonl']);
    });

    test('a journal opened again counts its bytes after the checkpoint it starts with', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const a = new Journal(file);
      a.append(run);
      a.compact([run, checkpoint(3)]);
      a.append({ k: 'start', t: 4 });
      a.close();
      const b = new Journal(file);
      expect(b.bytesSinceCheckpoint).toBe(size([{ k: 'start', t: 4 }]));
      b.close();
      // one that has no checkpoint counts from its start
      const plain = path.join(dir, 'plain.jsonl');
      fs.writeFileSync(plain, [run, ...tail(2, 2)].map((l) => JSON.stringify(l) + '\n').join(''));
      const c = new Journal(plain);
      expect(c.bytesSinceCheckpoint).toBe(size([run, ...tail(2, 2)]));
      c.close();
    });

    test('the new journal is on disk before the rename, and the rename once its directory is', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const j = new Journal(file);
      j.append(run);
      // what was synced, by the path its descriptor was opened with, and when the rename came
      const paths = new Map<number, string>();
      const steps: string[] = [];
      const [open, fsync, rename] = [fs.openSync, fs.fsyncSync, fs.renameSync];
      jest.spyOn(fs, 'openSync').mockImplementation((p, flags, mode) => {
        const fd = open(p, flags, mode);
        paths.set(fd, String(p));
        return fd;
      });
      jest.spyOn(fs, 'fsyncSync').mockImplementation((fd) => {
        steps.push(`fsync ${path.relative(dir, paths.get(fd) ?? '?') || '.'}`);
        fsync(fd);
      });
      jest.spyOn(fs, 'renameSync').mockImplementation((a, b) => {
        steps.push('rename');
        rename(a, b);
      });
      j.compact([run, checkpoint(2)]);
      expect(steps).toEqual(['fsync journal.jsonl.next', 'rename', 'fsync .']);
      j.close();
    });

    test('killed at each step, the journal under its name is the old one or the new one, whole', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const old = [run, ...tail(2, 4)];
      const images: { step: string; journal: JournalLine[]; files: string[] }[] = [];
      const take = (step: string) => images.push({ step, journal: readJournal(file), files: fs.readdirSync(dir).sort() });
      const j = new Journal(file); // its lock (journal.jsonl.lock) is held until it closes
      const link = fs.linkSync;
      const rename = fs.renameSync;
      jest.spyOn(fs, 'linkSync').mockImplementation((a, b) => {
        take('new file written');
        link(a, b);
        take('previous segment linked');
      });
      jest.spyOn(fs, 'renameSync').mockImplementation((a, b) => {
        rename(a, b);
        take('renamed');
      });
      for (const l of old) j.append(l);
      j.compact([run, checkpoint(6)]);
      j.close();
      expect(images).toEqual([
        { step: 'new file written', journal: old, files: ['journal.jsonl', 'journal.jsonl.lock', 'journal.jsonl.next'] },
        { step: 'previous segment linked', journal: old, files: ['journal.jsonl', 'journal.jsonl.lock', 'journal.jsonl.next', 'journal.prev.jsonl'] },
        { step: 'renamed', journal: [run, checkpoint(6)], files: ['journal.jsonl', 'journal.jsonl.lock', 'journal.prev.jsonl'] },
      ]);
    });

    test('a new file left by a compaction killed before its rename is removed when the journal is opened; the old journal goes on', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const old = [run, ...tail(2, 3)];
      fs.writeFileSync(file, old.map((l) => JSON.stringify(l) + '\n').join(''));
      fs.writeFileSync(`${file}.next`, JSON.stringify(run) + '\n' + JSON.stringify(checkpoint(4)) + '\n');
      const j = new Journal(file);
      expect(fs.existsSync(`${file}.next`)).toBe(false);
      expect(j.bytesSinceCheckpoint).toBe(size(old));
      j.append({ k: 'resume', t: 9 });
      j.close();
      expect(readJournal(file)).toEqual([...old, { k: 'resume', t: 9 }]);
    });

    test('without hard links the previous segment is a copy', () => {
      jest.spyOn(fs, 'linkSync').mockImplementation(() => {
        throw Object.assign(new Error('operation not permitted'), { code: 'EPERM' });
      });
      const file = path.join(dir, JOURNAL_FILE);
      const j = new Journal(file);
      j.append(run);
      j.append({ k: 'start', t: 2 });
      j.compact([run, checkpoint(3)]);
      j.close();
      expect(readJournal(previousJournalPath(file))).toEqual([run, { k: 'start', t: 2 }]);
      expect(readJournal(file)).toEqual([run, checkpoint(3)]);
    });
  });

  describe('readJournal', () => {
    const write = (text: string): string => {
      const file = path.join(dir, JOURNAL_FILE);
      fs.writeFileSync(file, text);
      return file;
    };

    test('a journal that does not exist reads as empty', () => {
      expect(readJournal(path.join(dir, 'missing.jsonl'))).toEqual([]);
      expect(readJournal(path.join(dir, 'no', 'such', 'dir', JOURNAL_FILE))).toEqual([]);
    });

    test('an empty file and blank lines read as nothing', () => {
      expect(readJournal(write(''))).toEqual([]);
      expect(readJournal(write('\n\n  \n{"k":"start","t":1}\n\n{"k":"stop","t":2}\n\n'))).toEqual([
        { k: 'start', t: 1 },
        { k: 'stop', t: 2 },
      ]);
    });

    test('CRLF line endings and a missing final newline are fine', () => {
      expect(readJournal(write('{"k":"start","t":1}\r\n{"k":"stop","t":2}'))).toEqual([
        { k: 'start', t: 1 },
        { k: 'stop', t: 2 },
      ]);
    });

    test('a last line cut in the middle (crash mid-write) is dropped; the complete lines before it are kept', () => {
      const whole = '{"k":"run","t":1}\n{"k":"intent","id":1,"t":2,"op":"openTrade","args":{}}\n';
      const torn = '{"k":"answer","id":1,"ok":tr';
      const file = write(whole + torn);
      expect(readJournal(file)).toEqual([
        { k: 'run', t: 1 },
        { k: 'intent', id: 1, t: 2, op: 'openTrade', args: {} },
      ]);
      // only the opening brace made it
      expect(readJournal(write(whole + '{'))).toHaveLength(2);
      // a journal that is nothing but a torn first line
      expect(readJournal(write('{"k":"ru'))).toEqual([]);
    });

    test('a torn tail written by a real Journal and cut on disk reads back without it', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const j = new Journal(file);
      j.append({ k: 'run', t: 1 });
      j.append({ k: 'intent', id: 1, t: 2, op: 'openTrade', args: { amount: 10 } });
      j.close();
      const full = fs.statSync(file).size;
      fs.truncateSync(file, full - 8); // cut the second line in the middle
      expect(readJournal(file)).toEqual([{ k: 'run', t: 1 }]);
    });

    test('a journal reopened after a torn write appends after its last complete line, restart after restart', () => {
      const file = path.join(dir, JOURNAL_FILE);
      const j = new Journal(file);
      j.append({ k: 'run', t: 1 });
      j.append({ k: 'intent', id: 1, t: 2, op: 'openTrade', args: { amount: 10 } });
      j.close();
      const whole = fs.statSync(file).size;
      const intentLine = JSON.stringify({ k: 'intent', id: 1, t: 2, op: 'openTrade', args: { amount: 10 } }).length + 1;
      fs.truncateSync(file, whole - 8); // killed in the middle of the intent
      const torn: number[] = [];
      for (const t of [3, 4]) {
        const resumed = new Journal(file);
        torn.push(resumed.tornTailBytes); // what the runner warns about
        resumed.append({ k: 'resume', t });
        resumed.close();
      }
      expect(torn).toEqual([intentLine - 8, 0]);
      expect(readJournal(file)).toEqual([
        { k: 'run', t: 1 },
        { k: 'resume', t: 3 },
        { k: 'resume', t: 4 },
      ]);
    });

    test('a malformed line before the tail is an error naming the file and the line', () => {
      const file = write('{"k":"run","t":1}\nnot json\n{"k":"stop","t":2}\n');
      expect(() => readJournal(file)).toThrow(`${file}:2: not a journal line: `);
      expect(() => readJournal(write('{"k":"run","t":1}\n\n{"k":"start",\n{"k":"stop","t":2}\n{"k":"stop","t":3}\n'))).toThrow(`${file}:3: not a journal line: `);
    });

    test('a malformed first line followed by good lines is an error too', () => {
      const file = write('garbage\n{"k":"run","t":1}\n{"k":"stop","t":2}\n');
      expect(() => readJournal(file)).toThrow(`${file}:1: not a journal line: `);
    });
  });
});
