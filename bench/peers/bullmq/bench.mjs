// BullMQ's side of bench/peers: `node bench.mjs worker 10` x2 runs it (one Worker of
// concurrency 10 per process); `node bench.mjs enqueue N [noop|io|mail]` is the
// producer (addBulk). Counting as drivers/counting.py: a job buffers its index; one
// pipeline (SETBIT per index + INCRBY) sends the buffer once FLUSH_JOBS are buffered
// or FLUSH_MS after the first, and at SIGTERM after the Worker closed.
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const COUNT_KEY = "peerbench:count";
const SEEN_KEY = "peerbench:seen";
const CHUNK = 1000; // jobs per addBulk call
const FLUSH_JOBS = Number(process.env.PEERBENCH_FLUSH_JOBS ?? "100");
const FLUSH_MS = Math.min(Number(process.env.PEERBENCH_FLUSH_MS ?? "20"), 2 ** 31 - 1);
const IO_MS = Number(process.env.PEERBENCH_IO_MS ?? "5"); // the io job's sleep
// the memory workload's job, the same for every peer (drivers/counting.py MAIL)
const MAIL = { to: "user123@example.com", subject: "Your weekly digest", n: 42 };
const url = process.env.PEERBENCH_URL;
const [mode, arg, kind = "noop"] = process.argv.slice(2);
const connection = () => new IORedis(url, { maxRetriesPerRequest: null });

if (mode === "enqueue") {
  const n = Number(arg);
  const queue = new Queue("noop", { connection: connection() });
  await queue.waitUntilReady();
  const t0 = performance.now();
  for (let start = 0; start < n; start += CHUNK) {
    const jobs = [];
    for (let i = start; i < Math.min(n, start + CHUNK); i++) {
      const data = { noop: { i }, io: { i, ms: IO_MS }, mail: MAIL }[kind];
      const name = kind === "mail" ? "send_email" : kind;
      jobs.push({ name, data, opts: { removeOnComplete: true } });
    }
    await queue.addBulk(jobs);
  }
  const seconds = (performance.now() - t0) / 1000;
  console.log(JSON.stringify({ seconds, jobs: n }));
  await queue.close();
  process.exit(0);
} else if (mode === "worker") {
  const counter = new IORedis(url);
  let indices = [];
  let runs = 0;
  let timer = null;
  let sent = Promise.resolve(); // the flushes in order: the last one settles them all
  const flush = () => {
    clearTimeout(timer);
    timer = null;
    if (!runs) return sent;
    const pipe = counter.pipeline();
    for (const i of indices) pipe.setbit(SEEN_KEY, i, 1);
    pipe.incrby(COUNT_KEY, runs);
    indices = [];
    runs = 0;
    sent = sent.then(() => pipe.exec());
    return sent;
  };
  const ran = (i) => {
    if (i !== undefined) indices.push(i); // the mail job has no index: runs only
    runs += 1;
    if (runs >= FLUSH_JOBS) flush();
    else if (timer === null) timer = setTimeout(flush, FLUSH_MS);
  };
  const worker = new Worker(
    "noop",
    async (job) => {
      if (job.name === "io") await new Promise((done) => setTimeout(done, job.data.ms));
      ran(job.name === "send_email" ? undefined : job.data.i);
    },
    { connection: connection(), concurrency: Number(arg) },
  );
  const stop = async () => {
    await worker.close();
    await flush();
    await counter.quit();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
} else {
  console.error("usage: node bench.mjs enqueue N | worker CONCURRENCY");
  process.exit(2);
}
