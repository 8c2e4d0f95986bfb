'use strict';
// BullMQ producer for the Conveyor benchmark: the same command line and JSON summary as
// bench/harness/producer.py (which the Python systems use).
//   node bullmq_producer.js --url redis://127.0.0.1:PORT/DB --op one|bulk|paced|version
//        [--count N] [--start 0] [--sleep 0] [--batch 1000] [--interval 0.01]
// one: queue.add per job; bulk: queue.addBulk per batch; paced: one add every --interval s.
// Job n carries {n, s, t} with t the wall-clock time taken just before its add call. The last
// stdout line is {"op", "count", "elapsed", "rate"} (elapsed covers the timed loop only).
const { Queue } = require('bullmq');

function parse(argv) {
  const args = { count: 0, start: 0, sleep: 0, batch: 1000, interval: 0.01, url: '', op: '' };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in args)) throw new Error(`unknown option ${argv[i]}`);
    args[key] = typeof args[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  return args;
}

const now = () => (performance.timeOrigin + performance.now()) / 1000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  const args = parse(process.argv.slice(2));
  if (args.op === 'version') {
    const version = require('bullmq/package.json').version;
    console.log(JSON.stringify({ op: 'version', version: `${version} (Node ${process.versions.node})` }));
    return;
  }
  const url = new URL(args.url);
  const connection = { host: url.hostname, port: Number(url.port), db: Number(url.pathname.slice(1) || 0) };
  const queue = new Queue('bench', { connection });
  await queue.waitUntilReady();
  const { start, count, sleep: s } = args;
  const t0 = performance.now();
  if (args.op === 'one') {
    for (let n = start; n < start + count; n++) await queue.add('bench', { n, s, t: now() });
  } else if (args.op === 'bulk') {
    for (let b = start; b < start + count; b += args.batch) {
      const t = now();
      const jobs = [];
      for (let n = b; n < Math.min(b + args.batch, start + count); n++) jobs.push({ name: 'bench', data: { n, s, t } });
      await queue.addBulk(jobs);
    }
  } else if (args.op === 'paced') {
    for (let i = 0; i < count; i++) {
      const delay = t0 + i * args.interval * 1000 - performance.now();
      if (delay > 0) await sleep(delay);
      await queue.add('bench', { n: start + i, s: 0, t: now() });
    }
  } else {
    throw new Error(`unknown op ${args.op}`);
  }
  const elapsed = (performance.now() - t0) / 1000;
  await queue.close();
  console.log(JSON.stringify({ op: args.op, count, elapsed, rate: elapsed > 0 ? count / elapsed : 0 }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
