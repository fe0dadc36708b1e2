/**
 * Whether a process named by a pid (in a lock file, say) still runs, and which process it is: a
 * pid can be used again by another process after its own ended, so a long-lived lock also keeps
 * the process's identity — on Linux its boot and start time (/proc), elsewhere none.
 */
import fs from 'node:fs';

/** `<boot id>:<start time in clock ticks>` of a process (Linux /proc); undefined where there is none. */
export function processIdentity(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name (field 2) is in parentheses and may hold spaces: count from the last ')'
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]; // field 22, starttime
    const boot = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    return start ? `${boot}:${start}` : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether `pid` runs on this machine (another user's process included); with `identity`, also
 * that it is still that process (where identities can be read: a reused pid is not it).
 */
export function processLives(pid: number, identity?: string): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (identity === undefined) return true;
  const now = processIdentity(pid);
  return now === undefined || now === identity;
}
