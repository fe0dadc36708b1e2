/**
 * The worker thread of a config build (see config-builder.ts): parses and validates one config
 * into a plan off the event loop, then hands the plan's records to the main thread a slice at a
 * time, when it asks. It ends when the last slice is taken or the load failed.
 */
import * as os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { planFiles, planObjects, type ConfigPlan } from '../config/load';
import { ConfigError } from '../config/types';
import { readListedFiles } from './config-files';
import { decodeResource } from './xds/convert';
import type { BuildJob, FromBuildWorker, ToBuildWorker } from './config-builder';

const port = parentPort!;
const job = workerData as BuildJob;

// The lowest CPU priority for this thread alone (Linux: the nice value is per thread): when cores
// are short, calls on the main thread go first and the config waits.
try {
  os.setPriority(19);
} catch {
  // Not permitted here: the build still runs, at the usual priority.
}

function post(message: FromBuildWorker): void {
  port.postMessage(message);
}

let plan: ConfigPlan | undefined;
try {
  plan =
    job.source.kind === 'files'
      ? planFiles(readListedFiles(job.source.files, job.source.maxBytes), job.options)
      : planObjects(
          job.source.resources.map((r, i) => decodeResource(r, i)),
          job.options,
        );
} catch (err) {
  post({ type: 'error', message: err instanceof Error ? err.message : String(err), configError: err instanceof ConfigError });
}

if (plan !== undefined) {
  const { records } = plan;
  let next = 0;
  post({ type: 'planned', ruleCount: plan.ruleCount, domainCount: plan.domainCount, records: records.length });
  port.on('message', (m: ToBuildWorker) => {
    if (m.type !== 'next') return;
    const slice = records.slice(next, next + job.sliceRecords);
    next += slice.length;
    post({ type: 'records', records: slice, last: next >= records.length });
    if (next >= records.length) port.close();
  });
}
