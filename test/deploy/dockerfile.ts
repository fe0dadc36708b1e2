/** A small Dockerfile reader shared by the static checks and the real build of its steps. */

export interface Instruction {
  readonly op: string;
  readonly args: string;
}

export interface Stage {
  readonly from: string;
  readonly name?: string;
  readonly instructions: Instruction[];
}

/** Instructions (continuation lines joined, comments and the parser directive dropped), by stage. */
export function parseDockerfile(text: string): { args: Map<string, string>; stages: Stage[] } {
  const logical: string[] = [];
  let current = '';
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    if (current === '' && /^\s*#/.test(line)) continue;
    if (current !== '' && /^\s*#/.test(line)) continue; // comment inside a continuation
    if (line.endsWith('\\')) {
      current += line.slice(0, -1) + ' ';
      continue;
    }
    current += line;
    if (current.trim() !== '') logical.push(current.trim());
    current = '';
  }
  const args = new Map<string, string>();
  const stages: Stage[] = [];
  for (const l of logical) {
    const m = /^(\w+)\s+([\s\S]*)$/.exec(l);
    if (!m) throw new Error(`cannot parse Dockerfile line: ${l}`);
    const op = m[1]!.toUpperCase();
    const rest = m[2]!.trim();
    if (op === 'FROM') {
      const f = /^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest);
      const image = f![1]!.replace(/\$\{(\w+)\}|\$(\w+)/g, (_x, a: string | undefined, b: string | undefined) => args.get((a ?? b)!) ?? '');
      stages.push({ from: image, name: f![2], instructions: [] });
    } else if (op === 'ARG' && stages.length === 0) {
      const [k, v] = rest.split('=');
      args.set(k!, v ?? '');
    } else {
      if (stages.length === 0) throw new Error(`${op} before FROM`);
      stages[stages.length - 1]!.instructions.push({ op, args: rest });
    }
  }
  return { args, stages };
}

/** COPY flags and operands (shell form; JSON form too). */
export function parseCopy(args: string): { from?: string; sources: string[]; dest: string } {
  let words: string[];
  if (args.trimStart().startsWith('[')) words = JSON.parse(args) as string[];
  else words = args.split(/\s+/);
  let from: string | undefined;
  const operands: string[] = [];
  for (const w of words) {
    if (w.startsWith('--')) {
      const m = /^--from=(.+)$/.exec(w);
      if (m) from = m[1];
    } else operands.push(w);
  }
  const dest = operands.pop()!;
  return { from, sources: operands, dest };
}

/** `ENV A=1 B=2` (and the legacy `ENV A 1`) as an object. */
export function parseEnv(args: string): Record<string, string> {
  if (!args.includes('=')) {
    const [k, ...v] = args.split(/\s+/);
    return { [k!]: v.join(' ') };
  }
  const out: Record<string, string> = {};
  for (const m of args.matchAll(/(\w+)=("(?:[^"\\]|\\.)*"|\S*)/g)) out[m[1]!] = m[2]!.replace(/^"|"$/g, '');
  return out;
}
