// BullMQ's side of bench/peers: `node bench.mjs worker 10` x2 runs it (one Worker of
// concurrency 10 per process); `node bench.mjs enqueue N [noop|mail]` is the producer
// (addBulk).
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const COUNT_KEY = "peerbench:count";
const SEEN_KEY = "peerbench:seen";
const CHUNK = 1000; // jobs per addBulk call
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
      jobs.push(
        kind === "noop"
          ? { name: "noop", data: { i }, opts: { removeOnComplete: true } }
          : { name: "send_email", data: MAIL, opts: { removeOnComplete: true } },
      );
    }
    await queue.addBulk(jobs);
  }
  const seconds = (performance.now() - t0) / 1000;
  console.log(JSON.stringify({ seconds, jobs: n }));
  await queue.close();
  process.exit(0);
} else if (mode === "worker") {
  const counter = new IORedis(url);
  const worker = new Worker(
    "noop",
    async (job) => {
      if (job.name === "send_email") {
        await counter.incr(COUNT_KEY); // no index: runs are counted, not told apart
      } else {
        await counter.pipeline().setbit(SEEN_KEY, job.data.i, 1).incr(COUNT_KEY).exec();
      }
    },
    { connection: connection(), concurrency: Number(arg) },
  );
  const stop = async () => {
    await worker.close();
    await counter.quit();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
} else {
  console.error("usage: node bench.mjs enqueue N | worker CONCURRENCY");
  process.exit(2);
}
