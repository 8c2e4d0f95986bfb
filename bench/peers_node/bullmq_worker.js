'use strict';
// BullMQ worker for the Conveyor benchmark (bench/README.md). One process, one Worker on the
// queue "bench"; the job body is bench/peer_tasks/body.py's, in JavaScript: it appends
// "S <n> <start> <enqueue time>" and "F <n> <finish>" to $BENCH_LOG (O_APPEND, one write per
// line) and sleeps s seconds in between when s > 0.
// Environment: BENCH_REDIS_URL (redis://127.0.0.1:PORT/DB), BENCH_LOG, BENCH_BULLMQ_CONCURRENCY
// (the Worker's concurrency, BullMQ's default 1), BENCH_BULLMQ_REMOVE_ON_COMPLETE=1 (the Worker
// drops completed jobs instead of keeping them; BullMQ's default keeps them).
const fs = require('fs');
const { Worker } = require('bullmq');

const url = new URL(process.env.BENCH_REDIS_URL);
const connection = {
  host: url.hostname,
  port: Number(url.port),
  db: Number(url.pathname.slice(1) || 0),
  maxRetriesPerRequest: null,
};
const fd = fs.openSync(process.env.BENCH_LOG, 'a');
const now = () => (performance.timeOrigin + performance.now()) / 1000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function body(job) {
  const { n, s, t } = job.data;
  fs.writeSync(fd, `S ${n} ${now().toFixed(6)} ${Number(t).toFixed(6)}\n`);
  if (s > 0) await sleep(s * 1000);
  fs.writeSync(fd, `F ${n} ${now().toFixed(6)}\n`);
}

const opts = { connection, concurrency: Number(process.env.BENCH_BULLMQ_CONCURRENCY || 1) };
if (process.env.BENCH_BULLMQ_REMOVE_ON_COMPLETE === '1') opts.removeOnComplete = { count: 0 };
const worker = new Worker('bench', body, opts);
worker.on('error', (err) => console.error('worker error', err));

let closing = false;
async function shutdown() {
  if (closing) return;
  closing = true;
  await worker.close();
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
